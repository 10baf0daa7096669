//! daisy-driver: the process that owns a run.
//! (How the crates fit together: docs/architecture.md.)
//!
//! It reads the pipeline file, plans the blockwise graph, hands blocks out
//! and records what finished so a re-run resumes.
//!
//! # Layout
//! Layers, each using only those below it (kept so by
//! `tests/architecture.rs`): [`cli`] → [`inspect`] → [`run`] →
//! [`run_dir`] → [`pipeline`], with small helpers under all of them.
//! - [`pipeline`]: the pipeline file (TOML or JSON), read, validated and
//!   resolved into what a run needs (with each task's skip mask).
//! - [`run_dir`]: what a run leaves on disk and reads back: the directory
//!   and its lock, the checks before a run writes there, `--reset`, the
//!   done markers, the event log and its history, the recorder that
//!   writes what became of each block, and the model of a run read back
//!   from them (`run_state`, which `status`, `report` and `run
//!   --retry-failed` share).
//! - [`run`]: running a pipeline, distributed (a block server, workers
//!   started through launchers, one run loop around a synchronous core) or
//!   serial, with the budget, the worker slots, progress and the summary.
//! - [`inspect`]: looking at a run without changing it: `plan`, `status`
//!   and `report`.
//! - [`cli`]: the command line, one function per subcommand.
pub mod cli;
pub(crate) mod counted;
pub mod exit;
pub mod inspect;
pub mod pipeline;
pub mod run;
pub mod run_dir;
pub(crate) mod throttle;
