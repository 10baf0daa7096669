//! The run loop's state and its transitions, one `on_*` function per
//! event. Everything here is synchronous; I/O happens by sending on a
//! connection's outbox or calling the launcher (which returns at once).

use super::launcher_thread::{LauncherEvent, LauncherThread};
use super::RunOptions;
use crate::budget::{worker_demand, Budget};
use crate::connection::Outbox;
use crate::connection::{ConnEvent, ConnId};
use crate::events::Event;
use crate::launch;
use crate::outcome_recorder::{Attempt, OutcomeRecorder};
use crate::pipeline::{Pipeline, TaskConfig};
use crate::progress::{Progress, TaskProgress};
use crate::recent_rate::RecentRate;
use crate::run_dir::RunDir;
use crate::slots::{Gone, SlotId, SlotState, Slots};
use crate::summary::{RunEnd, RunSummary, TaskSummary};
use crate::throttle::Throttle;
use daisy_core::context::{WorkerContext, CONTEXT_ENV};
use daisy_core::printable::printable;
use daisy_core::protocol::messages::{InFlightBlock, RunSnapshot, TaskSnapshot, WorkerCounts};
use daisy_core::protocol::{BlockResult, FromDriver, Hello, Role, ToDriver, Welcome, WireBlock};
use daisy_core::{BlockId, BlockOutcome, Scheduler, TaskIdx};
use launchers::WorkerRequest;
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long past its task's `timeout` a block may be held before the
/// driver takes it back (the worker's own timeout, its SIGTERM grace and
/// the report should all fit in it).
const RECLAIM_MARGIN: Duration = Duration::from_secs(10);

/// Refused connections logged one by one per window; more are counted.
const REFUSALS_WINDOW: Duration = Duration::from_secs(10);
const REFUSALS_TOLD_PER_WINDOW: u32 = 20;

/// Block ids a refusal names; it counts the rest.
const IDS_NAMED: usize = 5;

/// The most blocks handed out in one `Blocks` message.
const MAX_BATCH: u32 = 1024;

/// A welcomed connection as the run loop sees it.
struct Conn {
    outbox: Outbox,
    role: Role,
    task: TaskIdx,
    slot: SlotId,
    /// Spatial ids of the blocks this worker holds, and since when.
    held: HashMap<u64, Instant>,
    /// Set by `AcquireBlocks` until blocks (or Shutdown) are sent.
    wants: Option<u32>,
    /// Since when the worker has waited for blocks, if it does.
    idle_since: Option<Instant>,
    /// Why the worker drains, once it said so, and whether because its
    /// job's walltime runs out.
    draining: Option<(String, bool)>,
    /// The worker has reported a block's result.
    reported: bool,
    /// Why the worker cannot run its task's code, if it said so.
    cannot_serve: Option<String>,
}

impl Conn {
    /// A connection that is ending, or whose peer does not read, sends
    /// nothing more; its Closed event follows and cleans up.
    fn send(&self, message: FromDriver) {
        self.outbox.send(message);
    }
}

pub struct Driver {
    pipeline: Arc<Pipeline>,
    run_dir: RunDir,
    options: RunOptions,
    scheduler: Scheduler,
    recorder: OutcomeRecorder,
    budget: Budget,
    slots: Slots,
    launcher: LauncherThread,
    context: WorkerContext,
    conns: HashMap<ConnId, Conn>,
    /// Connections whose acquire waits for blocks (`wants` is set), so
    /// that serving them after a release costs nothing when there are
    /// none, however many workers are connected.
    parked: BTreeSet<ConnId>,
    progress: Progress,
    started: Instant,
    /// Why each abandoned task was abandoned.
    abandon_reasons: Vec<Option<String>>,
    /// Per task, why a worker we started could not run its code: no more
    /// are started for it (each would fail the same way), and it is
    /// abandoned once no worker of it is left.
    unservable: Vec<Option<String>>,
    /// The last error of a block of each task, for the summary.
    last_errors: Vec<Option<String>>,
    /// Seconds into the run at which each task was done.
    done_at: Vec<Option<f64>>,
    /// The longest a block of each task has run so far, as workers report:
    /// new workers get it for their walltime estimate.
    longest_block_s: Vec<Option<f64>>,
    /// Blocks completed per second recently, per task (live status).
    rates: Vec<RecentRate>,
    /// An error that ends the run (a done marker that cannot be written).
    fatal: Option<anyhow::Error>,
    /// Connections turned away at the handshake, for logging.
    refusals: Throttle,
}

