//! The worker's main loop: connect, take a block, run the task's code on
//! it, report the result, repeat, until the driver says there is no more
//! work or the worker is asked to stop.
//!
//! One `select!` races everything that can happen (the stop signal, the
//! driver's answer to a parked request, the block finishing, the driver
//! lost), each branch a short `on_*` fn; it ends with a stop reason
//! ([`Stopped`]) or an error, and the cleanup (finishing a worker command,
//! closing the connection) happens once, after it.
//!
//! Stopping (SIGTERM, SIGINT, or the future a caller passes in) is the
//! simple form of draining: no more blocks are asked for, the driver is
//! told (`Draining`, which it answers a parked `AcquireBlocks` with
//! `Shutdown`), the running block finishes and is released, then the
//! worker exits cleanly. Blocks already on their way are run, not dropped.
//!
//! User code runs on a blocking thread ([`tokio::task::spawn_blocking`]),
//! because it is synchronous (see [`crate::user_code`]); the connection
//! keeps heartbeating meanwhile.

use crate::client::{Acquired, Client, ClientError, ConnectError, ConnectOpts};
use crate::runner::Runner;
use crate::user_code::BlockFailure;
use daisy_core::protocol::{BlockResult, Welcome, WireBlock};
use std::collections::VecDeque;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::task::{JoinError, JoinHandle};

/// What the runtime needs: where the driver is, where user output goes.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub connect: ConnectOpts,
    /// User code output goes to `<log_dir>/worker-<id>-user.{out,err}`.
    pub log_dir: PathBuf,
}

/// Why the worker stopped cleanly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The driver has no more work for this worker.
    Shutdown { reason: String },
    /// The worker was asked to stop; it finished the block it was running.
    Drained { reason: String },
}

/// Why the worker stopped without finishing its job.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The task's code from the driver cannot run on this worker.
    #[error("task {task:?}: its code cannot run: {reason}")]
    BadCode { task: String, reason: String },
    /// The connection broke after the Welcome.
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the thread running block {block_id} failed: {reason}")]
    UserCodeThread { block_id: u64, reason: String },
}

/// Serves the task in `config` until the driver has no more work or `stop`
/// resolves (with why: `"received SIGTERM"`).
///
/// On an error the user code is left to its `Drop` (which kills it) and
/// the connection is dropped; the binary exits right away, which also
/// ends a block still running (its process dies with the worker).
pub async fn run(
    config: RunConfig,
    stop: impl Future<Output = String>,
) -> Result<Stopped, RunError> {
    let RunConfig { connect, log_dir } = config;
    let mut stop = pin!(stop);
    let task = connect.task_id.clone();
    let client = tokio::select! {
        reason = &mut stop => return Ok(Stopped::Drained { reason }),
        client = Client::connect(connect) => client?,
    };
    let runner = match runner_for(&task, client.welcome(), &log_dir) {
        Ok(runner) => runner,
        Err(reason) => return Err(refuse_code(client, task, reason).await),
    };
    let mut worker = Worker::new(client, runner);
    let stopped = worker.serve(stop).await?;
    Ok(worker.finish(stopped).await)
}

fn runner_for(task: &str, welcome: &Welcome, log_dir: &Path) -> Result<Runner, String> {
    let code = welcome
        .code
        .as_ref()
        .ok_or("the driver's Welcome carries no code")?;
    Runner::new(task, welcome.worker_id, code, log_dir)
}

/// Tells the driver why this worker cannot serve (so its events say so)
/// before hanging up.
async fn refuse_code(mut client: Client, task: String, reason: String) -> RunError {
    let said = client
        .draining(format!("its code cannot run: {reason}"))
        .await;
    if let Err(e) = said.and(client.close().await) {
        tracing::debug!("could not tell the driver: {e}");
    }
    RunError::BadCode { task, reason }
}

/// A block running on a blocking thread.
struct Running {
    block_id: u64,
    handle: JoinHandle<Result<(), BlockFailure>>,
}

/// A block's id and how its thread ended.
type Done = (u64, Result<Result<(), BlockFailure>, JoinError>);

/// The state of the main loop.
struct Worker {
    client: Client,
    /// Shared with the blocking thread running a block; only ever locked
    /// there, or once the loop is over.
    runner: Arc<Mutex<Runner>>,
    /// Blocks received and not started yet (the driver sends at most the
    /// one asked for, but a batch would not be lost).
    queued: VecDeque<WireBlock>,
    running: Option<Running>,
    /// Set once asked to stop: why. No more blocks are asked for.
    draining: Option<String>,
}

