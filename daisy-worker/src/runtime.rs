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
//! Draining: a stop (SIGTERM, SIGINT, SIGUSR1/2, or the future a caller
//! passes in), or a job walltime too short for another block, makes the
//! worker take no more blocks: the driver is told (`Draining`, which it
//! answers a parked `AcquireBlocks` with `Shutdown`), the running block
//! finishes and is released, blocks not started are handed back
//! (`ReturnBlocks`), then the worker exits cleanly. A block that fails
//! after the signal was most likely killed by it (SLURM signals every
//! process of a job at its time limit), so it is handed back too, not
//! reported failed: neither costs the block a retry.
//!
//! Blocks come in batches: the worker asks for the task's `batch_size`
//! (or `1 + prefetch`, if larger, so a worker command has blocks to be fed
//! ahead; for `batch_size = 0`, a size fitted to its blocks' run time, see
//! `batch_size`) in one `AcquireBlocks`, runs the batch as one unit,
//! and releases every result of it in one `ReleaseBlocks` once all are
//! done. A stop lets the running batch finish; a lost driver ends the
//! worker, and the driver hands the batch to another.
//!
//! A block command and in-process code run on a blocking thread
//! ([`tokio::task::spawn_blocking`]), because they are synchronous (see
//! [`crate::user_code`]); a worker command's pipes are waited for on the
//! runtime, like the connection (see `runner`).
//!
//! The connection is read and written by the main loop itself (a
//! [`Wire`], one branch of its `select!`, which also heartbeats): a task
//! in between cost two hand-overs per block, a fifth of the instructions
//! of relaying a block. Messages queued during a turn of the loop leave
//! in one write at its end (a release and the next acquire).

mod state;

use crate::batch_size::BatchSize;
use crate::client::{self, Answer, ClientError, ConnectError, ConnectOpts, Wire};
use crate::drain::Drain;
use crate::runner::{Batch, Overdue, Ran, Runner, SharedRunner};
use crate::user_code::Finished;
use daisy_core::protocol::{BlockResult, CodeKind, TaskCode, ToDriver, Welcome, WireBlock};
use state::{stopped_when_idle, Intake, Supply};
use std::collections::VecDeque;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinError;

/// What the runtime needs: where the driver is, where user output goes,
/// when the job ends.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub connect: ConnectOpts,
    /// User code output goes to `<log_dir>/worker-<id>-user.{out,err}`.
    pub log_dir: PathBuf,
    /// When the cluster scheduler ends this worker's job, if known.
    pub job_end: Option<Instant>,
}

/// Why the worker stopped cleanly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The driver has no more work for this worker.
    Shutdown { reason: String },
    /// The worker was asked to stop; it finished the block it was running.
    Drained { reason: String },
    /// The driver said the run is over, then ended before the blocks in
    /// hand were done: they are left (the process's end stops them), and a
    /// re-run runs them again.
    DriverGone { reason: String },
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
    /// In-process code ran past the task's timeout; the block was
    /// reported failed and the worker must end to stop it.
    #[error("block {block_id} ran past the task's timeout of {timeout:?}")]
    BlockTimedOut { block_id: u64, timeout: Duration },
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
    let RunConfig {
        connect,
        log_dir,
        job_end,
    } = config;
    let mut stop = pin!(stop);
    let task = connect.task_id.clone();
    let (welcome, wire) = tokio::select! {
        reason = &mut stop => return Ok(Stopped::Drained { reason }),
        connected = client::connect(connect) => connected?,
    };
    let mut runner = match runner_for(&task, &welcome, &log_dir) {
        Ok(runner) => runner,
        Err(reason) => return Err(refuse_code(wire, task, reason).await),
    };
    let code = welcome.code.as_ref();
    let batch = code.map_or(BatchSize::Fixed(1), batch_size);
    let drain = Drain::new(job_end);
    // Blocks of the task other workers ran, until this one has run its own.
    if let Some(seconds) = welcome.longest_block_s {
        drain.observe(Duration::try_from_secs_f64(seconds).unwrap_or_default());
    }
    let overdue = runner.take_overdue();
    let mut worker = Worker::new(wire, runner, batch, drain);
    worker.overdue = overdue;
    worker.task = task;
    match worker.serve(stop).await {
        Ok(gone @ Stopped::DriverGone { .. }) => Ok(gone),
        Ok(stopped) => Ok(worker.finish(stopped).await),
        // What the worker said (a stuck block, code that cannot serve)
        // must reach the driver before the process ends.
        Err(said @ (RunError::BlockTimedOut { .. } | RunError::BadCode { .. })) => {
            worker.close().await;
            Err(said)
        }
        Err(error) => Err(error),
    }
}

