//! The two syncs as library code: the tools slurm-sync-tracked and slurm-sync-untracked are
//! their command lines, and `slurm-alloc exec --sync` runs both inside its one ssh execution
//! (see [`fused`]).

pub mod fused;
pub mod last_sync;
mod pending;
pub mod tracked;
mod tracked_packs;
mod tracked_remote;
pub mod untracked;
