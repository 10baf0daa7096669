//! What the core shows: snapshots for observers (`status` of a live
//! run), the numbers of the progress bars, and the end-of-run summary.

use super::Core;
use crate::run::distributed::connection::ConnId;
use crate::run::output::progress::TaskProgress;
use crate::run::output::summary::{RunEnd, RunSummary, TaskSummary};
use crate::run::slots::{Gone, SlotState};
use crate::run_dir::RunDir;
use daisy_core::protocol::messages::{InFlightBlock, RunSnapshot, TaskSnapshot, WorkerCounts};
use daisy_core::protocol::FromDriver;
use daisy_core::TaskIdx;
use std::time::{Duration, Instant};

impl Core {
    pub(super) fn on_snapshot_request(&mut self, conn: ConnId) {
        if self.peers.get(conn).is_some() {
            let snapshot = self.snapshot();
            self.send(conn, FromDriver::Snapshot(snapshot));
        }
    }

    fn snapshot(&self) -> RunSnapshot {
        let tasks = (self.scheduler.graph().task_indices())
            .map(|task| self.task_snapshot(task))
            .collect();
        RunSnapshot {
            pipeline: self.pipeline.name.clone(),
            tasks,
            seconds: self.now.duration_since(self.started).as_secs_f64(),
        }
    }

    fn task_snapshot(&self, task: TaskIdx) -> TaskSnapshot {
        let counters = self.scheduler.counters(task);
        let blocks_per_s = self.tasks[task.index()].rate.per_second(self.now);
        TaskSnapshot {
            task_id: self.task_id(task).to_string(),
            counters,
            workers_connected: self.workers_connected(task),
            workers: self.worker_counts(task),
            in_flight: self.in_flight_blocks(task),
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
                SlotState::Gone(Gone::Lost(_) | Gone::DiedInBlocks(_)) => counts.lost += 1,
                SlotState::Gone(Gone::FailedStart(_)) => counts.failed_starts += 1,
                SlotState::Gone(Gone::Clean) => {}
            }
        }
        counts.idle = self
            .peers
            .of_task(task)
            .filter(|w| w.held.is_empty())
            .count() as u32;
        counts
    }

    /// The blocks of `task` that workers hold, oldest first.
    fn in_flight_blocks(&self, task: TaskIdx) -> Vec<InFlightBlock> {
        let mut blocks: Vec<InFlightBlock> = (self.peers.of_task(task))
            .flat_map(|w| {
                w.held.iter().map(|(&block_id, &since)| InFlightBlock {
                    block_id,
                    worker_id: w.slot.0,
                    seconds: self.now.duration_since(since).as_secs_f64(),
                })
            })
            .collect();
        blocks.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        blocks
    }

    fn workers_connected(&self, task: TaskIdx) -> u32 {
        self.peers.of_task(task).count() as u32
    }

    /// Each task's numbers for the progress bars or lines.
    pub fn progress(&self) -> Vec<TaskProgress<'_>> {
        (self.scheduler.graph().task_indices())
            .map(|task| TaskProgress {
                id: self.task_id(task),
                counters: self.scheduler.counters(task),
                workers: self.workers_connected(task),
            })
            .collect()
    }

    /// Records the tasks done by the end of the run, `now`.
    pub fn close(&mut self, now: Instant) {
        self.now = now;
        self.note_finished_tasks();
    }

    /// Sums the run up at its end, `now`.
    pub fn summary(&self, end: RunEnd, now: Instant, run_dir: &RunDir) -> RunSummary {
        let elapsed = now.duration_since(self.started);
        let tasks = (self.scheduler.graph().task_indices())
            .map(|t| self.task_summary(t, elapsed, run_dir))
            .collect();
        RunSummary {
            failed_attempts: self.failed_attempts,
            failed_event_writes: 0,
            tasks,
            seconds: elapsed.as_secs_f64(),
            events: run_dir.events(),
            end,
        }
    }

    fn task_summary(&self, task: TaskIdx, elapsed: Duration, run_dir: &RunDir) -> TaskSummary {
        let notes = &self.tasks[task.index()];
        TaskSummary {
            id: self.task_id(task).to_string(),
            counters: self.scheduler.counters(task),
            logs: run_dir.task_logs(self.task_id(task)),
            workers: self.slots.connected(task),
            restarts: self.slots.unclean_exits(task),
            seconds: notes.done_at.unwrap_or(elapsed.as_secs_f64()),
            abandoned: notes.abandoned.clone(),
            last_error: notes.last_error.clone(),
        }
    }
}
