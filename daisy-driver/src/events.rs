//! `events.jsonl`: one JSON object per line for everything that happened
//! in a run, so that `status`, reports and scripts can reconstruct it
//! after the fact, even after a crash (each line is written whole, never
//! split across `write` calls).
//!
//! [`EventLog::record`] writes at once. [`EventLog::record_buffered`]
//! keeps lines in memory until the next `record` or [`EventLog::flush`]:
//! the distributed driver uses it for `block_done`, one per block, so a
//! run of 100,000 blocks makes a few hundred writes instead of 100,000.
//! Such lines are written late, never lost by a crash that matters: a
//! block's done marker is written before its `block_done` line, so after
//! a `kill -9` the markers are the truth and the log at most lacks the
//! last `block_done` lines (those since the driver's last tick).

use daisy_core::TaskCounters;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// What happened. Serialised with an `"event"` tag, e.g.
/// `{"time": 1764403200.5, "event": "block_failed", "task": "predict", ...}`.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    RunStarted {
        pipeline: &'a str,
        mode: &'a str,
        /// `run --retry-failed`: only the blocks that failed last time
        /// (and their orphans) may run.
        #[serde(skip_serializing_if = "is_false")]
        retry_failed: bool,
    },
    BlockDone {
        task: &'a str,
        block_id: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        worker_id: Option<u64>,
        /// How long the block ran, as its worker measured it.
        #[serde(skip_serializing_if = "Option::is_none")]
        seconds: Option<f64>,
    },
    BlockFailed {
        task: &'a str,
        block_id: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        worker_id: Option<u64>,
        error: &'a str,
        /// True when the block will not be tried again.
        for_good: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        seconds: Option<f64>,
    },
    /// A draining worker gave blocks back unfinished; they are queued
    /// again and do not count as failed attempts.
    BlocksReturned {
        task: &'a str,
        worker_id: u64,
        block_ids: &'a [u64],
        why: &'a str,
    },
    TaskDone {
        task: &'a str,
        counters: TaskCounters,
    },
    /// The task's workers kept dying; its remaining blocks are orphaned.
    TaskAbandoned {
        task: &'a str,
        unclean_exits: u32,
        why: &'a str,
    },
    WorkerSubmitted {
        task: &'a str,
        worker_id: u64,
        job: &'a str,
    },
    WorkerStartFailed {
        task: &'a str,
        worker_id: u64,
        error: &'a str,
    },
    WorkerConnected {
        task: &'a str,
        worker_id: u64,
        host: &'a str,
        pid: u32,
        /// Started by hand (or a job not launched by this run).
        by_hand: bool,
        /// A launched worker back after its job was requeued.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        requeued: bool,
    },
    /// The driver let an idle worker go (its task's `idle_timeout`).
    WorkerReleased {
        task: &'a str,
        worker_id: u64,
        why: &'a str,
    },
    /// The worker takes no more blocks (walltime, SIGTERM, preemption).
    WorkerDraining {
        task: &'a str,
        worker_id: u64,
        why: &'a str,
    },
    WorkerGone {
        task: &'a str,
        worker_id: u64,
        clean: bool,
        why: &'a str,
    },
    /// A peer was turned away at the handshake (wrong token, ...).
    ConnectionRefused {
        peer: &'a str,
        reason: &'a str,
    },
    /// More peers were turned away at the handshake than are recorded
    /// one by one (`connection_refused`) within `seconds`.
    ConnectionsRefused {
        count: u64,
        seconds: f64,
    },
    /// A worker sent something that was refused; the run goes on.
    RequestRefused {
        task: &'a str,
        worker_id: u64,
        reason: &'a str,
    },
    RunFinished {
        completed: bool,
        seconds: f64,
    },
    /// A driver starting on the run directory cancelled these jobs, which
    /// the run before it submitted and left queued or running (it was
    /// killed); recorded before the new run's `run_started`.
    EarlierJobsCancelled {
        launcher: &'a str,
        jobs: &'a [String],
    },
}

fn is_false(value: &bool) -> bool {
    !value
}

#[derive(Serialize)]
struct Record<'a> {
    time: f64,
    #[serde(flatten)]
    event: &'a Event<'a>,
}

/// Lines kept before [`EventLog::record_buffered`] writes them anyway:
/// a few hundred `block_done` lines.
const BUFFER_BYTES: usize = 64 * 1024;

/// Appends events to `<run-dir>/events.jsonl`.
pub struct EventLog {
    path: PathBuf,
    /// Holds only whole lines: each is encoded into `line` first and
    /// handed over in one `write_all`, which either fits in the buffer or
    /// writes the buffer out first (flushed on drop, too).
    file: BufWriter<File>,
    /// The line being encoded, reused so recording does not allocate.
    line: Vec<u8>,
}

impl EventLog {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)?;
        // A crash or a full disk mid-write leaves the last line cut short.
        // End it, so that our first line (a run's `run_started`) is not
        // glued to it and lost with it: readers would then take this run
        // for part of the one before.
        let len = file.metadata()?.len();
        let mut last = [0u8];
        if len > 0 {
            file.read_exact_at(&mut last, len - 1)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            file: BufWriter::with_capacity(BUFFER_BYTES, file),
            line: Vec::with_capacity(256),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one event as one line, after any buffered ones.
    pub fn record(&mut self, event: &Event) -> std::io::Result<()> {
        self.record_buffered(event)?;
        self.flush()
    }

    /// Buffers one event as one line; it is written by the next
    /// [`Self::record`] or [`Self::flush`], or when the buffer is full.
    pub fn record_buffered(&mut self, event: &Event) -> std::io::Result<()> {
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.line.clear();
        serde_json::to_writer(&mut self.line, &Record { time, event })?;
        self.line.push(b'\n');
        self.file.write_all(&self.line)
    }

    /// Writes the buffered lines.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_appended_as_tagged_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        for _ in 0..2 {
            let mut log = EventLog::open(&path).unwrap();
            log.record(&Event::BlockFailed {
                task: "predict",
                block_id: 7,
                worker_id: Some(2),
                error: "exit status 1",
                for_good: false,
                seconds: Some(0.5),
            })
            .unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["event"], "block_failed");
        assert_eq!(lines[1]["task"], "predict");
        assert_eq!(lines[1]["block_id"], 7);
        assert!(lines[1]["time"].as_f64().unwrap() > 1.0e9);
    }

    #[test]
    fn buffered_events_are_written_in_order_by_the_next_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::open(&path).unwrap();
        let done = |block_id| Event::BlockDone {
            task: "predict",
            block_id,
            worker_id: None,
            seconds: None,
        };
        log.record_buffered(&done(1)).unwrap();
        log.record_buffered(&done(2)).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        log.record(&Event::RunFinished {
            completed: true,
            seconds: 1.0,
        })
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let events: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].to_string())
            .collect();
        assert_eq!(
            events,
            ["\"block_done\"", "\"block_done\"", "\"run_finished\""]
        );
    }

    #[test]
    fn buffered_events_are_written_when_the_log_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::open(&path).unwrap();
        log.record_buffered(&Event::BlockDone {
            task: "predict",
            block_id: 3,
            worker_id: Some(1),
            seconds: None,
        })
        .unwrap();
        drop(log);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    }
}
