//! Reading `events.jsonl` back: the typed history of a run directory,
//! for `status`, reports and `run --retry-failed`, streamed: the file is
//! read a line at a time and never held whole (it may be GBs).
//!
//! [`crate::run_dir::events`] defines the events and writes the file; this module
//! reads it into owned values and cuts it into **runs**: a run starts at a
//! `run_started` line and lasts until the next one (the *last run* is
//! everything after the last `run_started`). A reader ([`RunFold`]) made
//! afresh at each `run_started` is handed the events of its run, so what
//! is left at the end has seen the last run only. The file may be
//! damaged in ways a crash or a hand edit leaves it: a truncated last
//! line (a `kill -9` mid-write) is dropped silently, any other line that
//! is not a JSON object with a known shape becomes a [`BadLine`] (naming
//! its line number) and is skipped, and events of kinds this build does
//! not know (written by a newer daisy) are kept as [`Event::Unknown`].
//! Nothing here panics on the file's content.
//!
//! Done markers, not this file, are the truth about done blocks: a
//! `kill -9` can lose the last `block_done` lines or `blocks_done`
//! records (see [`crate::run_dir::events`]).

use crate::run_dir::events::{Event, EventLine};
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
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

/// What sums up the events of one run, handed them in file order.
pub trait RunFold {
    fn on_event(&mut self, event: &HistoryEvent);
}

/// Keeping every event: for small histories and tests.
impl RunFold for Vec<HistoryEvent> {
    fn on_event(&mut self, event: &HistoryEvent) {
        self.push(event.clone());
    }
}

/// Two readers of one pass over the file.
impl<A: RunFold, B: RunFold> RunFold for (A, B) {
    fn on_event(&mut self, event: &HistoryEvent) {
        self.0.on_event(event);
        self.1.on_event(event);
    }
}

/// Bad lines named one by one; a badly damaged file gets a count.
const BAD_LINES_NAMED: usize = 100;

/// A run directory's history: the last run as `R` sums it up.
#[derive(Clone, Debug, Default)]
pub struct RunHistory<R = Vec<HistoryEvent>> {
    pub path: PathBuf,
    /// The last run (or the one asked for, [`RunHistory::read_run`]);
    /// `None` if the file has no `run_started` (or not that many).
    pub last_run: Option<R>,
    /// Only this run (from 1) is kept, if set.
    only_run: Option<usize>,
    /// How many runs the file holds.
    pub runs: usize,
    /// Lines skipped because they are not events (a torn last line is
    /// not one of them: it is expected after a crash), the first
    /// [`BAD_LINES_NAMED`] of them.
    pub bad_lines: Vec<BadLine>,
    /// How many more were skipped.
    pub more_bad_lines: usize,
}

impl<R: RunFold> RunHistory<R> {
    /// Reads `path` (normally `<run-dir>/events.jsonl`), handing each
    /// run's events to a reader `new_run` makes for it.
    pub fn read(path: &Path, new_run: impl FnMut() -> R) -> Result<Self, HistoryError> {
        Self::read_run(path, None, new_run)
    }

    /// As [`RunHistory::read`], keeping run number `only` (from 1) instead
    /// of the last one, if given.
    pub fn read_run(
        path: &Path,
        only: Option<usize>,
        new_run: impl FnMut() -> R,
    ) -> Result<Self, HistoryError> {
        let io = |source| HistoryError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let reader = BufReader::with_capacity(1 << 16, file);
        Self::from_reader_run(path, reader, only, new_run).map_err(io)
    }

    /// Reads the lines of an events file from `reader`; `path` is kept
    /// for messages.
    #[cfg(test)]
    pub fn from_reader(
        path: &Path,
        reader: impl BufRead,
        new_run: impl FnMut() -> R,
    ) -> std::io::Result<Self> {
        Self::from_reader_run(path, reader, None, new_run)
    }

    fn from_reader_run(
        path: &Path,
        mut reader: impl BufRead,
        only_run: Option<usize>,
        mut new_run: impl FnMut() -> R,
    ) -> std::io::Result<Self> {
        let mut history = Self {
            path: path.to_path_buf(),
            last_run: None,
            only_run,
            runs: 0,
            bad_lines: Vec::new(),
            more_bad_lines: 0,
        };
        let mut line = Vec::new();
        for number in 1.. {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            // A file cut by a crash ends without a newline; its last
            // line is then incomplete and expected to be garbage.
            let torn = line.last() != Some(&b'\n');
            history.on_line(number, &line, torn, &mut new_run);
        }
        Ok(history)
    }

