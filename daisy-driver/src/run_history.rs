//! Reading `events.jsonl` back: the typed history of a run directory,
//! for `status`, reports and `run --retry-failed`.
//!
//! [`crate::events`] writes the file; this module reads it into owned
//! values and cuts it into **runs**: a run starts at a `run_started` line
//! and lasts until the next one (the *last run* is everything after the
//! last `run_started`). The file may be damaged in ways a crash or a
//! hand edit leaves it: a truncated last line (a `kill -9` mid-write) is
//! dropped silently, any other line that is not a JSON object with a
//! known shape becomes a [`BadLine`] (naming its line number) and is
//! skipped, and events of kinds this build does not know (written by a
//! newer daisy) are kept as [`EventKind::Unknown`]. Nothing here panics
//! on the file's content.
//!
//! Done markers, not this file, are the truth about done blocks: a
//! `kill -9` can lose the last `block_done` lines (see [`crate::events`]).

use daisy_core::TaskCounters;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One line of `events.jsonl`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct HistoryEvent {
    /// Unix seconds.
    pub time: f64,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened; the owned mirror of [`crate::events::Event`] (fields
/// added later are optional, so older files still read).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    RunStarted {
        pipeline: String,
        mode: String,
        /// The run only retried the blocks that failed before
        /// (`run --retry-failed`).
        #[serde(default)]
        retry_failed: bool,
    },
    BlockDone {
        task: String,
        block_id: u64,
        #[serde(default)]
        worker_id: Option<u64>,
        /// How long the block ran.
        #[serde(default)]
        seconds: Option<f64>,
    },
    BlockFailed {
        task: String,
        block_id: u64,
        #[serde(default)]
        worker_id: Option<u64>,
        error: String,
        for_good: bool,
        #[serde(default)]
        seconds: Option<f64>,
    },
    /// A draining worker gave blocks back unfinished (not failures).
    BlocksReturned {
        task: String,
        worker_id: u64,
        block_ids: Vec<u64>,
        why: String,
    },
    TaskDone {
        task: String,
        counters: TaskCounters,
    },
    TaskAbandoned {
        task: String,
        unclean_exits: u32,
        why: String,
    },
    WorkerSubmitted {
        task: String,
        worker_id: u64,
        job: String,
    },
    WorkerStartFailed {
        task: String,
        worker_id: u64,
        error: String,
    },
    WorkerConnected {
        task: String,
        worker_id: u64,
        host: String,
        pid: u32,
        by_hand: bool,
        /// Back after its job was requeued.
        #[serde(default)]
        requeued: bool,
    },
    /// The driver let an idle worker go (`idle_timeout`).
    WorkerReleased {
        task: String,
        worker_id: u64,
        why: String,
    },
    /// The worker takes no more blocks (walltime, SIGTERM, preemption).
    WorkerDraining {
        task: String,
        worker_id: u64,
        why: String,
    },
    WorkerGone {
        task: String,
        worker_id: u64,
        clean: bool,
        why: String,
    },
    ConnectionRefused {
        peer: String,
        reason: String,
    },
    ConnectionsRefused {
        count: u64,
        seconds: f64,
    },
    RequestRefused {
        task: String,
        worker_id: u64,
        reason: String,
    },
    RunFinished {
        completed: bool,
        seconds: f64,
    },
    /// A new driver cancelled jobs the run before it left behind.
    EarlierJobsCancelled {
        launcher: String,
        jobs: Vec<String>,
    },
    /// An event kind this build does not know (a newer daisy wrote it).
    #[serde(other)]
    Unknown,
}

/// A line that could not be read as an event, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    /// 1-based, as editors count.
    pub line: usize,
    pub error: String,
}

/// Why `events.jsonl` could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Every event of a run directory, in file order.
#[derive(Clone, Debug, Default)]
pub struct RunHistory {
    pub path: PathBuf,
    pub events: Vec<HistoryEvent>,
    /// Lines skipped because they are not events (a torn last line is
    /// not one of them: it is expected after a crash).
    pub bad_lines: Vec<BadLine>,
}

