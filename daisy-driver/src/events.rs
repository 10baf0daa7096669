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
//! summed up (bigger runs, see [`crate::outcome_recorder`]). Such lines
//! are written late, never lost by a crash that matters: a block's done
//! marker is written before its line or record, so after a `kill -9` the
//! markers are the truth and the log at most lacks the last done blocks
//! (those since the driver's last tick, or the last second's).

use crate::run_times::RunTimes;
use daisy_core::TaskCounters;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Text of an event: borrowed when written, owned when read back.
type Text<'a> = Cow<'a, str>;

/// What happened: the one schema of `events.jsonl`, written by
/// [`EventLog`] and read back by [`crate::run_history`]. Serialised with
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
    /// Runs of more blocks than [`crate::outcome_recorder`] logs one by
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
    },
    WorkerStartFailed {
        task: Text<'a>,
        worker_id: u64,
        error: Text<'a>,
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

impl EventLine<&Event<'_>> {
    /// The line's bytes, newline included; `head` is the start of the
    /// last `block_done` line, kept for the next.
    fn encode(&self, out: &mut Vec<u8>, head: &mut BlockDoneHead) -> serde_json::Result<()> {
        out.clear();
        match self.kind {
            Event::BlockDone {
                task,
                block_id,
                worker_id,
                seconds,
            } => {
                out.extend_from_slice(head.of(self.time, task)?);
                write_block_done(out, *block_id, (*worker_id, *seconds))?
            }
            _ => serde_json::to_writer(&mut *out, self)?,
        }
        out.push(b'\n');
        Ok(())
    }
}

/// The start of a `block_done` line, up to its block id, for the time
/// and task it was last written for: the lines of a release's blocks
/// share both, and formatting them was half the cost of a line.
#[derive(Default)]
struct BlockDoneHead {
    time: u64,
    task: String,
    bytes: Vec<u8>,
}

impl BlockDoneHead {
    fn of(&mut self, time: f64, task: &str) -> serde_json::Result<&[u8]> {
        if self.bytes.is_empty() || self.time != time.to_bits() || self.task != task {
            self.bytes.clear();
            self.bytes.extend_from_slice(b"{\"time\":");
            serde_json::to_writer(&mut self.bytes, &time)?;
            self.bytes
                .extend_from_slice(b",\"event\":\"block_done\",\"task\":");
            serde_json::to_writer(&mut self.bytes, task)?;
            self.bytes.extend_from_slice(b",\"block_id\":");
            self.time = time.to_bits();
            self.task.clear();
            self.task.push_str(task);
        }
        Ok(&self.bytes)
    }
}

