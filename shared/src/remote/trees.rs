//! Each job's own code tree (the edit-sync-run loop): where it is, and the cluster-side shell that
//! makes and prunes the trees, used by slurm-submit for every submission and by
//! `slurm-alloc exec --own-tree`. See the cookbook, "Where each job's code lives".

use crate::remote::layout::{self, join, Layout};
use crate::remote::quote::Script;
use crate::{Context, Result};

/// Where each job's own code lives (see [`TREE`]).
pub struct Trees {
    /// The folder of every job's tree: `<parent of remote_work_dir>/.trees`.
    pub dir: String,
    /// This job's own tree (the snapshot it was submitted with, and its untracked files).
    pub job: String,
    /// The snapshot commit (`sync_tracked.commit`); empty: the clone's HEAD.
    pub commit: String,
    /// The branch's warm build tree, where build jobs build (outputs survive between builds).
    pub warm: String,
    pub keep: u32,
    /// The tree's name: the submission's tag.
    pub token: String,
}

impl Trees {
    /// The trees beside the work directory `layout` decides for the clone `repo`, for the
    /// tracked sync `synced` (the document's `sync_tracked`, or one not yet in the document: a
    /// sync that runs in the same ssh execution as the job's submission).
    pub fn of(
        layout: &layout::LayoutInput,
        repo: &str,
        token: &str,
        keep: u32,
        synced: Option<&crate::contract::schema::SyncTracked>,
    ) -> Result<Trees> {
        let work = Layout::of(layout).work_dir(repo)?.path;
        let parent = work
            .trim_end_matches('/')
            .rsplit_once('/')
            .map_or("/", |(p, _)| if p.is_empty() { "/" } else { p })
            .to_string();
        let dir = join(&parent, ".trees");
        let branch = synced
            .and_then(|t| t.branch.clone())
            .unwrap_or_else(|| "detached".into());
        Ok(Trees {
            job: join(&dir, token),
            warm: join(&dir, &format!("build-{}", layout::sanitize(&branch, true))),
            commit: synced.map(|t| t.commit.clone()).unwrap_or_default(),
            dir,
            keep,
            token: token.to_string(),
        })
    }
}

impl Trees {
    /// The variables [`TREE`]'s functions use, and the functions, at the top of a script.
    pub fn assign(&self, s: &mut Script, is_build: bool) -> Result<()> {
        s.assign("token", &self.token)?;
        s.assign("trees", &self.dir)?;
        s.assign("tree", &self.job)?;
        s.assign("commit", &self.commit)?;
        s.assign("warm", &self.warm)?;
        s.assign("keep", &self.keep.to_string())?;
        s.assign("is_build", if is_build { "yes" } else { "no" })?;
        s.assign("manifest", crate::repo::manifest::MANIFEST)?;
        s.assign("paths0", crate::repo::manifest::PATHS0)?;
        s.raw(crate::remote::UNTRACKED_STORE);
        s.raw(TREE);
        Ok(())
    }
}

/// The shell functions `make_tree` and `prune_trees`: `shared/src/remote/sh/job-tree.sh`.
pub const TREE: &str = crate::remote::JOB_TREE;

