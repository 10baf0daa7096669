//! The driver's core: every rule of a distributed run as a synchronous
//! state machine, like [`Scheduler`]. An input (a peer's Hello or
//! message, a closed connection, a launcher event, a tick) comes with the
//! time it happened; what the core wants done comes out as [`Command`]s,
//! which the shell (`super::shell`) carries out in order. No sockets,
//! files, threads or clock in here, so every rule is unit tested
//! in-process with a made-up clock (`tests.rs`).
//!
//! The path of a block, by file: [`hand_out`] (a worker asks, blocks go
//! out or it parks), [`release`] (results come back and are recorded,
//! blocks are handed back), [`timers`] (overdue blocks are reclaimed,
//! idle workers let go, retries come due). The path of a worker:
//! [`staffing`] (how many each task wants, started through the launcher,
//! tasks abandoned when none is left), [`workers`] (welcomed, draining,
//! gone), its connection in [`peers`].
//! [`snapshot`] answers observers and feeds progress and the summary.

mod deaths;
mod hand_out;
mod peers;
mod release;
mod snapshot;
mod staffing;
mod timers;
mod workers;

#[cfg(test)]
mod tests;

use crate::pipeline::budget::Share;
use crate::pipeline::{Pipeline, TaskConfig};
use crate::run::budget::Budget;
use crate::run::distributed::connection::{ConnId, PeerEvent};
use crate::run::launching::thread::LauncherEvent;
use crate::run::output::summary::RunEnd;
use crate::run::recent_rate::RecentRate;
use crate::run::slots::{SlotId, Slots};
use crate::run_dir::events::Event;
use crate::run_dir::outcome_recorder::Attempt;
use crate::throttle::Throttle;
use daisy_core::id_hash::IdMap;
use daisy_core::protocol::{FromDriver, Hello, ToDriver, Welcome};
use daisy_core::scheduler::Released;
use daisy_core::{Block, BlockId, Scheduler, TaskIdx};
use peers::Peers;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Refused connections logged one by one per window; more are counted.
const REFUSALS_WINDOW: Duration = Duration::from_secs(10);
const REFUSALS_TOLD_PER_WINDOW: u32 = 20;

/// Whether a block was done before this run (its done marker says so):
/// such blocks are skipped, never handed out.
pub type DoneBefore<'a> = &'a dyn Fn(&Block) -> bool;

/// What happened, as the core learns it.
#[derive(Debug)]
pub enum Input {
    /// A peer passed the token check; answered with [`Command::Answer`].
    Hello {
        conn: ConnId,
        hello: Hello,
    },
    /// A welcomed peer's message, its connection's end, a refusal.
    Peer(PeerEvent),
    Launcher(LauncherEvent),
    /// Time passed: timers, job starts, abandonment.
    Tick,
    /// A turn of skipping blocks done before, while
    /// [`Core::is_catching_up`].
    CatchUp,
}

/// What the core wants done, in this order.
#[derive(Debug)]
pub enum Command {
    /// The answer to a Hello: a Welcome, or why the peer is refused.
    Answer {
        conn: ConnId,
        answer: Result<Welcome, String>,
    },
    /// A message for a welcomed connection (dropped if it is gone).
    Send {
        conn: ConnId,
        message: FromDriver,
    },
    /// Blocks of `task` for a welcomed connection, which now holds them
    /// (a `blocks` message, written by the shell straight from them).
    SendBlocks {
        conn: ConnId,
        task: TaskIdx,
        blocks: Vec<Block>,
    },
    /// Launch these workers of `task` (one submission: one job array).
    StartWorkers {
        task: TaskIdx,
        slots: Vec<SlotId>,
    },
    /// End the jobs of these workers (they may still run, hung).
    CancelJobs(Vec<SlotId>),
    /// These launched workers' connections ended uncleanly: their places
    /// in jobs of several workers may take new ones.
    WorkersLeft(Vec<SlotId>),
    /// Mark the block done before anything later is carried out. If
    /// that fails the run must end: what follows must not happen.
    MarkDone {
        block: BlockAt,
        attempt: Attempt,
    },
    /// Count a failed attempt the scheduler `released` as retried or
    /// failed for good; `error` is printable already. With `stderr_of`,
    /// the end of that worker's own stderr log (if the run directory has
    /// it) is added to the error: the worker died, and its last words are
    /// there.
    RecordFailure {
        block: BlockAt,
        attempt: Attempt,
        error: String,
        released: Released,
        stderr_of: Option<SlotId>,
    },
    Record(Event<'static>),
}

/// A block as commands name it: its id and its cell index in its task's
/// grid (`BlockGrid::cell_index_of`), 24 bytes where the block is 304.
/// Each command is moved a few times on its way to the shell, a `memcpy`
/// each if it is big; [`Core::block`] builds the block again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockAt {
    pub id: BlockId,
    pub cell: u64,
}