/// The rest of a `block_done` line after its [`BlockDoneHead`], without
/// the newline: the line is byte for byte what serde writes (a test
/// compares them). Runs of up to 100,000 blocks write one per block, and
/// serde's flattened map (a generic call per key) made it a tenth of the
/// driver's work per block in batches.
fn write_block_done(
    out: &mut Vec<u8>,
    block_id: u64,
    (worker_id, seconds): (Option<u64>, Option<f64>),
) -> serde_json::Result<()> {
    serde_json::to_writer(&mut *out, &block_id)?;
    if let Some(worker_id) = worker_id {
        out.extend_from_slice(b",\"worker_id\":");
        serde_json::to_writer(&mut *out, &worker_id)?;
    }
    if let Some(seconds) = seconds {
        out.extend_from_slice(b",\"seconds\":");
        serde_json::to_writer(&mut *out, &seconds)?;
    }
    out.push(b'}');
    Ok(())
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
    block_done_head: BlockDoneHead,
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
            block_done_head: BlockDoneHead::default(),
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
        self.record_buffered_at(unix_now(), event)
    }

    /// As [`Self::record_buffered`], for an event that happened at `time`
    /// (Unix seconds) rather than now.
    pub fn record_buffered_at(&mut self, time: f64, event: &Event) -> std::io::Result<()> {
        let line = EventLine { time, kind: event };
        line.encode(&mut self.line, &mut self.block_done_head)?;
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

    const TIME: f64 = 1764403200.5;

    /// Every kind, with optional fields both set and left out, and the
    /// line each is written as (the bytes earlier versions wrote).
    fn every_kind() -> Vec<(Event<'static>, &'static str)> {
        let counters = TaskCounters {
            total: 2,
            completed: 1,
            failed: 1,
            ..TaskCounters::default()
        };
        vec![
            (
                Event::RunStarted {
                    pipeline: "p".into(),
                    mode: "serial".into(),
                    retry_failed: true,
                },
                r#"{"time":1764403200.5,"event":"run_started","pipeline":"p","mode":"serial","retry_failed":true}"#,
            ),
            (
                Event::RunStarted {
                    pipeline: "p".into(),
                    mode: "distributed".into(),
                    retry_failed: false,
                },
                r#"{"time":1764403200.5,"event":"run_started","pipeline":"p","mode":"distributed"}"#,
            ),
            (
                Event::BlockDone {
                    task: "t".into(),
                    block_id: 3,
                    worker_id: Some(2),
                    seconds: Some(0.25),
                },
                r#"{"time":1764403200.5,"event":"block_done","task":"t","block_id":3,"worker_id":2,"seconds":0.25}"#,
            ),
            (
                Event::BlockDone {
                    task: "t".into(),
                    block_id: 3,
                    worker_id: None,
                    seconds: None,
                },
                r#"{"time":1764403200.5,"event":"block_done","task":"t","block_id":3}"#,
            ),
            (
                Event::BlocksDone {
                    task: "t".into(),
                    worker_id: Some(2),
                    count: 3,
                    first: 1764403200.25,
                    start: Some(1764403199.75),
                    run_times: Some(RunTimes {
                        buckets: [(-16, 2), (0, 1)].into(),
                        longest: 1.0,
                    }),
                },
                r#"{"time":1764403200.5,"event":"blocks_done","task":"t","worker_id":2,"count":3,"first":1764403200.25,"start":1764403199.75,"run_times":{"buckets":[[-16,2],[0,1]],"longest":1.0}}"#,
            ),
            (
                Event::BlocksDone {
                    task: "t".into(),
                    worker_id: None,
                    count: 1,
                    first: 1764403200.5,
                    start: None,
                    run_times: None,
                },
                r#"{"time":1764403200.5,"event":"blocks_done","task":"t","count":1,"first":1764403200.5}"#,
            ),
            (
                Event::BlockFailed {
                    task: "t".into(),
                    block_id: 4,
                    worker_id: Some(1),
                    error: "exit \"1\"\n\\".into(),
                    for_good: true,
                    seconds: Some(1.0),
                },
                r#"{"time":1764403200.5,"event":"block_failed","task":"t","block_id":4,"worker_id":1,"error":"exit \"1\"\n\\","for_good":true,"seconds":1.0}"#,
            ),
            (
                Event::BlockFailed {
                    task: "t".into(),
                    block_id: 4,
                    worker_id: None,
                    error: "e".into(),
                    for_good: false,
                    seconds: None,
                },
                r#"{"time":1764403200.5,"event":"block_failed","task":"t","block_id":4,"error":"e","for_good":false}"#,
            ),
            (
                Event::BlocksReturned {
                    task: "t".into(),
                    worker_id: 1,
                    block_ids: vec![5, 6].into(),
                    why: "walltime".into(),
                },
                r#"{"time":1764403200.5,"event":"blocks_returned","task":"t","worker_id":1,"block_ids":[5,6],"why":"walltime"}"#,
            ),
            (
                Event::TaskDone {
                    task: "t".into(),
                    counters,
                },
                r#"{"time":1764403200.5,"event":"task_done","task":"t","counters":{"total":2,"ready":0,"processing":0,"completed":1,"skipped":0,"failed":1,"orphaned":0,"left":0}}"#,
            ),
            (
                Event::TaskAbandoned {
                    task: "t".into(),
                    unclean_exits: 3,
                    why: "3 unclean worker exits".into(),
                },
                r#"{"time":1764403200.5,"event":"task_abandoned","task":"t","unclean_exits":3,"why":"3 unclean worker exits"}"#,
            ),
            (
                Event::WorkerSubmitted {
                    task: "t".into(),
                    worker_id: 1,
                    job: "42".into(),
                },
                r#"{"time":1764403200.5,"event":"worker_submitted","task":"t","worker_id":1,"job":"42"}"#,
            ),
            (
                Event::WorkerStartFailed {
                    task: "t".into(),
                    worker_id: 1,
                    error: "no".into(),
                },
                r#"{"time":1764403200.5,"event":"worker_start_failed","task":"t","worker_id":1,"error":"no"}"#,
            ),
            (
                Event::WorkerConnected {
                    task: "t".into(),
                    worker_id: 1,
                    host: "h".into(),
                    pid: 7,
                    by_hand: false,
                    requeued: true,
                },
                r#"{"time":1764403200.5,"event":"worker_connected","task":"t","worker_id":1,"host":"h","pid":7,"by_hand":false,"requeued":true}"#,
            ),
            (
                Event::WorkerConnected {
                    task: "t".into(),
                    worker_id: 1,
                    host: "h".into(),
                    pid: 7,
                    by_hand: true,
                    requeued: false,
                },
                r#"{"time":1764403200.5,"event":"worker_connected","task":"t","worker_id":1,"host":"h","pid":7,"by_hand":true}"#,
            ),
            (
                Event::WorkerReleased {
                    task: "t".into(),
                    worker_id: 1,
                    why: "idle".into(),
                },
                r#"{"time":1764403200.5,"event":"worker_released","task":"t","worker_id":1,"why":"idle"}"#,
            ),
            (
                Event::WorkerDraining {
                    task: "t".into(),
                    worker_id: 1,
                    why: "SIGTERM".into(),
                },
                r#"{"time":1764403200.5,"event":"worker_draining","task":"t","worker_id":1,"why":"SIGTERM"}"#,
            ),
            (
                Event::WorkerGone {
                    task: "t".into(),
                    worker_id: 1,
                    clean: false,
                    why: "eof".into(),
                },
                r#"{"time":1764403200.5,"event":"worker_gone","task":"t","worker_id":1,"clean":false,"why":"eof"}"#,
            ),
            (
                Event::ConnectionRefused {
                    peer: "1.2.3.4:5".into(),
                    reason: "wrong token".into(),
                },
                r#"{"time":1764403200.5,"event":"connection_refused","peer":"1.2.3.4:5","reason":"wrong token"}"#,
            ),
            (
                Event::ConnectionsRefused {
                    count: 3,
                    seconds: 10.0,
                },
                r#"{"time":1764403200.5,"event":"connections_refused","count":3,"seconds":10.0}"#,
            ),
            (
                Event::RequestRefused {
                    task: "t".into(),
                    worker_id: 1,
                    reason: "not held".into(),
                },
                r#"{"time":1764403200.5,"event":"request_refused","task":"t","worker_id":1,"reason":"not held"}"#,
            ),
            (
                Event::RunFinished {
                    completed: false,
                    seconds: 1.5,
                },
                r#"{"time":1764403200.5,"event":"run_finished","completed":false,"seconds":1.5}"#,
            ),
            (
                Event::EarlierJobsCancelled {
                    launcher: "sbatch".into(),
                    jobs: vec!["24_0".to_string()].into(),
                },
                r#"{"time":1764403200.5,"event":"earlier_jobs_cancelled","launcher":"sbatch","jobs":["24_0"]}"#,
            ),
        ]
    }

    fn encoded(event: &Event) -> String {
        let mut line = Vec::new();
        EventLine {
            time: TIME,
            kind: event,
        }
        .encode(&mut line, &mut BlockDoneHead::default())
        .unwrap();
        String::from_utf8(line).unwrap()
    }

    #[test]
    fn every_kind_is_written_as_earlier_versions_wrote_it() {
        for (event, line) in every_kind() {
            assert_eq!(encoded(&event), format!("{line}\n"));
        }
    }

    #[test]
    fn a_block_done_line_is_what_serde_writes_whatever_its_values() {
        let tasks = ["t", "a \"quoted\"\n\\ task", "tâche ✓", ""];
        let times = [TIME, 0.0, -1.5, 1e21, 1.0e-7, f64::NAN, f64::INFINITY];
        let seconds = [None, Some(0.1), Some(f64::NAN), Some(-0.0), Some(3e300)];
        let by_task = (tasks.iter()).flat_map(|task| times.iter().map(move |&time| (task, time)));
        let by_time = (times.iter()).flat_map(|&time| tasks.iter().map(move |task| (task, time)));
        // One head for all lines, as a log keeps it: a line's own time and
        // task must replace the last line's, whichever of them changed.
        let lines = by_task.chain(by_time);
        let mut head = BlockDoneHead::default();
        for (task, time) in lines {
            for (&seconds, worker_id) in seconds
                .iter()
                .zip([None, Some(0), Some(u64::MAX)].iter().cycle())
            {
                let event = Event::BlockDone {
                    task: (*task).into(),
                    block_id: u64::MAX - 7,
                    worker_id: *worker_id,
                    seconds,
                };
                let line = EventLine { time, kind: &event };
                let mut fast = Vec::new();
                line.encode(&mut fast, &mut head).unwrap();
                let serde = serde_json::to_string(&line).unwrap() + "\n";
                assert_eq!(String::from_utf8(fast).unwrap(), serde);
            }
        }
    }

    #[test]
    fn every_kind_reads_back_as_it_was_written() {
        for (event, _) in every_kind() {
            let read: EventLine<Event> = serde_json::from_str(&encoded(&event)).unwrap();
            assert_eq!(
                read,
                EventLine {
                    time: TIME,
                    kind: event
                }
            );
        }
    }

    #[test]
    fn lines_without_the_fields_added_later_read_with_their_defaults() {
        let line = r#"{"time": 2.0, "event": "worker_connected", "task": "t", "worker_id": 1, "host": "h", "pid": 7, "by_hand": false}"#;
        let read: EventLine<Event> = serde_json::from_str(line).unwrap();
        assert!(
            matches!(
                read.kind,
                Event::WorkerConnected {
                    requeued: false,
                    ..
                }
            ),
            "{read:?}"
        );
    }

    #[test]
    fn an_unknown_kind_reads_as_unknown_and_is_never_written() {
        let line = r#"{"time": 3.0, "event": "shiny_new_event", "x": 1}"#;
        let read: EventLine<Event> = serde_json::from_str(line).unwrap();
        assert_eq!(read.kind, Event::Unknown);
        assert!(serde_json::to_string(&Event::Unknown).is_err());
    }

    #[test]
    fn events_are_appended_as_tagged_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        for _ in 0..2 {
            let mut log = EventLog::open(&path).unwrap();
            log.record(&Event::BlockFailed {
                task: "predict".into(),
                block_id: 7,
                worker_id: Some(2),
                error: "exit status 1".into(),
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
            task: "predict".into(),
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
            task: "predict".into(),
            block_id: 3,
            worker_id: Some(1),
            seconds: None,
        })
        .unwrap();
        drop(log);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    }
}
