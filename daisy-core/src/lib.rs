//! daisy-core: the shared model of daisy.
//! (How the crates fit together: docs/architecture.md.)
//!
//! Geometry (`Coordinate`, `Roi`), blocks and their ids, the task spec the
//! scheduler needs, the blockwise dependency graph, the scheduler state
//! machine with a serial runner, and the wire protocol. No sockets, no
//! policy, no launcher knowledge: the driver, the worker, the launchers and
//! the tests all build on this.
//!
//! # Layout
//! - [`coordinate`], [`roi`]: n-dimensional geometry with floor division.
//! - [`divisor`]: division by a fixed coordinate, by multiplication.
//! - [`block`]: `Block`, `BlockId`, `TaskIdx`, Cantor ids.
//! - [`cell_set`]: a set of a task's blocks at a bit per block.
//! - [`task`]: `TaskSpec`, `Fit`.
//! - [`geometry`]: where a task's blocks sit (`BlockGrid`), geometry checks.
//! - [`graph`]: levels, conflicts, upstream/downstream (`DependencyGraph`).
//! - [`id_hash`]: fast hash maps for ids the driver hands out.
//! - [`protocol`]: the wire protocol: messages, framing, handshake.
//! - [`context`]: `DAISY_CONTEXT`, how a worker finds its driver.
//! - [`scheduler`]: ready blocks, retries, orphans, counters.
//! - [`serial`]: run a pipeline in-process, one block at a time.
//! - [`template`]: `{placeholders}` in block commands, checked and filled in.
//! - [`write_grid`]: the chunk and shard grids of arrays a task writes;
//!   `write_locks` keeps two blocks from writing into one shard at once.

pub mod block;
pub mod cell_set;
pub mod context;
pub mod coordinate;
pub mod divisor;
pub mod geometry;
pub mod graph;
pub mod id_hash;
pub mod marker_grid;
pub mod printable;
pub mod protocol;
pub mod roi;
pub mod scheduler;
pub mod serial;
pub mod task;
pub mod template;
pub mod walltime;
pub mod write_grid;
mod write_locks;

pub use block::{Block, BlockId, TaskIdx};
pub use coordinate::Coordinate;
pub use graph::{DependencyGraph, GraphError, TaskGraph};
pub use roi::Roi;
pub use scheduler::{BlockOutcome, Scheduler, TaskCounters};
pub use task::{Fit, TaskSpec};
pub use write_grid::{WriteGrid, WriteLayout};
pub use write_locks::Holder;
