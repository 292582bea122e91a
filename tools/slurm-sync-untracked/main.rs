//! slurm-sync-untracked: the untracked, non-ignored files of the working tree, as one tar stream
//! into the remote checkout (docs/migrating.md, step 4e.1).

use clap::Parser;
use shared::sync::untracked::{self, Options};
use shared::{Context, InputArg, Outcome, Result, ToolCli};

/// Send the untracked, non-ignored files of your working tree into the remote checkout.
///
/// The files `git ls-files --others --exclude-standard` lists (every ignore source honoured)
/// travel as one tar stream over one ssh execution, built while it is sent (memory stays small
/// whatever the size). Symlinks are sent as symlinks (a link to a secret never uploads the
/// secret); FIFOs, sockets, devices, unreadable files and directories, and nested git
/// repositories are skipped and listed with their reason. Names arrive byte-exact, executable
/// bits are kept, ownership and setuid bits are not. On the remote, extraction stays inside
/// `remote_repo_path`: symlinks an earlier sync left where a directory now goes are removed
/// first, so nothing is written through them. Run it after slurm-sync-tracked.
///
/// Re-syncs are incremental: the remote checkout keeps a manifest of what the last sync sent
/// (in .git/slurm-tools/), so only new and changed files travel (size, mtime, mode or kind
/// differ), files deleted locally are deleted there, and unchanged ones cost nothing but the
/// local stat. slurm-sync-tracked knows these files as ours: it never stashes them or calls
/// them cluster-side changes. --full sends everything again.
///
/// {reads}
/// (repo_root defaults to the repository around the current directory; slurm-sync-tracked
/// derives remote_repo_path and writes sync_tracked.)
///
/// {adds}
///
/// Exit: 0 synced; 2 bad input; 3 a login is needed; 4 ssh, tar or the cluster failed (the
/// local repository is untouched).
///
/// Example:
///   slurm-sync-tracked < ready.json | slurm-sync-untracked > synced.json
#[derive(Parser, Debug)]
#[command(name = "slurm-sync-untracked", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    input: InputArg,

    /// Compress the stream with gzip (for slow links; costs CPU on both sides).
    #[arg(long)]
    gzip: bool,

    /// Send every untracked file, ignoring what the last sync recorded as sent (after files in
    /// the remote checkout were changed or removed there by hand).
    #[arg(long)]
    full: bool,

    /// Seconds to wait while another sync into the same remote clone holds its lock (concurrent
    /// pipelines take turns there); after that, exit 4 naming the holder.
    #[arg(long, value_name = "SECONDS", default_value_t = shared::sync::tracked::LOCK_WAIT_SECS)]
    lock_wait: u64,

    /// Say which untracked files a sync would consider sending (names and sizes, on stderr) and
    /// send nothing: no ssh connection, the document passed on unchanged.
    #[arg(long)]
    dry_run: bool,
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        &self.input
    }
    const SECTIONS: &'static [&'static str] = &["sync_untracked"];

    fn reads() -> Vec<&'static str> {
        shared::sync::untracked::Input::reads()
    }
}

pub fn main() -> std::process::ExitCode {
    shared::contract::driver::run::<Cli>("slurm-sync-untracked", sync)
}

fn sync(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    let opts = Options {
        gzip: cli.gzip,
        full: cli.full,
        lock_wait: cli.lock_wait,
        dry_run: cli.dry_run,
    };
    untracked::sync(&opts, ctx)
}

#[cfg(test)]
mod help {
    #[test]
    fn help_names_every_field_of_the_sections_it_writes() {
        shared::contract::driver::assert_help_names_its_sections::<super::Cli>();
    }
}