fn runner_for(task: &str, welcome: &Welcome, log_dir: &Path) -> Result<Runner, String> {
    let code = welcome
        .code
        .as_ref()
        .ok_or("the driver's Welcome carries no code")?;
    Runner::new(task, welcome.worker_id, code, log_dir)
}

/// How many blocks to ask for at once: a batch (or an automatic size),
/// and enough for a worker command to be fed `prefetch` blocks ahead of
/// the one it works on.
fn batch_size(code: &TaskCode) -> BatchSize {
    let floor = match code.kind {
        CodeKind::WorkerCommand => code.prefetch.saturating_add(1),
        _ => 1,
    };
    BatchSize::new(code.batch_size, floor)
}

/// Tells the driver why this worker cannot serve (so its events say so)
/// before hanging up.
async fn refuse_code(mut wire: Wire, task: String, reason: String) -> RunError {
    let said = format!("its code cannot run: {reason}");
    if let Err(e) = wire.queue(ToDriver::CannotServe { reason: said }) {
        tracing::debug!("could not tell the driver: {e}");
    }
    close(wire).await;
    RunError::BadCode { task, reason }
}

/// Writes what is queued and hangs up; failures lose nothing the driver
/// needs (it treats a lost worker's blocks as such), so they are logged.
async fn close(mut wire: Wire) {
    let closed = tokio::time::timeout(client::CLOSE_TIMEOUT, wire.close()).await;
    match closed {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("could not close the connection cleanly: {e}"),
        Err(_) => tracing::warn!(
            "could not write the last messages within {:?}",
            client::CLOSE_TIMEOUT
        ),
    }
}

/// A batch running (on a blocking thread, or in a future the loop polls).
struct Running {
    block_ids: Vec<u64>,
    handle: Batch,
}

/// A batch's block ids and how its thread ended.
type Done = (Vec<u64>, Result<Vec<Ran>, JoinError>);

/// The state of the main loop.
struct Worker {
    wire: Wire,
    supply: Supply,
    /// Shared with the batch running; only ever locked there, or between
    /// batches.
    runner: SharedRunner,
    /// Blocks received and not started yet.
    queued: VecDeque<WireBlock>,
    /// Blocks asked for per `AcquireBlocks`.
    batch: BatchSize,
    running: Option<Running>,
    intake: Intake,
    /// Shared with the thread running blocks, which asks it before each.
    drain: Arc<Drain>,
    /// In-process code with a timeout: the block found running past it.
    overdue: Option<Overdue>,
    /// The task served, for errors.
    task: String,
}

impl Worker {
    fn new(wire: Wire, runner: Runner, batch: BatchSize, drain: Drain) -> Self {
        Self {
            wire,
            supply: Supply::NotAsked,
            runner: SharedRunner::new(runner),
            queued: VecDeque::new(),
            batch,
            running: None,
            intake: Intake::Taking,
            drain: Arc::new(drain),
            overdue: None,
            task: String::new(),
        }
    }

