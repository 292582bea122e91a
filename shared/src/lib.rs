//! What every `slurm-*` tool shares, in five parts and two subjects:
//!
//! - [`contract`]: the job document, its section types, errors and exit codes, the tool frame.
//! - [`remote`]: the cluster side: ssh and its master, quoting, the remote scripts (`sh/`), the
//!   remote layout, job trees, forensics.
//! - [`repo`]: the local repository, read and never written: snapshot, submodules, git's index,
//!   the tar stream, the untracked manifest.
//! - [`state`]: the tools' own files on the person's machine: ledger, journal, local copies,
//!   private files and temporary directories.
//! - [`support`]: running programs, the clock, messages for people, test pause points.
//! - [`slurm`]: Slurm settings (parsed once for submit and alloc), job ids, squeue/sacct
//!   parsers, containers, pending reasons, sweeps, usage.
//! - [`sync`]: the tracked and untracked syncs and their fused, one-execution form.
//!
//! No two modules import each other in a circle; within `contract` the order is text, error,
//! schema, doc (each uses only those before it), and the other parts use `contract` and
//! `support` freely.

pub mod contract;
pub mod remote;
pub mod repo;
pub mod slurm;
pub mod state;
pub mod support;
pub mod sync;

pub use contract::doc::Document;
pub use contract::driver::{Context, DocumentTo, InputArg, Outcome, ToolCli};
pub use contract::error::{ErrorKind, Result, ToolError};

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
