//! The remote layout of docs/migrating.md, step 4a/4b/4f.1, decided here and only here, for every tool.
//!
//! One precedence, documented once ([`Layout`]):
//! - the **root** (where clones go, docs/migrating.md, step 4a): `default_user_root_dir`, else `remote_cwd`;
//! - the **working directory** preflight checks and creates: `remote_cwd`, else the root;
//! - **`remote_repo_path`**: as given, else `<root>/<name of repo_url>` (4b);
//! - **`remote_work_dir`**: as given, else `<remote_repo_path>/work_dirs/<leaf>`, the leaf from
//!   `work_dir`'s basename, else the sanitised `job_name`, else `default` (4f.1).
//!
//! Every remote path is absolute. A path starting with `~/` is expanded once, against the cluster
//! home slurm-ssh-preflight found (`preflight.remote.home`); before preflight has run it is
//! refused with an error naming the field, never sent as a literal `~` directory.

use crate::contract::doc::field_error;
use crate::contract::error::Result;

/// A remote path and whether it was derived (not given in the document).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub path: String,
    pub derived: bool,
}

crate::document_input! {
    /// The fields the remote layout is decided from.
    pub struct LayoutInput {
        pub default_user_root_dir: Option<String> = string,
        pub remote_cwd: Option<String> = string,
        pub remote_repo_path: Option<String> = string,
        pub repo_url: Option<String> = string,
        pub remote_work_dir: Option<String> = string,
        pub work_dir: Option<String> = string,
        pub job_name: Option<String> = string,
        /// For the cluster home (`preflight.remote.home`).
        pub preflight: Option<crate::contract::schema::Preflight> = section,
    }
}

/// The remote layout of one document.
pub struct Layout<'a> {
    input: &'a LayoutInput,
    /// The cluster user's home, from `preflight.remote.home`.
    home: Option<String>,
}

