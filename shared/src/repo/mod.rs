//! The local repository: read, never written (the snapshot commit lives in git's object store
//! only, through a private index).
//!
//! - [`git`], [`snapshot`]: the local repository, and the zero-disturbance snapshot commit.
//! - [`submodules`]: the submodules of a working tree, nested ones too.
//! - [`index_file`]: git's index file, read directly (entries, stat data, cache-tree root).
//! - [`worktree_tree`]: the snapshot's tree computed in-process when that equals git's.
//! - [`archive`]: the tar stream of files sent to the cluster.
//! - [`manifest`]: what the last untracked sync sent, for incremental re-syncs.

pub mod archive;
pub mod git;
pub mod index_file;
pub mod manifest;
pub mod snapshot;
pub mod submodules;
pub mod worktree_tree;