/// The settings the core's rules read.
#[derive(Debug, Clone)]
pub struct CoreSettings {
    pub heartbeat_interval: Duration,
    pub heartbeat_misses: u32,
}

/// What the core keeps per task besides the scheduler's counters.
#[derive(Debug, Clone)]
struct TaskNotes {
    /// Why the task was abandoned.
    abandoned: Option<String>,
    /// Why a worker we started could not run the task's code: no more
    /// are started for it (each would fail the same way), and it is
    /// abandoned once no worker of it is left.
    unservable: Option<String>,
    /// Launched workers that left by their own decision while it had
    /// blocks (their code ended: a worker function returned). As daisy
    /// 1.x keeps the place of a worker whose process exited with status
    /// 0, none is started in their place while another of its workers
    /// runs; once none runs, one is (see `Core::workers_wanted`).
    retired: u32,
    /// The last error of one of its blocks, for the summary.
    last_error: Option<String>,
    /// Seconds into the run at which the task was done.
    done_at: Option<f64>,
    /// The longest a block has run so far, as workers report: new
    /// workers get it for their walltime estimate.
    longest_block_s: Option<f64>,
    /// Blocks completed per second recently (live status).
    rate: RecentRate,
}

pub struct Core {
    pipeline: Arc<Pipeline>,
    settings: CoreSettings,
    scheduler: Scheduler,
    slots: Slots,
    peers: Peers,
    tasks: Vec<TaskNotes>,
    started: Instant,
    /// The time of the input being handled.
    now: Instant,
    refusals: Throttle,
    /// Blocks of workers that died in them, waiting for their job's end.
    dying: IdMap<SlotId, deaths::Dying>,
    /// Blocks whose worker died holding them among others: each goes
    /// out alone until it is released.
    suspects: HashSet<BlockId>,
    /// Attempts that failed so far, retried or not.
    failed_attempts: u64,
    commands: Vec<Command>,
}

impl Core {
    /// A run of `pipeline` whose blocks `scheduler` hands out, starting
    /// at `now`.
    pub fn new(
        pipeline: Arc<Pipeline>,
        mut scheduler: Scheduler,
        settings: CoreSettings,
        now: Instant,
    ) -> Self {
        scheduler.limit_skips_per_call(hand_out::SKIPS_PER_TURN);
        let requires = pipeline.tasks.iter().map(|t| t.requires.clone()).collect();
        let notes = TaskNotes {
            abandoned: None,
            unservable: None,
            retired: 0,
            last_error: None,
            done_at: None,
            longest_block_s: None,
            rate: RecentRate::new(now),
        };
        Self {
            slots: Slots::new(Budget::new(pipeline.resources.clone()), requires),
            tasks: vec![notes; pipeline.tasks.len()],
            scheduler,
            settings,
            peers: Peers::new(pipeline.tasks.len()),
            started: now,
            now,
            refusals: Throttle::new(REFUSALS_WINDOW, REFUSALS_TOLD_PER_WINDOW),
            dying: IdMap::default(),
            suspects: HashSet::new(),
            failed_attempts: 0,
            commands: Vec::new(),
            pipeline,
        }
    }

    /// Handles one input at `now`; the commands it leads to are taken
    /// with [`Self::take_commands`].
    pub fn handle(&mut self, now: Instant, input: Input, done_before: DoneBefore) {
        self.now = now;
        match input {
            Input::Hello { conn, hello } => self.on_hello(conn, &hello),
            Input::Peer(PeerEvent::Message { conn, message }) => {
                self.on_message(conn, message, done_before)
            }
            Input::Peer(PeerEvent::Closed { conn, ending, why }) => {
                self.on_closed(conn, ending, &why, done_before)
            }
            Input::Peer(PeerEvent::Refused { peer, reason }) => self.on_refused(peer, &reason),
            Input::Launcher(event) => self.on_launcher_event(event, done_before),
            Input::Tick => self.on_tick(done_before),
            Input::CatchUp => self.on_catch_up(done_before),
        }
    }

    /// The commands of the inputs handled since the last call, in order,
    /// swapped into `out` (which must be empty): the two buffers take
    /// turns, so handing commands over allocates nothing.
    pub fn take_commands(&mut self, out: &mut Vec<Command>) {
        debug_assert!(out.is_empty());
        std::mem::swap(&mut self.commands, out);
    }

    /// `Some` once the run is over.
    pub fn end(&self) -> Option<RunEnd> {
        if self.scheduler.is_done() {
            return Some(RunEnd::Finished);
        }
        (self.scheduler.is_stalled() && !self.peers.hold_blocks() && self.nothing_to_start())
            .then_some(RunEnd::Stalled)
    }

    fn nothing_to_start(&self) -> bool {
        self.scheduler
            .graph()
            .task_indices()
            .all(|t| self.scheduler.counters(t).ready == 0)
    }

    pub fn has_connections(&self) -> bool {
        !self.peers.is_empty()
    }

