//! Appending to `events.jsonl`: each event encoded into one whole line
//! and handed over in one write, buffered or not (see the module above
//! for which lines wait and why none that matters is lost).

use super::{unix_now, Event, EventLine};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
impl EventLine<&Event<'_>> {
    /// The line's bytes, newline included; `head` is the start of the
    /// last `block_done` line, kept for the next.
    pub(super) fn encode(
        &self,
        out: &mut Vec<u8>,
        head: &mut BlockDoneHead,
    ) -> serde_json::Result<()> {
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
pub(super) struct BlockDoneHead {
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
