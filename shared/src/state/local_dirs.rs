//! Where the tools keep files on this machine (slurm-watch's copy of a job's log, slurm-fetch's
//! results), decided here and only here: never inside the person's repository unless they ask.
//!
//! - `local_dir` (the document) names the folder: absolute, or relative to the current directory,
//!   as any command-line path. Logs go to `<local_dir>/`, fetched files to
//!   `<local_dir>/fetched/<job id>/`.
//! - Without it, an absolute `work_dir` still works as before (the older spelling of the same
//!   thing); a relative `work_dir` is the *remote* work directory's leaf, so its local copies go
//!   to the state directory (`<state dir>/logs/<work_dir>/`), not into `repo_root`, where the next
//!   untracked sync would upload them.
//! - A folder the person does put inside the repository is left out of the untracked sync
//!   ([`inside_repository`]), and the tools say so.

use std::path::{Path, PathBuf};

crate::document_input! {
    /// The fields that name where local copies go.
    pub struct LocalDirs {
        pub local_dir: Option<String> = string,
        /// An absolute one is the older spelling of `local_dir`.
        pub work_dir: Option<String> = string,
    }
}

/// The tools' configuration folder: `$XDG_CONFIG_HOME/slurm-tools`, else
/// `$HOME/.config/slurm-tools`; `None` when neither is set (never the current directory).
pub fn config_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("XDG_CONFIG_HOME")
        .or_else(|| env("HOME").map(|h| h.join(".config")))
        .map(|d| d.join("slurm-tools"))
}

/// The folder for local copies of what a job produced, when the document asks for any.
pub fn local_dir(dirs: &LocalDirs) -> Option<PathBuf> {
    if let Some(d) = &dirs.local_dir {
        return Some(PathBuf::from(d));
    }
    let w = Path::new(dirs.work_dir.as_deref()?);
    if w.is_absolute() {
        return Some(w.to_path_buf());
    }
    crate::state::journal::state_dir().map(|s| s.join("logs").join(w))
}

/// Where slurm-fetch puts a job's files by default: `<local_dir>/fetched/<id>`, else the state
/// directory's `fetched/<cluster>-<id>` (never the current directory, which is often the
/// repository), else `./fetched/<id>` when there is no state directory at all.
pub fn fetch_dir(dirs: &LocalDirs, cluster: &str, id: &str) -> PathBuf {
    if let Some(d) = local_dir(dirs) {
        return d.join("fetched").join(id);
    }
    match crate::state::journal::state_dir() {
        Some(s) => s.join("fetched").join(format!(
            "{}-{id}",
            crate::remote::layout::sanitize(cluster, true)
        )),
        None => PathBuf::from("fetched").join(id),
    }
}

/// `dir`'s path relative to the repository root when it lies inside it (`None`: outside, or no
/// repository). Both sides are made absolute and normalised without touching the filesystem for
/// what does not exist yet.
pub fn inside_repository(root: &Path, dir: &Path) -> Option<PathBuf> {
    let abs = |p: &Path| -> Option<PathBuf> {
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir().ok()?.join(p)
        };
        // The longest existing ancestor, canonicalised, plus the rest as written.
        let mut existing = p.clone();
        let mut rest = Vec::new();
        while !existing.exists() {
            rest.push(existing.file_name()?.to_os_string());
            existing = existing.parent()?.to_path_buf();
        }
        let mut out = existing.canonicalize().ok()?;
        for part in rest.iter().rev() {
            if part == ".." {
                out.pop();
            } else if part != "." {
                out.push(part);
            }
        }
        Some(out)
    };
    let (root, dir) = (abs(root)?, abs(dir)?);
    dir.strip_prefix(&root).ok().map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(s: &str) -> LocalDirs {
        LocalDirs::read(&crate::Document::parse(s.as_bytes(), "test").unwrap()).unwrap()
    }

    #[test]
    fn a_relative_work_dir_never_lands_in_the_repository() {
        let d = local_dir(&doc(r#"{"work_dir":"sample-run"}"#)).unwrap();
        if let Some(state) = crate::state::journal::state_dir() {
            assert_eq!(d, state.join("logs/sample-run"));
        }
        let d = local_dir(&doc(r#"{"work_dir":"/abs/logs"}"#));
        assert_eq!(d, Some(PathBuf::from("/abs/logs")));
        let d = local_dir(&doc(r#"{"work_dir":"x","local_dir":"out"}"#));
        assert_eq!(d, Some(PathBuf::from("out")));
        assert_eq!(local_dir(&doc("{}")), None);
        let f = fetch_dir(&doc(r#"{"local_dir":"/r"}"#), "c", "42");
        assert_eq!(f, PathBuf::from("/r/fetched/42"));
    }

    #[test]
    fn a_folder_inside_the_repository_is_recognised_however_it_is_written() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path().join("repo");
        std::fs::create_dir_all(repo.join("sub")).unwrap();
        assert_eq!(
            inside_repository(&repo, &repo.join("logs/new")),
            Some(PathBuf::from("logs/new"))
        );
        assert_eq!(
            inside_repository(&repo, &repo.join("sub/../out")),
            Some(PathBuf::from("out"))
        );
        assert_eq!(inside_repository(&repo, &t.path().join("elsewhere")), None);
    }
}
