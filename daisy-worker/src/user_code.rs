//! How user code runs a block, synchronously: a worker command started
//! with `std::process`, a block's process with a start of our own that
//! does not copy the worker (`spawn`).
//!
//! Two modes (DESIGN.md, "Workers and user code"):
//! - [`BlockCommand`]: the user's program is started once per block; the
//!   block reaches it through `{placeholders}` in its arguments and
//!   `DAISY_*` environment variables, and exit 0 means success.
//! - [`WorkerCommand`]: a long-running program (it loads its model once)
//!   is fed one JSON line per block on its stdin and answers one
//!   [`BlockResult`](daisy_core::protocol::BlockResult) line per block.
//!
//! This module owns everything about the user's processes: their output
//! ([`BlockLog`]), their process group (so a timeout kills a shell's
//! children too), PR_SET_PDEATHSIG and a watcher process (so they die with
//! the worker, even one killed outright: see `watcher`), and
//! turning how they ended into a one-line-ish [`BlockFailure`] that the
//! driver records. It knows nothing about drivers, connections or retries;
//! the async worker runtime calls it from blocking threads, and the serial
//! `daisy-driver run` calls it directly.
//!
//! Terms: the *grace* period is how long a process group gets between
//! SIGTERM (or, for a worker command, its stdin closing) and SIGKILL.

mod adopted;
mod block_command;
mod exit_watch;
mod group;
mod pipes;
mod program;
mod spawn;
#[cfg(test)]
mod test_util;
mod watcher;
mod worker_command;

pub use adopted::{adopt_orphans, end_children, ADOPTED_GRACE};
pub use block_command::BlockCommand;
pub use daisy_core::template::CommandError;
pub use group::{end_all as end_all_user_processes, SpawnError};
pub use pipes::{run_blocking, Wait};
pub use program::{check_program, ProgramError};
pub use worker_command::{Outcome, StartError, WorkerCommand};

use daisy_core::printable::printable;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Time between SIGTERM and SIGKILL, long enough for user code to flush
/// what it wrote and remove temporary files.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// The worker's context variable: it carries the run token, which never
/// reaches user code (it could end up in a log; DESIGN.md, "Guarantees and
/// secrets").
const SECRET_ENV: &str = "DAISY_CONTEXT";

/// At most this much of stderr's end goes into a failure message.
const TAIL_BYTES: u64 = 2048;
/// And at most this many lines of it.
const TAIL_LINES: usize = 20;

/// The files a block's (or a worker command's) stdout and stderr are
/// appended to. Appending lets many blocks share one pair of files per
/// worker; blocks running concurrently should get their own pair, or their
/// stderr tails may mix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockLog {
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl BlockLog {
    /// `<dir>/<name>.out` and `<dir>/<name>.err`.
    pub fn in_dir(dir: &Path, name: &str) -> Self {
        Self {
            stdout: dir.join(format!("{name}.out")),
            stderr: dir.join(format!("{name}.err")),
        }
    }

    /// Opens both files for appending, creating them and their parents,
    /// and remembers where stderr ends now, so a failure quotes only what
    /// was written after this point.
    fn open(&self) -> Result<OpenLog, LogError> {
        let stdout = open_append(&self.stdout)?;
        let stderr = open_append(&self.stderr)?;
        let start = stderr
            .metadata()
            .map_err(|cause| LogError::new(&self.stderr, cause))?;
        let tail = StderrTail {
            path: self.stderr.clone(),
            start: start.len(),
        };
        Ok(OpenLog {
            stdout,
            stderr,
            tail,
        })
    }
}

/// Opens `path` for appending; its directories are created only if it
/// cannot be opened for their lack (once per worker, not per block).
fn open_append(path: &Path) -> Result<File, LogError> {
    let open = || OpenOptions::new().create(true).append(true).open(path);
    let opened = match (open(), path.parent()) {
        (Err(e), Some(parent)) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(parent).and_then(|()| open())
        }
        (opened, _) => opened,
    };
    opened.map_err(|cause| LogError::new(path, cause))
}

