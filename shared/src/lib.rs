//! What every `slurm-*` tool shares.
//!
//! - [`doc`]: the job document, round-trip safe, with typed field accessors.
//! - [`error`]: the error type and the contract's exit codes.
//! - [`driver`]: the process plumbing every tool's `main` delegates to.
//! - [`quote`]: the only place a value becomes shell text.
//! - [`process`]: running external programs with deadlines and bounded output.
//! - [`ssh`]: the ssh argv builder and the one way to run a remote script.
//! - [`journal`]: slurm-submit's record that lets a rerun find what an interrupted run submitted.
//! - [`ui`]: stderr messages for people.

pub mod archive;
pub mod control_socket;
pub mod doc;
pub mod driver;
pub mod error;
pub mod git;
pub mod journal;
pub mod layout;
pub mod process;
pub mod quote;
pub mod schema;
pub mod slurm;
pub mod snapshot;
pub mod ssh;
pub mod tempdir;
pub mod testhook;
pub mod ui;

pub use doc::Document;
pub use driver::{Context, InputArg, Outcome, ToolCli};
pub use error::{ErrorKind, Result, ToolError};