impl Driver {
    pub fn open(
        pipeline: Arc<Pipeline>,
        run_dir: &RunDir,
        options: &RunOptions,
        launcher: LauncherThread,
        context: WorkerContext,
    ) -> anyhow::Result<Self> {
        let retry_failed = options.only_blocks.is_some();
        let recorder = OutcomeRecorder::open(&pipeline, run_dir, "distributed", retry_failed)?;
        let scheduler = crate::retry::scheduler(&pipeline, options.only_blocks.as_ref());
        let totals: Vec<(&str, u64)> = (scheduler.graph().task_indices())
            .map(|t| {
                (
                    pipeline.tasks[t.index()].spec.id.as_str(),
                    scheduler.counters(t).total,
                )
            })
            .collect();
        Ok(Self {
            progress: Progress::new(&totals, options.status_every),
            scheduler,
            budget: Budget::new(pipeline.resources.clone()),
            slots: Slots::new(pipeline.tasks.len()),
            done_at: vec![None; pipeline.tasks.len()],
            longest_block_s: vec![None; pipeline.tasks.len()],
            rates: vec![RecentRate::new(Instant::now()); pipeline.tasks.len()],
            abandon_reasons: vec![None; pipeline.tasks.len()],
            unservable: vec![None; pipeline.tasks.len()],
            last_errors: vec![None; pipeline.tasks.len()],
            run_dir: run_dir.clone(),
            options: options.clone(),
            conns: HashMap::new(),
            parked: BTreeSet::new(),
            started: Instant::now(),
            fatal: None,
            recorder,
            refusals: Throttle::new(REFUSALS_WINDOW, REFUSALS_TOLD_PER_WINDOW),
            launcher,
            context,
            pipeline,
        })
    }

    fn config(&self, task: TaskIdx) -> &TaskConfig {
        &self.pipeline.tasks[task.index()]
    }

    fn task_id(&self, task: TaskIdx) -> &str {
        &self.pipeline.tasks[task.index()].spec.id
    }

    fn record(&mut self, event: &Event) {
        self.recorder.record(event);
    }

    /// Prints where the driver listens and how to start workers by hand.
    pub fn announce(&mut self) {
        println!(
            "daisy-driver: serving {:?} on {}",
            self.pipeline.name,
            self.context.addresses.join(", ")
        );
        let lines: Vec<String> = self
            .pipeline
            .tasks
            .iter()
            .map(|t| self.hand_command(t))
            .collect();
        let _ = std::fs::write(self.run_dir.worker_commands(), lines.join("\n") + "\n");
        for task in self.pipeline.tasks.iter().filter(|t| t.max_workers == 0) {
            println!(
                "task {:?} takes workers started by hand: {}",
                task.spec.id,
                self.hand_command(task)
            );
        }
    }

