//! The task's code, ready to run blocks: built from the [`TaskCode`] the
//! driver sends in its Welcome, on top of [`crate::user_code`].
//!
//! A block command is started per block. A worker command is started
//! before the first block and started again before the next block if it
//! died (the block it died on fails, and the driver retries it). Both
//! append the user's output to one pair of files per worker,
//! `<log-dir>/worker-<id>-user.{out,err}`: a file per block would make
//! millions of files.
//!
//! Everything here is synchronous and blocking; the runtime calls it from
//! `spawn_blocking`, always through the same [`Runner`].

use crate::user_code::{BlockCommand, BlockFailure, BlockLog, WorkerCommand};
use daisy_core::protocol::{CodeKind, TaskCode, WireBlock};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Runs one task's blocks, one at a time.
#[derive(Debug)]
pub enum Runner {
    Block {
        command: BlockCommand,
        log: BlockLog,
    },
    Worker(WorkerProcess),
}

impl Runner {
    /// The runner for `code`, or why the driver's code cannot run (an
    /// unknown placeholder, an empty command, a bad timeout).
    pub fn new(
        task_id: &str,
        worker_id: u64,
        code: &TaskCode,
        log_dir: &Path,
    ) -> Result<Self, String> {
        let timeout = timeout(code.timeout_s)?;
        let log = BlockLog::in_dir(log_dir, &format!("worker-{worker_id}-user"));
        Ok(match code.kind {
            CodeKind::BlockCommand => Self::Block {
                command: BlockCommand::new(&code.argv, code.env.clone(), timeout)
                    .map_err(|e| e.to_string())?,
                log,
            },
            CodeKind::WorkerCommand if code.argv.is_empty() => {
                return Err("the worker command is empty".into())
            }
            CodeKind::WorkerCommand => Self::Worker(WorkerProcess {
                task_id: task_id.to_string(),
                argv: code.argv.clone(),
                env: code.env.clone(),
                timeout,
                log,
                process: None,
            }),
        })
    }

    /// Runs `block`; blocks the calling thread until it is done.
    pub fn run(&mut self, block: &WireBlock) -> Result<(), BlockFailure> {
        match self {
            Self::Block { command, log } => command.run(block, log),
            Self::Worker(worker) => worker.run(block),
        }
    }

    /// Ends a worker command (closes its stdin, waits out its grace
    /// period); nothing to do for block commands.
    pub fn finish(&mut self) {
        if let Self::Worker(worker) = self {
            worker.finish();
        }
    }
}

fn timeout(seconds: Option<f64>) -> Result<Option<Duration>, String> {
    seconds
        .map(|s| {
            Duration::try_from_secs_f64(s)
                .map_err(|_| format!("timeout_s = {s} is not a valid number of seconds"))
        })
        .transpose()
}

/// A worker command, started on demand.
#[derive(Debug)]
pub struct WorkerProcess {
    task_id: String,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    timeout: Option<Duration>,
    log: BlockLog,
    /// `None` before the first block and after [`Self::finish`].
    process: Option<WorkerCommand>,
}

impl WorkerProcess {
    fn run(&mut self, block: &WireBlock) -> Result<(), BlockFailure> {
        let timeout = self.timeout;
        self.running()?.run(block, timeout)
    }

    /// The process, started (again) if it is not running.
    fn running(&mut self) -> Result<&mut WorkerCommand, BlockFailure> {
        if self.process.take_if(|p| !p.is_running()).is_some() {
            tracing::warn!("the worker command died; starting it again");
        }
        let process = match self.process.take() {
            Some(process) => process,
            None => self.start()?,
        };
        Ok(self.process.insert(process))
    }

    fn start(&self) -> Result<WorkerCommand, BlockFailure> {
        WorkerCommand::start(&self.task_id, &self.argv, &self.env, &self.log).map_err(|e| {
            BlockFailure {
                message: format!("cannot start the worker command: {e}"),
            }
        })
    }

    fn finish(&mut self) {
        let Some(process) = self.process.take() else {
            return;
        };
        match process.finish() {
            Ok(status) if status.success() => tracing::debug!("the worker command exited"),
            Ok(status) => tracing::warn!("the worker command ended with {status}"),
            Err(e) => tracing::warn!("cannot wait for the worker command: {e}"),
        }
    }
}
