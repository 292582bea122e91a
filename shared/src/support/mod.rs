//! What the other parts stand on.
//!
//! - [`process`]: running external programs with deadlines and bounded output.
//! - [`clock`]: Unix time and UTC stamps.
//! - [`ui`]: stderr messages and progress for people.
//! - [`testhook`]: `SLURM_TOOLS_PAUSE_AT` pause points for the fault tests.

pub mod clock;
pub mod process;
pub mod testhook;
pub mod ui;
