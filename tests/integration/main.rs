//! The integration suite: the real binaries, run as processes, against the real local cluster
//! (slurmctld, slurmd, slurmdbd), the real sshd instances and real git that
//! `scripts/local-cluster up` brings up. `scripts/test` brings them up before running this.
//! Nothing here is a mock; where a fault cannot be caused for real, the test says so.

// A scenario reads top to bottom: the workspace limit on function length is for the code.
#![allow(clippy::too_many_lines)]

mod concurrent;
mod document;
mod examples;
pub mod fixture;
pub(crate) mod forensics;
mod harness;
mod history;
pub(crate) mod install;
mod mcp;
mod modern;
mod nodes;
mod pending;
mod polish;
mod preflight;
pub(crate) mod readme;
mod remote_quoting;
mod repos;
mod resolve;
pub(crate) mod runs;
mod secrets;
pub mod submit;
mod sweep;
pub mod sync;
mod testbed;
pub mod totp;
mod watch;
