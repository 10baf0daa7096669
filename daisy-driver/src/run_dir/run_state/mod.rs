//! What a run directory says about each task's blocks and workers, after
//! a run or while one runs: the one model that `status`, `run
//! --retry-failed` and `report` read, so the three never disagree about
//! which blocks failed or how a worker ended.
//!
//! Two sources make it, in two steps:
//! - [`RunEvents`]: one run's `events.jsonl` lines summed up while the
//!   file streams by (never held whole): its start and end, per task what
//!   its blocks did, per worker its life. Of single blocks it keeps only
//!   those that failed.
//! - [`BlockStates`]: the done markers, read against those events and the
//!   dependency graph: each block's [`BlockState`], and what measured
//!   blocks cost.
//!
//! Terms, per task: **done** blocks are those set in the done marker (the
//! truth: `events.jsonl` may lack the last done blocks after a `kill -9`,
//! and big runs record them only summed up); **failed** blocks failed for
//! good in the last run and are not done; **orphaned** blocks are not
//! done and lie downstream of a failed block (or belong to a task the last
//! run abandoned); **remaining** is the rest. The *last run* starts at the
//! last `run_started` line of `events.jsonl`.
//!
//! What the readers make of it (status's JSON, the report's pictures, the
//! blocks a retry runs) is theirs.

mod block_by_id;
mod blocks;
mod events;
mod workers;

pub use block_by_id::block_by_id;
pub use blocks::{BlockState, BlockStates};
pub use events::{RunEnding, RunEvents, TaskEvents};
pub use workers::{WorkerEnd, WorkerLife};
