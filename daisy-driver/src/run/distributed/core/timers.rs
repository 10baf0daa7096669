//! What the passing of time decides, on each tick: blocks held too long
//! are taken back, workers idle too long are let go, retries whose
//! backoff ran out become ready.

use super::{shutdown, Core, DoneBefore};
use crate::run::distributed::connection::ConnId;
use crate::run_dir::events::Event;
use crate::run_dir::outcome_recorder::Attempt;
use daisy_core::BlockId;
use std::time::Duration;

/// How long past its task's `timeout` a block may be held before the
/// driver takes it back (the worker's own timeout, its SIGTERM grace and
/// the report should all fit in it).
pub(super) const RECLAIM_MARGIN: Duration = Duration::from_secs(10);

impl Core {
    /// Blocks held past their task's `timeout` plus a margin are taken
    /// back and count as failed attempts (retried as usual): the worker's
    /// own timeout should have stopped them, so the worker is stuck or its
    /// report got lost. A late release is then refused as "not held".
    pub(super) fn reclaim_overdue_blocks(&mut self) {
        let margin = RECLAIM_MARGIN.max(self.settings.heartbeat_interval * 2);
        let (now, pipeline) = (self.now, self.pipeline.clone());
        let mut overdue = Vec::new();
        for worker in self.peers.workers_mut() {
            let Some(timeout) = pipeline.tasks[worker.task.index()].timeout else {
                continue;
            };
            let late = |since: &std::time::Instant| now.duration_since(*since) > timeout + margin;
            worker.held.retain(|&spatial, since| {
                let keep = !late(since);
                if !keep {
                    let id = BlockId {
                        task: worker.task,
                        spatial,
                    };
                    overdue.push((id, worker.slot, timeout));
                }
                keep
            });
        }
        for (id, slot, timeout) in overdue {
            let error = format!(
                "reclaimed from worker {slot}: held past the task's timeout of {timeout:?} \
                 plus {margin:?}"
            );
            tracing::warn!(block = id.spatial, "{error}");
            let attempt = Attempt {
                cost: None,
                worker_id: Some(slot.0),
                seconds: None,
            };
            self.record_failure(id, attempt, &error);
        }
    }

    /// Retries whose backoff delay ran out become ready, for parked
    /// workers first (a worker waiting for them is kept, not shut down:
    /// they count as pending). The tick's period is the delay's precision.
    pub(super) fn promote_due_retries(&mut self, done_before: DoneBefore) {
        if self.scheduler.promote_due(self.now) > 0 {
            self.serve_parked(done_before);
        }
    }

    /// Launched workers that waited for blocks longer than their task's
    /// `idle_timeout` are told to stop, freeing their budget share; a
    /// clean exit, and a new worker is started if blocks come.
    pub(super) fn release_idle_workers(&mut self) {
        let idle: Vec<ConnId> = self
            .peers
            .parked()
            .filter(|&c| self.idle_too_long(c))
            .collect();
        for conn in idle {
            self.peers.unpark(conn);
            let worker = self
                .peers
                .worker_mut(conn)
                .expect("parked peers are workers");
            worker.wants = None;
            let (task, slot) = (worker.task, worker.slot);
            let limit = self.config(task).idle_timeout.unwrap_or_default();
            let reason = format!("no block for it within the task's idle_timeout of {limit:?}");
            self.send(conn, shutdown(&reason));
            self.record(Event::WorkerReleased {
                task: self.task_id(task).to_string().into(),
                worker_id: slot.0,
                why: reason.into(),
            });
        }
    }

    /// A launched worker that holds no block (one that asks ahead while
    /// it runs blocks is not idle) and has waited past its task's
    /// `idle_timeout`.
    fn idle_too_long(&self, conn: ConnId) -> bool {
        let Some(worker) = self.peers.worker(conn) else {
            return false;
        };
        let limit = self.config(worker.task).idle_timeout;
        let idle_for = worker
            .idle_since
            .map(|since| self.now.duration_since(since));
        worker.launched
            && worker.held.is_empty()
            && idle_for
                .zip(limit)
                .is_some_and(|(idle, limit)| idle > limit)
    }
}
