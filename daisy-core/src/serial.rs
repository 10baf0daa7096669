//! A serial in-process runner: the scheduler driven one block at a time,
//! for tests, debugging and the `plan` walk-through. It gives the same
//! results as a distributed run with one worker, without any I/O.

use crate::block::Block;
use crate::block::TaskIdx;
use crate::scheduler::{BlockOutcome, Scheduler};

/// How a serial run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SerialEnd {
    /// Every block completed, failed or was orphaned.
    Finished,
    /// Work remains that can never become ready (see
    /// [`Scheduler::is_stalled`]).
    Stalled,
    /// `process` asked to stop after this many blocks.
    Stopped,
}

/// What `process` says about one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Continue(BlockOutcome),
    /// Stop the run here; the block is handed back unprocessed.
    Stop,
}

/// Runs blocks until the scheduler is done, taking tasks in turn so that
/// no task starves. `is_done` reports blocks finished in an earlier run;
/// `process` runs one block.
pub fn run(
    scheduler: &mut Scheduler,
    is_done: &mut dyn FnMut(&Block) -> bool,
    process: &mut dyn FnMut(&Block) -> Step,
) -> SerialEnd {
    let tasks: Vec<TaskIdx> = scheduler.graph().task_indices().collect();
    loop {
        let mut handed_out = false;
        for &task in &tasks {
            let Some(block) = scheduler.acquire(task, is_done) else {
                continue;
            };
            handed_out = true;
            match process(&block) {
                Step::Continue(outcome) => {
                    scheduler.release(block.id, outcome);
                }
                Step::Stop => {
                    scheduler.release(block.id, BlockOutcome::Returned);
                    return SerialEnd::Stopped;
                }
            }
        }
        if scheduler.is_done() {
            return SerialEnd::Finished;
        }
        if !handed_out && scheduler.is_stalled() {
            return SerialEnd::Stalled;
        }
    }
}
