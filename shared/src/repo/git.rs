//! The local repository: finding it, reading its state (with git2, read-only), and running the
//! git CLI where git's own behaviour matters (filters, credentials, the person's config).
//!
//! Nothing here writes to HEAD, the refs, the index file, the working tree or the stash: the
//! promise that local work is never lost (docs/reliability.md 1) starts with this module only reading.

use crate::contract::error::{ErrorKind, Result, ToolError};
use crate::support::process::{Cmd, Output};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct LocalRepo {
    /// The working tree's top level.
    pub root: PathBuf,
    /// The git directory of this working tree (`.git`, or `.git/worktrees/<name>`).
    pub git_dir: PathBuf,
    pub repo: git2::Repository,
}

/// HEAD as the snapshot needs it.
#[derive(Debug, Clone)]
pub struct Head {
    pub commit: String,
    /// The checked-out branch; `None` when HEAD is detached.
    pub branch: Option<String>,
}

/// Index entries that need a word to the person.
#[derive(Debug, Default, Clone)]
pub struct IndexNotes {
    pub intent_to_add: Vec<String>,
    pub skip_worktree: Vec<String>,
    pub submodules: Vec<String>,
    /// The commit each submodule entry records, in the order of `submodules`.
    pub gitlinks: Vec<String>,
}

/// The entries worth a note, from the index file (see [`crate::repo::index_file`]).
fn scan_index(b: &[u8]) -> Option<IndexNotes> {
    let index = crate::repo::index_file::parse(b)?;
    let mut notes = IndexNotes::default();
    for e in &index.entries {
        let name = || String::from_utf8_lossy(&e.path).into_owned();
        if e.intent_to_add {
            notes.intent_to_add.push(name());
        }
        if e.skip_worktree {
            notes.skip_worktree.push(name());
        }
        if e.mode == crate::repo::index_file::GITLINK {
            notes.submodules.push(name());
            notes
                .gitlinks
                .push(e.oid.iter().map(|x| format!("{x:02x}")).collect());
        }
    }
    Some(notes)
}

impl LocalRepo {
    /// `repo_root` (the document's), else the repository around the current directory.
    pub fn open(repo_root: Option<&str>) -> Result<LocalRepo> {
        let start = match repo_root {
            Some(p) => PathBuf::from(p),
            None => std::env::current_dir().map_err(|e| {
                ToolError::bad_input(format!("cannot read the current directory: {e}"))
            })?,
        };
        let start = start.canonicalize().unwrap_or(start);
        let repo = git2::Repository::discover(&start).map_err(|e| {
            ToolError::field(
                ErrorKind::BadInput,
                "repo_root",
                format!(
                    "{} is not inside a git repository: {}",
                    start.display(),
                    e.message()
                ),
            )
            .with_hint("run the tool inside your repository, or set `repo_root` to it")
        })?;
        // A `.git` file (a linked worktree, `--separate-git-dir`, a submodule) names the git
        // directory but not the work tree when no core.worktree says it: the work tree is where
        // that file is (libgit2 would guess the git directory's parent).
        if let Some(top) = start
            .ancestors()
            .find(|d| d.join(".git").exists())
            .filter(|d| d.join(".git").is_file())
        {
            if repo.workdir().map(|w| w.canonicalize().ok()) != Some(top.canonicalize().ok()) {
                let _ = repo.set_workdir(top, false);
            }
        }
        let root = repo
            .workdir()
            .ok_or_else(|| {
                ToolError::field(
                    ErrorKind::BadInput,
                    "repo_root",
                    format!("{} is a bare repository", start.display()),
                )
                .with_hint("point `repo_root` at a working tree")
            })?
            .to_path_buf();
        let git_dir = repo.path().to_path_buf();
        Ok(LocalRepo {
            root,
            git_dir,
            repo,
        })
    }

    pub fn head(&self) -> Result<Head> {
        let head = self.repo.head().map_err(|e| {
            if e.code() == git2::ErrorCode::UnbornBranch {
                ToolError::bad_input(format!(
                    "the repository {} has no commits yet (unborn branch), so there is nothing to sync against",
                    self.root.display()
                ))
                .with_hint("make a first commit (`git commit`), then sync")
            } else {
                ToolError::bad_input(format!("cannot read HEAD of {}: {}", self.root.display(), e.message()))
            }
        })?;
        let commit = head.peel_to_commit().map_err(|e| {
            ToolError::bad_input(format!("HEAD does not point at a commit: {}", e.message()))
        })?;
        let branch = if self.repo.head_detached().unwrap_or(false) {
            None
        } else {
            head.shorthand().ok().map(str::to_string)
        };
        Ok(Head {
            commit: commit.id().to_string(),
            branch,
        })
    }

