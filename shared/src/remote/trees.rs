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
