//! Temporary branches pushed to origin and not yet deleted, remembered in
//! `<git dir>/slurm-tools-pending-refs` (one `url<TAB>branch<TAB>pid` per line), so a run killed
//! between the push and the delete is cleaned up by the next run. Several syncs from the same
//! checkout may run at once: every read-modify-write of the file happens under an exclusive lock
//! (`slurm-tools-pending-refs.lock` beside it), and the next run deletes only the branches of runs
//! whose process is gone (a line without a pid is an older version's, and is deleted). These two
//! files are the only things the tool writes locally, and they are not part of the work (HEAD,
//! refs, index, tree, stash).

use crate::repo::git::LocalRepo;
use std::time::Duration;

fn file(git_dir: &std::path::Path) -> std::path::PathBuf {
    git_dir.join("slurm-tools-pending-refs")
}

/// One remembered branch: (url, branch, the pid of the run that pushed it, if recorded).
type Pending = (String, String, Option<String>);

fn read(git_dir: &std::path::Path) -> Vec<Pending> {
    std::fs::read_to_string(file(git_dir))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (u, b) = (f.next()?, f.next()?);
            Some((u.to_string(), b.to_string(), f.next().map(str::to_string)))
        })
        .collect()
}

fn write(git_dir: &std::path::Path, entries: &[Pending]) {
    if entries.is_empty() {
        let _ = std::fs::remove_file(file(git_dir));
        return;
    }
    let text: String = entries
        .iter()
        .map(|(u, b, pid)| match pid {
            Some(p) => format!("{u}\t{b}\t{p}\n"),
            None => format!("{u}\t{b}\n"),
        })
        .collect();
    let _ = crate::state::private_files::write_atomic(&file(git_dir), text.as_bytes(), 0o600);
}

/// Change the record under its lock (held until `change` returns; released by the kernel if this
/// process dies).
fn update<T>(git_dir: &std::path::Path, change: impl FnOnce(&mut Vec<Pending>) -> T) -> T {
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(git_dir.join("slurm-tools-pending-refs.lock"));
    if let Ok(f) = &lock {
        let _ = f.lock();
    }
    let mut e = read(git_dir);
    let out = change(&mut e);
    write(git_dir, &e);
    out
}

pub fn record(local: &LocalRepo, url: &str, branch: &str) {
    if url.contains(['\t', '\n']) || branch.contains(['\t', '\n']) {
        return;
    }
    let pid = std::process::id().to_string();
    update(&local.git_dir, |e| {
        e.push((url.to_string(), branch.to_string(), Some(pid)))
    });
}

pub fn forget(local: &LocalRepo, url: &str, branch: &str) {
    forget_in(&local.git_dir, url, branch);
}

fn forget_in(git_dir: &std::path::Path, url: &str, branch: &str) {
    update(git_dir, |e| {
        e.retain(|(u, b, _)| !(u == url && b == branch))
    });
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
        let out = crate::repo::git::git_in(&self.root)
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

/// Delete every remembered branch of a run that is gone (never one a live run on this machine is
/// still using); returns the ones deleted (or already gone).
pub fn clean(local: &LocalRepo) -> Vec<String> {
    read(&local.git_dir)
        .into_iter()
        .filter(|(_, _, pid)| {
            pid.as_deref()
                .is_none_or(|p| !crate::state::tempdir::alive(p))
        })
        .filter(|(url, branch, _)| delete(local, url, branch))
        .map(|(_, branch, _)| branch)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::git;

    #[test]
    fn the_next_run_deletes_only_branches_of_runs_that_are_gone() {
        let t = tempfile::tempdir().unwrap();
        let origin = t.path().join("origin.git");
        let work = t.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(
            t.path(),
            &["init", "-q", "--bare", origin.to_str().unwrap()],
        );
        git(&work, &["init", "-q"]);
        git(&work, &["commit", "-q", "--allow-empty", "-m", "x"]);
        let url = origin.to_str().unwrap();
        for b in ["live", "dead", "old"] {
            git(&work, &["push", "-q", url, &format!("HEAD:refs/heads/{b}")]);
        }
        let local = LocalRepo::open(work.to_str()).unwrap();
        // A run still going (this process), one that died, one from an older version (no pid).
        let dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id().to_string();
        let mut dead = dead;
        dead.wait().unwrap();
        record(&local, url, "live");
        update(&local.git_dir, |e| {
            e.push((url.into(), "dead".into(), Some(dead_pid)));
            e.push((url.into(), "old".into(), None));
        });
        let mut cleaned = clean(&local);
        cleaned.sort();
        assert_eq!(cleaned, ["dead", "old"]);
        let left = git(&work, &["ls-remote", "--heads", url]);
        assert!(
            left.contains("refs/heads/live") && !left.contains("dead"),
            "{left}"
        );
        assert_eq!(
            read(&local.git_dir).len(),
            1,
            "the live run's branch stays remembered"
        );
        forget(&local, url, "live");
        assert!(!file(&local.git_dir).exists());
    }

    #[test]
    fn concurrent_records_lose_no_line() {
        let t = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let d = t.path().to_path_buf();
                std::thread::spawn(move || {
                    for j in 0..20 {
                        update(&d, |e| e.push(("u".into(), format!("b{i}-{j}"), None)));
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert_eq!(read(t.path()).len(), 160);
    }
}
