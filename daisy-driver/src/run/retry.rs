//! `run --retry-failed`: a run restricted to the blocks that failed for
//! good in the last run and the blocks that wait for them (found by
//! [`BlockStates::to_retry`]). Blocks done are skipped as
//! always; any other block is left for a later plain run (see
//! [`Scheduler::run_only`]).

use crate::pipeline::Pipeline;
use crate::run_dir::run_state::{BlockStates, RunEvents};
use crate::run_dir::RunDir;
use daisy_core::{BlockId, Scheduler};
use std::collections::HashSet;
use std::sync::Arc;

/// The blocks a restricted run may run.
pub type OnlyBlocks = Arc<HashSet<BlockId>>;

/// The blocks to retry in `run_dir`, after saying how many there are.
pub fn only_failed(pipeline: &Pipeline, run_dir: &RunDir) -> anyhow::Result<OnlyBlocks> {
    let (last_run, _) = RunEvents::read_last(run_dir)?;
    let retry = BlockStates::read(pipeline, run_dir, &last_run)?.to_retry();
    crate::run::output::stdout::print_line(format_args!(
        "daisy-driver: --retry-failed: running {} failed blocks and {} orphaned blocks; other blocks not done are left for a later run",
        retry.failed, retry.orphaned
    ));
    Ok(Arc::new(retry.blocks))
}

/// The scheduler of a run of `pipeline`, restricted to `only` if given.
pub fn scheduler(pipeline: &Pipeline, only: Option<&OnlyBlocks>) -> Scheduler {
    let mut scheduler = Scheduler::new(Arc::new(pipeline.graph()));
    if let Some(only) = only {
        scheduler.run_only(only.clone());
    }
    scheduler
}
