//! Status from the run directory alone: each task's
//! [`TaskStatus`](crate::inspect::task_status::TaskStatus) from
//! [`crate::run_dir::run_state`] (done markers read against the last
//! run's events), with the line where the last run's part of each failed
//! block's log starts, and the last run's workers.

use super::{LastRun, TaskStatus, WorkerStatus};
use crate::pipeline::Pipeline;
use crate::run_dir::run_state::{BlockStates, RunEvents, WorkerEnd, WorkerLife};
use crate::run_dir::user_logs;
use crate::run_dir::RunDir;
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
        let never_submitted = life
            .waiting_for
            .as_ref()
            .map(|limit| format!("never submitted: it waited for {limit} until the run ended"));
        let why = match (end, &never_submitted) {
            (WorkerEnd::Unrecorded, Some(never)) => Some(never.as_str()),
            _ => why,
        };
        WorkerStatus {
            task: task.to_string(),
            worker_id,
            job: life.job.clone(),
            host: life.host.clone(),
            pid: life.pid,
            by_hand: life.by_hand,
            waiting_for: life
                .waiting_for
                .clone()
                .filter(|_| end == WorkerEnd::Queued),
            end,
            why: why.map(str::to_string),
        }
    }
}
