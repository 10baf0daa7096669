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
//! Blocks come in batches (the task's `batch_size`): a block command runs
//! them one by one; a worker command is fed `1 + prefetch` of them ahead
//! of its answers, so it can overlap reading the next block with
//! computing this one.
//!
//! A block starts only while [`Drain`] allows it: once the worker drains,
//! the rest of a batch is left unrun, for the runtime to hand back.
//!
//! A block command and in-process code are synchronous: the runtime runs
//! their batches on a blocking thread. A worker command's pipes are
//! waited for by the runtime itself, so relaying a block to it and its
//! answer back costs no thread hop ([`SharedRunner::start_batch`]).

use crate::cost::WorkerMeter;
use crate::drain::Drain;
use crate::embedded::{self, BlockControl, EmbeddedCode, EmbeddedRan, Metered, Watchdog};
use crate::user_code::{
    check_program, run_blocking, BlockCommand, BlockFailure, BlockLog, Finished, Outcome, Wait,
    WorkerCommand,
};
use daisy_core::protocol::{BlockCost, CodeKind, TaskCode, WireBlock};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinError;

/// A block that ran: how it went, how long it took, and what else it
/// cost if the task tracks resources.
#[derive(Debug)]
pub struct Ran {
    pub block_id: u64,
    pub outcome: Result<Finished, BlockFailure>,
    pub seconds: f64,
    pub cost: Option<BlockCost>,
}

/// Runs one task's blocks, one at a time.
#[derive(Debug)]
pub enum Runner {
    Block {
        command: BlockCommand,
        log: BlockLog,
    },
    /// Boxed: its pipes' buffers and reactor registrations are large.
    Worker(Box<WorkerProcess>),
    /// A function of the embedding interpreter ([`crate::embedded`]).
    Embedded(Embedded),
}

/// The first block of in-process code found past the task's `timeout`.
pub struct Overdue {
    pub block: tokio::sync::oneshot::Receiver<u64>,
    pub timeout: Duration,
}

/// A task's function, called in this process, and the watchdog of its
/// blocks if the task has a timeout.
pub struct Embedded {
    code: Box<dyn EmbeddedCode>,
    watchdog: Option<Watchdog>,
    /// Taken by the runtime: the first block past the timeout.
    overdue: Option<tokio::sync::oneshot::Receiver<u64>>,
    /// The worker's own counters, if the task tracks resources.
    meter: Option<Mutex<(WorkerMeter, usize)>>,
}

impl Embedded {
    fn new(
        task_id: &str,
        worker_id: u64,
        code: &TaskCode,
        timeout: Option<Duration>,
    ) -> Result<Self, String> {
        let watched = timeout.map(Watchdog::start).transpose();
        let watched = watched.map_err(|e| format!("cannot start the block watchdog: {e}"))?;
        let (watchdog, overdue) = watched.unzip();
        Ok(Self {
            code: embedded::code_for(task_id, worker_id, code)?,
            watchdog,
            overdue,
            meter: code.resource_tracking.then(embedded::own_meter),
        })
    }

    fn run_batch(&mut self, blocks: Vec<WireBlock>, drain: &Drain) -> Vec<Ran> {
        let watched = Watched {
            drain,
            watchdog: self.watchdog.as_ref(),
        };
        let metered = (self.meter.as_ref()).map(|meter| Metered::new(&watched, meter));
        let control: &dyn BlockControl = match &metered {
            Some(metered) => metered,
            None => &watched,
        };
        let ran = self.code.run_batch(blocks, control);
        ran.into_iter()
            .map(
                |EmbeddedRan {
                     block_id,
                     outcome,
                     took,
                 }| {
                    drain.observe(took);
                    Ran {
                        cost: metered.as_ref().and_then(|m| m.take(block_id)),
                        ..self::ran(block_id, outcome, took)
                    }
                },
            )
            .collect()
    }
}

/// Blocks start while the worker does not drain, each watched.
struct Watched<'a> {
    drain: &'a Drain,
    watchdog: Option<&'a Watchdog>,
}