/// A log file could not be opened: the worker cannot keep user output, so
/// nothing is started.
#[derive(Debug, thiserror::Error)]
#[error("cannot open log file {}: {cause}", path.display())]
pub struct LogError {
    pub path: PathBuf,
    pub cause: io::Error,
}

impl LogError {
    fn new(path: &Path, cause: io::Error) -> Self {
        Self {
            path: path.to_path_buf(),
            cause,
        }
    }
}

/// The log files, open for the child to inherit.
struct OpenLog {
    stdout: File,
    stderr: File,
    tail: StderrTail,
}

/// Where one process's stderr starts in a shared log file.
#[derive(Debug, Clone)]
pub struct StderrTail {
    path: PathBuf,
    start: u64,
}

impl StderrTail {
    /// The whole of the log at `path`: one process's own stderr (a
    /// worker's, as its launcher redirected it).
    pub fn of_file(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            start: 0,
        }
    }

    /// The last lines written since `start`, or why they can't be read.
    pub fn read(&self) -> String {
        match self.read_end() {
            Ok(bytes) => last_lines(&String::from_utf8_lossy(&bytes)),
            Err(e) => format!("(cannot read {}: {e})", self.path.display()),
        }
    }

    fn read_end(&self) -> io::Result<Vec<u8>> {
        let mut file = File::open(&self.path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(
            self.start.max(len.saturating_sub(TAIL_BYTES)),
        ))?;
        let mut bytes = Vec::new();
        file.take(TAIL_BYTES).read_to_end(&mut bytes)?;
        Ok(bytes)
    }
}

fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}

/// How a block that did not fail ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Finished {
    /// The user's code ran it.
    #[default]
    Ran,
    /// The user's code found it done already and did not run it (a
    /// check function; a worker command's `"skipped": true`).
    FoundDone,
}

/// Why a block failed, as the driver records it: specific and short, e.g.
/// `exit status 3; stderr tail: no such file: in.zarr`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BlockFailure {
    pub message: String,
    /// The process was stopped by a signal from outside the worker (a
    /// job's time limit, preemption), not by its own error or a timeout.
    pub by_signal: bool,
}

impl BlockFailure {
    /// A failure saying `message`, its control characters escaped (it
    /// quotes the user's stderr, which may hold terminal escapes).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: printable(&message.into()).into_owned(),
            by_signal: false,
        }
    }

    /// Notes whether `status` says a signal stopped the process.
    fn ended_with(self, status: std::process::ExitStatus) -> Self {
        Self {
            by_signal: group::stopped_by_signal(status),
            ..self
        }
    }

    /// `what` followed by the end of the process's stderr, which usually
    /// says why (a Python traceback ends with the exception).
    fn with_tail(what: &str, tail: &StderrTail) -> Self {
        match tail.read() {
            text if text.is_empty() => Self::new(format!("{what}; stderr was empty")),
            text => Self::new(format!("{what}; stderr tail: {text}")),
        }
    }

    fn timed_out(timeout: Duration, tail: &StderrTail) -> Self {
        Self::with_tail(&format!("timed out after {timeout:?}"), tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_created_with_its_parents_and_the_tail_starts_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let log = BlockLog::in_dir(&dir.path().join("logs/predict"), "worker-1");
        fs::create_dir_all(log.stderr.parent().unwrap()).unwrap();
        fs::write(&log.stderr, "old\n").unwrap();
        let open = log.open().unwrap();
        assert!(log.stdout.exists());
        fs::write(&log.stderr, "old\nnew\n").unwrap();
        assert_eq!(open.tail.read(), "new");
    }

    #[test]
    fn the_tail_keeps_the_last_lines_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let log = BlockLog::in_dir(dir.path(), "b");
        let open = log.open().unwrap();
        let lines = |range: std::ops::Range<usize>| -> Vec<String> {
            range.map(|i| format!("line {i}")).collect()
        };
        fs::write(&log.stderr, lines(0..100).join("\n") + "\n").unwrap();
        assert_eq!(open.tail.read(), lines(80..100).join("\n"));
        fs::write(&log.stderr, "x".repeat(3000)).unwrap();
        assert_eq!(open.tail.read(), "x".repeat(TAIL_BYTES as usize));
    }
}
