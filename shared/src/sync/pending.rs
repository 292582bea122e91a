//! Temporary branches pushed to origin and not yet deleted, remembered in
//! `<git dir>/slurm-tools-pending-refs` (one `url<TAB>branch` per line), so a run killed between
//! the push and the delete is cleaned up by the next run. This file is the only thing the tool
//! writes locally, and it is not part of the work (HEAD, refs, index, tree, stash).

use crate::git::LocalRepo;
use std::time::Duration;

fn file(git_dir: &std::path::Path) -> std::path::PathBuf {
    git_dir.join("slurm-tools-pending-refs")
}

fn read(git_dir: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(file(git_dir))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_once('\t')
                .map(|(u, b)| (u.to_string(), b.to_string()))
        })
        .collect()
}

fn write(git_dir: &std::path::Path, entries: &[(String, String)]) {
    if entries.is_empty() {
        let _ = std::fs::remove_file(file(git_dir));
        return;
    }
    let text: String = entries.iter().map(|(u, b)| format!("{u}\t{b}\n")).collect();
    let _ = std::fs::write(file(git_dir), text);
}

pub fn record(local: &LocalRepo, url: &str, branch: &str) {
    if url.contains(['\t', '\n']) || branch.contains(['\t', '\n']) {
        return;
    }
    let mut e = read(&local.git_dir);
    e.push((url.to_string(), branch.to_string()));
    write(&local.git_dir, &e);
}

pub fn forget(local: &LocalRepo, url: &str, branch: &str) {
    forget_in(&local.git_dir, url, branch);
}

fn forget_in(git_dir: &std::path::Path, url: &str, branch: &str) {
    let mut e = read(git_dir);
    e.retain(|(u, b)| !(u == url && b == branch));
    write(git_dir, &e);
}

/// Delete a temporary branch on origin; true when it is gone (or already was), and then it is
/// no longer remembered.
pub fn delete(local: &LocalRepo, url: &str, branch: &str) -> bool {
    Where::of(local).delete(url, branch)
}

/// A repository's places, for a deletion that runs apart from the [`LocalRepo`] (on a thread
/// of its own while the cluster works).
#[derive(Debug, Clone)]
pub struct Where {
    root: std::path::PathBuf,
    git_dir: std::path::PathBuf,
}

impl Where {
    pub fn of(local: &LocalRepo) -> Where {
        Where {
            root: local.root.clone(),
            git_dir: local.git_dir.clone(),
        }
    }

    /// [`delete`], from these places.
    pub fn delete(&self, url: &str, branch: &str) -> bool {
        let out = crate::git::git_in(&self.root)
            .args([
                "push",
                "--quiet",
                "--delete",
                "--",
                url,
                &format!("refs/heads/{branch}"),
            ])
            .deadline(Duration::from_secs(300))
            .run();
        let gone = out
            .as_ref()
            .is_ok_and(|o| o.success() || o.stderr_tail.contains("remote ref does not exist"));
        if gone {
            forget_in(&self.git_dir, url, branch);
        }
        gone
    }
}

/// Delete every remembered branch; returns the ones deleted (or already gone).
pub fn clean(local: &LocalRepo) -> Vec<String> {
    read(&local.git_dir)
        .into_iter()
        .filter(|(url, branch)| delete(local, url, branch))
        .map(|(_, branch)| branch)
        .collect()
}
