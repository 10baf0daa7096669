//! daisy-driver: the process that owns a run.
//!
//! It reads the pipeline file, plans the blockwise graph, hands blocks out
//! and records what finished so a re-run resumes.
//!
//! # Layout
//! - [`pipeline`]: the pipeline file (TOML or JSON), parsed then validated.
//! - [`done_marker`]: per-task done markers (Zarr v3, daisy 2.0 layout).
//! - [`run_dir`]: where a run keeps markers, events and logs.
//! - [`plan`]: the dry run behind `daisy-driver plan`.
//! - [`events`]: `events.jsonl`, one line per thing that happened.
//! - [`serial_run`]: `daisy-driver run`, blocks one at a time.
//! - [`cli`]: the command line.
pub mod cli;
pub mod done_marker;
pub mod events;
pub mod pipeline;
pub mod plan;
pub mod run_dir;
pub mod serial_run;
