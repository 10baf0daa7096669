//! `events.jsonl`: one JSON object per line for everything that happened
//! in a run, so that `status`, reports and scripts can reconstruct it
//! after the fact, even after a crash (each line is written whole, with
//! one `write` call, as it happens).

use daisy_core::TaskCounters;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::Write;
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
    },
    BlockDone {
        task: &'a str,
        block_id: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        worker_id: Option<u64>,
    },
    BlockFailed {
        task: &'a str,
        block_id: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        worker_id: Option<u64>,
        error: &'a str,
        /// True when the block will not be tried again.
        for_good: bool,
    },
    TaskDone {
        task: &'a str,
        counters: TaskCounters,
    },
    /// The task's workers kept dying; its remaining blocks are orphaned.
    TaskAbandoned {
        task: &'a str,
        unclean_exits: u32,
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
}

#[derive(Serialize)]
struct Record<'a> {
    time: f64,
    #[serde(flatten)]
    event: &'a Event<'a>,
}

/// Appends events to `<run-dir>/events.jsonl`.
pub struct EventLog {
    path: PathBuf,
    file: File,
}

impl EventLog {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one event as one line in one `write` call.
    pub fn record(&mut self, event: &Event) -> std::io::Result<()> {
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let mut line = serde_json::to_vec(&Record { time, event })?;
        line.push(b'\n');
        self.file.write_all(&line)
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
}