    async fn serve(
        &mut self,
        mut stop: Pin<&mut impl Future<Output = String>>,
    ) -> Result<Stopped, RunError> {
        let mut walltime = WalltimeTimer::new();
        loop {
            self.drain_if_walltime_short()?;
            if let Some(stopped) = self.stopped() {
                return Ok(stopped);
            }
            self.ask()?;
            // What this turn queued leaves in one write.
            self.wire.flush_now()?;
            // Biased: the branches are polled in order, sparing the
            // random pick, and none can starve another (each is rare).
            tokio::select! {
                biased;
                reason = &mut stop, if !self.intake.signalled() => self.on_signal(reason)?,
                answer = self.wire.next_answer() => match (answer, &self.supply) {
                    (Ok(answer), _) => self.on_answer(answer),
                    (
                        Err(ClientError::Disconnected | ClientError::Io { .. }),
                        Supply::Shutdown { reason },
                    ) => return Ok(gone_after_shutdown(reason, self.running.is_some())),
                    (Err(error), _) => return Err(error.into()),
                },
                done = finished(&mut self.running) => {
                    if !self.intake.signalled() && stopped_by_signal(&done) {
                        // SLURM signals every process of a job at once: the
                        // worker's own signal may be a moment behind.
                        if let Ok(reason) = tokio::time::timeout(SIGNAL_LAG, stop.as_mut()).await {
                            self.on_signal(reason)?;
                        }
                    }
                    self.on_batch_done(done).await?
                }
                // A worker waiting for blocks drains on time too.
                () = walltime.at(self.drain.walltime_deadline()), if self.intake == Intake::Taking => {}
                block_id = overdue_block(&mut self.overdue) => return Err(self.on_overdue(block_id).await),
            }
        }
    }

    /// Asks for the next batch once idle; never while draining or told
    /// to leave.
    fn ask(&mut self) -> Result<(), ClientError> {
        let idle = self.queued.is_empty() && self.running.is_none();
        let free = self.supply == Supply::NotAsked && self.intake == Intake::Taking;
        if !idle || !free {
            return Ok(());
        }
        let max = self.batch.next();
        self.wire.queue(ToDriver::AcquireBlocks { max })?;
        self.supply = Supply::Asked;
        Ok(())
    }

    fn drain_if_walltime_short(&mut self) -> Result<(), RunError> {
        let Some(why) = self.drain.walltime_too_short() else {
            return Ok(());
        };
        let began = self.intake.on_out_of_time(why);
        self.take_no_more(began)
    }

    fn on_signal(&mut self, reason: String) -> Result<(), RunError> {
        let began = self.intake.on_signal(reason);
        self.take_no_more(began)
    }

    /// Once draining began (`said`: the `Draining` for the driver), the
    /// thread running blocks starts no more and the driver is told.
    fn take_no_more(&mut self, said: Option<ToDriver>) -> Result<(), RunError> {
        let Some(said) = said else {
            return Ok(());
        };
        self.drain.begin();
        self.wire.queue(said)?;
        Ok(())
    }

    /// A function ran past the task's timeout and cannot be stopped: the
    /// block is reported failed, the others handed back, and the worker
    /// leaves as a draining one (no failure of the worker's: the driver
    /// starts another); its process ends the stuck call.
    async fn on_overdue(&mut self, block_id: u64) -> RunError {
        let timeout = self.overdue.as_ref().map(|o| o.timeout).unwrap_or_default();
        let reason = format!("block {block_id} ran past the task's timeout of {timeout:?}");
        tracing::error!("{reason}; a function cannot be stopped, so this worker ends");
        let failed = BlockResult {
            block_id,
            ok: false,
            skipped: false,
            error: Some(format!(
                "timed out after {timeout:?} (the worker running it ended)"
            )),
            seconds: Some(timeout.as_secs_f64()),
            cost: None,
        };
        let mut others: Vec<u64> = self.queued.iter().map(|b| b.block_id).collect();
        others.extend(
            self.running
                .iter()
                .flat_map(|r| r.block_ids.iter().copied()),
        );
        others.retain(|id| *id != block_id);
        let draining = ToDriver::Draining {
            reason: reason.clone(),
            out_of_time: false,
            by_choice: false,
        };
        let mut said = vec![draining, release(vec![failed])];
        if !others.is_empty() {
            let (block_ids, reason) = (others, reason);
            said.push(ToDriver::ReturnBlocks { block_ids, reason });
        }
        if let Err(e) = said.into_iter().try_for_each(|m| self.wire.queue(m)) {
            tracing::warn!("could not tell the driver: {e}");
        }
        RunError::BlockTimedOut { block_id, timeout }
    }

