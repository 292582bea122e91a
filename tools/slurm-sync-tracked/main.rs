//! slurm-sync-tracked: the remote checkout becomes HEAD plus the local working tree's tracked
//! changes, as one snapshot commit; the local repository is never touched (docs/migrating.md, step 4).

use clap::{Parser, ValueEnum};
use shared::contract::schema;
use shared::sync::tracked::{self, Options};
use shared::{Context, InputArg, Outcome, Result, ToolCli};

/// Make the remote checkout equal to your working tree's tracked files, without touching it.
///
/// A snapshot commit (parent: HEAD; tree: HEAD plus the working-tree content of every tracked
/// file, deletions and staged-new files included; untracked files excluded) is built in a
/// temporary index: your HEAD, branches, index, working tree and stash stay byte-identical.
/// It is pushed to origin as a temporary branch `<user>_<model>_<UTC stamp>_<random>` (unique
/// per sync, so pipelines run at the same time never collide), and in one ssh
/// round trip the remote clone (cloned from `repo_url` when absent) stashes any cluster-side
/// edits (reported, never lost), fetches, checks the branch out, re-checks-out each
/// `refresh_paths` entry from HEAD and creates `remote_work_dir`. The temporary branch is then
/// deleted from origin, on success and on failure. `--via direct` pushes straight into the
/// remote clone over the same ssh connection instead, and nothing touches origin.
///
/// Submodules (nested too) arrive as they are locally: each at its HEAD when clean, else at a
/// snapshot of its working tree built the same way; their commits travel over ssh into their
/// repositories in the remote clone, so commits that exist only locally arrive and the cluster
/// never needs the submodules' URLs. Git LFS files arrive with their content: the objects the
/// remote clone lacks are sent from the local LFS store (git-lfs is needed on both sides).
/// Linked worktrees and separate git directories work like a main checkout.
///
/// A sync from the wrong directory is refused before anything is pushed: `repo_url` must be one
/// of the local repository's remotes, and the remote clone's history must share a root commit
/// with the local one (`--allow-unrelated` overrides both).
///
/// {reads}
/// (repo_root defaults to the repository around the current directory; repo_url to the origin
/// remote's URL; remote_repo_path to <default_user_root_dir, else remote_cwd>/<repo name>;
/// remote_work_dir to <remote_repo_path>/work_dirs/<work_dir's name, else job_name>;
/// refresh_paths, the paths whose cluster-side build output is wiped at each sync, to none;
/// slurm_user and model_name name the temporary branch. A remote path starting with `~/` is
/// expanded against the cluster home preflight found.)
///
/// {adds}
///
/// Exit: 0 synced; 2 bad input (the field is named; nothing was pushed); 3 a login is needed; 4
/// git, ssh or the cluster failed (the cause is named; the local repository is untouched).
///
/// Example:
///   slurm-ssh-preflight job.json | slurm-sync-tracked | slurm-sync-untracked > synced.json
#[derive(Parser, Debug)]
#[command(name = "slurm-sync-tracked", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    input: InputArg,

    /// Where the snapshot travels: through origin (a temporary branch, deleted afterwards) or
    /// directly into the remote clone over ssh (origin untouched).
    #[arg(long, value_enum, default_value_t = Via::Origin)]
    via: Via,

    /// Build the snapshot and report what would be synced, without pushing or touching the
    /// remote (the snapshot commit exists only as an unreferenced local object).
    #[arg(long)]
    dry_run: bool,

    /// Sync even when the local repository is not the one the document names: `repo_url` is
    /// none of its remotes, or the remote clone shares no commit with it. Without this flag
    /// such a sync is refused before anything is pushed (a sync run from the wrong directory
    /// would otherwise put one project's code over another's clone).
    #[arg(long)]
    allow_unrelated: bool,

    /// Seconds to wait while another sync into the same remote clone holds its lock (concurrent
    /// pipelines take turns there); after that, exit 4 naming the holder.
    #[arg(long, value_name = "SECONDS", default_value_t = tracked::LOCK_WAIT_SECS)]
    lock_wait: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Via {
    Origin,
    Direct,
}

impl From<Via> for schema::Via {
    fn from(v: Via) -> schema::Via {
        match v {
            Via::Origin => schema::Via::Origin,
            Via::Direct => schema::Via::Direct,
        }
    }
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        &self.input
    }
    const SECTIONS: &'static [&'static str] = &["sync_tracked"];

    fn reads() -> Vec<&'static str> {
        shared::sync::tracked::Input::reads()
    }
}

pub fn main() -> std::process::ExitCode {
    shared::contract::driver::run::<Cli>("slurm-sync-tracked", sync)
}

fn sync(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    let opts = Options {
        via: cli.via.into(),
        dry_run: cli.dry_run,
        allow_unrelated: cli.allow_unrelated,
        lock_wait: cli.lock_wait,
    };
    tracked::sync(&opts, ctx)
}

#[cfg(test)]
mod help {
    #[test]
    fn help_names_every_field_of_the_sections_it_writes() {
        shared::contract::driver::assert_help_names_its_sections::<super::Cli>();
    }
}