impl Worker {
    fn new(client: Client, runner: Runner) -> Self {
        Self {
            client,
            runner: Arc::new(Mutex::new(runner)),
            queued: VecDeque::new(),
            running: None,
            draining: None,
        }
    }

    async fn serve(
        &mut self,
        mut stop: Pin<&mut impl Future<Output = String>>,
    ) -> Result<Stopped, RunError> {
        let mut lost = pin!(self.client.lost());
        loop {
            // While draining, only an answer already owed is awaited.
            let asking = self.draining.is_none() || self.client.awaits_blocks();
            let taking = self.running.is_none() && asking;
            tokio::select! {
                reason = &mut stop, if self.draining.is_none() => self.on_stop(reason).await?,
                acquired = self.client.acquire(1), if taking => {
                    if let Some(stopped) = self.on_acquired(acquired?) {
                        return Ok(stopped);
                    }
                }
                done = finished(&mut self.running) => self.on_block_done(done).await?,
                error = &mut lost => return Err(error.into()),
            }
            if let Some(stopped) = self.drained() {
                return Ok(stopped);
            }
        }
    }

    async fn on_stop(&mut self, reason: String) -> Result<(), RunError> {
        tracing::info!("{reason}: taking no more blocks");
        self.client.draining(reason.clone()).await?;
        self.draining = Some(reason);
        Ok(())
    }

    /// Blocks are run even while draining: they crossed the `Draining`
    /// on the wire, and running them loses nothing.
    fn on_acquired(&mut self, acquired: Acquired) -> Option<Stopped> {
        match (acquired, &self.draining) {
            (Acquired::Blocks(blocks), _) => {
                self.queued.extend(blocks);
                self.start_next();
                None
            }
            (Acquired::Shutdown { .. }, Some(reason)) => Some(Stopped::Drained {
                reason: reason.clone(),
            }),
            (Acquired::Shutdown { reason }, None) => Some(Stopped::Shutdown { reason }),
        }
    }

    async fn on_block_done(&mut self, (block_id, joined): Done) -> Result<(), RunError> {
        self.running = None;
        let outcome = joined.map_err(|e| RunError::UserCodeThread {
            block_id,
            reason: e.to_string(),
        })?;
        self.client.release(vec![result(block_id, outcome)]).await?;
        self.start_next();
        Ok(())
    }

    /// Starts the next queued block, if any, on a blocking thread.
    fn start_next(&mut self) {
        let Some(block) = self.queued.pop_front() else {
            return;
        };
        let runner = Arc::clone(&self.runner);
        let block_id = block.block_id;
        tracing::debug!(block_id, "running block");
        let handle = tokio::task::spawn_blocking(move || lock(&runner).run(&block));
        self.running = Some(Running { block_id, handle });
    }

    /// Stopped, once asked to, with nothing received left to run and no
    /// blocks still owed by the driver.
    fn drained(&self) -> Option<Stopped> {
        let idle = self.running.is_none() && self.queued.is_empty() && !self.client.awaits_blocks();
        let reason = self.draining.as_ref().filter(|_| idle)?;
        Some(Stopped::Drained {
            reason: reason.clone(),
        })
    }

    /// Ends the user's worker command, then the connection. Failures here
    /// lose nothing (every result was queued), so they are only logged.
    async fn finish(self, stopped: Stopped) -> Stopped {
        let runner = self.runner;
        let finished = tokio::task::spawn_blocking(move || lock(&runner).finish()).await;
        if let Err(e) = finished {
            tracing::warn!("could not finish the user code: {e}");
        }
        if let Err(e) = self.client.close().await {
            tracing::warn!("could not close the connection cleanly: {e}");
        }
        stopped
    }
}

/// The running block's outcome once it is done; never, if none runs.
async fn finished(running: &mut Option<Running>) -> Done {
    match running {
        Some(running) => (running.block_id, (&mut running.handle).await),
        None => std::future::pending().await,
    }
}

/// A panic while running a block ends the worker (see `on_block_done`),
/// so a poisoned lock is only seen by `finish`, which may still proceed.
fn lock(runner: &Mutex<Runner>) -> std::sync::MutexGuard<'_, Runner> {
    runner.lock().unwrap_or_else(PoisonError::into_inner)
}

fn result(block_id: u64, outcome: Result<(), BlockFailure>) -> BlockResult {
    match outcome {
        Ok(()) => BlockResult {
            block_id,
            ok: true,
            error: None,
        },
        Err(failure) => {
            tracing::warn!(block_id, "block failed: {failure}");
            BlockResult {
                block_id,
                ok: false,
                error: Some(failure.message),
            }
        }
    }
}

#[cfg(test)]
mod tests;
