//! The submodules of a working tree, nested ones too, as the syncs need them: where each lives,
//! its name (which names its git directory), whether it is checked out locally, and its HEAD.
//!
//! Read-only, like [`crate::repo::git`]: the gitlinks come from the index (what `git status` knows),
//! names and URLs from `.gitmodules`, and each checked-out submodule is opened in place.

use crate::repo::git::LocalRepo;
use std::path::Path;

/// One submodule of the superproject (or of another submodule).
pub struct Submodule {
    /// Its path from the superproject's top level, `/`-separated (`third_party/lib/inner`).
    pub path: String,
    /// Its path inside the repository that holds it (the last part for a top-level one).
    pub path_in_parent: String,
    /// The path of the repository that holds it, from the superproject's top level (`""`: the
    /// superproject itself).
    pub parent: String,
    /// Its name in the parent's `.gitmodules` (the path when it has no entry there).
    pub name: String,
    /// Its git directory below the superproject's, as git lays it out:
    /// `modules/<name>[/modules/<nested name>...]`.
    pub module_dir: String,
    /// Its URL in `.gitmodules`, if any.
    pub url: Option<String>,
    /// The commit the parent's index records for it.
    pub recorded: String,
    /// The checked-out submodule; `None` when it is not initialised locally.
    pub repo: Option<LocalRepo>,
}

impl Submodule {
    pub fn initialised(&self) -> bool {
        self.repo.is_some()
    }
}

/// Every submodule under `repo`, parents before their children (so a remote side can create
/// them in this order, and a snapshot is built in the reverse one).
pub fn all(repo: &LocalRepo) -> Vec<Submodule> {
    let mut out = Vec::new();
    collect(repo, "", "", &mut out);
    out
}

fn collect(repo: &LocalRepo, prefix: &str, module_prefix: &str, out: &mut Vec<Submodule>) {
    // The index scanned directly (fast at any size); libgit2's reading where the scanner does
    // not know the format.
    let gitlinks: Vec<(String, String)> = match repo.scan_index() {
        Some(notes) => notes.submodules.into_iter().zip(notes.gitlinks).collect(),
        None => {
            let Ok(index) = repo.repo.index() else {
                return;
            };
            index
                .iter()
                .filter(|e| e.mode == 0o160000)
                .map(|e| {
                    (
                        String::from_utf8_lossy(&e.path).into_owned(),
                        e.id.to_string(),
                    )
                })
                .collect()
        }
    };
    for (path, recorded) in gitlinks {
        let config = repo.repo.find_submodule(&path).ok();
        let name = config
            .as_ref()
            .and_then(|s| s.name().ok().map(str::to_string))
            .unwrap_or_else(|| path.clone());
        let url = config
            .as_ref()
            .and_then(|s| s.url().ok().flatten().map(str::to_string));
        let full = if prefix.is_empty() {
            path.clone()
        } else {
            format!("{prefix}/{path}")
        };
        let module_dir = format!("{module_prefix}modules/{name}");
        let sub_repo = open_checked_out(&repo.root.join(&path));
        let index = out.len();
        out.push(Submodule {
            path: full.clone(),
            path_in_parent: path,
            parent: prefix.to_string(),
            name,
            module_dir: module_dir.clone(),
            url,
            recorded,
            repo: None,
        });
        if let Some(sub) = sub_repo {
            collect(&sub, &full, &format!("{module_dir}/"), out);
            out[index].repo = Some(sub);
        }
    }
}

/// The submodule's own repository, when it is checked out there (a `.git` file or directory of
/// its own, not the superproject's found by searching upwards).
fn open_checked_out(dir: &Path) -> Option<LocalRepo> {
    if !dir.join(".git").exists() {
        return None;
    }
    let repo = git2::Repository::open(dir).ok()?;
    if repo.workdir().and_then(|w| w.canonicalize().ok()) != dir.canonicalize().ok() {
        repo.set_workdir(dir, false).ok()?;
    }
    let root = repo.workdir()?.to_path_buf();
    let git_dir = repo.path().to_path_buf();
    Some(LocalRepo {
        root,
        git_dir,
        repo,
    })
}