    fn on_line(&mut self, number: usize, line: &[u8], torn: bool, new_run: &mut impl FnMut() -> R) {
        let text = match std::str::from_utf8(line) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(line),
        };
        let text = text.trim_end_matches('\n').trim_end_matches('\r');
        if text.trim().is_empty() {
            return;
        }
        match read_event(text) {
            Ok(event) => self.on_event(event, new_run),
            Err(_) if torn => {}
            Err(error) if self.bad_lines.len() < BAD_LINES_NAMED => self.bad_lines.push(BadLine {
                line: number,
                error: error.to_string(),
            }),
            Err(_) => self.more_bad_lines += 1,
        }
    }

    fn on_event(&mut self, event: HistoryEvent, new_run: &mut impl FnMut() -> R) {
        if matches!(event.kind, Event::RunStarted { .. }) {
            self.runs += 1;
            if self.only_run.is_none_or(|only| only == self.runs) {
                self.last_run = Some(new_run());
            }
        }
        // Events before the first run_started, from a damaged file, form
        // no run; those of runs not asked for are dropped.
        let kept = self.only_run.is_none_or(|only| only == self.runs);
        if let Some(run) = self.last_run.as_mut().filter(|_| kept) {
            run.on_event(&event);
        }
    }
}

/// One line as an event. A `block_done` line, most of the file in runs
/// of up to 100,000 blocks (a line per block), is read by a plain struct
/// first: about three times as fast as the derived reading of
/// [`HistoryEvent`], whose flattened, internally tagged event serde
/// buffers twice. Anything else, or a `block_done` line of another shape,
/// is read the derived way.
fn read_event(text: &str) -> serde_json::Result<HistoryEvent> {
    /// The fields of [`Event::BlockDone`], with the line's time and tag.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct BlockDoneLine<'a> {
        time: f64,
        #[serde(borrow)]
        event: &'a str,
        task: String,
        block_id: u64,
        #[serde(default)]
        worker_id: Option<u64>,
        #[serde(default)]
        seconds: Option<f64>,
    }
    if text.contains("\"block_done\"") {
        if let Ok(line) = serde_json::from_str::<BlockDoneLine>(text) {
            if line.event == "block_done" {
                let kind = Event::BlockDone {
                    task: line.task.into(),
                    block_id: line.block_id,
                    worker_id: line.worker_id,
                    seconds: line.seconds,
                };
                return Ok(HistoryEvent {
                    time: line.time,
                    kind,
                });
            }
        }
    }
    serde_json::from_str(text)
}

/// A history read as its file grows (a run that is going): each
/// [`Following::catch_up`] reads only the lines written since the last,
/// into the same [`RunHistory`]. A last line without its newline yet is
/// left for the next catch-up, where it is whole.
#[derive(Debug)]
pub struct Following<R> {
    pub history: RunHistory<R>,
    /// Bytes read so far: where the next catch-up starts.
    offset: u64,
    lines: usize,
}

impl<R: RunFold> Following<R> {
    /// Follows `path`, which need not exist yet.
    pub fn new(path: &Path) -> Self {
        Self {
            history: RunHistory {
                path: path.to_path_buf(),
                last_run: None,
                only_run: None,
                runs: 0,
                bad_lines: Vec::new(),
                more_bad_lines: 0,
            },
            offset: 0,
            lines: 0,
        }
    }

    /// Reads the whole lines written since the last call.
    pub fn catch_up(&mut self, mut new_run: impl FnMut() -> R) -> Result<(), HistoryError> {
        let path = self.history.path.clone();
        let io = |source| HistoryError::Io {
            path: path.clone(),
            source,
        };
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(io(error)),
        };
        file.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        let mut reader = BufReader::with_capacity(1 << 16, file);
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = reader.read_until(b'\n', &mut line).map_err(io)?;
            if read == 0 || line.last() != Some(&b'\n') {
                return Ok(());
            }
            self.offset += read as u64;
            self.lines += 1;
            self.history.on_line(self.lines, &line, false, &mut new_run);
        }
    }
}

impl<R> RunHistory<R> {
    /// One message per skipped line, naming the file and the line.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> = (self.bad_lines.iter())
            .map(|bad| {
                format!(
                    "{} line {}: not an event, skipped ({})",
                    self.path.display(),
                    bad.line,
                    bad.error
                )
            })
            .collect();
        if self.more_bad_lines > 0 {
            warnings.push(format!(
                "... and {} more lines of {} that are not events",
                self.more_bad_lines,
                self.path.display()
            ));
        }
        warnings
    }
}

#[cfg(test)]
impl RunHistory {
    /// Every event of the last run of the text of an events file.
    pub fn parse(path: &Path, text: &str) -> Self {
        Self::from_reader(path, text.as_bytes(), Vec::new).expect("reading from memory")
    }

