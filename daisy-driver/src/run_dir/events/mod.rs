//! `events.jsonl`: one JSON object per line for everything that happened
//! in a run, so that `status`, reports and scripts can reconstruct it
//! after the fact, even after a crash (each line is written whole, never
//! split across `write` calls).
//!
//! [`EventLog::record`] writes at once. [`EventLog::record_buffered`]
//! keeps lines in memory until the next `record` or [`EventLog::flush`]:
//! the driver uses it for `block_done`, one per block (runs of up to
//! 100,000 blocks), so such a run makes a few hundred writes instead of
//! 100,000, and for `blocks_done`, the done blocks of a worker's second
//! summed up (bigger runs, see [`crate::run_dir::outcome_recorder`]). Such lines
//! are written late, never lost by a crash that matters: a block's done
//! marker is written before its line or record, so after a `kill -9` the
//! markers are the truth and the log at most lacks the last done blocks
//! (those since the driver's last tick, or the last second's).

pub(crate) mod done_tally;
mod file;
pub(crate) mod history;
pub(crate) mod recorder;
pub(crate) mod run_times;

use crate::pipeline::budget::Share;
use crate::run_dir::events::run_times::RunTimes;
use daisy_core::TaskCounters;
pub use file::EventLog;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// Text of an event: borrowed when written, owned when read back.
type Text<'a> = Cow<'a, str>;

/// What happened: the one schema of `events.jsonl`, written by
/// [`EventLog`] and read back by [`crate::run_dir::events::history`]. Serialised with
/// an `"event"` tag, e.g. `{"time": 1764403200.5, "event":
/// "block_failed", "task": "predict", ...}`. Fields added after a kind
/// first shipped have a default, so lines of earlier versions still read;
/// the written bytes are what docs/user-guide.md documents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    RunStarted {
        pipeline: Text<'a>,
        mode: Text<'a>,
        /// `run --retry-failed`: only the blocks that failed last time
        /// (and their orphans) may run.
        #[serde(default, skip_serializing_if = "is_false")]
        retry_failed: bool,
    },
    BlockDone {
        task: Text<'a>,
        block_id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker_id: Option<u64>,
        /// How long the block ran, as its worker measured it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seconds: Option<f64>,
    },
    /// Blocks that succeeded, summed up: those of one worker (none in a
    /// serial run) of one task whose results came within about a second.
    /// Runs of more blocks than [`crate::run_dir::outcome_recorder`] logs one by
    /// one write these instead of `block_done` lines. The line's `time`
    /// is when the last of them ended.
    BlocksDone {
        task: Text<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker_id: Option<u64>,
        count: u64,
        /// Unix seconds when the first of them ended.
        first: f64,
        /// Unix seconds when the earliest of them started (end minus run
        /// time); absent when no run time was measured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start: Option<f64>,
        /// The run times measured (see [`RunTimes`]); absent when none was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_times: Option<RunTimes>,
    },
    BlockFailed {
        task: Text<'a>,
        block_id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker_id: Option<u64>,
        error: Text<'a>,
        /// True when the block will not be tried again.
        for_good: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seconds: Option<f64>,
    },
    /// A draining worker gave blocks back unfinished; they are queued
    /// again and do not count as failed attempts.
    BlocksReturned {
        task: Text<'a>,
        worker_id: u64,
        block_ids: Cow<'a, [u64]>,
        why: Text<'a>,
    },
    TaskDone {
        task: Text<'a>,
        counters: TaskCounters,
    },
    /// The task's workers kept dying; its remaining blocks are orphaned.
    TaskAbandoned {
        task: Text<'a>,
        unclean_exits: u32,
        why: Text<'a>,
    },
    WorkerSubmitted {
        task: Text<'a>,
        worker_id: u64,
        job: Text<'a>,
        /// The budget's ids the worker holds, per key (none: no budget).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        resources: Cow<'a, Share>,
    },
    WorkerStartFailed {
        task: Text<'a>,
        worker_id: u64,
        error: Text<'a>,
    },
    /// The worker's submission waits for a limit: a site limit refused
    /// it (`limit` is SLURM's reason, such as
    /// `QOSMaxSubmitJobPerUserLimit`, `MaxArraySize`, or LSF's
    /// `MAX_PEND_JOBS`) or the task's `max_jobs` jobs are queued or
    /// running (`limit` is `max_jobs`). Its slot stays pending; the
    /// launcher submits it later (then `worker_submitted`). Recorded
    /// again only when the limit it waits for changes.
    WorkerSubmitWaiting {
        task: Text<'a>,
        worker_id: u64,
        limit: Text<'a>,
        /// The scheduler's words, or why `max_jobs` holds it back.
        message: Text<'a>,
    },
    WorkerConnected {
        task: Text<'a>,
        worker_id: u64,
        host: Text<'a>,
        pid: u32,
        /// Started by hand (or a job not launched by this run).
        by_hand: bool,
        /// A launched worker back after its job was requeued.
        #[serde(default, skip_serializing_if = "is_false")]
        requeued: bool,
        /// The batch job it says it runs in: SLURM's `<job>` or, for a
        /// job step (a job of several workers), `<job>.<step>`; LSF's job.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<Text<'a>>,
    },
    /// The driver let an idle worker go (its task's `idle_timeout`).
    WorkerReleased {
        task: Text<'a>,
        worker_id: u64,
        why: Text<'a>,
    },
    /// The worker takes no more blocks (walltime, SIGTERM, preemption).
    WorkerDraining {
        task: Text<'a>,
        worker_id: u64,
        why: Text<'a>,
    },
    WorkerGone {
        task: Text<'a>,
        worker_id: u64,
        clean: bool,
        why: Text<'a>,
    },
    /// A peer was turned away at the handshake (wrong token, ...).
    ConnectionRefused {
        peer: Text<'a>,
        reason: Text<'a>,
    },
    /// More peers were turned away at the handshake than are recorded
    /// one by one (`connection_refused`) within `seconds`.
    ConnectionsRefused {
        count: u64,
        seconds: f64,
    },
    /// A worker sent something that was refused; the run goes on.
    RequestRefused {
        task: Text<'a>,
        worker_id: u64,
        reason: Text<'a>,
    },
    RunFinished {
        completed: bool,
        seconds: f64,
    },
    /// A driver starting on the run directory cancelled these jobs, which
    /// the run before it submitted and left queued or running (it was
    /// killed); recorded before the new run's `run_started`.
    EarlierJobsCancelled {
        launcher: Text<'a>,
        jobs: Cow<'a, [String]>,
    },
    /// Read back only: a kind this build does not know (a newer daisy
    /// wrote it). Never written.
    #[serde(other, skip_serializing)]
    Unknown,
}

/// Unix seconds now, as event lines give their time.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn is_false(value: &bool) -> bool {
    !value
}

/// One line of `events.jsonl`: an event and when it happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventLine<E> {
    /// Unix seconds.
    pub time: f64,
    #[serde(flatten)]
    pub kind: E,
}

#[cfg(test)]
mod tests;
