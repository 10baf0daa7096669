//! A serial in-process runner: the scheduler driven one block at a time.
//! It gives the same results as a distributed run with one worker, without
//! any I/O of its own; `daisy-driver run` and the tests build on it. It
//! reads the clock for retry backoff, and sleeps when the only work left
//! is retries waiting for their delay.

use crate::block::{Block, TaskIdx};
use crate::scheduler::{BlockOutcome, Released, Scheduler};
use std::time::Instant;

/// How a serial run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SerialEnd {
    /// Every block completed, failed or was orphaned.
    Finished,
    /// Work remains that can never become ready (see
    /// [`Scheduler::is_stalled`]).
    Stalled,
    /// The runner asked to stop.
    Stopped,
}

/// What the runner says about one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Continue(BlockOutcome),
    /// Stop the run here; the block is handed back unprocessed.
    Stop,
}

/// Runs blocks for [`run`]. A closure `FnMut(&Block) -> Step` is a runner
/// that never skips and ignores what releases did.
pub trait BlockRunner {
    /// True if the block finished in an earlier run (it is then skipped).
    fn is_done(&mut self, _block: &Block) -> bool {
        false
    }

    /// Processes one block.
    fn process(&mut self, block: &Block) -> Step;

    /// Learns what the scheduler made of a processed block.
    fn released(&mut self, _block: &Block, _released: &Released) {}
}

impl<F: FnMut(&Block) -> Step> BlockRunner for F {
    fn process(&mut self, block: &Block) -> Step {
        self(block)
    }
}

/// Runs blocks until the scheduler is done, taking tasks in turn so that
/// no task starves.
pub fn run(scheduler: &mut Scheduler, runner: &mut dyn BlockRunner) -> SerialEnd {
    let tasks: Vec<TaskIdx> = scheduler.graph().task_indices().collect();
    loop {
        scheduler.promote_due(Instant::now());
        let mut handed_out = false;
        for &task in &tasks {
            let Some(block) = scheduler.acquire(task, &mut |b| runner.is_done(b)) else {
                continue;
            };
            handed_out = true;
            let outcome = match runner.process(&block) {
                Step::Continue(outcome) => outcome,
                Step::Stop => {
                    scheduler.release(block.id, BlockOutcome::Returned);
                    return SerialEnd::Stopped;
                }
            };
            let released = scheduler.release_at(block.id, outcome, Instant::now());
            runner.released(&block, &released);
        }
        if scheduler.is_done() {
            return SerialEnd::Finished;
        }
        if !handed_out {
            if let Some(due) = scheduler.next_due() {
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            } else if scheduler.is_stalled() {
                return SerialEnd::Stalled;
            }
        }
    }
}