    /// The worker program launched workers of `task` run (a Python task's
    /// own), a path made absolute, so the line works as printed
    /// (daisy-worker need not be on PATH).
    fn hand_command(&self, task: &TaskConfig) -> String {
        let absolute = |path: &std::path::Path| {
            std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
        };
        let (program, args) = launch::task_worker_program(
            task,
            &self.options.worker_program,
            &self.options.worker_args,
        );
        // A bare name (`python3`) is looked up on PATH, as the launcher does.
        let program = match program.components().count() {
            1 => program.to_path_buf(),
            _ => absolute(program),
        };
        let context = absolute(&self.run_dir.context_file());
        let task_id = task.spec.id.as_str();
        let args = args.iter().map(String::as_str);
        std::iter::once(program.to_string_lossy().as_ref())
            .chain(args)
            .chain([
                "--context-file",
                &context.to_string_lossy(),
                "--task",
                task_id,
            ])
            .map(launchers::shell_quote)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `Some` once the run is over.
    pub fn end(&self) -> Option<RunEnd> {
        if self.fatal.is_some() {
            return Some(RunEnd::Interrupted);
        }
        if self.scheduler.is_done() {
            return Some(RunEnd::Finished);
        }
        (self.scheduler.is_stalled()
            && self.conns.values().all(|c| c.held.is_empty())
            && self.nothing_to_start())
        .then_some(RunEnd::Stalled)
    }

    fn nothing_to_start(&self) -> bool {
        self.scheduler
            .graph()
            .task_indices()
            .all(|t| self.scheduler.counters(t).ready == 0)
    }

    pub fn has_connections(&self) -> bool {
        !self.conns.is_empty()
    }

    pub fn on_conn_event(&mut self, event: ConnEvent) {
        match event {
            ConnEvent::Hello {
                conn,
                hello,
                outbox,
                reply,
            } => self.on_hello(conn, hello, outbox, reply),
            ConnEvent::Message { conn, message } => self.on_message(conn, message),
            ConnEvent::Closed { conn, clean, why } => self.on_closed(conn, clean, &why),
            ConnEvent::Refused { peer, reason } => self.on_refused(peer, &reason),
        }
    }

    /// A peer was turned away: logged and recorded, the first few of each
    /// window one by one, the rest as a count (a flood of connections
    /// must not fill the disk).
    fn on_refused(&mut self, peer: SocketAddr, reason: &str) {
        if !self.refusals.admit(Instant::now()) {
            return;
        }
        tracing::warn!(%peer, "refused a connection: {reason}");
        self.record(&Event::ConnectionRefused {
            peer: peer.to_string().into(),
            reason: reason.into(),
        });
    }

    fn say_unsaid_refusals(&mut self) {
        let Some(count) = self.refusals.take_unsaid(Instant::now()) else {
            return;
        };
        let seconds = self.refusals.window().as_secs_f64();
        tracing::warn!("refused {count} more connections in the last {seconds} s");
        self.record(&Event::ConnectionsRefused { count, seconds });
    }

    /// Answers a Hello; a refusal is recorded when the connection reports
    /// it (`ConnEvent::Refused`), like every other refusal.
    fn on_hello(
        &mut self,
        conn: ConnId,
        hello: Hello,
        outbox: Outbox,
        reply: oneshot::Sender<Result<Welcome, String>>,
    ) {
        let answer = match hello.role {
            Role::Observer => Ok(self.welcome_observer(conn, outbox)),
            Role::Worker => self.welcome_worker(conn, &hello, outbox),
        };
        let _ = reply.send(answer);
    }

    /// A worker of `task` (none for an observer) is welcomed with its code.
    fn welcome(&self, worker_id: u64, task: Option<TaskIdx>) -> Welcome {
        Welcome {
            worker_id,
            heartbeat_interval_s: self.options.heartbeat_interval.as_secs_f64(),
            heartbeat_misses: self.options.heartbeat_misses,
            code: task.map(|task| self.config(task).task_code()),
            longest_block_s: task.and_then(|task| self.longest_block_s[task.index()]),
        }
    }

    fn welcome_observer(&mut self, conn: ConnId, outbox: Outbox) -> Welcome {
        let observer = Conn {
            outbox,
            role: Role::Observer,
            task: TaskIdx(0),
            slot: 0,
            held: HashMap::new(),
            wants: None,
            idle_since: None,
            draining: None,
            reported: false,
            cannot_serve: None,
        };
        self.conns.insert(conn, observer);
        self.welcome(0, None)
    }

    fn welcome_worker(
        &mut self,
        conn: ConnId,
        hello: &Hello,
        outbox: Outbox,
    ) -> Result<Welcome, String> {
        let task_id = hello.task_id.as_deref().unwrap_or_default();
        let task = self.scheduler.graph().task_index(task_id).ok_or_else(|| {
            let known: Vec<&str> = self
                .pipeline
                .tasks
                .iter()
                .map(|t| t.spec.id.as_str())
                .collect();
            format!(
                "unknown task {task_id:?}; this run has {}",
                known.join(", ")
            )
        })?;
        let requeued = self.slots.requeued(hello.worker_id, task).is_some();
        let requires = &self.pipeline.tasks[task.index()].requires;
        if requeued && !self.budget.try_allocate(requires) {
            return Err(format!(
                "worker {} came back after its job was requeued, but its share of the \
                 budget went to another worker meanwhile",
                hello.worker_id.unwrap_or_default()
            ));
        }
        let slot = self.slots.connect(hello.worker_id, task);
        let by_hand = !self.slots.get(slot).is_some_and(|s| s.launched);
        self.record(&Event::WorkerConnected {
            task: task_id.into(),
            worker_id: slot,
            host: printable(&hello.host),
            pid: hello.pid,
            by_hand,
            requeued,
        });
        let worker = Conn {
            outbox,
            role: Role::Worker,
            task,
            slot,
            held: HashMap::new(),
            wants: None,
            idle_since: None,
            draining: None,
            reported: false,
            cannot_serve: None,
        };
        self.conns.insert(conn, worker);
        Ok(self.welcome(slot, Some(task)))
    }

    fn on_message(&mut self, conn: ConnId, message: ToDriver) {
        match message {
            ToDriver::AcquireBlocks { max } => self.on_acquire(conn, max),
            ToDriver::ReleaseBlocks { results } => self.on_release(conn, results),
            ToDriver::Draining {
                reason,
                out_of_time,
            } => self.on_draining(conn, &printable(&reason), out_of_time),
            ToDriver::ReturnBlocks { block_ids, reason } => {
                self.on_return(conn, &block_ids, &printable(&reason))
            }
            ToDriver::CannotServe { reason } => {
                self.on_cannot_serve(conn, printable(&reason).into_owned())
            }
            ToDriver::GetSnapshot => self.on_snapshot_request(conn),
            ToDriver::Hello(_) | ToDriver::Heartbeat => {}
        }
    }

    /// A worker cannot run its task's code. If we started it, the next
    /// one would fail the same way: no more are started for the task.
    fn on_cannot_serve(&mut self, conn: ConnId, reason: String) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let task = self.pipeline.tasks[c.task.index()].spec.id.as_str();
        tracing::warn!(
            task,
            worker_id = c.slot,
            "the worker cannot serve: {reason}"
        );
        c.cannot_serve = Some(reason.clone());
        let launched = self.slots.get(c.slot).is_some_and(|s| s.launched);
        let unservable = &mut self.unservable[c.task.index()];
        if launched && unservable.is_none() {
            *unservable = Some(reason);
        }
    }

