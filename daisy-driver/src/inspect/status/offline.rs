//! Status from the run directory alone: the numbers of
//! [`crate::run_dir::run_state`] (done markers read against the last run's
//! events) as `status` shows them, per task and per worker, with where
//! each failed block's log is.

use super::{FailedBlock, LastRun, TaskStatus, WorkerStatus};
use crate::inspect::cost_summary::{self, TaskCosts};
use crate::pipeline::Pipeline;
use crate::run_dir::run_state::{block_by_id, BlockStates, RunEvents, WorkerEnd, WorkerLife};
use crate::run_dir::user_logs;
use crate::run_dir::RunDir;
use daisy_core::protocol::WireRoi;
use daisy_core::TaskIdx;
use std::collections::HashMap;
use std::path::PathBuf;

/// The numbers per task, and what did not add up.
pub(super) struct Analysis {
    pub tasks: Vec<TaskStatus>,
    pub warnings: Vec<String>,
}

pub(super) fn analyse(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    last_run: &RunEvents,
) -> anyhow::Result<Analysis> {
    let mut states = BlockStates::read(pipeline, run_dir, last_run)?;
    states.read_costs();
    let mut tasks: Vec<TaskStatus> = states
        .graph()
        .task_indices()
        .map(|task| TaskStatus::of(&states, run_dir, task))
        .collect();
    if let Some(start) = &last_run.start {
        mark_log_parts(&mut tasks, start.time);
    }
    Ok(Analysis {
        tasks,
        warnings: states.warnings().to_vec(),
    })
}

/// Points each failed block's log at the line where the part of the run
/// started at `started` begins, reading each log once.
fn mark_log_parts(tasks: &mut [TaskStatus], started: f64) {
    let mut lines: HashMap<PathBuf, Option<usize>> = HashMap::new();
    let failed = tasks.iter_mut().flat_map(|t| t.failed_blocks.iter_mut());
    for block in failed {
        let Some(log) = &block.log else { continue };
        block.log_line =
            *(lines.entry(log.clone())).or_insert_with(|| user_logs::part_of_run(log, started));
    }
}

impl TaskStatus {
    /// The numbers of `task`, as `status` shows them.
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

impl LastRun {
    /// The last run's start, end and workers (by worker id); a worker
    /// without a recorded end is at work if the driver is `running`.
    pub(super) fn of(run: &RunEvents, running: bool) -> Option<Self> {
        let start = run.start.as_ref()?;
        let mut workers: Vec<WorkerStatus> = (run.workers.iter())
            .filter(|(_, life)| life.recorded())
            .map(|(&(task, worker_id), life)| {
                WorkerStatus::of(&run.tasks[task].id, worker_id, life, running)
            })
            .collect();
        workers.sort_by_key(|w| w.worker_id);
        let tasks_ended = (run.tasks.iter())
            .filter_map(|task| Some((task.id.clone(), task.counters?)))
            .collect();
        Some(LastRun {
            started: start.time,
            mode: start.mode.clone(),
            retry_failed: start.retry_failed,
            finished: run.finished.clone(),
            workers,
            tasks_ended,
        })
    }
}

impl WorkerStatus {
    fn of(task: &str, worker_id: u64, life: &WorkerLife, running: bool) -> Self {
        let (end, why) = match life.end_state() {
            (WorkerEnd::Unrecorded, why) if running => match (life.connected, &life.drained) {
                (None, _) => (WorkerEnd::Queued, why),
                (Some(_), Some((_, draining))) => (WorkerEnd::Draining, Some(draining.as_str())),
                (Some(_), None) => (WorkerEnd::Running, why),
            },
            state => state,
        };
        WorkerStatus {
            task: task.to_string(),
            worker_id,
            job: life.job.clone(),
            host: life.host.clone(),
            pid: life.pid,
            by_hand: life.by_hand,
            end,
            why: why.map(str::to_string),
        }
    }
}