impl BlockControl for Watched<'_> {
    fn start(&self, block_id: u64) -> bool {
        let may = self.drain.may_start_block();
        if let (true, Some(watchdog)) = (may, self.watchdog) {
            watchdog.started(block_id);
        }
        may
    }

    fn finished(&self, block_id: u64) {
        if let Some(watchdog) = self.watchdog {
            watchdog.finished(block_id);
        }
    }
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Embedded")
    }
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
        let runner = match code.kind {
            CodeKind::BlockCommand => Self::Block {
                command: BlockCommand::new(&code.argv, code.env.clone(), timeout)
                    .map_err(|e| e.to_string())?
                    .with_resource_tracking(code.resource_tracking),
                log,
            },
            CodeKind::WorkerCommand if code.argv.is_empty() => {
                return Err("the worker command is empty".into())
            }
            CodeKind::WorkerCommand => Self::Worker(Box::new(WorkerProcess {
                task_id: task_id.to_string(),
                argv: code.argv.clone(),
                env: code.env.clone(),
                timeout,
                depth: 1 + code.prefetch as usize,
                resource_tracking: code.resource_tracking,
                log,
                process: None,
            })),
            CodeKind::ProcessFunction | CodeKind::WorkerFunction => {
                Self::Embedded(Embedded::new(task_id, worker_id, code, timeout)?)
            }
            CodeKind::Unknown => {
                return Err("the driver sent a kind of code this worker does not know: \
                            a newer daisy-worker is needed"
                    .into())
            }
        };
        check_starts(runner.program(), &code.env)?;
        Ok(runner)
    }

    /// Why the code cannot serve the task at all, once it found out while
    /// running a batch (in-process code only).
    pub fn cannot_serve(&self) -> Option<String> {
        match self {
            Self::Embedded(embedded) => embedded.code.cannot_serve(),
            _ => None,
        }
    }

    /// Why the code ended on its own, once it did (in-process code only).
    pub fn ended_by_choice(&self) -> Option<String> {
        match self {
            Self::Embedded(embedded) => embedded.code.ended_by_choice(),
            _ => None,
        }
    }

    /// For in-process code with a timeout: resolves with the first block
    /// found running past it, and the timeout (once; `None` after).
    pub fn take_overdue(&mut self) -> Option<Overdue> {
        let Self::Embedded(embedded) = self else {
            return None;
        };
        let timeout = embedded.watchdog.as_ref()?.timeout();
        Some(Overdue {
            block: embedded.overdue.take()?,
            timeout,
        })
    }

    /// The program the code starts, unless a placeholder makes it differ
    /// per block; `None` for functions, which start none.
    fn program(&self) -> Option<&str> {
        match self {
            Self::Block { command, .. } => command.program(),
            Self::Worker(worker) => worker.argv.first().map(String::as_str),
            Self::Embedded(_) => None,
        }
    }

    /// Runs `blocks` while `drain` allows, in the order they finished;
    /// blocks the calling thread until they are done. Blocks missing from
    /// the result were not started.
    pub fn run_batch(&mut self, blocks: Vec<WireBlock>, drain: &Drain) -> Vec<Ran> {
        match self {
            Self::Block { command, log } => blocks
                .iter()
                .take_while(|_| drain.may_start_block())
                .map(|block| {
                    let started = Instant::now();
                    let (outcome, cost) = command.run_costed(block, log);
                    drain.observe(started.elapsed());
                    let outcome = outcome.map(|()| Finished::Ran);
                    Ran {
                        cost,
                        ..ran(block.block_id, outcome, started.elapsed())
                    }
                })
                .collect(),
            Self::Worker(worker) => run_blocking(worker.run_batch(blocks, drain, Wait::Blocking)),
            Self::Embedded(embedded) => embedded.run_batch(blocks, drain),
        }
    }

    /// Ends a worker command (closes its stdin, waits out its grace
    /// period); nothing to do for block commands.
    pub fn finish(&mut self) {
        match self {
            Self::Worker(worker) => worker.finish(),
            Self::Embedded(embedded) => embedded.code.finish(),
            Self::Block { .. } => {}
        }
    }
}

/// A batch running: its results, or how the thread running it failed.
pub type Batch = Pin<Box<dyn Future<Output = Result<Vec<Ran>, JoinError>> + Send>>;

/// The runner, shared between the runtime and the batch it runs.
#[derive(Debug)]
pub struct SharedRunner {
    runner: Arc<tokio::sync::Mutex<Runner>>,
    /// A worker command, whose batches run on the runtime.
    on_runtime: bool,
}

impl SharedRunner {
    pub fn new(runner: Runner) -> Self {
        Self {
            on_runtime: matches!(runner, Runner::Worker(_)),
            runner: Arc::new(tokio::sync::Mutex::new(runner)),
        }
    }