    /// Tells every connection to stop.
    pub fn shutdown_all(&mut self, reason: &str) {
        for conn in self.peers.stop_all() {
            self.send(conn, shutdown(reason));
        }
    }

    /// The budget's ids a launched worker holds.
    pub fn share_of(&self, slot: SlotId) -> Share {
        self.slots
            .get(slot)
            .map(|s| s.share.clone())
            .unwrap_or_default()
    }

    /// The block a command names.
    pub fn block(&self, at: BlockAt) -> Block {
        self.scheduler.block_at(at.id.task, at.cell)
    }

    fn config(&self, task: TaskIdx) -> &TaskConfig {
        &self.pipeline.tasks[task.index()]
    }

    fn task_id(&self, task: TaskIdx) -> &str {
        &self.pipeline.tasks[task.index()].spec.id
    }

    fn send(&mut self, conn: ConnId, message: FromDriver) {
        self.commands.push(Command::Send { conn, message });
    }

    fn record(&mut self, event: Event<'static>) {
        self.commands.push(Command::Record(event));
    }

    /// Refuses a request with a reason; the connection stays open.
    fn refuse(&mut self, conn: ConnId, reason: String) {
        self.send(
            conn,
            FromDriver::Error {
                reason: reason.clone(),
            },
        );
        let Some(worker) = self.peers.worker(conn) else {
            return tracing::warn!("refused an observer's request: {reason}");
        };
        let (task, slot) = (worker.task, worker.slot);
        let task = self.task_id(task).to_string();
        tracing::warn!(task, worker_id = slot.0, "refused a request: {reason}");
        self.record(Event::RequestRefused {
            task: task.into(),
            worker_id: slot.0,
            reason: reason.into(),
        });
    }

    fn on_message(&mut self, conn: ConnId, message: ToDriver, done_before: DoneBefore) {
        use daisy_core::printable::printable;
        match message {
            ToDriver::AcquireBlocks { max } => self.on_acquire(conn, max, done_before),
            ToDriver::ReleaseBlocks { results } => self.on_release(conn, results, done_before),
            ToDriver::Draining {
                reason,
                out_of_time,
                by_choice,
            } => {
                let why = (printable(&reason), out_of_time, by_choice);
                self.on_draining(conn, why, done_before)
            }
            ToDriver::ReturnBlocks { block_ids, reason } => {
                self.on_return(conn, &block_ids, &printable(&reason), done_before)
            }
            ToDriver::CannotServe { reason } => {
                self.on_cannot_serve(conn, printable(&reason).into_owned())
            }
            ToDriver::GetSnapshot => self.on_snapshot_request(conn),
            ToDriver::Hello(_) | ToDriver::Heartbeat => {}
        }
    }

    /// A peer was turned away: logged and recorded, the first few of each
    /// window one by one, the rest as a count (a flood of connections
    /// must not fill the disk).
    fn on_refused(&mut self, peer: SocketAddr, reason: &str) {
        if !self.refusals.admit(self.now) {
            return;
        }
        tracing::warn!(%peer, "refused a connection: {reason}");
        self.record(Event::ConnectionRefused {
            peer: peer.to_string().into(),
            reason: reason.to_string().into(),
        });
    }

    fn say_unsaid_refusals(&mut self) {
        let Some(count) = self.refusals.take_unsaid(self.now) else {
            return;
        };
        let seconds = self.refusals.window().as_secs_f64();
        tracing::warn!("refused {count} more connections in the last {seconds} s");
        self.record(Event::ConnectionsRefused { count, seconds });
    }

    fn on_tick(&mut self, done_before: DoneBefore) {
        self.reclaim_overdue_blocks();
        self.fail_blocks_of_overdue_deaths();
        // Retries that are due first: a worker that waited for one is
        // served, not let go for idleness.
        self.promote_due_retries(done_before);
        self.release_idle_workers();
        self.abandon_hopeless_tasks(done_before);
        self.start_workers(done_before);
        // Counting the workers a task wants skips blocks done before: it
        // may have found one for a worker that waits.
        self.serve_parked(done_before);
        self.say_unsaid_refusals();
    }

    /// Records tasks that just got done. Runs after every release, so it
    /// does no more than compare counters when none did.
    fn note_finished_tasks(&mut self) {
        for i in 0..self.tasks.len() {
            let task = TaskIdx(i as u32);
            let counters = self.scheduler.counters(task);
            if self.tasks[i].done_at.is_none() && counters.is_done() {
                let elapsed = self.now.duration_since(self.started);
                self.tasks[i].done_at = Some(elapsed.as_secs_f64());
                let id = self.task_id(task).to_string();
                self.record(Event::TaskDone {
                    task: id.into(),
                    counters,
                });
                self.withdraw_queued_workers(task);
            }
        }
    }
}

fn shutdown(reason: &str) -> FromDriver {
    FromDriver::Shutdown {
        reason: reason.to_string(),
    }
}
