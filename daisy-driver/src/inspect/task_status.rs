//! One task as the done markers and the last run's events say it is:
//! its block counts, its failed blocks with their logs, what its blocks
//! cost. The one model that `status` prints, `report` draws and the
//! dashboard serves, built from [`crate::run_dir::run_state`], so the
//! three never disagree.

use crate::inspect::cost_summary::{self, TaskCosts};
use crate::run_dir::run_state::{block_by_id, BlockStates};
use crate::run_dir::RunDir;
use daisy_core::protocol::WireRoi;
use daisy_core::TaskIdx;
use serde::Serialize;
use std::path::PathBuf;

/// One task, from its done marker and the last run's events.
#[derive(Debug, Serialize)]
pub struct TaskStatus {
    pub id: String,
    pub total: u64,
    pub done: u64,
    /// Blocks its `skip_mask` removes: never run, not failed.
    pub skipped: u64,
    pub failed: u64,
    pub orphaned: u64,
    pub remaining: u64,
    /// Why the last run abandoned the task, if it did.
    pub abandoned: Option<String>,
    /// The failed blocks, by block id.
    pub failed_blocks: Vec<FailedBlock>,
    /// What its blocks cost, if it tracked resources (`resource_tracking`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub costs: Option<TaskCosts>,
}

/// A block that failed for good in the last run.
#[derive(Debug, Serialize)]
pub struct FailedBlock {
    pub block_id: u64,
    /// The region the block writes, if the pipeline still has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_roi: Option<daisy_core::protocol::WireRoi>,
    /// Failed attempts in the last run.
    pub attempts: u32,
    /// The error of the last attempt.
    pub error: String,
    /// The worker of the last attempt (none in a `--serial` run).
    pub worker_id: Option<u64>,
    /// Where that attempt's user code wrote its stderr, if the file exists.
    pub log: Option<PathBuf>,
    /// The line of `log` where the last run's part starts (logs gather
    /// every run's; see `run_dir::user_logs`), if it is marked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_line: Option<usize>,
}

impl TaskStatus {
    /// The numbers of `task`, as `status` and `report` show them.
    pub fn of(states: &BlockStates, run_dir: &RunDir, task: TaskIdx) -> Self {
        let id = states.graph().task(task).id.clone();
        let total = states.graph().task_graph(task).num_blocks();
        let done = states.done_count(task);
        let failed_blocks: Vec<FailedBlock> = (states.failed(task).iter())
            .map(|(&block_id, f)| FailedBlock {
                block_id,
                write_roi: block_by_id(states.graph(), task, block_id)
                    .map(|block| WireRoi::from(&block.write_roi)),
                attempts: f.attempts,
                error: f.error.clone(),
                worker_id: f.worker_id,
                log: user_log(run_dir, &id, f.worker_id),
                log_line: None,
            })
            .collect();
        let failed = failed_blocks.len() as u64;
        let orphaned = states.orphaned_count(task);
        let skipped = states.masked_count(task);
        let costs: Option<TaskCosts> = cost_summary::summarise(&states.measured_blocks(task));
        TaskStatus {
            costs,
            remaining: total.saturating_sub(done + skipped + failed + orphaned),
            skipped,
            abandoned: states.abandoned(task).map(str::to_string),
            id,
            total,
            done,
            failed,
            orphaned,
            failed_blocks,
        }
    }
}

/// The stderr file of the user code a worker ran: its programs'
/// (`worker-<id>-user.err`, as daisy-worker names it), else the worker's
/// own, where a function run in its process (a Python task's) writes its
/// traceback (`worker-<id>.err`, as the local launcher names it); or a
/// `--serial` run's (`serial.err`).
fn user_log(run_dir: &RunDir, task: &str, worker_id: Option<u64>) -> Option<PathBuf> {
    let names = match worker_id {
        Some(id) => vec![format!("worker-{id}-user.err"), format!("worker-{id}.err")],
        None => vec!["serial.err".to_string()],
    };
    let logs = run_dir.task_logs(task);
    names
        .into_iter()
        .map(|name| logs.join(name))
        .find(|path| path.exists())
}