    /// The events of the last run, starting with its `run_started`; empty
    /// if there was none.
    pub fn last_run(&self) -> &[HistoryEvent] {
        self.last_run.as_deref().unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::events::EventLog;

    #[test]
    fn a_line_reads_as_the_derived_reading_reads_it() {
        let lines = [
            r#"{"time":2.5,"event":"block_done","task":"t","block_id":7,"worker_id":3}"#,
            r#"{"block_id":7,"task":"t","event":"block_done","time":2.5,"seconds":0.25}"#,
            r#"{"time":2.5,"event":"block_done","task":"t","block_id":7,"from":"a newer daisy"}"#,
            r#"{"time":2.5,"event":"block_failed","task":"block_done","block_id":7,"error":"x","for_good":true}"#,
            r#"{"event":"run_finished","completed":true,"seconds":1.0,"time":9.0}"#,
        ];
        for line in lines {
            let derived: Result<HistoryEvent, _> = serde_json::from_str(line);
            assert_eq!(read_event(line).ok(), derived.ok(), "{line}");
        }
        for bad in [
            r#"{"time":2.5,"event":"block_done","block_id":7}"#,
            r#"{"time":"2.5","event":"block_done","task":"t","block_id":7}"#,
            "[1]",
        ] {
            assert!(read_event(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_followed_file_is_read_as_it_grows_and_a_half_line_waits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut following = Following::<Vec<HistoryEvent>>::new(&path);
        following.catch_up(Vec::new).unwrap();
        assert_eq!(following.history.runs, 0, "no file yet");
        let started = r#"{"time":1.0,"event":"run_started","pipeline":"p","mode":"serial"}"#;
        let finished = r#"{"time":2.0,"event":"run_finished","completed":true,"seconds":1.0}"#;
        std::fs::write(&path, format!("{started}\n{}", &finished[..10])).unwrap();
        following.catch_up(Vec::new).unwrap();
        let last = |f: &Following<Vec<HistoryEvent>>| f.history.last_run.clone().unwrap();
        assert_eq!((following.history.runs, last(&following).len()), (1, 1));
        std::fs::write(&path, format!("{started}\n{finished}\n{started}\n")).unwrap();
        following.catch_up(Vec::new).unwrap();
        assert_eq!(following.history.runs, 2);
        assert_eq!(last(&following).len(), 1, "the second run, begun anew");
        assert!(
            following.history.bad_lines.is_empty(),
            "{:?}",
            following.history.bad_lines
        );
    }

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
        let history = RunHistory::read(&path, Vec::new).unwrap();
        assert!(history.bad_lines.is_empty(), "{:?}", history.bad_lines);
        let read: Vec<&Event> = history.last_run().iter().map(|e| &e.kind).collect();
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
        assert_eq!(history.last_run().len(), 3);
        assert_eq!(history.last_run()[1].kind, Event::Unknown);
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
        assert_eq!(history.runs, 2, "the stray first line belongs to no run");
        assert_eq!(history.last_run().len(), 1);
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
        let history = RunHistory::read(&path, Vec::new).unwrap();
        assert_eq!(history.runs, 2, "{history:?}");
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
        let error = RunHistory::read(Path::new("/nonexistent/events.jsonl"), Vec::new).unwrap_err();
        assert!(
            error.to_string().contains("/nonexistent/events.jsonl"),
            "{error}"
        );
    }

    /// Counts the events of its run.
    #[derive(Default)]
    struct Count(usize);

    impl RunFold for Count {
        fn on_event(&mut self, _: &HistoryEvent) {
            self.0 += 1;
        }
    }

    #[test]
    fn each_run_is_read_by_a_fold_of_its_own_and_the_last_is_kept() {
        let started = r#"{"time": 1.0, "event": "run_started", "pipeline": "p", "mode": "serial"}"#;
        let gone = r#"{"time": 2.0, "event": "worker_gone", "task": "t", "worker_id": 1, "clean": true, "why": "done"}"#;
        let text = [gone, started, gone, gone, started, gone].join("\n");
        let mut made = 0;
        let history = RunHistory::from_reader(Path::new("e"), text.as_bytes(), || {
            made += 1;
            Count::default()
        })
        .unwrap();
        assert_eq!((made, history.runs), (2, 2));
        assert_eq!(history.last_run.unwrap().0, 2, "run_started and one more");
    }

    #[test]
    fn a_file_of_garbage_names_its_first_bad_lines_and_counts_the_rest() {
        let text = "garbage\n".repeat(BAD_LINES_NAMED + 7);
        let history = RunHistory::parse(Path::new("e"), &text);
        assert_eq!(history.bad_lines.len(), BAD_LINES_NAMED);
        let warnings = history.warnings();
        assert_eq!(warnings.len(), BAD_LINES_NAMED + 1);
        assert_eq!(
            warnings.last().unwrap(),
            "... and 7 more lines of e that are not events"
        );
    }
}
