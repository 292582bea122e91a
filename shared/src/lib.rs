//! What every `slurm-*` tool shares.
//!
//! The document and its rules:
//! - [`doc`]: the job document, round-trip safe, with typed field and section accessors.
//! - [`schema`]: every section as a Rust type, the only way a tool writes or reads one.
//! - [`layout`]: the remote layout (root, `remote_repo_path`, `remote_work_dir`), decided once.
//! - [`error`]: the error type and the contract's exit codes.
//! - [`driver`]: the process plumbing every tool's `main` delegates to.
//!
//! Talking to the cluster:
//! - [`ssh`]: the ssh argv builder (the only one) and the one way to run a remote script.
//! - [`control_socket`]: checks of the ControlMaster socket path (length, owner).
//! - [`quote`]: the only place a value becomes shell text.
//! - [`remote`]: the remote shell scripts, as `.sh` files.
//! - [`remote_exit`]: the remote scripts' exit codes, named once for the shell and the Rust.
//! - [`slurm`]: Slurm settings (parsed once for submit and alloc), job ids, squeue/sacct parsers.
//! - [`process`]: running external programs with deadlines and bounded output.
//! - [`script_check`]: the static checks of every generated remote script (shellcheck, sh -n).
//!
//! The local side:
//! - [`git`], [`snapshot`]: the local repository, and the zero-disturbance snapshot commit.
//! - [`submodules`]: the submodules of a working tree, nested ones too.
//! - [`index_file`]: git's index file, read directly (entries, stat data, cache-tree root).
//! - [`worktree_tree`]: the snapshot's tree computed in-process when that equals git's.
//! - [`trees`]: each job's own code tree on the cluster (made and pruned at submission).
//! - [`archive`]: the tar stream of files sent to the cluster.
//! - [`manifest`]: what the last untracked sync sent, for incremental re-syncs.
//! - [`local_dirs`]: where local copies of logs and fetched files go (never the repository).
//! - [`journal`]: slurm-submit's record that lets a rerun find what an interrupted run submitted.
//! - [`ledger`]: the local run ledger (every submission, every verdict) slurm-runs reads.
//! - [`events`]: the JSON-lines event stream of slurm-watch and slurm-runs.
//! - [`private_files`]: the tools' own files: 0700/0600, atomic rewrites, ownership checks.
//! - [`tempdir`]: private temporary directories, swept when their process died.
//! - [`clock`]: Unix time and UTC stamps.
//! - [`ui`]: stderr messages and progress for people.
//! - [`testhook`]: `SLURM_TOOLS_PAUSE_AT` pause points for the fault tests.

pub mod archive;
pub mod clock;
pub mod control_socket;
pub mod doc;
pub mod driver;
pub mod error;
pub mod events;
pub mod forensics;
pub mod git;
pub mod index_file;
pub mod journal;
pub mod layout;
pub mod ledger;
pub mod local_dirs;
pub mod manifest;
pub mod private_files;
pub mod process;
pub mod quote;
pub mod remote;
pub mod remote_exit;
pub mod running;
pub mod schema;
pub mod script_check;
pub mod slurm;
pub mod snapshot;
pub mod ssh;
pub mod submodules;
pub mod sync;
pub mod tempdir;
pub mod testhook;
pub mod text;
pub mod trees;
pub mod ui;
pub mod worktree_tree;

pub use doc::Document;
pub use driver::{Context, DocumentTo, InputArg, Outcome, ToolCli};
pub use error::{ErrorKind, Result, ToolError};

/// Helpers for this crate's unit tests.
#[cfg(test)]
pub(crate) mod testutil {
    use std::path::Path;

    /// git in `dir` with a fixed identity and no global configuration; its stdout, trimmed.
    /// Panics (the test fails) when git does.
    pub fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@l"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}