impl<'a> Layout<'a> {
    pub fn of(input: &'a LayoutInput) -> Layout<'a> {
        let home = input.preflight.as_ref().and_then(|p| p.remote.home.clone());
        Layout { input, home }
    }

    /// The cluster user's home, when slurm-ssh-preflight has learned it.
    pub fn home(&self) -> Option<&str> {
        self.home.as_deref()
    }

    /// A layout field's value made absolute: `~/x` against the remote home (refused while the
    /// home is unknown), a relative path refused; both errors name `field`.
    pub fn absolute(&self, field: &str, value: &str) -> Result<String> {
        if let Some(rest) = value.strip_prefix("~/").or((value == "~").then_some("")) {
            let Some(home) = &self.home else {
                return Err(field_error(
                    field,
                    &format!("is {value:?}, a path in the cluster home, and the home is not known yet"),
                )
                .with_hint(format!(
                    "run slurm-ssh-preflight first (it learns the cluster home and later tools expand `~/` against it), or give `{field}` as an absolute path"
                )));
            };
            return Ok(if rest.is_empty() {
                home.clone()
            } else {
                join(home, rest)
            });
        }
        if !value.starts_with('/') {
            return Err(field_error(
                field,
                &format!(
                    "is {value:?}; it must be an absolute path on the cluster (or start with `~/`)"
                ),
            )
            .with_hint(format!("give `{field}` as a full path, e.g. /home/me/work")));
        }
        Ok(value.to_string())
    }

    /// The root clones go under: `default_user_root_dir`, else `remote_cwd`.
    pub fn root(&self) -> Result<Option<String>> {
        let fields = [
            ("default_user_root_dir", &self.input.default_user_root_dir),
            ("remote_cwd", &self.input.remote_cwd),
        ];
        for (field, value) in fields {
            if let Some(v) = value {
                return self.absolute(field, v).map(Some);
            }
        }
        Ok(None)
    }

    /// `remote_repo_path`, else derived from the root and `url` (the repository's clone URL).
    pub fn repo_path(&self, url: Option<&str>) -> Result<Option<Decided>> {
        if let Some(p) = &self.input.remote_repo_path {
            return Ok(Some(Decided {
                path: self.absolute("remote_repo_path", p)?,
                derived: false,
            }));
        }
        let (Some(root), Some(url)) = (self.root()?, url) else {
            return Ok(None);
        };
        let name = repo_name(url).ok_or_else(|| {
            field_error(
                "repo_url",
                &format!("is {url:?}, which has no repository name at its end"),
            )
            .with_hint("use the clone URL of the repository, e.g. git@host:org/project.git")
        })?;
        Ok(Some(Decided {
            path: join(&root, &name),
            derived: true,
        }))
    }

    /// `remote_repo_path`, required: given, or derived from `repo_url`.
    pub fn repo_path_req(&self) -> Result<Decided> {
        self.repo_path(self.input.repo_url.as_deref())?.ok_or_else(|| {
            crate::contract::doc::missing(
                "remote_repo_path",
                "set `remote_repo_path`, or `repo_url` and `default_user_root_dir`/`remote_cwd` to derive it (slurm-resolve and slurm-sync-tracked do)",
            )
        })
    }

    /// `remote_work_dir`, else `<repo>/work_dirs/<leaf>`. The job's logs go there through
    /// `--output`/`--error`, so it must hold no Slurm filename pattern ([`check_log_dir`]).
    pub fn work_dir(&self, repo: &str) -> Result<Decided> {
        if let Some(w) = &self.input.remote_work_dir {
            let path = self.absolute("remote_work_dir", w)?;
            check_log_dir("remote_work_dir", &path)?;
            return Ok(Decided {
                path,
                derived: false,
            });
        }
        let leaf = self.input.work_dir.as_deref();
        if let Some(l) = leaf.and_then(basename) {
            check_log_dir("work_dir", &l)?;
        }
        check_log_dir("remote_repo_path", repo)?;
        Ok(Decided {
            path: work_dir(repo, leaf, self.input.job_name.as_deref()),
            derived: true,
        })
    }
}

/// A directory that goes into Slurm's `--output`/`--error` (the job's logs). Slurm reads `%` there
/// as a filename pattern (`%u`, `%x`, `%A`) and any `\` turns every substitution off (so `%j`
/// stays literal): either way the path Slurm writes would not be the one the tools record, watch
/// and fetch. Refused, naming `field`.
pub fn check_log_dir(field: &str, dir: &str) -> Result<()> {
    if let Some(c) = dir.chars().find(|c| *c == '%' || *c == '\\') {
        return Err(field_error(
            field,
            &format!(
                "gives the log directory {dir:?}, which holds {c:?}: Slurm reads it in --output/--error as a filename pattern, so the job's log would not be written where the tools look"
            ),
        )
        .with_hint(format!("choose a path for `{field}` without `%` or `\\`")));
    }
    Ok(())
}

/// The working directory preflight checks and creates, as written (`remote_cwd`, else
/// `default_user_root_dir`): preflight's remote check expands a leading `~/` itself, since it is
/// the step that learns the home. Absolute or `~/` only.
pub fn preflight_cwd(
    remote_cwd: Option<&str>,
    default_user_root_dir: Option<&str>,
) -> Result<Option<(String, &'static str)>> {
    let fields = [
        ("remote_cwd", remote_cwd),
        ("default_user_root_dir", default_user_root_dir),
    ];
    for (field, value) in fields {
        if let Some(v) = value {
            if !(v.starts_with('/') || v.starts_with("~/") || v == "~") {
                return Err(field_error(
                    field,
                    &format!(
                        "is {v:?}; it must be an absolute path on the cluster (or start with `~/`)"
                    ),
                )
                .with_hint(format!("give `{field}` as a full path, e.g. /home/me/work")));
            }
            return Ok(Some((v.to_string(), field)));
        }
    }
    Ok(None)
}

/// Join two remote path parts with exactly one `/`.
pub fn join(a: &str, b: &str) -> String {
    format!("{}/{}", a.trim_end_matches('/'), b.trim_start_matches('/'))
}

/// The last component of a path, when it is a real name.
pub fn basename(p: &str) -> Option<String> {
    p.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|s| !s.is_empty() && *s != "." && *s != "..")
        .map(str::to_string)
}