impl RunHistory {
    /// Reads `path` (normally `<run-dir>/events.jsonl`).
    pub fn read(path: &Path) -> Result<Self, HistoryError> {
        let bytes = std::fs::read(path).map_err(|source| HistoryError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self::parse(path, &String::from_utf8_lossy(&bytes)))
    }

    /// Parses the text of an events file; `path` is kept for messages.
    pub fn parse(path: &Path, text: &str) -> Self {
        let mut history = Self {
            path: path.to_path_buf(),
            ..Self::default()
        };
        // A file cut by a crash ends without a newline; its last line is
        // then incomplete and expected to be garbage.
        let torn = !text.is_empty() && !text.ends_with('\n');
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<HistoryEvent>(line) {
                Ok(event) => history.events.push(event),
                Err(_) if torn && i + 1 == lines.len() => {}
                Err(error) => history.bad_lines.push(BadLine {
                    line: i + 1,
                    error: error.to_string(),
                }),
            }
        }
        history
    }

    /// The runs in order, each starting at its `run_started` event (events
    /// before the first one, from a damaged file, form no run).
    pub fn runs(&self) -> Vec<&[HistoryEvent]> {
        let starts: Vec<usize> = self
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e.kind, EventKind::RunStarted { .. }))
            .map(|(i, _)| i)
            .collect();
        let ends = starts.iter().skip(1).copied().chain([self.events.len()]);
        starts
            .iter()
            .zip(ends)
            .map(|(&start, end)| &self.events[start..end])
            .collect()
    }

    /// The events of the last run, starting with its `run_started`; empty
    /// if there was none.
    pub fn last_run(&self) -> &[HistoryEvent] {
        self.runs().last().copied().unwrap_or(&[])
    }

    /// One message per skipped line, naming the file and the line.
    pub fn warnings(&self) -> Vec<String> {
        self.bad_lines
            .iter()
            .map(|bad| {
                format!(
                    "{} line {}: not an event, skipped ({})",
                    self.path.display(),
                    bad.line,
                    bad.error
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, EventLog};

    #[test]
    fn every_event_the_log_writes_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::open(&path).unwrap();
        let events = [
            Event::RunStarted {
                pipeline: "p",
                mode: "serial",
                retry_failed: true,
            },
            Event::BlockDone {
                task: "t",
                block_id: 3,
                worker_id: Some(2),
                seconds: Some(0.25),
            },
            Event::BlockFailed {
                task: "t",
                block_id: 4,
                worker_id: None,
                error: "exit status 1",
                for_good: true,
                seconds: None,
            },
            Event::BlocksReturned {
                task: "t",
                worker_id: 1,
                block_ids: &[5, 6],
                why: "walltime",
            },
            Event::TaskDone {
                task: "t",
                counters: TaskCounters {
                    total: 2,
                    completed: 1,
                    failed: 1,
                    ..TaskCounters::default()
                },
            },
            Event::TaskAbandoned {
                task: "t",
                unclean_exits: 3,
                why: "3 unclean worker exits",
            },
            Event::WorkerSubmitted {
                task: "t",
                worker_id: 1,
                job: "42",
            },
            Event::WorkerStartFailed {
                task: "t",
                worker_id: 1,
                error: "no",
            },
            Event::WorkerConnected {
                task: "t",
                worker_id: 1,
                host: "h",
                pid: 7,
                by_hand: false,
                requeued: true,
            },
            Event::WorkerReleased {
                task: "t",
                worker_id: 1,
                why: "idle",
            },
            Event::WorkerDraining {
                task: "t",
                worker_id: 1,
                why: "SIGTERM",
            },
            Event::WorkerGone {
                task: "t",
                worker_id: 1,
                clean: false,
                why: "eof",
            },
            Event::ConnectionRefused {
                peer: "1.2.3.4:5",
                reason: "wrong token",
            },
            Event::ConnectionsRefused {
                count: 3,
                seconds: 10.0,
            },
            Event::RequestRefused {
                task: "t",
                worker_id: 1,
                reason: "not held",
            },
            Event::RunFinished {
                completed: false,
                seconds: 1.5,
            },
            Event::EarlierJobsCancelled {
                launcher: "sbatch",
                jobs: &["24_0".to_string()],
            },
        ];
        for event in &events {
            log.record(event).unwrap();
        }
        let history = RunHistory::read(&path).unwrap();
        assert!(history.bad_lines.is_empty(), "{:?}", history.bad_lines);
        assert_eq!(history.events.len(), events.len());
        assert!(history.events.iter().all(|e| e.kind != EventKind::Unknown));
        let EventKind::BlockDone { seconds, .. } = &history.events[1].kind else {
            panic!("{:?}", history.events[1]);
        };
        assert_eq!(*seconds, Some(0.25));
        assert_eq!(
            history.events[2].kind,
            EventKind::BlockFailed {
                task: "t".into(),
                block_id: 4,
                worker_id: None,
                error: "exit status 1".into(),
                for_good: true,
                seconds: None,
            }
        );
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_other_garbage_is_named() {
        let text = concat!(
            r#"{"time": 1.0, "event": "run_started", "pipeline": "p", "mode": "serial"}"#,
            "\n",
            "not json\n",
            r#"{"time": 2.0, "event": "block_done", "task": "t"}"#,
            "\n",
            r#"{"time": 3.0, "event": "shiny_new_event", "x": 1}"#,
            "\n",
            r#"{"time": 4.0, "event": "block_done", "task": "t", "block_id": 1}"#,
            "\n",
            r#"{"time": 5.0, "event": "block_do"#,
        );
        let history = RunHistory::parse(Path::new("run/events.jsonl"), text);
        assert_eq!(history.events.len(), 3);
        assert_eq!(history.events[1].kind, EventKind::Unknown);
        let lines: Vec<usize> = history.bad_lines.iter().map(|b| b.line).collect();
        assert_eq!(lines, [2, 3], "the torn line 6 is not a problem");
        let warnings = history.warnings();
        assert!(
            warnings[0].starts_with("run/events.jsonl line 2: not an event"),
            "{warnings:?}"
        );
    }

    #[test]
    fn the_last_run_starts_at_the_last_run_started() {
        let line = |time: f64, event: &str| {
            format!(
                r#"{{"time": {time}, "event": "{event}", "pipeline": "p", "mode": "serial", "completed": true, "seconds": 1}}"#
            )
        };
        let text = [
            line(1.0, "run_finished"),
            line(2.0, "run_started"),
            line(3.0, "run_finished"),
            line(4.0, "run_started"),
        ]
        .join("\n")
            + "\n";
        let history = RunHistory::parse(Path::new("e"), &text);
        let runs: Vec<usize> = history.runs().iter().map(|r| r.len()).collect();
        assert_eq!(runs, [2, 1], "the stray first line belongs to no run");
        assert_eq!(history.last_run()[0].time, 4.0);
        assert!(RunHistory::parse(Path::new("e"), "").last_run().is_empty());
    }

    #[test]
    fn a_run_appended_after_a_torn_last_line_starts_a_run_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let started = |retry_failed| Event::RunStarted {
            pipeline: "p",
            mode: "serial",
            retry_failed,
        };
        EventLog::open(&path)
            .unwrap()
            .record(&started(false))
            .unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(r#"{"time": 2.0, "event": "block_fa"#); // a crash
        std::fs::write(&path, text).unwrap();
        EventLog::open(&path)
            .unwrap()
            .record(&started(true))
            .unwrap();
        let history = RunHistory::read(&path).unwrap();
        assert_eq!(history.runs().len(), 2, "{history:?}");
        assert!(
            matches!(
                history.last_run()[0].kind,
                EventKind::RunStarted {
                    retry_failed: true,
                    ..
                }
            ),
            "{history:?}"
        );
        let lines: Vec<usize> = history.bad_lines.iter().map(|b| b.line).collect();
        assert_eq!(lines, [2], "the torn line is on its own");
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let error = RunHistory::read(Path::new("/nonexistent/events.jsonl")).unwrap_err();
        assert!(
            error.to_string().contains("/nonexistent/events.jsonl"),
            "{error}"
        );
    }
}
