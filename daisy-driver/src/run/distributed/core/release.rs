//! Blocks coming back: results reported by the worker that held them
//! (done blocks are marked before anything else happens, failures are
//! counted and retried or given up by the scheduler), and blocks handed
//! back unfinished by a worker that leaves.

use super::{BlockAt, Command, Core, DoneBefore};
use crate::run::distributed::connection::ConnId;
use crate::run::slots::SlotId;
use crate::run_dir::events::Event;
use crate::run_dir::outcome_recorder::Attempt;
use daisy_core::printable::printable;
use daisy_core::protocol::BlockResult;
use daisy_core::{BlockId, BlockOutcome, TaskIdx};

/// Block ids a refusal names; it counts the rest.
const IDS_NAMED: usize = 5;

impl Core {
    pub(super) fn on_release(
        &mut self,
        conn: ConnId,
        results: Vec<BlockResult>,
        done_before: DoneBefore,
    ) {
        let now = self.now;
        let mut not_held = Vec::new();
        for result in results {
            let Some(worker) = self.peers.worker_mut(conn) else {
                return;
            };
            if worker.held.remove(&result.block_id).is_none() {
                not_held.push(result.block_id);
                continue;
            }
            worker.reported = true;
            if worker.held.is_empty() && worker.idle_since.is_some() {
                // It asked ahead while it ran blocks: idle from now on.
                worker.idle_since = Some(now);
            }
            let (task, slot) = (worker.task, worker.slot);
            self.on_result(task, slot, result);
        }
        if !not_held.is_empty() {
            let reason = format!(
                "{} not held by this worker (released twice, or never handed out)",
                name_blocks(&not_held)
            );
            self.refuse(conn, reason);
        }
        self.serve_parked(done_before);
    }

    /// Records one block's result reported by worker `slot`.
    fn on_result(&mut self, task: TaskIdx, slot: SlotId, result: BlockResult) {
        let id = BlockId {
            task,
            spatial: result.block_id,
        };
        if let Some(seconds) = result.seconds.filter(|s| s.is_finite()) {
            let longest = &mut self.tasks[task.index()].longest_block_s;
            *longest = Some(longest.map_or(seconds, |l| l.max(seconds)));
        }
        let attempt = Attempt {
            worker_id: Some(slot.0),
            seconds: result.seconds,
            cost: result.cost,
        };
        match result.ok {
            true if result.skipped => self.record_success(id, attempt, BlockOutcome::Skipped),
            true => self.record_success(id, attempt, BlockOutcome::Success),
            false => {
                let error = result.error.as_deref().unwrap_or("no reason given");
                self.record_failure(id, attempt, error)
            }
        }
    }

    /// Marks the block done, then tells the scheduler (`outcome` says
    /// whether it ran or was found done): the mark comes first among the
    /// commands, so nothing this release unlocks happens before it is on
    /// disk.
    fn record_success(&mut self, id: BlockId, attempt: Attempt, outcome: BlockOutcome) {
        let Some(cell) = self.scheduler.cell_in_flight(id) else {
            return;
        };
        let block = BlockAt { id, cell };
        self.suspects.remove(&id);
        self.commands.push(Command::MarkDone { block, attempt });
        self.scheduler.release(id, outcome);
        self.tasks[id.task.index()].rate.record(self.now);
    }

    /// Records a failed attempt; `error` (a user process's stderr, as a
    /// worker sent it) is escaped before it reaches a log, the events or
    /// the terminal.
    pub(super) fn record_failure(&mut self, id: BlockId, attempt: Attempt, error: &str) {
        self.record_failure_of(id, attempt, error, None)
    }

    /// As [`Self::record_failure`]; with `stderr_of`, the end of that
    /// worker's own stderr log is added to the error when it is recorded.
    pub(super) fn record_failure_of(
        &mut self,
        id: BlockId,
        attempt: Attempt,
        error: &str,
        stderr_of: Option<SlotId>,
    ) {
        let Some(cell) = self.scheduler.cell_in_flight(id) else {
            return;
        };
        let block = BlockAt { id, cell };
        self.suspects.remove(&id);
        self.failed_attempts += 1;
        let released = self
            .scheduler
            .release_at(id, BlockOutcome::Failure, self.now);
        let error = printable(error).into_owned();
        self.tasks[id.task.index()].last_error = Some(format!("block {}: {error}", id.spatial));
        self.commands.push(Command::RecordFailure {
            block,
            attempt,
            error,
            released,
            stderr_of,
        });
    }

    /// Blocks handed back unfinished go back to the queue without using
    /// a retry: the worker is leaving, the blocks did nothing wrong.
    pub(super) fn on_return(
        &mut self,
        conn: ConnId,
        block_ids: &[u64],
        reason: &str,
        done_before: DoneBefore,
    ) {
        let Some(worker) = self.peers.worker_mut(conn) else {
            return;
        };
        let (task, slot) = (worker.task, worker.slot);
        let (held, not_held): (Vec<u64>, Vec<u64>) = block_ids
            .iter()
            .partition(|id| worker.held.remove(id).is_some());
        for &spatial in &held {
            let id = BlockId { task, spatial };
            self.scheduler.release(id, BlockOutcome::Returned);
        }
        if !held.is_empty() {
            self.record(Event::BlocksReturned {
                task: self.task_id(task).to_string().into(),
                worker_id: slot.0,
                block_ids: held.into(),
                why: reason.to_string().into(),
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
        self.serve_parked(done_before);
    }
}

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