    /// Blocks that crossed the `Draining` on the wire go to the runner,
    /// which hands them back unrun. A shutdown ends the worker once
    /// nothing runs.
    fn on_answer(&mut self, answer: Answer) {
        match answer {
            Answer::Blocks(blocks) => {
                self.supply.on_blocks();
                // Taken over, not copied, when nothing waits (the usual case).
                if self.queued.is_empty() {
                    self.queued = VecDeque::from(blocks);
                } else {
                    self.queued.extend(blocks);
                }
                self.start_next();
            }
            Answer::Shutdown(reason) => self.supply = Supply::Shutdown { reason },
        }
    }

    /// Releases the whole batch in one message and hands back what was
    /// not run (or was cut short by a stop signal), then starts the next.
    async fn on_batch_done(&mut self, (block_ids, joined): Done) -> Result<(), RunError> {
        self.running = None;
        let ran = joined.map_err(|e| RunError::UserCodeThread {
            block_id: block_ids.first().copied().unwrap_or_default(),
            reason: e.to_string(),
        })?;
        self.batch.observe(
            ran.iter()
                .map(|ran| ran.seconds)
                .reduce(f64::max)
                .map(Duration::from_secs_f64),
        );
        // The runner may have stopped the batch for the walltime: say so
        // before handing blocks back.
        self.drain_if_walltime_short()?;
        // Taken out in place: the results stay in the batch's vector.
        let mut results = ran;
        let cut_short: Vec<Ran> = results
            .extract_if(.., |ran| self.cut_short_by_signal(ran))
            .collect();
        let unable = self.runner.cannot_serve().await;
        if let Some(why) = self.runner.ended_by_choice().await {
            let began = self.intake.on_code_ended(why);
            self.take_no_more(began)?;
        }
        let mut returned: Vec<u64> = block_ids
            .into_iter()
            .filter(|id| !results.iter().any(|ran| ran.block_id == *id))
            .collect();
        if !results.is_empty() {
            let results = results.into_iter().map(result).collect();
            self.wire.queue(release(results))?;
        }
        if !returned.is_empty() {
            let draining = self.intake.draining().map(str::to_string);
            let reason = unable.clone().or(draining).unwrap_or_default();
            tracing::info!(
                blocks = returned.len(),
                cut_short = cut_short.len(),
                "handing blocks back: {reason}"
            );
            returned.sort_unstable();
            let (block_ids, reason) = (returned, reason);
            self.wire
                .queue(ToDriver::ReturnBlocks { block_ids, reason })?;
        }
        if let Some(reason) = unable {
            let said = format!("its code cannot run: {reason}");
            self.wire.queue(ToDriver::CannotServe { reason: said })?;
            let task = self.task.clone();
            return Err(RunError::BadCode { task, reason });
        }
        self.start_next();
        Ok(())
    }

    /// A block stopped by a signal while the worker got a stop signal too:
    /// both came from outside (SLURM signals the whole job), so it is no
    /// failure of the block's.
    fn cut_short_by_signal(&self, ran: &Ran) -> bool {
        self.intake.signalled() && ran.outcome.as_ref().is_err_and(|f| f.by_signal)
    }

    /// Starts every queued block, as one batch.
    fn start_next(&mut self) {
        if self.queued.is_empty() {
            return;
        }
        // The queue's buffer becomes the batch: no allocation, no copy.
        let batch = Vec::from(std::mem::take(&mut self.queued));
        let block_ids: Vec<u64> = batch.iter().map(|block| block.block_id).collect();
        tracing::debug!(?block_ids, "running batch");
        let handle = self.runner.start_batch(batch, &self.drain);
        self.running = Some(Running { block_ids, handle });
    }

    /// Stopped, once asked to (or told to leave), with nothing received
    /// left to run and no blocks still owed by the driver.
    fn stopped(&self) -> Option<Stopped> {
        if self.running.is_some() || !self.queued.is_empty() {
            return None;
        }
        stopped_when_idle(&self.intake, &self.supply)
    }