/// The repository's directory name from its URL: `git@h:org/proj.git` -> `proj`.
pub fn repo_name(url: &str) -> Option<String> {
    let tail = url.trim_end_matches('/').rsplit(['/', ':']).next()?;
    let name = tail.strip_suffix(".git").unwrap_or(tail);
    (!name.is_empty() && name != "." && name != "..").then(|| name.to_string())
}

/// Keep `[A-Za-z0-9_-]` (plus `.` when `allow_dot`); every other byte becomes `_`
/// (docs/migrating.md, step 4c's rule for branch-name parts).
pub fn sanitize(s: &str, allow_dot: bool) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (allow_dot && b == b'.') {
                b as char
            } else {
                '_'
            }
        })
        .collect()
}

/// `<repo>/work_dirs/<leaf>`, the leaf from `work_dir`, else the job name, else `default`.
pub fn work_dir(repo: &str, work_dir: Option<&str>, job_name: Option<&str>) -> String {
    let leaf = work_dir
        .and_then(basename)
        .or_else(|| job_name.map(|j| sanitize(j, true)))
        .unwrap_or_else(|| "default".to_string());
    join(&join(repo, "work_dirs"), &leaf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::doc::Document;

    fn doc(s: &str) -> LayoutInput {
        LayoutInput::read(&Document::parse(s.as_bytes(), "test").unwrap()).unwrap()
    }

    const HOME: &str = r#""preflight":{"ssh_path":"direct","master":"none","control_path":null,"mfa_style":false,"mfa_style_discovered":false,"remote":{"remote_cwd":"/h/u","remote_cwd_exists":true,"remote_cwd_created":false,"remote_cwd_writable":true,"user":"u","home":"/h/u","login_host":null,"tmux":null,"slurm_version":null,"git":null,"tar":null,"accounting":null,"container_flags":false}}"#;

    #[test]
    fn slurm_filename_patterns_in_log_dirs_are_refused_naming_the_field() {
        let d = doc(r#"{"remote_work_dir":"/h/u/run-%u"}"#);
        let e = Layout::of(&d).work_dir("/h/u/repo").unwrap_err();
        assert!(
            e.message.contains("remote_work_dir") && e.message.contains('%'),
            "{}",
            e.message
        );
        let d = doc(r#"{"work_dir":"a\\b"}"#);
        let e = Layout::of(&d).work_dir("/h/u/repo").unwrap_err();
        assert!(e.message.contains("work_dir"), "{}", e.message);
        let d = doc(r#"{}"#);
        let e = Layout::of(&d).work_dir("/h/u/re%jpo").unwrap_err();
        assert!(e.message.contains("remote_repo_path"), "{}", e.message);
        assert!(Layout::of(&d).work_dir("/h/u/repo").is_ok());
    }

    #[test]
    fn one_precedence_for_every_layout_field() {
        // (document, root, repo path, work dir)
        let table: &[(&str, Option<&str>, Option<&str>, &str)] = &[
            (
                r#"{"default_user_root_dir":"/r","remote_cwd":"/c","repo_url":"h:o/p.git"}"#,
                Some("/r"),
                Some("/r/p"),
                "/r/p/work_dirs/default",
            ),
            (
                r#"{"remote_cwd":"/c","repo_url":"h:o/p.git","job_name":"a b"}"#,
                Some("/c"),
                Some("/c/p"),
                "/c/p/work_dirs/a_b",
            ),
            (
                r#"{"remote_repo_path":"/x/y","remote_cwd":"/c","work_dir":"runs/e1"}"#,
                Some("/c"),
                Some("/x/y"),
                "/x/y/work_dirs/e1",
            ),
            (
                r#"{"remote_repo_path":"/x/y","remote_work_dir":"/w"}"#,
                None,
                Some("/x/y"),
                "/w",
            ),
            (r#"{"repo_url":"h:o/p.git"}"#, None, None, ""),
        ];
        for (d, root, repo, work) in table {
            let d = doc(d);
            let l = Layout::of(&d);
            assert_eq!(l.root().unwrap().as_deref(), *root, "{d:?}");
            let r = l.repo_path(d.repo_url.as_deref()).unwrap();
            assert_eq!(r.as_ref().map(|r| r.path.as_str()), *repo, "{d:?}");
            if let Some(r) = r {
                assert_eq!(l.work_dir(&r.path).unwrap().path, *work, "{d:?}");
            }
        }
    }

    #[test]
    fn tilde_paths_expand_against_the_remote_home_or_are_refused() {
        let d = doc(r#"{"default_user_root_dir":"~/work","repo_url":"h:o/p.git"}"#);
        let e = Layout::of(&d).root().unwrap_err();
        assert_eq!(e.field.as_deref(), Some("default_user_root_dir"));
        assert!(e.message.contains("home is not known"), "{}", e.message);
        assert!(e.hint.unwrap().contains("slurm-ssh-preflight"));

        let d = doc(&format!(
            r#"{{"default_user_root_dir":"~/work","repo_url":"h:o/p.git",{HOME}}}"#
        ));
        let l = Layout::of(&d);
        let repo = l.repo_path_req().unwrap();
        assert_eq!(
            repo,
            Decided {
                path: "/h/u/work/p".into(),
                derived: true
            }
        );
        let d = doc(&format!(
            r#"{{"remote_repo_path":"~","remote_work_dir":"~/w",{HOME}}}"#
        ));
        let l = Layout::of(&d);
        assert_eq!(l.repo_path_req().unwrap().path, "/h/u");
        assert_eq!(l.work_dir("/h/u").unwrap().path, "/h/u/w");
    }

    #[test]
    fn relative_remote_paths_are_refused_naming_the_field() {
        for (d, field) in [
            (r#"{"remote_repo_path":"work/p"}"#, "remote_repo_path"),
            (r#"{"remote_cwd":"work","repo_url":"h:o/p"}"#, "remote_cwd"),
            (
                r#"{"remote_repo_path":"/p","remote_work_dir":"w"}"#,
                "remote_work_dir",
            ),
        ] {
            let d = doc(d);
            let l = Layout::of(&d);
            let e = l
                .repo_path_req()
                .and_then(|r| l.work_dir(&r.path))
                .unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field));
        }
        assert!(preflight_cwd(Some("rel"), None).is_err());
        assert_eq!(
            preflight_cwd(None, Some("~/w")).unwrap(),
            Some(("~/w".to_string(), "default_user_root_dir"))
        );
    }

    #[test]
    fn repo_names() {
        assert_eq!(
            repo_name("git@github.com:NVIDIA/TensorRT-LLM.git").as_deref(),
            Some("TensorRT-LLM")
        );
        assert_eq!(repo_name("/srv/x/sample.git/").as_deref(), Some("sample"));
        assert_eq!(repo_name("https://h/a/b").as_deref(), Some("b"));
        assert_eq!(repo_name("/"), None);
    }

    #[test]
    fn names_and_paths() {
        assert_eq!(basename("runs/exp1/").as_deref(), Some("exp1"));
        assert_eq!(basename(".."), None);
        assert_eq!(sanitize("a b/ü.c", false), "a_b____c");
        assert_eq!(work_dir("/r/", Some("x/y"), None), "/r/work_dirs/y");
        assert_eq!(work_dir("/r", None, Some("a b")), "/r/work_dirs/a_b");
    }
}
