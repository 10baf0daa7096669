//! daisy-driver: the process that owns a run.
//!
//! It reads the pipeline file, plans the blockwise graph, hands blocks out
//! and records what finished so a re-run resumes.
//!
//! # Layout
//! - [`pipeline`]: the pipeline file (TOML or JSON), parsed then validated.
//! - [`done_marker`]: per-task done markers (Zarr v3, daisy 2.0 layout).
pub mod done_marker;
pub mod pipeline;
