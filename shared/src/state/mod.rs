//! Local state: what the tools keep on the person's machine, outside the repository.
//!
//! - [`ledger`]: the local run ledger (every submission, every verdict) slurm-runs reads.
//! - [`journal`]: slurm-submit's record that lets a rerun find what an interrupted run submitted.
//! - [`local_dirs`]: where local copies of logs and fetched files go (never the repository).
//! - [`private_files`]: the tools' own files: 0700/0600, atomic rewrites, ownership checks.
//! - [`tempdir`]: private temporary directories, swept when their process died.

pub mod journal;
pub mod ledger;
pub mod local_dirs;
pub mod private_files;
pub mod tempdir;
