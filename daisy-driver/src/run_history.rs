//! Reading `events.jsonl` back: the typed history of a run directory,
//! for `status`, reports and `run --retry-failed`.
//!
//! [`crate::events`] defines the events and writes the file; this module
//! reads it into owned values and cuts it into **runs**: a run starts at a `run_started` line
//! and lasts until the next one (the *last run* is everything after the
//! last `run_started`). The file may be damaged in ways a crash or a
//! hand edit leaves it: a truncated last line (a `kill -9` mid-write) is
//! dropped silently, any other line that is not a JSON object with a
//! known shape becomes a [`BadLine`] (naming its line number) and is
//! skipped, and events of kinds this build does not know (written by a
//! newer daisy) are kept as [`Event::Unknown`]. Nothing here panics
//! on the file's content.
//!
//! Done markers, not this file, are the truth about done blocks: a
//! `kill -9` can lose the last `block_done` lines (see [`crate::events`]).

use crate::events::{Event, EventLine};
use std::path::{Path, PathBuf};

/// One line of `events.jsonl`, read back.
pub type HistoryEvent = EventLine<Event<'static>>;

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
            .filter(|(_, e)| matches!(e.kind, Event::RunStarted { .. }))
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
    use crate::events::EventLog;

    #[test]
    fn events_the_log_writes_read_back_equal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::open(&path).unwrap();
        let events = [
            Event::RunStarted {
                pipeline: "p".into(),
                mode: "serial".into(),
                retry_failed: true,
            },
            Event::BlockFailed {
                task: "t".into(),
                block_id: 4,
                worker_id: None,
                error: "exit status 1".into(),
                for_good: true,
                seconds: None,
            },
            Event::EarlierJobsCancelled {
                launcher: "sbatch".into(),
                jobs: vec!["24_0".to_string()].into(),
            },
        ];
        for event in &events {
            log.record(event).unwrap();
        }
        let history = RunHistory::read(&path).unwrap();
        assert!(history.bad_lines.is_empty(), "{:?}", history.bad_lines);
        let read: Vec<&Event> = history.events.iter().map(|e| &e.kind).collect();
        assert_eq!(read, events.iter().collect::<Vec<_>>());
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
        assert_eq!(history.events[1].kind, Event::Unknown);
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
            pipeline: "p".into(),
            mode: "serial".into(),
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
                Event::RunStarted {
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