/// What the cluster-side script said about the job's code tree; the disk all trees use (KiB).
pub fn tree_notes(ctx: &Context, tree: &Trees, said: &str) -> Option<u64> {
    let mut pruned = 0;
    let mut kb = None;
    let snapshot = !said.lines().any(|l| l == "NO_SNAPSHOT");
    for line in said.lines() {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        match tag {
            "NO_SNAPSHOT" => ctx.warn(
                "the remote checkout is not a git clone: the job runs in it as it is (its tree is a link to it), so a later change there changes the job's code; sync with slurm-sync-tracked to give each job its own snapshot",
            ),
            "UNTRACKED_FROM" => ctx.warn(format!(
                "the untracked files in the remote clone are from the sync of snapshot {rest}, not of this job's snapshot {}: the job's tree has those (run slurm-sync-untracked on this document before submitting to send its own)",
                tree.commit
            )),
            "BUILD_OUTPUTS" => ctx.note(format!(
                "the job's tree has the outputs of the build of the same snapshot (from {rest})"
            )),
            "PRUNED" => pruned += 1,
            "TREES_KB" => kb = rest.trim().parse().ok(),
            _ => {}
        }
    }
    if !snapshot {
        return kb;
    }
    ctx.note(format!(
        "the job runs in its own code tree {} (snapshot {}){}",
        tree.job,
        if tree.commit.is_empty() {
            "of the clone's HEAD"
        } else {
            &tree.commit[..tree.commit.len().min(12)]
        },
        match (pruned, kb) {
            (0, Some(kb)) => format!(
                "; job trees use {}",
                crate::support::ui::human_bytes(kb * 1024)
            ),
            (n, Some(kb)) => format!(
                "; removed {n} finished job tree(s) (keeping {}), job trees use {}",
                tree.keep,
                crate::support::ui::human_bytes(kb * 1024)
            ),
            _ => String::new(),
        }
    ));
    kb
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::git;
    use std::path::Path;
    use std::process::Command;

    /// `body` run in sh in the clone `repo`, after the untracked store's functions (and the
    /// job tree's, for `trees`): its exit code and stderr.
    fn sh(
        repo: &Path,
        trees: Option<&Trees>,
        vars: &[(&'static str, &str)],
        body: &'static str,
    ) -> (Option<i32>, String) {
        let mut s = Script::new();
        for (name, value) in vars {
            s.assign(name, value).unwrap();
        }
        s.assign("manifest", crate::repo::manifest::MANIFEST)
            .unwrap();
        s.assign("paths0", crate::repo::manifest::PATHS0).unwrap();
        s.raw(crate::remote::UNTRACKED_STORE);
        s.raw(crate::remote::UNTRACKED_KEEP);
        if let Some(t) = trees {
            t.assign(&mut s, false).unwrap();
        }
        s.raw(body);
        crate::remote::script_check::assert_clean("untracked-sets", s.as_str());
        let out = Command::new("sh")
            .arg("-c")
            .arg(s.as_str())
            .current_dir(repo)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// An untracked sync of `snapshot` that put `files` into the clone (its manifest files
    /// written as the sync writes them), then kept as the snapshot's set.
    fn synced(repo: &Path, snapshot: &str, files: &[(&str, &str)]) {
        let mut paths0 = Vec::new();
        for (name, text) in files {
            // A sync replaces a file by a new one (never writes into it).
            let _ = std::fs::remove_file(repo.join(name));
            std::fs::write(repo.join(name), text).unwrap();
            paths0.extend_from_slice(name.as_bytes());
            paths0.push(0);
        }
        std::fs::create_dir_all(repo.join(".git/slurm-tools")).unwrap();
        std::fs::write(
            repo.join(crate::repo::manifest::MANIFEST),
            format!("# slurm-tools untracked manifest snapshot={snapshot}\n"),
        )
        .unwrap();
        std::fs::write(repo.join(crate::repo::manifest::PATHS0), paths0).unwrap();
        let (code, err) = sh(repo, None, &[], "keep_untracked\n");
        assert_eq!(code, Some(0), "{err}");
    }

    fn store(repo: &Path) -> std::path::PathBuf {
        repo.join(".git/slurm-tools/untracked-sets")
    }

    fn current(repo: &Path, snapshot: &str) -> Option<String> {
        std::fs::read_to_string(store(repo).join(snapshot))
            .ok()
            .map(|s| s.trim().to_string())
    }

    fn trees_in(dir: &Path, tag: &str, commit: &str) -> Trees {
        let trees = dir.join("trees").to_str().unwrap().to_string();
        Trees {
            job: join(&trees, tag),
            warm: join(&trees, "build-main"),
            commit: commit.to_string(),
            dir: trees,
            keep: 4,
            token: tag.to_string(),
        }
    }

    fn clone_with_a_commit(dir: &Path) -> (std::path::PathBuf, String) {
        let repo = dir.join("clone");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join("tracked.txt"), "t\n").unwrap();
        git(&repo, &["add", "."]);
        git(
            &repo,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "c",
            ],
        );
        let commit = git(&repo, &["rev-parse", "HEAD"]);
        (repo, commit)
    }

    /// Concurrent pipelines syncing one snapshot: a job's tree being made from the set it read
    /// while a newer sync of the same snapshot replaces it still gets every file of that set;
    /// a new tree gets the newest; a copy that loses a file fails instead of leaving it out.
    #[test]
    fn a_snapshots_set_is_never_changed_under_a_job_tree_being_made_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, commit) = clone_with_a_commit(dir.path());
        synced(&repo, &commit, &[("u.txt", "one\n"), ("v.txt", "v\n")]);
        let first = current(&repo, &commit).expect("a set for the snapshot");
        // Another checkout's sync of the same snapshot, while a tree reads the first set.
        synced(&repo, &commit, &[("u.txt", "two\n")]);
        let second = current(&repo, &commit).unwrap();
        assert_ne!(first, second);
        let old = store(&repo).join(&first);
        assert_eq!(std::fs::read_to_string(old.join("u.txt")).unwrap(), "one\n");
        assert_eq!(std::fs::read_to_string(old.join("v.txt")).unwrap(), "v\n");
        let copy = "copy_listed0 \"$set\" ../from-first <\"$set.paths0\"\n";
        let vars = [("set", old.to_str().unwrap())];
        let (code, err) = sh(&repo, None, &vars, copy);
        assert_eq!(
            code,
            Some(1),
            "a copy into a missing folder must fail: {err}"
        );
        std::fs::create_dir(dir.path().join("from-first")).unwrap();
        assert_eq!(sh(&repo, None, &vars, copy).0, Some(0));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("from-first/v.txt")).unwrap(),
            "v\n"
        );
        // A file gone from under the copy fails it.
        std::fs::remove_file(old.join("v.txt")).unwrap();
        let (code, err) = sh(&repo, None, &vars, copy);
        assert_eq!(code, Some(1), "{err}");
        // A new job's tree has the newest set of its snapshot.
        let trees = trees_in(dir.path(), "st-tag-1", &commit);
        let (code, err) = sh(&repo, Some(&trees), &[], "make_tree\n");
        assert_eq!(code, Some(0), "{err}");
        let tree = Path::new(&trees.job);
        assert_eq!(
            std::fs::read_to_string(tree.join("u.txt")).unwrap(),
            "two\n"
        );
        assert!(!tree.join("v.txt").exists(), "the newest set has no v.txt");
        assert_eq!(git(tree, &["rev-parse", "HEAD"]), commit);
    }

    /// A tree that cannot be finished is removed again, so that a rerun of the same tag makes
    /// it anew instead of running in half a tree.
    #[test]
    fn a_tree_it_could_not_finish_is_removed_and_made_again_by_a_rerun() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, commit) = clone_with_a_commit(dir.path());
        synced(&repo, &commit, &[("u.txt", "one\n")]);
        let set = store(&repo).join(current(&repo, &commit).unwrap());
        std::fs::remove_file(set.join("u.txt")).unwrap();
        let trees = trees_in(dir.path(), "st-tag-2", &commit);
        let (code, _) = sh(&repo, Some(&trees), &[], "make_tree\n");
        assert_eq!(code, Some(1));
        assert!(!Path::new(&trees.job).exists(), "a half-made tree was left");
        std::fs::write(set.join("u.txt"), "one\n").unwrap();
        let (code, err) = sh(&repo, Some(&trees), &[], "make_tree\n");
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(
            std::fs::read_to_string(Path::new(&trees.job).join("u.txt")).unwrap(),
            "one\n"
        );
    }

    /// The newest 32 snapshots keep a set; a replaced set stays an hour after it was replaced
    /// (a tree may be reading it), then goes; a snapshot's current set never goes for its age.
    #[test]
    fn old_snapshots_lose_their_sets_and_a_replaced_set_goes_an_hour_later() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, _) = clone_with_a_commit(dir.path());
        let snap = |i: usize| format!("{i:040x}");
        let touch = |path: &Path, ago_secs: u64| {
            let when = std::time::SystemTime::now() - std::time::Duration::from_secs(ago_secs);
            std::fs::File::options()
                .write(true)
                .open(path)
                .or_else(|_| std::fs::File::open(path))
                .unwrap()
                .set_modified(when)
                .unwrap();
        };
        for i in 0..33 {
            synced(&repo, &snap(i), &[("u.txt", &format!("{i}\n"))]);
            // Older snapshots synced earlier (ls -t orders by these times).
            touch(&store(&repo).join(snap(i)), (40 - i as u64) * 60);
        }
        // 33 sets: the oldest snapshot lost its pointer, its set retired (still there).
        assert_eq!(current(&repo, &snap(0)), None);
        assert!(current(&repo, &snap(1)).is_some());
        let sets = |repo: &Path| {
            std::fs::read_dir(store(repo))
                .unwrap()
                .filter_map(|e| {
                    let n = e.unwrap().file_name().into_string().unwrap();
                    (n.contains('-') && !n.contains('.')).then_some(n)
                })
                .collect::<std::collections::BTreeSet<_>>()
        };
        let retired = sets(&repo)
            .into_iter()
            .find(|n| n.starts_with(&snap(0)))
            .expect("retired set kept for now");
        // Snapshot 5 synced again: its old set retired now; the retired set of snapshot 0 and
        // the current set of snapshot 7 made two hours ago.
        let five_old = current(&repo, &snap(5)).unwrap();
        let seven = current(&repo, &snap(7)).unwrap();
        touch(&store(&repo).join(&retired), 7200);
        touch(&store(&repo).join(&seven), 7200);
        synced(&repo, &snap(5), &[("u.txt", "5 again\n")]);
        let now = sets(&repo);
        assert!(
            !now.contains(&retired),
            "a set retired two hours ago stayed: {now:?}"
        );
        assert!(!store(&repo).join(format!("{retired}.paths0")).exists());
        assert!(now.contains(&seven), "a current set went for its age");
        assert!(now.contains(&five_old), "a set replaced a moment ago went");
        assert_eq!(now.len(), 33, "{now:?}");
    }
}