    /// Refuses a request with a reason; the connection stays open.
    fn refuse(&mut self, conn: ConnId, reason: String) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        c.send(FromDriver::Error {
            reason: reason.clone(),
        });
        let (task, worker_id) = (c.task, c.slot);
        let task = self.task_id(task).to_string();
        tracing::warn!(task, worker_id, "refused a request: {reason}");
        self.record(&Event::RequestRefused {
            task: task.as_str().into(),
            worker_id,
            reason: reason.as_str().into(),
        });
    }

    fn on_acquire(&mut self, conn: ConnId, max: u32) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.role != Role::Worker || max == 0 {
            let reason = if max == 0 {
                "acquire_blocks needs max >= 1"
            } else {
                "observers take no blocks"
            };
            return self.refuse(conn, reason.to_string());
        }
        c.wants = Some(max.min(MAX_BATCH));
        self.serve(conn);
    }

    /// Answers a worker's pending acquire if blocks are ready, or tells it
    /// to stop if its task will have none for it; otherwise it stays parked.
    fn serve(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (Some(max), task) = (c.wants, c.task) else {
            return;
        };
        let launched = self.slots.get(c.slot).is_some_and(|s| s.launched);
        if let Some(reason) = self.reason_to_stop(task, c.draining.is_some(), launched) {
            let c = self.conns.get_mut(&conn).expect("checked above");
            c.wants = None;
            return c.send(FromDriver::Shutdown { reason });
        }
        let blocks = self.take_blocks(task, max);
        let c = self.conns.get_mut(&conn).expect("checked above");
        let now = Instant::now();
        if blocks.is_empty() {
            c.idle_since.get_or_insert(now);
            self.parked.insert(conn);
            return;
        }
        c.wants = None;
        c.idle_since = None;
        c.held.extend(blocks.iter().map(|b| (b.block_id, now)));
        c.send(FromDriver::Blocks { blocks });
    }

    /// Why a worker asking for blocks should stop instead. An idle launched
    /// worker of a task with nothing left to hand out frees its budget
    /// share (a new one is started if a block comes back); a worker started
    /// by hand stays until the task is done, since nobody would restart it.
    fn reason_to_stop(&self, task: TaskIdx, draining: bool, launched: bool) -> Option<String> {
        let c = self.scheduler.counters(task);
        if draining {
            Some("the worker is draining".to_string())
        } else if self.scheduler.is_abandoned(task) {
            Some("the task was abandoned".to_string())
        } else if c.is_done() {
            Some("the task is done".to_string())
        } else if launched && c.ready == 0 && c.pending() == 0 {
            Some("the task has no more blocks to hand out".to_string())
        } else {
            None
        }
    }

    /// Up to `max` ready blocks of `task`, as they go on the wire.
    fn take_blocks(&mut self, task: TaskIdx, max: u32) -> Vec<WireBlock> {
        let recorder = &self.recorder;
        let task_id = &self.pipeline.tasks[task.index()].spec.id;
        let scheduler = &mut self.scheduler;
        std::iter::from_fn(|| scheduler.acquire(task, &mut |b| recorder.is_done(b)))
            .take(max as usize)
            .map(|block| WireBlock::new(task_id, &block))
            .collect()
    }

    /// Serves parked workers of every task (after anything that may have
    /// made blocks ready or ended a task); those still waiting park again.
    fn serve_parked(&mut self) {
        for conn in std::mem::take(&mut self.parked) {
            self.serve(conn);
        }
        self.note_finished_tasks();
    }

    fn on_release(&mut self, conn: ConnId, results: Vec<BlockResult>) {
        let mut not_held = Vec::new();
        for result in results {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            if c.held.remove(&result.block_id).is_none() {
                not_held.push(result.block_id);
                continue;
            }
            c.reported = true;
            if c.held.is_empty() && c.idle_since.is_some() {
                // It asked ahead while it ran blocks: idle from now on.
                c.idle_since = Some(Instant::now());
            }
            let (task, worker_id) = (c.task, c.slot);
            self.on_result(task, worker_id, result);
        }
        if !not_held.is_empty() {
            let reason = format!(
                "{} not held by this worker (released twice, or never handed out)",
                name_blocks(&not_held)
            );
            self.refuse(conn, reason);
        }
        self.serve_parked();
    }

    /// Records one block's result reported by `worker_id`.
    fn on_result(&mut self, task: TaskIdx, worker_id: u64, result: BlockResult) {
        let id = BlockId {
            task,
            spatial: result.block_id,
        };
        if let Some(seconds) = result.seconds.filter(|s| s.is_finite()) {
            let longest = &mut self.longest_block_s[id.task.index()];
            *longest = Some(longest.map_or(seconds, |l| l.max(seconds)));
        }
        match result.ok {
            true => self.record_success(id, worker_id, result.seconds),
            false => self.record_failure(
                id,
                worker_id,
                result.error.as_deref().unwrap_or("no reason given"),
                result.seconds,
            ),
        }
    }

    /// Marks the block done, then tells the scheduler: a block reported
    /// done is never lost, even if the driver dies right after. Its event
    /// is buffered (one line per block); the tick writes them.
    fn record_success(&mut self, id: BlockId, worker_id: u64, seconds: Option<f64>) {
        let Some(block) = self.scheduler.block_in_flight(id).copied() else {
            return;
        };
        let attempt = Attempt {
            worker_id: Some(worker_id),
            seconds,
        };
        if let Err(error) = self.recorder.done(&block, attempt) {
            self.fatal = Some(
                anyhow::Error::new(error)
                    .context(format!("recording block {} as done", id.spatial)),
            );
            return;
        }
        self.scheduler.release(id, BlockOutcome::Success);
        self.rates[id.task.index()].record(Instant::now());
    }

    /// Records a failed attempt; `error` (a user process's stderr, as a
    /// worker sent it) is escaped before it reaches a log, the events or
    /// the terminal.
    fn record_failure(&mut self, id: BlockId, worker_id: u64, error: &str, seconds: Option<f64>) {
        let Some(block) = self.scheduler.block_in_flight(id).copied() else {
            return;
        };
        let released = self
            .scheduler
            .release_at(id, BlockOutcome::Failure, Instant::now());
        let error = printable(error);
        self.last_errors[id.task.index()] = Some(format!("block {}: {error}", id.spatial));
        let attempt = Attempt {
            worker_id: Some(worker_id),
            seconds,
        };
        self.recorder.failed(&block, attempt, &error, &released);
    }

    fn on_draining(&mut self, conn: ConnId, reason: &str, out_of_time: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        tracing::info!(worker_id = c.slot, "worker is draining: {reason}");
        c.draining = Some((reason.to_string(), out_of_time));
        let (task, worker_id) = (c.task, c.slot);
        let task = self.task_id(task).to_string();
        self.record(&Event::WorkerDraining {
            task: task.as_str().into(),
            worker_id,
            why: reason.into(),
        });
        self.serve(conn);
    }

    /// Blocks handed back unfinished go back to the queue without using
    /// a retry: the worker is leaving, the blocks did nothing wrong.
    fn on_return(&mut self, conn: ConnId, block_ids: &[u64], reason: &str) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let (task, worker_id) = (c.task, c.slot);
        let (held, not_held): (Vec<u64>, Vec<u64>) =
            block_ids.iter().partition(|id| c.held.remove(id).is_some());
        for &spatial in &held {
            let id = BlockId { task, spatial };
            self.scheduler.release(id, BlockOutcome::Returned);
        }
        if !held.is_empty() {
            let task = self.task_id(task).to_string();
            self.record(&Event::BlocksReturned {
                task: task.as_str().into(),
                worker_id,
                block_ids: held.as_slice().into(),
                why: reason.into(),
            });
        }
        if !not_held.is_empty() {
            let them = if not_held.len() == 1 { "it" } else { "they" };
            let reason = format!(
                "{} not held by this worker, so {them} cannot be returned",
                name_blocks(&not_held)
            );
            self.refuse(conn, reason);
        }
        self.serve_parked();
    }

    fn on_snapshot_request(&mut self, conn: ConnId) {
        let snapshot = self.snapshot();
        if let Some(c) = self.conns.get(&conn) {
            c.send(FromDriver::Snapshot(snapshot));
        }
    }

    fn snapshot(&self) -> RunSnapshot {
        let now = Instant::now();
        let tasks = self
            .scheduler
            .graph()
            .task_indices()
            .map(|task| self.task_snapshot(task, now))
            .collect();
        RunSnapshot {
            pipeline: self.pipeline.name.clone(),
            tasks,
            seconds: now.duration_since(self.started).as_secs_f64(),
        }
    }

    fn task_snapshot(&self, task: TaskIdx, now: Instant) -> TaskSnapshot {
        let counters = self.scheduler.counters(task);
        let blocks_per_s = self.rates[task.index()].per_second(now);
        TaskSnapshot {
            task_id: self.task_id(task).to_string(),
            counters,
            workers_connected: self.workers_connected(task),
            workers: self.worker_counts(task),
            in_flight: self.in_flight_blocks(task, now),
            blocks_per_s,
            eta_s: (blocks_per_s > 0.0).then(|| counters.unresolved() as f64 / blocks_per_s),
        }
    }

    fn worker_counts(&self, task: TaskIdx) -> WorkerCounts {
        let mut counts = WorkerCounts::default();
        for slot in self.slots.all().filter(|s| s.task == task) {
            match &slot.state {
                SlotState::Submitted => counts.submitted += 1,
                SlotState::Connected => counts.connected += 1,
                SlotState::Gone(Gone::Lost(_)) => counts.lost += 1,
                SlotState::Gone(Gone::FailedStart(_)) => counts.failed_starts += 1,
                SlotState::Gone(Gone::Clean) => {}
            }
        }
        counts.idle = self
            .conns
            .values()
            .filter(|c| c.role == Role::Worker && c.task == task && c.held.is_empty())
            .count() as u32;
        counts
    }

    /// The blocks of `task` that workers hold, oldest first.
    fn in_flight_blocks(&self, task: TaskIdx, now: Instant) -> Vec<InFlightBlock> {
        let mut blocks: Vec<InFlightBlock> = self
            .conns
            .values()
            .filter(|c| c.role == Role::Worker && c.task == task)
            .flat_map(|c| {
                c.held.iter().map(|(&block_id, &since)| InFlightBlock {
                    block_id,
                    worker_id: c.slot,
                    seconds: now.duration_since(since).as_secs_f64(),
                })
            })
            .collect();
        blocks.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        blocks
    }

    fn workers_connected(&self, task: TaskIdx) -> u32 {
        self.conns
            .values()
            .filter(|c| c.role == Role::Worker && c.task == task)
            .count() as u32
    }

    /// A connection ended: its blocks go back to the queue (not counted as
    /// failures), its slot ends, its budget share returns.
    fn on_closed(&mut self, conn: ConnId, clean: bool, why: &str) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.parked.remove(&conn);
        if c.role != Role::Worker {
            return;
        }
        for spatial in c.held.keys() {
            self.scheduler.release(
                BlockId {
                    task: c.task,
                    spatial: *spatial,
                },
                BlockOutcome::Returned,
            );
        }
        // A draining worker leaving is no failure, even if its job's end
        // killed it before it said goodbye (its blocks were returned above),
        // unless its walltime ran out before it reported a single block:
        // jobs whose walltime is too short for a block must end in
        // abandonment, not in resubmissions forever. (A signal, such as a
        // preemption or requeue during a first long block, is no such
        // case.)
        let fruitless = c
            .draining
            .as_ref()
            .filter(|(_, out_of_time)| *out_of_time && !c.reported)
            .map(|(reason, _)| format!("drained before it reported a block ({reason})"));
        let failure = c.cannot_serve.clone().or(fruitless);
        let clean = (clean || c.draining.is_some()) && failure.is_none();
        let why = failure.as_deref().unwrap_or(why);
        let how = if clean {
            Gone::Clean
        } else {
            Gone::Lost(why.to_string())
        };
        self.end_slot(c.slot, how);
        let task = self.task_id(c.task).to_string();
        self.record(&Event::WorkerGone {
            task: task.as_str().into(),
            worker_id: c.slot,
            clean,
            why: why.into(),
        });
        self.serve_parked();
    }

    /// Ends a slot: its budget share returns, and a lost launched worker's
    /// job is cancelled (it may still be running, hung).
    fn end_slot(&mut self, slot: SlotId, how: Gone) {
        let lost = how.is_unclean();
        let Some(ended) = self.slots.end(slot, how) else {
            return;
        };
        if !ended.launched {
            return;
        }
        let task = ended.task;
        self.budget
            .release(&self.pipeline.tasks[task.index()].requires);
        if lost {
            self.launcher.cancel(vec![slot]);
        }
    }

    pub fn on_tick(&mut self) {
        self.reclaim_overdue_blocks();
        // Retries that are due first: a worker that waited for one is
        // served, not let go for idleness.
        self.promote_due_retries();
        self.release_idle_workers();
        self.abandon_hopeless_tasks();
        self.start_workers();
        self.note_finished_tasks();
        self.update_progress();
        self.say_unsaid_refusals();
        self.recorder.flush();
    }

    /// Launched workers that waited for blocks longer than their task's
    /// `idle_timeout` are told to stop, freeing their budget share; a
    /// clean exit, and a new worker is started if blocks come.
    fn release_idle_workers(&mut self) {
        let idle: Vec<ConnId> = self
            .parked
            .iter()
            .copied()
            .filter(|conn| {
                let c = &self.conns[conn];
                let limit = self.pipeline.tasks[c.task.index()].idle_timeout;
                let launched = self.slots.get(c.slot).is_some_and(|s| s.launched);
                let idle_for = c.idle_since.map(|since| since.elapsed());
                // A worker may ask ahead while it runs blocks: that is
                // no idleness.
                launched
                    && c.held.is_empty()
                    && idle_for
                        .zip(limit)
                        .is_some_and(|(idle, limit)| idle > limit)
            })
            .collect();
        for conn in idle {
            self.parked.remove(&conn);
            let c = self.conns.get_mut(&conn).expect("parked connections exist");
            c.wants = None;
            let (task, worker_id) = (c.task, c.slot);
            let limit = self.pipeline.tasks[task.index()].idle_timeout;
            let reason = format!(
                "no block for it within the task's idle_timeout of {:?}",
                limit.unwrap_or_default()
            );
            c.send(FromDriver::Shutdown {
                reason: reason.clone(),
            });
            let task = self.task_id(task).to_string();
            self.record(&Event::WorkerReleased {
                task: task.as_str().into(),
                worker_id,
                why: reason.as_str().into(),
            });
        }
    }

    /// Blocks held past their task's `timeout` plus a margin are taken
    /// back and count as failed attempts (retried as usual): the worker's
    /// own timeout should have stopped them, so the worker is stuck or its
    /// report got lost. A late release is then refused as "not held".
    fn reclaim_overdue_blocks(&mut self) {
        let margin = RECLAIM_MARGIN.max(self.options.heartbeat_interval * 2);
        let mut overdue = Vec::new();
        for c in self.conns.values_mut() {
            let Some(timeout) = self.pipeline.tasks[c.task.index()].timeout else {
                continue;
            };
            let late: Vec<u64> = c
                .held
                .iter()
                .filter(|(_, since)| since.elapsed() > timeout + margin)
                .map(|(id, _)| *id)
                .collect();
            for spatial in late {
                c.held.remove(&spatial);
                overdue.push((
                    BlockId {
                        task: c.task,
                        spatial,
                    },
                    c.slot,
                    timeout,
                ));
            }
        }
        for (id, worker_id, timeout) in overdue {
            let error = format!("reclaimed from worker {worker_id}: held past the task's timeout of {timeout:?} plus {margin:?}");
            tracing::warn!(block = id.spatial, "{error}");
            self.record_failure(id, worker_id, &error, None);
        }
    }

    /// Retries whose backoff delay ran out become ready, for parked
    /// workers first (a worker waiting for them is kept, not shut down:
    /// they count as pending). The tick's period is the delay's precision.
    fn promote_due_retries(&mut self) {
        if self.scheduler.promote_due(Instant::now()) > 0 {
            self.serve_parked();
        }
    }

    /// A job that ended without its worker ever connecting is a failed
    /// start; other ends are the connection's business.
    fn on_job_ended(&mut self, slot: SlotId, end: &str) {
        let Some(ended) = self.slots.job_ended(slot, end.to_string()) else {
            return;
        };
        let task = ended.task;
        self.budget
            .release(&self.pipeline.tasks[task.index()].requires);
        let task = self.task_id(task).to_string();
        let error = format!("the worker's job ended before it connected: {end}");
        tracing::warn!(task, worker_id = slot, "{error}");
        self.record(&Event::WorkerStartFailed {
            task: task.as_str().into(),
            worker_id: slot,
            error: error.as_str().into(),
        });
    }

    /// Abandons tasks that no worker is left for and none will be started
    /// for: their restarts are used up, or a worker could not run their code.
    fn abandon_hopeless_tasks(&mut self) {
        let hopeless: Vec<(TaskIdx, String)> = self
            .scheduler
            .graph()
            .task_indices()
            .filter(|&t| {
                !self.scheduler.is_abandoned(t)
                    && !self.scheduler.counters(t).is_done()
                    && self.slots.live(t) == 0
            })
            .filter_map(|t| Some((t, self.why_no_workers(t)?)))
            .collect();
        for (task, why) in hopeless {
            self.abandon(task, &why);
        }
    }

    /// Why no more workers are started for `task`, if none are.
    fn why_no_workers(&self, task: TaskIdx) -> Option<String> {
        if let Some(reason) = &self.unservable[task.index()] {
            return Some(format!("a worker could not serve it: {reason}"));
        }
        let exits = self.slots.unclean_exits(task);
        if exits <= self.config(task).max_worker_restarts {
            return None;
        }
        Some(match self.slots.last_unclean_exit(task) {
            Some(last) => format!("{exits} unclean worker exits, the last: {last}"),
            None => format!("{exits} unclean worker exits"),
        })
    }

    /// Gives up on a task and its downstream tasks, saying why.
    fn abandon(&mut self, task: TaskIdx, why: &str) {
        for abandoned in self.scheduler.abandon(task) {
            let unclean_exits = self.slots.unclean_exits(abandoned);
            let id = self.task_id(abandoned).to_string();
            tracing::error!(task = id, "abandoned: {why}");
            self.abandon_reasons[abandoned.index()] = Some(why.to_string());
            self.record(&Event::TaskAbandoned {
                task: id.as_str().into(),
                unclean_exits,
                why: why.into(),
            });
        }
        self.serve_parked();
    }

    /// Starts the workers each task wants, as one submission per task (one
    /// job array on a cluster); the slots hold their budget share from now.
    fn start_workers(&mut self) {
        for task in self.scheduler.graph().task_indices().collect::<Vec<_>>() {
            let wanted = self.workers_wanted(task);
            let requires = &self.pipeline.tasks[task.index()].requires;
            let granted = self.budget.allocate_up_to(requires, wanted);
            let requests: Vec<WorkerRequest> = (0..granted)
                .map(|_| {
                    let slot = self.slots.next_id();
                    self.slots.submitting(slot, task);
                    self.worker_request(task, slot)
                })
                .collect();
            if !requests.is_empty() {
                self.launcher.start(requests);
            }
        }
    }

    /// How many more workers a task wants: its [`worker_demand`] beyond its
    /// live workers, none once its restart budget is used up. Blocks done
    /// in an earlier run are skipped first, so a resumed run starts no
    /// worker for work that is done.
    fn workers_wanted(&mut self, task: TaskIdx) -> u32 {
        if self.scheduler.is_abandoned(task) || self.why_no_workers(task).is_some() {
            return 0;
        }
        let config = &self.pipeline.tasks[task.index()];
        let recorder = &self.recorder;
        if !self
            .scheduler
            .has_runnable(task, &mut |b| recorder.is_done(b))
        {
            return 0;
        }
        let c = self.scheduler.counters(task);
        let runnable = c.ready + c.processing;
        let runnable = self
            .scheduler
            .most_to_run(task)
            .map_or(runnable, |most| runnable.min(most));
        worker_demand(runnable, config.max_workers).saturating_sub(self.slots.live(task))
    }

    pub fn on_launcher_event(&mut self, event: LauncherEvent) {
        match event {
            LauncherEvent::Started(results) => {
                for (slot, result) in results {
                    self.on_started(slot, result);
                }
            }
            LauncherEvent::Ended(ended) => {
                for (slot, _job, end) in ended {
                    self.on_job_ended(slot, &end.to_string());
                }
            }
        }
        self.serve_parked();
    }

    fn on_started(
        &mut self,
        slot: SlotId,
        result: Result<launchers::JobId, launchers::LaunchError>,
    ) {
        let Some(task) = self.slots.get(slot).map(|s| s.task) else {
            return;
        };
        let task_id = self.task_id(task).to_string();
        match result {
            Ok(job) => {
                self.slots.submitted(slot, job.0.clone());
                self.record(&Event::WorkerSubmitted {
                    task: task_id.as_str().into(),
                    worker_id: slot,
                    job: job.0.as_str().into(),
                });
            }
            Err(error) => {
                let permanent = matches!(
                    error,
                    launchers::LaunchError::Submit {
                        permanent: true,
                        ..
                    }
                );
                let message = format!("{:#}", anyhow::Error::new(error));
                tracing::warn!(task = task_id, "cannot start a worker: {message}");
                self.end_slot(slot, Gone::FailedStart(message.clone()));
                self.record(&Event::WorkerStartFailed {
                    task: task_id.as_str().into(),
                    worker_id: slot,
                    error: message.as_str().into(),
                });
                if permanent {
                    self.abandon(task, &message);
                }
            }
        }
    }

    fn worker_request(&self, task: TaskIdx, slot: SlotId) -> WorkerRequest {
        let config = self.config(task);
        let context = WorkerContext {
            task_id: Some(config.spec.id.clone()),
            worker_id: Some(slot),
            ..self.context.clone()
        };
        launch::worker_request(
            config,
            slot,
            &self.run_dir,
            &self.options.worker_program,
            &self.options.worker_args,
            vec![(CONTEXT_ENV.to_string(), context.to_json())],
        )
    }

    /// Records tasks that just got done. Runs after every release, so it
    /// reads the clock only when there is one.
    fn note_finished_tasks(&mut self) {
        for i in 0..self.done_at.len() {
            let task = TaskIdx(i as u32);
            let counters = self.scheduler.counters(task);
            if self.done_at[i].is_none() && counters.is_done() {
                self.done_at[i] = Some(self.started.elapsed().as_secs_f64());
                let id = self.task_id(task).to_string();
                self.record(&Event::TaskDone {
                    task: id.as_str().into(),
                    counters,
                });
            }
        }
    }

    fn update_progress(&mut self) {
        let pipeline = self.pipeline.clone();
        let tasks: Vec<TaskProgress> = (0..pipeline.tasks.len())
            .map(|i| {
                let task = TaskIdx(i as u32);
                let (counters, workers) =
                    (self.scheduler.counters(task), self.workers_connected(task));
                TaskProgress {
                    id: &pipeline.tasks[i].spec.id,
                    counters,
                    workers,
                }
            })
            .collect();
        self.progress.update(&tasks);
    }

    /// Tells every connection to stop.
    pub fn shutdown_all(&mut self, reason: &str) {
        self.parked.clear();
        for c in self.conns.values_mut() {
            c.wants = None;
            c.send(FromDriver::Shutdown {
                reason: reason.to_string(),
            });
        }
    }

    /// Ends launched jobs (unless told to leave them), flushes done
    /// markers, records the end. Jobs ended here were cancelled by us, so
    /// they are not failed starts.
    pub fn finish(mut self, end: RunEnd, elapsed: Duration) -> anyhow::Result<RunSummary> {
        self.launcher.finish(self.options.leave_jobs);
        self.recorder.flush_markers()?;
        self.note_finished_tasks();
        self.update_progress();
        self.progress.finish();
        let completed = end == RunEnd::Finished && self.scheduler.is_done();
        self.record(&Event::RunFinished {
            completed,
            seconds: elapsed.as_secs_f64(),
        });
        if let Some(error) = self.fatal.take() {
            return Err(error);
        }
        Ok(self.summary(end, elapsed))
    }

    fn summary(&self, end: RunEnd, elapsed: Duration) -> RunSummary {
        let tasks = self
            .scheduler
            .graph()
            .task_indices()
            .map(|t| TaskSummary {
                id: self.task_id(t).to_string(),
                counters: self.scheduler.counters(t),
                logs: self.run_dir.task_logs(self.task_id(t)),
                workers: self.slots.connected(t),
                restarts: self.slots.unclean_exits(t),
                seconds: self.done_at[t.index()].unwrap_or(elapsed.as_secs_f64()),
                abandoned: self.abandon_reasons[t.index()].clone(),
                last_error: self.last_errors[t.index()].clone(),
            })
            .collect();
        RunSummary {
            tasks,
            seconds: elapsed.as_secs_f64(),
            events: self.run_dir.events(),
            end,
        }
    }
}

/// Logs a failed write to `events.jsonl`; the run goes on without it.
/// "block 7 is", "blocks 7, 8 are", or with more than [`IDS_NAMED`] ids
/// "blocks 7, 8, 9, 10, 11 and 995 more are": a refusal's size does not
/// grow with what a peer sent.
fn name_blocks(ids: &[u64]) -> String {
    let named: Vec<String> = ids.iter().take(IDS_NAMED).map(u64::to_string).collect();
    match ids.len() {
        1 => format!("block {} is", named[0]),
        n if n <= IDS_NAMED => format!("blocks {} are", named.join(", ")),
        n => format!("blocks {} and {} more are", named.join(", "), n - IDS_NAMED),
    }
}

#[cfg(test)]
mod tests {
    use super::name_blocks;

    #[test]
    fn a_refusal_names_a_few_blocks_and_counts_the_rest() {
        assert_eq!(name_blocks(&[7]), "block 7 is");
        assert_eq!(name_blocks(&[7, 8]), "blocks 7, 8 are");
        let many: Vec<u64> = (0..1000).collect();
        assert_eq!(name_blocks(&many), "blocks 0, 1, 2, 3, 4 and 995 more are");
    }
}
