//! The contract: the job document, its types, its errors and exit codes, and the frame every
//! tool's `main` runs in (docs/contract.md is the public text of it).
//!
//! - [`text`]: values as text for people (previews, quoting for display); depends on nothing.
//! - [`error`]: the error type and the contract's exit codes.
//! - [`schema`]: every section as a Rust type, the only way a tool writes or reads one.
//! - [`doc`]: the job document, round-trip safe, with typed field and section accessors.
//! - [`input`]: a tool's input, the fields it reads, typed and checked once at the boundary.
//! - [`events`]: the JSON-lines event stream of slurm-watch and slurm-runs.
//! - [`driver`]: the process plumbing every tool's `main` delegates to.
//!
//! The order above is the import order: each module uses only those before it (the driver
//! excepted, which uses the rest of the crate).

pub mod doc;
pub mod driver;
pub mod error;
pub mod events;
pub mod input;
pub mod schema;
pub mod text;