    /// Starts running `blocks` as [`Runner::run_batch`] does: other code
    /// on a blocking thread, a worker command's in the returned future
    /// itself (no task to spawn and wake: the caller polls it).
    pub fn start_batch(&self, blocks: Vec<WireBlock>, drain: &Arc<Drain>) -> Batch {
        let (runner, drain) = (Arc::clone(&self.runner), Arc::clone(drain));
        if !self.on_runtime {
            let run = move || runner.blocking_lock().run_batch(blocks, &drain);
            return Box::pin(tokio::task::spawn_blocking(run));
        }
        Box::pin(async move {
            let mut runner = runner.lock().await;
            Ok(match &mut *runner {
                Runner::Worker(worker) => worker.run_batch(blocks, &drain, Wait::Async).await,
                // Not reached (`on_runtime` is for worker commands); correct anyway.
                other => other.run_batch(blocks, &drain),
            })
        })
    }

    /// See [`Runner::cannot_serve`]; after the batch is done. Only
    /// in-process code finds out while running, so a worker command's
    /// batch takes no lock for it (a lock and unlock per batch).
    pub async fn cannot_serve(&self) -> Option<String> {
        if self.on_runtime {
            return None;
        }
        self.runner.lock().await.cannot_serve()
    }

    /// See [`Runner::ended_by_choice`]; after the batch is done, as
    /// [`Self::cannot_serve`].
    pub async fn ended_by_choice(&self) -> Option<String> {
        if self.on_runtime {
            return None;
        }
        self.runner.lock().await.ended_by_choice()
    }

    /// Ends the code ([`Runner::finish`]) on a blocking thread: it waits
    /// out a worker command's grace period.
    pub async fn finish(&self) -> Result<(), JoinError> {
        let runner = Arc::clone(&self.runner);
        tokio::task::spawn_blocking(move || runner.blocking_lock().finish()).await
    }
}

/// Refuses code whose program cannot start in this worker's directory
/// (`None`: it is known only per block), before a block fails on it.
fn check_starts(program: Option<&str>, env: &BTreeMap<String, String>) -> Result<(), String> {
    let Some(program) = program else {
        return Ok(());
    };
    let dir =
        std::env::current_dir().map_err(|e| format!("cannot read the working directory: {e}"))?;
    check_program(program, &dir, env).map_err(|e| e.to_string())
}

fn ran(block_id: u64, outcome: Result<Finished, BlockFailure>, took: Duration) -> Ran {
    Ran {
        block_id,
        outcome,
        seconds: took.as_secs_f64(),
        cost: None,
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
    /// Blocks written to its stdin ahead of their answers: 1 + prefetch.
    depth: usize,
    resource_tracking: bool,
    log: BlockLog,
    /// `None` before the first block and after [`Self::finish`].
    process: Option<WorkerCommand>,
}

impl WorkerProcess {
    /// Feeds `blocks` ahead while `drain` allows; if the process dies,
    /// the blocks it was given fail and a fresh process takes the rest.
    /// Blocks overlap, so each is timed as its share of the time between
    /// answers.
    async fn run_batch(&mut self, blocks: Vec<WireBlock>, drain: &Drain, wait: Wait) -> Vec<Ran> {
        let (depth, timeout) = (self.depth, self.timeout);
        let mut todo = VecDeque::from(blocks);
        let mut done = Vec::with_capacity(todo.len());
        let may_feed = || drain.may_start_block();
        while !todo.is_empty() && may_feed() {
            let started = Instant::now();
            let outcomes: Vec<Outcome> = match self.running() {
                Ok(process) => {
                    process.begin_costs();
                    let ran = process.run_ahead_in(&mut todo, depth, timeout, &may_feed, wait);
                    ran.await
                }
                Err(failure) => {
                    let failed = todo.drain(..).map(|b| (b.block_id, Err(failure.clone())));
                    failed.collect()
                }
            };
            let share = started.elapsed() / outcomes.len().max(1) as u32;
            drain.observe(share);
            done.extend(outcomes.into_iter().map(|(id, outcome)| Ran {
                cost: self.process.as_mut().and_then(|p| p.take_cost(id)),
                ..ran(id, outcome, share)
            }));
        }
        done
    }

    /// The process, started (again) if it is not running.
    fn running(&mut self) -> Result<&mut WorkerCommand, BlockFailure> {
        if self.process.take_if(|p| !p.is_running()).is_some() {
            tracing::warn!("the worker command died; starting it again");
        }
        // Borrowed in place: a `WorkerCommand` is large, and taking it out
        // and putting it back copied it twice per batch.
        match self.process {
            Some(ref mut process) => Ok(process),
            None => {
                let process = self.start()?;
                Ok(self.process.insert(process))
            }
        }
    }

    fn start(&self) -> Result<WorkerCommand, BlockFailure> {
        WorkerCommand::start(&self.task_id, &self.argv, &self.env, &self.log)
            .map(|process| process.with_resource_tracking(self.resource_tracking))
            .map_err(|e| BlockFailure::new(format!("cannot start the worker command: {e}")))
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
