//! One writer per run directory: `run` and `reset` hold an OS advisory
//! lock (flock) on `<run-dir>/driver.lock` while they write, so a second
//! one is refused at once instead of running every block again and
//! fighting over `context.json`. `status` and `report` only read and take
//! no lock.
//!
//! The kernel drops the lock when its holder exits, however it exits
//! (`kill -9` included), so a crashed driver never blocks a resume, and a
//! leftover `driver.lock` means nothing by itself. The file also holds
//! who locked it (host, pid, since when) as JSON, only so that the refusal
//! can name the running driver; the file is never removed, since removing
//! a lock file while another process opens it would let two hold "the"
//! lock.

use crate::run_dir::RunDir;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// How long a refused driver waits for the holder's JSON, which the
/// holder writes right after taking the lock (both may start together).
const HOLDER_WAIT: Duration = Duration::from_secs(1);

/// The process that holds a run directory's lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    /// RFC 3339, UTC, to the second.
    pub started_at: String,
    /// What it does: "run", "reset".
    pub command: String,
}

/// Why the run directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock; `holder` is who it says it is.
    #[error(
        "run directory {} is in use by {}; wait for it to end, or stop it \
         (status and report work meanwhile)",
        dir.display(),
        describe(holder.as_ref())
    )]
    Held {
        dir: PathBuf,
        holder: Option<Holder>,
    },
    #[error("cannot lock run directory {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn describe(holder: Option<&Holder>) -> String {
    match holder {
        Some(h) => format!(
            "daisy-driver {} (pid {} on {}, since {})",
            h.command, h.pid, h.host, h.started_at
        ),
        None => "another daisy-driver (it has not said who yet)".to_string(),
    }
}

/// The lock on a run directory, held until dropped.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Creates the run directory if needed and locks it for `command`,
    /// or says who holds it.
    pub fn acquire(run_dir: &RunDir, command: &str) -> Result<Self, LockError> {
        let path = run_dir.lock_file();
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(run_dir.path()).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(LockError::Held {
                    dir: run_dir.path().to_path_buf(),
                    holder: wait_for_holder(&path),
                })
            }
            Err(TryLockError::Error(source)) => return Err(io(source)),
        }
        write_holder(&mut file, command).map_err(io)?;
        Ok(Self { _file: file })
    }
}

fn write_holder(file: &mut File, command: &str) -> std::io::Result<()> {
    let holder = Holder {
        host: nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "?".into()),
        pid: std::process::id(),
        started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        command: command.to_string(),
    };
    file.set_len(0)?;
    let mut line = serde_json::to_vec(&holder)?;
    line.push(b'\n');
    std::os::unix::fs::FileExt::write_all_at(file, &line, 0)?;
    file.flush()
}

/// Who holds the lock at `path`, once it has written it (at most
/// [`HOLDER_WAIT`]).
fn wait_for_holder(path: &Path) -> Option<Holder> {
    let deadline = Instant::now() + HOLDER_WAIT;
    loop {
        let holder = std::fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        if holder.is_some() || Instant::now() >= deadline {
            return holder;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_first_and_free_once_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let run_dir = RunDir::at(&tmp.path().join("run"));
        let first = RunLock::acquire(&run_dir, "run").unwrap();
        let error = RunLock::acquire(&run_dir, "reset").unwrap_err();
        let LockError::Held {
            holder: Some(holder),
            ..
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(
            (holder.pid, holder.command.as_str()),
            (std::process::id(), "run")
        );
        let message = error.to_string();
        assert!(
            message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
        drop(first);
        RunLock::acquire(&run_dir, "reset").unwrap();
    }

    #[test]
    fn a_leftover_lock_file_does_not_block() {
        let tmp = tempfile::tempdir().unwrap();
        let run_dir = RunDir::at(tmp.path());
        let stale =
            r#"{"host":"gone","pid":1,"started_at":"2020-01-01T00:00:00Z","command":"run"}"#;
        std::fs::write(run_dir.lock_file(), stale).unwrap();
        RunLock::acquire(&run_dir, "run").unwrap();
        let now: Holder =
            serde_json::from_slice(&std::fs::read(run_dir.lock_file()).unwrap()).unwrap();
        assert_eq!(now.pid, std::process::id());
    }
}
