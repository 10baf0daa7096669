//! Handing blocks out: a worker asks for up to `max` blocks; it gets the
//! ready ones of its task, is told to stop when its task will have none
//! for it, or parks until blocks appear.
//!
//! Blocks done in an earlier run are skipped on the way, at most
//! [`SKIPS_PER_TURN`] per call: a resumed run may have tens of millions
//! of them ahead of the first block to run, a minute of skipping in which
//! the driver's one thread would answer nobody (its workers gave it up
//! for lost after two missed heartbeats). The scheduler then stops and the
//! task is *catching up*; the run loop gives the core a turn
//! ([`Input::CatchUp`](super::Input::CatchUp)) whenever nothing else is
//! waiting, until the next block to run is found.

use super::peers::{Peer, Take};
use super::{shutdown, Command, Core, DoneBefore};
use crate::run::distributed::connection::ConnId;
use daisy_core::{Block, BlockOutcome, Holder, TaskIdx};

/// The most blocks handed out in one `Blocks` message.
pub(super) const MAX_BATCH: u32 = 1024;

/// The most done blocks one call skips: ~20 ms of skipping on the
/// benchmarks' machine (docs/benchmarks.md, "Run directory at scale").
pub(super) const SKIPS_PER_TURN: u64 = 10_000;

impl Core {
    pub(super) fn on_acquire(&mut self, conn: ConnId, max: u32, done_before: DoneBefore) {
        let refusal = match self.peers.get(conn) {
            None => return,
            Some(Peer::Observer) => Some("observers take no blocks"),
            Some(Peer::Worker(_)) => (max == 0).then_some("acquire_blocks needs max >= 1"),
        };
        if let Some(reason) = refusal {
            return self.refuse(conn, reason.to_string());
        }
        if let Some(worker) = self.peers.worker_mut(conn) {
            worker.wants = Some(max.min(MAX_BATCH));
        }
        self.serve(conn, done_before);
    }

    /// Answers a worker's pending acquire if blocks are ready, or tells it
    /// to stop if its task will have none for it; otherwise it parks.
    pub(super) fn serve(&mut self, conn: ConnId, done_before: DoneBefore) {
        let Some(worker) = self.peers.worker(conn) else {
            return;
        };
        let (Some(max), task) = (worker.wants, worker.task) else {
            return;
        };
        let draining = worker.draining.is_some();
        if let Some(reason) = self.reason_to_stop(task, draining, worker.launched) {
            self.peers.worker_mut(conn).expect("checked above").wants = None;
            return self.send(conn, shutdown(&reason));
        }
        let blocks = self.take_blocks(conn, task, max, done_before);
        let now = self.now;
        let worker = self.peers.worker_mut(conn).expect("checked above");
        if blocks.is_empty() {
            worker.idle_since.get_or_insert(now);
            return self.peers.park(conn);
        }
        worker.wants = None;
        worker.idle_since = None;
        worker
            .held
            .extend(blocks.iter().map(|b| (b.id.spatial, now)));
        self.commands
            .push(Command::SendBlocks { conn, task, blocks });
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

    /// Up to `max` ready blocks of `task` for the worker on `conn`; a
    /// suspect (`deaths`) only alone, so a batch stops before one.
    fn take_blocks(
        &mut self,
        conn: ConnId,
        task: TaskIdx,
        max: u32,
        done_before: DoneBefore,
    ) -> Vec<Block> {
        let holder = Holder(conn.number());
        let ready = self.scheduler.counters(task).ready;
        let mut blocks = Vec::with_capacity(ready.min(u64::from(max)) as usize);
        while blocks.len() < max as usize
            && (self.scheduler).acquire_onto(task, holder, &mut |b| done_before(b), &mut blocks)
        {
            let last = blocks.last().expect("just acquired");
            if self.goes_alone(last) {
                if blocks.len() > 1 {
                    let suspect = blocks.pop().expect("not empty");
                    self.scheduler.release(suspect.id, BlockOutcome::Returned);
                }
                break;
            }
        }
        blocks
    }

    /// True while a task is skipping blocks done before, a turn at a
    /// time: the run loop then calls [`Input::CatchUp`](super::Input::CatchUp)
    /// whenever nothing else is waiting.
    pub fn is_catching_up(&self) -> bool {
        let graph = self.scheduler.graph();
        graph
            .task_indices()
            .any(|t| self.scheduler.is_catching_up(t))
    }

    /// Skips another turn's worth of done blocks in each task catching
    /// up, then starts the workers that what was found calls for and
    /// serves the waiting ones (last: starting skips too).
    pub(super) fn on_catch_up(&mut self, done_before: DoneBefore) {
        for task in self.scheduler.graph().clone().task_indices() {
            if self.scheduler.is_catching_up(task) {
                self.scheduler.has_runnable(task, &mut |b| done_before(b));
            }
        }
        self.start_workers(done_before);
        self.serve_parked(done_before);
    }

    /// Serves the parked workers of each task that has something for
    /// them (after anything that may have made blocks ready or ended a
    /// task): blocks while it has ready ones, or the news that it will
    /// have none. A task with neither is not looked at, so this costs
    /// nothing per waiting worker.
    pub(super) fn serve_parked(&mut self, done_before: DoneBefore) {
        for task in self.scheduler.graph().task_indices() {
            while let Some(take) = self.parked_to_serve(task) {
                let Some(conn) = self.peers.take_parked(task, take) else {
                    break;
                };
                self.serve(conn, done_before);
                if self.peers.is_parked(conn) {
                    // Nothing could be taken after all (blocks done
                    // before, or outside this run): nor can the others.
                    break;
                }
            }
        }
        self.note_finished_tasks();
    }

    /// Which parked workers of `task` would now get an answer: any while
    /// it has ready blocks or is over, launched ones once it has nothing
    /// left to hand out (see [`Self::reason_to_stop`]), none otherwise.
    fn parked_to_serve(&self, task: TaskIdx) -> Option<Take> {
        let c = self.scheduler.counters(task);
        let take = if c.ready > 0 || c.is_done() || self.scheduler.is_abandoned(task) {
            Take::Any
        } else if c.pending() == 0 {
            Take::LaunchedOnly
        } else {
            return None;
        };
        self.peers.has_parked(task, take).then_some(take)
    }
}
