//! Reads `events.jsonl` back into typed events, for the report.
//!
//! Only the fields the report draws are read; unknown events and fields
//! are ignored, so newer drivers' logs still load. A line that is not a
//! JSON event (a torn last line after a crash, a corrupt one) is skipped
//! and counted, never fatal. A run directory holds every run that used it
//! (a resume appends): [`read_last_run`] keeps the events from the last
//! `run_started` on.

use daisy_core::TaskCounters;
use serde::Deserialize;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

/// One line of `events.jsonl`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RecordedEvent {
    /// Unix seconds.
    pub time: f64,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// The events the report uses, as `events.rs` writes them.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    RunStarted {
        pipeline: String,
    },
    BlockDone {
        task: String,
        block_id: u64,
        worker_id: Option<u64>,
        /// The block's run time as the worker measured it.
        seconds: Option<f64>,
    },
    BlockFailed {
        task: String,
        block_id: u64,
        worker_id: Option<u64>,
        #[serde(default)]
        error: String,
        for_good: bool,
        seconds: Option<f64>,
    },
    TaskDone {
        task: String,
        counters: TaskCounters,
    },
    TaskAbandoned {
        task: String,
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
    },
    WorkerConnected {
        task: String,
        worker_id: u64,
        #[serde(default)]
        host: String,
    },
    WorkerGone {
        task: String,
        worker_id: u64,
        clean: bool,
    },
    RunFinished {
        completed: bool,
    },
    /// Anything else (refused connections, ...): not drawn.
    #[serde(other)]
    Other,
}

/// The events of the last run in a run directory.
#[derive(Debug, Default)]
pub struct RunHistory {
    pub events: Vec<RecordedEvent>,
    /// Lines that were not events (corrupt or torn), skipped.
    pub bad_lines: usize,
    /// Runs before the last one in the same file (resumed runs).
    pub earlier_runs: usize,
}

/// Reads `path`, keeping the events of its last run.
pub fn read_last_run(path: &Path) -> io::Result<RunHistory> {
    parse_last_run(BufReader::new(File::open(path)?))
}

fn parse_last_run(mut input: impl BufRead) -> io::Result<RunHistory> {
    let mut history = RunHistory::default();
    // Bytes, not `lines()`: a line of invalid UTF-8 is one bad line, not
    // the end of the file.
    let mut line = Vec::new();
    while input.read_until(b'\n', &mut line)? > 0 {
        if !line.trim_ascii().is_empty() {
            history.push_line(&line);
        }
        line.clear();
    }
    Ok(history)
}

impl RunHistory {
    fn push_line(&mut self, line: &[u8]) {
        let Ok(event) = serde_json::from_slice::<RecordedEvent>(line) else {
            self.bad_lines += 1;
            return;
        };
        if matches!(event.kind, EventKind::RunStarted { .. }) && !self.events.is_empty() {
            self.earlier_runs += 1;
            self.events.clear();
        }
        self.events.push(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_run_is_kept_and_bad_lines_are_counted() {
        let text = concat!(
            "{\"time\": 1.0, \"event\": \"run_started\", \"pipeline\": \"p\", \"mode\": \"distributed\"}\n",
            "{\"time\": 2.0, \"event\": \"block_done\", \"task\": \"a\", \"block_id\": 1}\n",
            "{\"time\": 3.0, \"event\": \"run_started\", \"pipeline\": \"p\", \"mode\": \"distributed\"}\n",
            "not json\n",
            "\n",
            "{\"time\": 4.0, \"event\": \"connection_refused\", \"peer\": \"x\", \"reason\": \"y\"}\n",
            "{\"time\": 5.0, \"event\": \"block_failed\", \"task\": \"a\", \"block_id\": 2, ",
            "\"worker_id\": 3, \"error\": \"exit 1\", \"for_good\": true, \"seconds\": 0.5}\n",
            "{\"time\": 6.0, \"event\": \"block_done\", \"task\": \"a\", \"blo",
        );
        let history = parse_last_run(text.as_bytes()).unwrap();
        assert_eq!(history.earlier_runs, 1);
        assert_eq!(
            history.bad_lines, 2,
            "the garbage line and the torn last line"
        );
        let kinds: Vec<&EventKind> = history.events.iter().map(|e| &e.kind).collect();
        assert_eq!(kinds.len(), 3);
        assert_eq!(kinds[1], &EventKind::Other);
        assert_eq!(
            kinds[2],
            &EventKind::BlockFailed {
                task: "a".into(),
                block_id: 2,
                worker_id: Some(3),
                error: "exit 1".into(),
                for_good: true,
                seconds: Some(0.5),
            }
        );
    }

    #[test]
    fn invalid_utf8_is_one_bad_line() {
        let mut bytes =
            b"{\"time\": 1.0, \"event\": \"run_finished\", \"completed\": true}\n".to_vec();
        bytes.extend_from_slice(b"\xff\xfe\n");
        bytes.extend_from_slice(
            b"{\"time\": 2.0, \"event\": \"run_finished\", \"completed\": false}\n",
        );
        let history = parse_last_run(bytes.as_slice()).unwrap();
        assert_eq!(history.bad_lines, 1);
        assert_eq!(history.events.len(), 2);
    }
}
