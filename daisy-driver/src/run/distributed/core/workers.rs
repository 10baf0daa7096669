//! A worker's life on its connection: welcomed (or refused), maybe
//! unable to run its task's code, draining, and gone, its blocks going
//! back to the queue and its slot (with its budget share) ending.

use super::peers::{Peer, Worker};
use super::{Command, Core, DoneBefore};
use crate::run::distributed::connection::{ConnId, Ending};
use crate::run::slots::{Gone, ShareGone, SlotId};
use crate::run_dir::events::Event;
use daisy_core::printable::printable;
use daisy_core::protocol::{Hello, Role, Welcome};
use daisy_core::{BlockId, BlockOutcome, TaskIdx};
use std::borrow::Cow;

impl Core {
    /// Answers a Hello; a refusal is recorded when the connection reports
    /// it (`PeerEvent::Refused`), like every other refusal.
    pub(super) fn on_hello(&mut self, conn: ConnId, hello: &Hello) {
        let answer = match hello.role {
            Role::Observer => {
                self.peers.insert(conn, Peer::Observer);
                Ok(self.welcome(0, None))
            }
            Role::Worker => self.welcome_worker(conn, hello),
        };
        self.commands.push(Command::Answer { conn, answer });
    }

    /// A worker of `task` (none for an observer) is welcomed with its code.
    fn welcome(&self, worker_id: u64, task: Option<TaskIdx>) -> Welcome {
        Welcome {
            worker_id,
            heartbeat_interval_s: self.settings.heartbeat_interval.as_secs_f64(),
            heartbeat_misses: self.settings.heartbeat_misses,
            code: task.map(|task| self.config(task).task_code()),
            longest_block_s: task.and_then(|task| self.tasks[task.index()].longest_block_s),
        }
    }

    fn welcome_worker(&mut self, conn: ConnId, hello: &Hello) -> Result<Welcome, String> {
        let task_id = hello.task_id.as_deref().unwrap_or_default();
        let task = self.known_task(task_id)?;
        let claimed = hello.worker_id.map(SlotId);
        let connected = self
            .slots
            .connect(claimed, task, self.now)
            .map_err(|ShareGone| {
                format!(
                    "worker {} came back after its job was requeued, but its share of the \
                     budget went to another worker meanwhile",
                    hello.worker_id.unwrap_or_default()
                )
            })?;
        self.record(Event::WorkerConnected {
            task: task_id.to_string().into(),
            worker_id: connected.id.0,
            host: printable(&hello.host).into_owned().into(),
            pid: hello.pid,
            by_hand: !connected.launched,
            requeued: connected.requeued,
            job: (hello.job_id.as_deref()).map(|job| printable(job).into_owned().into()),
        });
        let worker = Worker::new(task, connected.id, connected.launched);
        self.peers.insert(conn, Peer::Worker(worker));
        Ok(self.welcome(connected.id.0, Some(task)))
    }

    fn known_task(&self, task_id: &str) -> Result<TaskIdx, String> {
        self.scheduler.graph().task_index(task_id).ok_or_else(|| {
            let known: Vec<&str> = (self.pipeline.tasks.iter())
                .map(|t| t.spec.id.as_str())
                .collect();
            format!(
                "unknown task {task_id:?}; this run has {}",
                known.join(", ")
            )
        })
    }

    /// A worker cannot run its task's code. If we started it, the next
    /// one would fail the same way: no more are started for the task.
    pub(super) fn on_cannot_serve(&mut self, conn: ConnId, reason: String) {
        let Some(worker) = self.peers.worker_mut(conn) else {
            return;
        };
        worker.cannot_serve = Some(reason.clone());
        let (task, slot, launched) = (worker.task, worker.slot, worker.launched);
        tracing::warn!(
            task = self.task_id(task),
            worker_id = slot.0,
            "the worker cannot serve: {reason}"
        );
        let unservable = &mut self.tasks[task.index()].unservable;
        if launched && unservable.is_none() {
            *unservable = Some(reason);
        }
    }