    /// The URL of the `origin` remote, if any.
    pub fn origin_url(&self) -> Option<String> {
        self.repo
            .find_remote("origin")
            .ok()
            .and_then(|r| r.url().ok().map(str::to_string))
    }

    /// Every remote's fetch and push URLs, as (remote name, URL).
    pub fn remote_urls(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let Ok(names) = self.repo.remotes() else {
            return out;
        };
        for name in names.iter().flatten().flatten() {
            let Ok(r) = self.repo.find_remote(name) else {
                continue;
            };
            let urls = [r.url().ok(), r.pushurl().ok().flatten()];
            for url in urls.into_iter().flatten() {
                if !out.iter().any(|(n, u)| n == name && u == url) {
                    out.push((name.to_string(), url.to_string()));
                }
            }
        }
        out
    }

    /// The commits without parents that HEAD descends from (at most `limit`): two clones of the
    /// same repository share them, two unrelated repositories do not.
    pub fn root_commits(&self, head: &str, limit: usize) -> Vec<String> {
        self.git()
            .args(["rev-list", "--max-parents=0", head])
            .run()
            .ok()
            .filter(|o| o.success())
            .map(|o| {
                o.stdout_text()
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .take(limit)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether any branch or tag tip of the repository at `url` is a commit this repository has
    /// (`None`: `url` could not be asked, or holds nothing yet, so nothing can be said).
    pub fn shares_a_commit_with(&self, url: &str) -> Option<bool> {
        let out = self
            .git()
            .args(["ls-remote", "--heads", "--tags", "--", url])
            .deadline(Duration::from_secs(60))
            .run()
            .ok()
            .filter(|o| o.success())?;
        let tips: Vec<git2::Oid> = out
            .stdout_text()
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter_map(|sha| git2::Oid::from_str(sha).ok())
            .collect();
        if tips.is_empty() {
            return None;
        }
        Some(tips.iter().any(|oid| self.repo.find_commit(*oid).is_ok()))
    }

    /// The Git LFS files of a commit as (oid, path), when the repository uses LFS (its
    /// `.gitattributes` names the lfs filter, or it has an LFS store); `Err` with git-lfs's
    /// complaint when it uses LFS but git-lfs cannot list them (not installed here).
    pub fn lfs_files(&self, commit: &str) -> std::result::Result<Vec<(String, String)>, String> {
        let attrs = std::fs::read_to_string(self.root.join(".gitattributes")).unwrap_or_default();
        if !attrs.contains("filter=lfs") && !self.repo.commondir().join("lfs").is_dir() {
            return Ok(Vec::new());
        }
        let out = self
            .git()
            .args(["lfs", "ls-files", "--long", commit])
            .run()
            .map_err(|e| e.to_string())?;
        if !out.success() {
            return Err(out.stderr_tail.trim().to_string());
        }
        Ok(out
            .stdout_text()
            .lines()
            .filter_map(|l| {
                let (oid, rest) = l.split_once(' ')?;
                let path = rest.get(2..)?;
                (oid.len() == 64 && oid.bytes().all(|b| b.is_ascii_hexdigit()))
                    .then(|| (oid.to_string(), path.to_string()))
            })
            .collect())
    }

    /// Where the local LFS store keeps an object (shared by every worktree).
    pub fn lfs_object(&self, oid: &str) -> PathBuf {
        self.repo
            .commondir()
            .join("lfs/objects")
            .join(&oid[..2])
            .join(&oid[2..4])
            .join(oid)
    }

    /// Whether `.git/index.lock` exists (another git command running, or a crashed one).
    pub fn index_locked(&self) -> bool {
        self.git_dir.join("index.lock").exists()
    }

    /// Intent-to-add, skip-worktree and submodule entries of the index. The index file is
    /// scanned directly (a few ms for 100,000 entries, where loading it through libgit2 costs
    /// more than `git status` itself); an index this scanner does not understand yields no notes.
    pub fn index_notes(&self) -> IndexNotes {
        self.scan_index().unwrap_or_default()
    }

    /// The notes, or `None` when there is no index or the scanner does not know its format.
    pub fn scan_index(&self) -> Option<IndexNotes> {
        std::fs::read(self.git_dir.join("index"))
            .ok()
            .and_then(|bytes| scan_index(&bytes))
    }

    /// Whether a path exists in a commit's tree.
    pub fn path_in_commit(&self, commit: &str, path: &str) -> bool {
        git2::Oid::from_str(commit)
            .ok()
            .and_then(|oid| self.repo.find_commit(oid).ok())
            .and_then(|c| c.tree().ok())
            .is_some_and(|t| t.get_path(Path::new(path)).is_ok())
    }

    /// The number of paths that differ between two commits, descending only into subtrees
    /// whose ids differ (libgit2's own tree diff reads every subtree); renames are not looked
    /// for, a submodule counts as one path.
    pub fn changed_paths(&self, from: &str, to: &str) -> usize {
        let tree = |c: &str| {
            git2::Oid::from_str(c)
                .ok()
                .and_then(|oid| self.repo.find_commit(oid).ok())
                .map(|c| c.tree_id())
        };
        match (tree(from), tree(to)) {
            (Some(a), Some(b)) => self.count_changed(Some(a), Some(b)),
            _ => 0,
        }
    }

    /// Paths below two trees (either may be absent) that differ.
    fn count_changed(&self, a: Option<git2::Oid>, b: Option<git2::Oid>) -> usize {
        if a == b {
            return 0;
        }
        let load = |t: Option<git2::Oid>| t.and_then(|oid| self.repo.find_tree(oid).ok());
        let (ta, tb) = (load(a), load(b));
        let entries =
            |t: &Option<git2::Tree>| -> std::collections::BTreeMap<Vec<u8>, (git2::Oid, bool)> {
                t.iter()
                    .flat_map(|t| t.iter())
                    .map(|e| {
                        let is_tree = e.kind() == Some(git2::ObjectType::Tree);
                        (e.name_bytes().to_vec(), (e.id(), is_tree))
                    })
                    .collect()
            };
        let (ea, eb) = (entries(&ta), entries(&tb));
        let names: std::collections::BTreeSet<&Vec<u8>> = ea.keys().chain(eb.keys()).collect();
        let mut n = 0;
        for name in names {
            let (x, y) = (ea.get(name), eb.get(name));
            if x.map(|e| e.0) == y.map(|e| e.0) {
                continue;
            }
            let sub = |e: Option<&(git2::Oid, bool)>| e.filter(|e| e.1).map(|e| e.0);
            let (sx, sy) = (sub(x), sub(y));
            n += if sx.is_some() || sy.is_some() {
                self.count_changed(sx, sy)
                    + usize::from(x.is_some_and(|e| !e.1))
                    + usize::from(y.is_some_and(|e| !e.1))
            } else {
                1
            };
        }
        n
    }

    /// A git CLI command in this repository, never prompting for credentials.
    pub fn git(&self) -> Cmd {
        git_in(&self.root)
    }
}

/// Whether two git URLs name the same repository, whatever the spelling: `git@host:org/r.git`,
/// `ssh://git@host/org/r`, `https://host/org/r/` are one repository; local paths compare after
/// resolving links (`file://` included). Users, ports and a trailing `.git` or `/` do not count.
pub fn same_repository(a: &str, b: &str) -> bool {
    a == b || url_key(a) == url_key(b)
}

/// (host, path) of a git URL, for [`same_repository`].
fn url_key(url: &str) -> (String, String) {
    let trim = |p: &str| -> String {
        let p = p.trim_end_matches('/');
        let p = p.strip_suffix(".git").unwrap_or(p).trim_end_matches('/');
        p.trim_start_matches('/')
            .trim_start_matches("~/")
            .to_string()
    };
    let local = |p: &str| -> (String, String) {
        let resolved = std::fs::canonicalize(p)
            .map(|c| c.display().to_string())
            .unwrap_or_else(|_| p.to_string());
        (String::new(), trim(&resolved))
    };
    if let Some(p) = url.strip_prefix("file://") {
        return local(p);
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        if !scheme.contains('/') {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            let host = authority.rsplit('@').next().unwrap_or(authority);
            let host = host.split(':').next().unwrap_or(host);
            return (host.to_ascii_lowercase(), trim(path));
        }
    }
    // scp-like `[user@]host:path` (a colon before any slash), else a local path.
    if let Some((before, path)) = url.split_once(':') {
        if !before.contains('/') && !before.is_empty() {
            let host = before.rsplit('@').next().unwrap_or(before);
            return (host.to_ascii_lowercase(), trim(path));
        }
    }
    local(url)
}

/// `git -C <dir>` that never prompts (a prompt would hang a pipeline).
pub fn git_in(dir: &Path) -> Cmd {
    Cmd::new("git")
        .arg("-C")
        .arg(dir.display().to_string())
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GCM_INTERACTIVE", "never")
        .deadline(Duration::from_secs(120))
}

/// Run a git command; a non-zero exit is an error saying what was being done.
pub fn run_git(cmd: Cmd, doing: &str, hint: &str) -> Result<Output> {
    let out = cmd
        .run()
        .map_err(|e| ToolError::remote(format!("cannot run git: {e}")).with_hint("install git"))?;
    if !out.success() {
        let what = if out.timed_out { "timed out" } else { "failed" };
        return Err(ToolError::remote(format!("git {what} while {doing}"))
            .with_hint(hint.to_string())
            .with_command(out.record()));
    }
    Ok(out)
}

#[cfg(test)]
mod url_tests {
    use super::same_repository;

    #[test]
    fn one_repository_in_every_spelling() {
        for (a, b) in [
            ("git@github.com:org/repo.git", "https://github.com/org/repo"),
            (
                "git@github.com:org/repo.git",
                "ssh://git@github.com:22/org/repo/",
            ),
            (
                "https://GitHub.com/org/repo.git/",
                "git@github.com:org/repo",
            ),
            ("/srv/git/sample.git", "file:///srv/git/sample.git"),
            ("/srv/git/sample.git", "/srv/git/sample"),
        ] {
            assert!(same_repository(a, b), "{a} {b}");
        }
        for (a, b) in [
            (
                "git@github.com:org/repo.git",
                "git@github.com:org/other.git",
            ),
            ("git@github.com:org/repo.git", "git@gitlab.com:org/repo.git"),
            ("/srv/git/sample.git", "/srv/git/tools.git"),
            ("https://host/a/repo", "https://host/b/repo"),
        ] {
            assert!(!same_repository(a, b), "{a} {b}");
        }
    }

    #[test]
    fn local_paths_compare_through_links() {
        let dir = std::env::temp_dir().join(format!("url-test-{}", std::process::id()));
        let real = dir.join("real.git");
        std::fs::create_dir_all(&real).unwrap();
        let link = dir.join("link.git");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(same_repository(
            &real.display().to_string(),
            &link.display().to_string()
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod changed_tests {
    use super::LocalRepo;
    use crate::testutil::git;

    #[test]
    fn changed_paths_counts_what_git_diff_tree_lists() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        let put = |f: &str, t: &str| {
            std::fs::create_dir_all(d.join(f).parent().unwrap()).unwrap();
            std::fs::write(d.join(f), t).unwrap();
        };
        for f in ["a", "b/c", "b/d/e", "b/d/f", "g/h", "same/x", "was-file"] {
            put(f, f);
        }
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "1"]);
        let first = git(d, &["rev-parse", "HEAD"]);
        put("a", "changed");
        put("b/d/e", "changed");
        put("new/deep/file", "new");
        std::fs::remove_dir_all(d.join("g")).unwrap();
        std::fs::remove_file(d.join("was-file")).unwrap();
        put("was-file/now-inside", "dir now");
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "2"]);
        let second = git(d, &["rev-parse", "HEAD"]);
        let listed = git(
            d,
            &[
                "diff-tree",
                "-r",
                "--name-only",
                "--no-renames",
                &first,
                &second,
            ],
        );
        let repo = git2::Repository::open(d).unwrap();
        let local = LocalRepo {
            root: d.to_path_buf(),
            git_dir: repo.path().to_path_buf(),
            repo,
        };
        assert_eq!(
            local.changed_paths(&first, &second),
            listed.lines().count(),
            "{listed}"
        );
        assert_eq!(local.changed_paths(&second, &first), listed.lines().count());
        assert_eq!(local.changed_paths(&first, &first), 0);
    }
}
