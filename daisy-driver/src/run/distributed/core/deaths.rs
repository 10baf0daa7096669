//! A worker whose process dies while it runs blocks (user code that
//! calls `os._exit`, segfaults, or is killed by the OOM killer): the
//! death is the blocks' doing, so they fail with how the worker died,
//! and are retried up to their `max_retries` like any failure, instead of
//! going back to the queue for free while the task's
//! `max_worker_restarts` runs out and the task is abandoned.
//!
//! A worker we started ends as a job the launcher waits for; its exit
//! status or signal says the most, so its blocks wait a moment for it
//! (they stay in flight meanwhile). Any other worker's blocks fail at once
//! with what the connection said.
//!
//! A worker that held a batch ran one of its blocks, and the driver
//! cannot tell which: the batch comes back unfailed, its blocks become
//! *suspects*, and each suspect goes out alone, so that if it kills its
//! worker again it is the only block held and is blamed.

use super::peers::Worker;
use super::{Command, Core};
use crate::run::slots::SlotId;
use crate::run_dir::events::Event;
use crate::run_dir::outcome_recorder::Attempt;
use daisy_core::{Block, BlockId, BlockOutcome, TaskIdx};
use std::time::{Duration, Instant};

/// How long the blocks of a dead launched worker wait for its job's end:
/// a local launcher reports it within a poll; a cluster launcher polls
/// every second for as long after a worker left uncleanly.
pub(super) const JOB_END_WAIT: Duration = launchers::QUICK_POLLS_AFTER_A_LOSS;

/// The blocks of a dead worker, waiting for how its job ended.
#[derive(Debug)]
pub(super) struct Dying {
    task: TaskIdx,
    blocks: Vec<u64>,
    /// What the connection said, if the job's end does not come.
    why: String,
    until: Instant,
}

impl Core {
    /// `worker`'s connection broke while it held blocks: they fail now,
    /// or once its job's end is known if we started it.
    pub(super) fn on_died_in_blocks(&mut self, worker: &Worker, why: &str) {
        let blocks: Vec<u64> = worker.held.keys().copied().collect();
        if !worker.launched {
            return self.fail_blocks_of_dead(worker.task, worker.slot, &blocks, why);
        }
        let dying = Dying {
            task: worker.task,
            blocks,
            why: why.to_string(),
            until: self.now + JOB_END_WAIT,
        };
        self.dying.insert(worker.slot, dying);
    }

    /// `worker` died holding a batch: its blocks come back unfailed, each
    /// to go out alone from now on.
    pub(super) fn suspect_blocks_of_dead(&mut self, worker: &Worker) {
        let task = worker.task;
        for &spatial in worker.held.keys() {
            let id = BlockId { task, spatial };
            self.scheduler.release(id, BlockOutcome::Returned);
            self.suspects.insert(id);
        }
        let mut block_ids: Vec<u64> = worker.held.keys().copied().collect();
        block_ids.sort_unstable();
        self.record(Event::BlocksReturned {
            task: self.task_id(task).to_string().into(),
            worker_id: worker.slot.0,
            block_ids: block_ids.into(),
            why: "its worker died holding them; each goes out alone from now on, \
                  so that a block that kills its worker is found"
                .into(),
        });
    }

    /// Whether `block` goes out alone: its worker died holding it among
    /// others.
    pub(super) fn goes_alone(&self, block: &Block) -> bool {
        !self.suspects.is_empty() && self.suspects.contains(&block.id)
    }

    /// The job of `slot` ended `how`; true if its worker had died in
    /// blocks, which fail now, saying so.
    pub(super) fn on_dead_workers_job_ended(&mut self, slot: SlotId, how: &str) -> bool {
        let Some(dying) = self.dying.remove(&slot) else {
            return false;
        };
        self.fail_blocks_of_dead(dying.task, slot, &dying.blocks, how);
        true
    }

    /// The blocks of dead workers whose job's end did not come in time
    /// fail with what their connection said, and the job is cancelled
    /// (its process may linger).
    pub(super) fn fail_blocks_of_overdue_deaths(&mut self) {
        let now = self.now;
        let overdue: Vec<SlotId> = (self.dying.iter())
            .filter(|(_, dying)| dying.until <= now)
            .map(|(&slot, _)| slot)
            .collect();
        for slot in overdue {
            let dying = self.dying.remove(&slot).expect("listed above");
            self.fail_blocks_of_dead(dying.task, slot, &dying.blocks, &dying.why);
            self.commands.push(Command::CancelJobs(vec![slot]));
        }
    }

    fn fail_blocks_of_dead(&mut self, task: TaskIdx, slot: SlotId, blocks: &[u64], how: &str) {
        let error = format!("worker {} died while running this block: {how}", slot.0);
        for &spatial in blocks {
            let attempt = Attempt {
                worker_id: Some(slot.0),
                seconds: None,
                cost: None,
            };
            let id = BlockId { task, spatial };
            self.record_failure_of(id, attempt, &error, Some(slot));
        }
    }
}