    /// A worker drains (`why`: its reason, whether its walltime runs
    /// out, whether its own code ended).
    pub(super) fn on_draining(
        &mut self,
        conn: ConnId,
        (reason, out_of_time, by_choice): (Cow<str>, bool, bool),
        done_before: DoneBefore,
    ) {
        let Some(worker) = self.peers.worker_mut(conn) else {
            return;
        };
        worker.draining = Some((reason.to_string(), out_of_time));
        worker.by_choice = by_choice;
        let (task, slot) = (worker.task, worker.slot);
        tracing::info!(worker_id = slot.0, "worker is draining: {reason}");
        self.record(Event::WorkerDraining {
            task: self.task_id(task).to_string().into(),
            worker_id: slot.0,
            why: reason.to_string().into(),
        });
        self.serve(conn, done_before);
    }

    /// A connection ended (see [`Ending`]; a worker told to drain that
    /// leaves counts as a goodbye): its slot ends, its
    /// budget share returns. Its blocks go back to the queue, not counted
    /// as failures, unless the worker died running them (`deaths`).
    pub(super) fn on_closed(
        &mut self,
        conn: ConnId,
        ending: Ending,
        why: &str,
        done_before: DoneBefore,
    ) {
        let Some(Peer::Worker(worker)) = self.peers.remove(conn) else {
            return;
        };
        let failure = why_a_goodbye_failed(&worker);
        let goodbye = ending == Ending::Goodbye || worker.draining.is_some();
        let clean = goodbye && failure.is_none();
        let peer_left = ending == Ending::PeerLeft;
        let died_in_blocks = !clean && peer_left && failure.is_none() && !worker.held.is_empty();
        match (died_in_blocks, worker.held.len()) {
            (true, 1) => self.on_died_in_blocks(&worker, why),
            (true, _) => self.suspect_blocks_of_dead(&worker),
            (false, _) => {
                for &spatial in worker.held.keys() {
                    let id = BlockId {
                        task: worker.task,
                        spatial,
                    };
                    self.scheduler.release(id, BlockOutcome::Returned);
                }
            }
        }
        if clean && worker.by_choice && worker.launched {
            self.on_retired(&worker);
        }
        let why = failure.as_deref().unwrap_or(why);
        let how = match (clean, died_in_blocks) {
            (true, _) => Gone::Clean,
            (false, true) => Gone::DiedInBlocks(why.to_string()),
            (false, false) => Gone::Lost(why.to_string()),
        };
        self.end_slot(worker.slot, how);
        self.record(Event::WorkerGone {
            task: self.task_id(worker.task).to_string().into(),
            worker_id: worker.slot.0,
            clean,
            why: why.to_string().into(),
        });
        self.serve_parked(done_before);
    }

    /// A launched worker left by its own decision (its code ended): while
    /// its task has blocks left, its place is kept (see `TaskNotes::retired`).
    fn on_retired(&mut self, worker: &Worker) {
        if self.scheduler.counters(worker.task).is_done() {
            return;
        }
        self.tasks[worker.task.index()].retired += 1;
        tracing::info!(
            task = self.task_id(worker.task),
            worker_id = worker.slot.0,
            "the worker left by its own decision: none is started in its place while \
             another worker of the task runs"
        );
    }

    /// Ends a slot, giving its budget share back; a lost launched
    /// worker's job is cancelled (it may still be running, hung), but
    /// not one that died in blocks: its job's end says how it died
    /// (`deaths` cancels it if that does not come).
    pub(super) fn end_slot(&mut self, slot: SlotId, how: Gone) {
        let how_unclean = how.is_unclean();
        let lost = how_unclean && !matches!(how, Gone::DiedInBlocks(_));
        let Some(ended) = self.slots.end(slot, how) else {
            return;
        };
        if ended.launched && how_unclean {
            self.commands.push(Command::WorkersLeft(vec![slot]));
        }
        if ended.launched && lost {
            self.commands.push(Command::CancelJobs(vec![slot]));
        }
    }
}

/// Why a worker's departure counts as a failure whatever the connection
/// said. A draining worker leaving is none, even if its job's end killed
/// it before it said goodbye (its blocks are returned), unless its
/// walltime ran out before it reported a single block: jobs whose
/// walltime is too short for a block must end in abandonment, not in
/// resubmissions forever. (A signal, such as a preemption or requeue
/// during a first long block, is no such case.)
fn why_a_goodbye_failed(worker: &Worker) -> Option<String> {
    let fruitless = (worker.draining.as_ref())
        .filter(|(_, out_of_time)| *out_of_time && !worker.reported)
        .map(|(reason, _)| format!("drained before it reported a block ({reason})"));
    worker.cannot_serve.clone().or(fruitless)
}