    /// Ends the connection once what was queued is written, leaving the
    /// user code as it is (a stuck call ends with the process).
    async fn close(self) {
        close(self.wire).await;
    }

    /// Ends the user's worker command (the connection heartbeating
    /// meanwhile: that may take its grace period), then the connection.
    /// Failures here lose nothing (every result was queued), so they are
    /// only logged.
    async fn finish(self, stopped: Stopped) -> Stopped {
        let Self {
            mut wire, runner, ..
        } = self;
        if let Err(e) = alongside(&mut wire, runner.finish()).await {
            tracing::warn!("could not finish the user code: {e}");
        }
        close(wire).await;
        stopped
    }
}

/// Runs `work` while `wire` keeps the connection alive; what the driver
/// answers meanwhile is dropped (the worker is leaving).
async fn alongside<T>(wire: &mut Wire, work: impl Future<Output = T>) -> T {
    let mut work = pin!(work);
    let mut alive = true;
    loop {
        tokio::select! {
            biased;
            done = &mut work => return done,
            answer = wire.next_answer(), if alive => alive = answer.is_ok(),
        }
    }
}

fn release(results: Vec<BlockResult>) -> ToDriver {
    ToDriver::ReleaseBlocks { results }
}

/// How long a batch whose block a signal stopped waits for the worker's
/// own stop signal, before reporting the block failed.
const SIGNAL_LAG: Duration = Duration::from_secs(1);

/// The timer of the walltime check, kept across turns of the main loop:
/// a timer armed per turn cost two updates of the runtime's timer wheel
/// per block.
struct WalltimeTimer {
    sleep: Pin<Box<tokio::time::Sleep>>,
    armed: Option<Instant>,
}

impl WalltimeTimer {
    fn new() -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep(Duration::MAX)),
            armed: None,
        }
    }

    /// Resolves at `deadline`, when the walltime check says to drain;
    /// never, without one.
    async fn at(&mut self, deadline: Option<Instant>) {
        let Some(at) = deadline else {
            return std::future::pending().await;
        };
        if self.armed != deadline {
            self.sleep.as_mut().reset(at.into());
            self.armed = deadline;
        }
        self.sleep.as_mut().await
    }
}

/// The driver told this worker the run is over, then closed the
/// connection before the batch in hand was done (an interrupted run
/// waits for its workers only a moment): a stop on purpose, not a
/// failure; a re-run runs that batch again.
fn gone_after_shutdown(reason: &str, running: bool) -> Stopped {
    let reason = reason.to_string();
    match running {
        true => Stopped::DriverGone { reason },
        false => Stopped::Shutdown { reason },
    }
}

/// Whether a block of the batch was stopped by a signal.
fn stopped_by_signal((_, joined): &Done) -> bool {
    joined.as_ref().is_ok_and(|ran| {
        ran.iter()
            .any(|ran| ran.outcome.as_ref().is_err_and(|f| f.by_signal))
    })
}

/// The block in-process code ran past its timeout; never, without a
/// watchdog.
async fn overdue_block(overdue: &mut Option<Overdue>) -> u64 {
    let Some(watched) = overdue else {
        return std::future::pending().await;
    };
    match (&mut watched.block).await {
        Ok(block_id) => block_id,
        Err(_) => {
            *overdue = None;
            std::future::pending().await
        }
    }
}

/// The running block's outcome once it is done; never, if none runs.
async fn finished(running: &mut Option<Running>) -> Done {
    match running {
        Some(running) => {
            let joined = (&mut running.handle).await;
            (std::mem::take(&mut running.block_ids), joined)
        }
        None => std::future::pending().await,
    }
}

fn result(ran: Ran) -> BlockResult {
    let Ran {
        block_id,
        outcome,
        seconds,
        cost,
    } = ran;
    let skipped = outcome == Ok(Finished::FoundDone);
    let error = outcome.err().map(|failure| {
        tracing::warn!(block_id, "block failed: {failure}");
        failure.message
    });
    BlockResult {
        block_id,
        ok: error.is_none(),
        skipped,
        error,
        seconds: Some(seconds),
        cost,
    }
}

#[cfg(test)]
mod tests;
