//! User code that runs inside the worker's own process: the functions of
//! an interpreter that embeds this crate (the Python package calls a
//! task's `process_function` or `worker_function` without starting a
//! program, so a block costs no process and no pipe).
//!
//! The embedding registers one [`EmbeddedFactory`] for the process before
//! it runs a worker or a serial run; the runtime and the serial run ask
//! it for the code of a task whose [`CodeKind`] is a function. A process
//! that registered nothing (the `daisy-worker` binary) cannot run such a
//! task and says which program can.
//!
//! The registry is process-wide because what it stands for is: there is
//! one embedding interpreter per process.
//!
//! A function cannot be stopped from outside the way a process group can,
//! so a block past its task's `timeout` is caught by a [`Watchdog`]: the
//! worker reports that block failed, hands back the rest and ends (its
//! process, and the stuck call with it), and the driver starts another.

mod metered;
mod watchdog;

pub use metered::{own_meter, Metered};
pub use watchdog::Watchdog;

use crate::user_code::{BlockFailure, Finished};
use daisy_core::protocol::{CodeKind, TaskCode, WireBlock};
use std::sync::OnceLock;
use std::time::Duration;

/// How one block ran in process.
#[derive(Debug)]
pub struct EmbeddedRan {
    pub block_id: u64,
    pub outcome: Result<Finished, BlockFailure>,
    pub took: Duration,
}

/// What the caller of [`EmbeddedCode::run_batch`] learns as blocks start
/// and end, and how it stops a batch part-way. `Sync`: an embedding may
/// run the batch on a thread of its own (Python's main thread) while the
/// caller waits.
pub trait BlockControl: Sync {
    /// Whether block `block_id` may start now (not once the worker
    /// drains); from a `true` on, the block counts as running.
    fn start(&self, block_id: u64) -> bool;
    /// Block `block_id` ended, however it went.
    fn finished(&self, block_id: u64);
}

/// Every block may start, and nothing watches them: a serial run.
pub struct Unwatched;

impl BlockControl for Unwatched {
    fn start(&self, _block_id: u64) -> bool {
        true
    }
    fn finished(&self, _block_id: u64) {}
}

/// A task's function, ready to run blocks. Called from one blocking
/// thread at a time; the embedding decides where the user's code runs
/// (the Python package runs it on the interpreter's main thread).
pub trait EmbeddedCode: Send {
    /// Runs `blocks` in order while `control` lets them start, telling it
    /// when each ends, and returns how each that started went; blocks
    /// missing from the result were not started (the runtime hands them
    /// back).
    fn run_batch(&mut self, blocks: Vec<WireBlock>, control: &dyn BlockControl)
        -> Vec<EmbeddedRan>;

    /// Whether the embedding was asked to stop (Ctrl-C in a serial run
    /// inside the user's interpreter): the caller stops starting blocks.
    fn interrupted(&self) -> bool {
        false
    }

    /// Why this code cannot serve the task at all (a worker function that
    /// fails before it takes its first block: its model does not load), so
    /// the worker says so and leaves instead of failing every block.
    fn cannot_serve(&self) -> Option<String> {
        None
    }

    /// Why this code ended on its own, once it did (a worker function
    /// that returned after taking blocks: the worker's decision to leave,
    /// as a daisy 1.x worker process that exits with status 0), so the
    /// worker leaves as one that drains, telling the driver it chose to.
    fn ended_by_choice(&self) -> Option<String> {
        None
    }

    /// Ends the code (a worker function is told there are no more blocks
    /// and waited for).
    fn finish(&mut self) {}
}

/// Makes the code of one task (its id, the worker's id, the driver's
/// [`TaskCode`]), or says why it cannot run here (a module that does not
/// import, a pickle that does not load). The worker id is the one the
/// driver gave this worker (0 in a serial run): user code that starts
/// processes of its own tells them which worker they belong to.
pub type EmbeddedFactory =
    dyn Fn(&str, u64, &TaskCode) -> Result<Box<dyn EmbeddedCode>, String> + Send + Sync;

static FACTORY: OnceLock<Box<EmbeddedFactory>> = OnceLock::new();

/// Registers the process's factory; a second registration is ignored
/// (the first embedding owns the process).
pub fn register(factory: Box<EmbeddedFactory>) {
    if FACTORY.set(factory).is_err() {
        tracing::debug!("an embedded code factory was already registered");
    }
}

/// The code of task `task_id` for worker `worker_id`, a function kind,
/// from the registered factory.
pub fn code_for(
    task_id: &str,
    worker_id: u64,
    code: &TaskCode,
) -> Result<Box<dyn EmbeddedCode>, String> {
    match FACTORY.get() {
        Some(factory) => factory(task_id, worker_id, code),
        None => Err(not_embedded(code.kind)),
    }
}

/// Why this process cannot run a function: which program can.
fn not_embedded(kind: CodeKind) -> String {
    let what = match kind {
        CodeKind::WorkerFunction => "a worker_function",
        _ => "a process_function",
    };
    format!(
        "the task runs {what} (Python), which this program cannot call; \
         its workers are `python -m daisy_rs.worker` (the driver starts those itself; \
         by hand, run that with the same flags as daisy-worker)"
    )
}
