//! daisy-driver: the process that owns a run.
//! (How the crates fit together: docs/architecture.md.)
//!
//! It reads the pipeline file, plans the blockwise graph, hands blocks out
//! and records what finished so a re-run resumes.
//!
//! # Layout
//! - [`pipeline`]: the pipeline file (TOML or JSON), parsed then validated.
//! - [`done_marker`]: per-task done markers (Zarr v3, daisy 2.0.0 layout).
//! - [`run_dir`]: where a run keeps markers, events and logs.
//! - [`run_lock`]: one driver (or reset) at a time per run directory.
//! - [`run_start`]: what a run checks before it writes to its run directory.
//! - [`plan`]: the dry run behind `daisy-driver plan`.
//! - [`events`]: `events.jsonl`, one line per thing that happened: the
//!   event schema, written and read back.
//! - [`journal`]: the event log of a run, which warns and goes on when the
//!   file cannot be written.
//! - [`outcome_recorder`]: what became of each block (done markers and
//!   events), the same for serial and distributed runs.
//! - [`done_tally`], [`run_times`]: done blocks summed up per worker and
//!   second for `events.jsonl` (big runs), and their run times.
//! - [`run_history`]: `events.jsonl` read back, cut into runs.
//! - [`driver`]: `daisy-driver run`: the run loop, its shell, and the
//!   core that holds every rule of a distributed run.
//! - [`connection`]: one task per worker connection.
//! - [`budget`], [`slots`]: the resource budget and worker accounting.
//! - [`launch`]: the launcher backend a task asks for.
//! - [`task_launchers`]: one launcher per kind the tasks use, behind one.
//! - [`earlier_jobs`]: cancelling the jobs a killed driver left queued.
//! - [`run_context`]: token, advertised addresses, `context.json`.
//! - [`progress`], [`summary`]: what the user sees during and after a run.
//! - [`recent_rate`]: blocks per second now, for live status.
//! - [`report`]: `daisy-driver report`, a run drawn from its run directory.
//! - [`serial_run`]: `daisy-driver run --serial`, blocks one at a time in
//!   process (debugging, small jobs).
//! - [`status`]: `daisy-driver status`, offline and live.
//! - [`retry`], [`reset`]: `run --retry-failed` and `--reset TASK`.
//! - [`skip_mask`]: a task's mask of blocks not to run, read from Zarr.
//! - [`throttle`]: how often one kind of trouble is logged.
//! - [`cli`]: the command line.
pub mod budget;
pub mod cli;
pub mod connection;
pub mod cost_summary;
pub mod counted;
pub mod done_marker;
pub mod done_tally;
pub mod driver;
pub mod earlier_jobs;
pub mod embedding;
pub mod events;
pub mod journal;
pub mod launch;
pub mod outcome_recorder;
pub mod pipeline;
pub mod plan;
pub mod program_check;
pub mod progress;
pub mod recent_rate;
pub mod report;
pub mod reset;
pub mod retry;
pub mod run_context;
pub mod run_dir;
pub mod run_history;
pub mod run_lock;
pub mod run_start;
pub mod run_times;
pub mod serial_run;
pub mod skip_mask;
pub mod slots;
pub mod status;
pub mod stdout;
pub mod summary;
pub mod task_launchers;
pub mod throttle;
