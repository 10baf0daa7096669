//! Status from the run directory alone: done markers (read-only) for
//! done blocks, the last run's events for failures, abandoned tasks and
//! workers ([`LastRunEvents`], summed up while `events.jsonl` streams
//! by: done blocks come from the markers, never from the events), the
//! dependency graph for orphans. `run --retry-failed` asks the same
//! question ("which blocks failed, and which wait for them?"),
//! so it is answered here once, and so does `report`'s picture of the
//! done markers ([`Findings::state`] per block).

use super::block_by_id::block_by_id;
use super::{FailedBlock, LastRun, RunEnding, TaskStatus, WorkerEnd, WorkerStatus};
use crate::inspect::cost_summary::{self, TaskCosts};
use crate::pipeline::Pipeline;
use crate::run_dir::done_marker::costs::{CostTable, StoredCost};
use crate::run_dir::done_marker::DoneMarker;
use crate::run_dir::events::history::{HistoryEvent, RunFold, RunHistory};
use crate::run_dir::events::Event;
use crate::run_dir::RunDir;
use anyhow::Context as _;
use daisy_core::protocol::WireRoi;
use daisy_core::{Block, BlockId, DependencyGraph, TaskCounters, TaskIdx};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

/// The numbers per task, and what did not add up.
pub(super) struct Analysis {
    pub tasks: Vec<TaskStatus>,
    pub warnings: Vec<String>,
}

/// What `run --retry-failed` may run: the blocks that failed for good in
/// the last run and the blocks that wait for them, none of them done.
#[derive(Debug, Default)]
pub struct RetryBlocks {
    pub blocks: HashSet<BlockId>,
    pub failed: u64,
    pub orphaned: u64,
}

/// The last failure of a block in the last run.
#[derive(Clone, Debug)]
struct Failure {
    attempts: u32,
    error: String,
    worker_id: Option<u64>,
    for_good: bool,
}

/// What became of a block, as `status` counts it. Ordered by how much it
/// needs attention, so a picture cell standing for many blocks can show
/// the most urgent one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BlockState {
    Done,
    /// Not run yet, ready, running, or waiting for a retry.
    Remaining,
    Orphaned,
    Failed,
}

impl BlockState {
    pub fn label(self) -> &'static str {
        match self {
            BlockState::Done => "done",
            BlockState::Remaining => "remaining",
            BlockState::Orphaned => "orphaned",
            BlockState::Failed => "failed",
        }
    }
}

/// What `status` needs of the last run's events, by task id: its start
/// and end, its failures, abandoned tasks and workers.
#[derive(Debug, Default)]
pub struct LastRunEvents {
    /// Unix seconds, mode and `retry_failed` of its `run_started`.
    started: Option<(f64, String, bool)>,
    finished: Option<RunEnding>,
    failed: HashMap<String, BTreeMap<u64, Failure>>,
    abandoned: HashMap<String, String>,
    /// How the run ended each task, from its `task_done` line.
    ended: BTreeMap<String, TaskCounters>,
    /// Every task the events name.
    tasks: HashSet<String>,
    /// By worker id; an end not recorded is `Unrecorded` until the end.
    workers: HashMap<u64, WorkerStatus>,
}

/// The last run of a run directory; none (with a warning) if it has no
/// events.jsonl, as a daisy 2.0 run directory holding only done markers.
pub fn read_last_run(run_dir: &RunDir) -> anyhow::Result<(LastRunEvents, Vec<String>)> {
    let path = run_dir.events();
    if !path.exists() {
        let warning = format!(
            "{} does not exist: no run recorded events here",
            path.display()
        );
        return Ok((LastRunEvents::default(), vec![warning]));
    }
    let history = RunHistory::read(&path, LastRunEvents::default)?;
    let warnings = history.warnings();
    Ok((history.last_run.unwrap_or_default(), warnings))
}

/// What the run directory says, per task (indexed like the pipeline).
pub struct Findings {
    graph: DependencyGraph,
    markers: Vec<Option<DoneMarker>>,
    /// Per task, what its measured blocks cost (tasks tracking resources).
    costs: Vec<Option<CostTable>>,
    /// Per task, the blocks its `skip_mask` removes.
    masked: Vec<u64>,
    /// Blocks that failed for good in the last run and are not done.
    failed: Vec<BTreeMap<u64, Failure>>,
    /// Blocks not done that wait for a failed block, or belong to a task
    /// the last run abandoned.
    orphaned: Vec<HashSet<u64>>,
    abandoned: Vec<Option<String>>,
    warnings: Vec<String>,
}

impl Findings {
    fn is_done(&self, block: &Block) -> bool {
        self.markers[block.id.task.index()]
            .as_ref()
            .is_some_and(|m| m.is_done(block))
    }

    fn done_count(&self, task: TaskIdx) -> u64 {
        self.markers[task.index()]
            .as_ref()
            .map_or(0, DoneMarker::count_done)
    }

    pub fn graph(&self) -> &DependencyGraph {
        &self.graph
    }

    /// The blocks of `task` that failed for good or are orphaned, and
    /// which: few, where the task's blocks may be 10⁸.
    pub fn failed_and_orphaned(&self, task: TaskIdx) -> Vec<Block> {
        let ids = (self.failed[task.index()].keys()).chain(&self.orphaned[task.index()]);
        ids.filter_map(|&id| block_by_id(&self.graph, task, id))
            .filter(|block| !self.is_done(block))
            .collect()
    }

    /// What became of `block`.
    pub fn state(&self, block: &Block) -> BlockState {
        let task = block.id.task.index();
        if self.is_done(block) {
            BlockState::Done
        } else if self.failed[task].contains_key(&block.id.spatial) {
            BlockState::Failed
        } else if self.orphaned[task].contains(&block.id.spatial) {
            BlockState::Orphaned
        } else {
            BlockState::Remaining
        }
    }

    /// Reads what blocks cost, for `status` and `report` (`run
    /// --retry-failed` has no use for it). A task whose cost arrays cannot
    /// be read is a warning: the figures are for diagnosis, the counts
    /// stand without them.
    pub fn read_costs(&mut self) {
        for (task, marker) in self.markers.iter().enumerate() {
            let Some(marker) = marker else { continue };
            match marker.read_costs() {
                Ok(table) => self.costs[task] = table,
                Err(error) => {
                    let id = &self.graph.task(TaskIdx(task as u32)).id;
                    let error = anyhow::Error::new(error);
                    (self.warnings).push(format!(
                        "task {id:?}: cannot read what blocks cost: {error:#}"
                    ));
                }
            }
        }
    }

    /// The measured blocks of `task`, by block id, and what each cost
    /// (none before [`Self::read_costs`]).
    pub fn measured_blocks(&self, task: TaskIdx) -> Vec<(u64, StoredCost)> {
        let marker = self.markers[task.index()].as_ref();
        match (marker, &self.costs[task.index()]) {
            (Some(marker), Some(table)) => cost_summary::measured_blocks(marker, table),
            _ => Vec::new(),
        }
    }

    /// What `block` cost, if it was measured.
    pub fn block_cost(&self, block: &Block) -> Option<StoredCost> {
        let task = block.id.task.index();
        let cell = self.markers[task].as_ref()?.cell_of(block)?;
        self.costs[task].as_ref()?.get(cell)
    }

    /// The numbers of `task`, as `status` shows them.
    pub fn task_status(&self, run_dir: &RunDir, task: TaskIdx) -> TaskStatus {
        task_status(self, run_dir, task)
    }

    /// Things that did not add up (tasks the pipeline lacks).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

pub(super) fn analyse(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    last_run: &LastRunEvents,
) -> anyhow::Result<Analysis> {
    let mut findings = findings(pipeline, run_dir, last_run)?;
    findings.read_costs();
    let tasks = findings
        .graph
        .task_indices()
        .map(|task| task_status(&findings, run_dir, task))
        .collect();
    Ok(Analysis {
        tasks,
        warnings: findings.warnings,
    })
}

/// The blocks `run --retry-failed` runs for `pipeline` in `run_dir`.
pub fn blocks_to_retry(pipeline: &Pipeline, run_dir: &RunDir) -> anyhow::Result<RetryBlocks> {
    let (last_run, _) = read_last_run(run_dir)?;
    let findings = findings(pipeline, run_dir, &last_run)?;
    let mut retry = RetryBlocks::default();
    for task in findings.graph.task_indices() {
        let ids = |spatial: &u64| BlockId {
            task,
            spatial: *spatial,
        };
        let failed = &findings.failed[task.index()];
        let orphaned = &findings.orphaned[task.index()];
        retry.failed += failed.len() as u64;
        retry.orphaned += orphaned.len() as u64;
        retry.blocks.extend(failed.keys().map(ids));
        retry.blocks.extend(orphaned.iter().map(ids));
    }
    Ok(retry)
}

/// Reads the done markers of `pipeline`'s tasks in `run_dir` and finds
/// the failed and orphaned blocks of `last_run`.
pub fn findings(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    last_run: &LastRunEvents,
) -> anyhow::Result<Findings> {
    let graph = pipeline.graph();
    let markers = pipeline
        .tasks
        .iter()
        .map(|t| DoneMarker::open_existing(&run_dir.done_marker(&t.spec.id), &t.spec))
        .collect::<Result<Vec<_>, _>>()
        .context("reading the done markers")?;
    let tasks = graph.num_tasks();
    let masked = (pipeline.tasks.iter())
        .map(|t| t.skip_mask.as_ref().map_or(0, |mask| mask.masked()))
        .collect();
    let mut findings = Findings {
        markers,
        costs: vec![None; tasks],
        masked,
        failed: (0..tasks).map(|_| BTreeMap::new()).collect(),
        orphaned: vec![HashSet::new(); tasks],
        abandoned: vec![None; tasks],
        warnings: Vec::new(),
        graph,
    };
    take_last_run(&mut findings, last_run);
    let failed_blocks = keep_failed_not_done(&mut findings);
    orphan_downstream(&mut findings, failed_blocks);
    orphan_abandoned_tasks(&mut findings);
    Ok(findings)
}

impl RunFold for LastRunEvents {
    fn on_event(&mut self, event: &HistoryEvent) {
        match &event.kind {
            Event::RunStarted {
                mode, retry_failed, ..
            } => self.started = Some((event.time, mode.to_string(), *retry_failed)),
            Event::RunFinished { completed, seconds } => {
                self.finished = Some(RunEnding {
                    completed: *completed,
                    seconds: *seconds,
                })
            }
            Event::BlockFailed { task, .. } => self.on_failure(task, &event.kind),
            Event::BlockDone { task, .. } | Event::BlocksDone { task, .. } => {
                self.note_task(task);
            }
            Event::TaskAbandoned { task, why, .. } => {
                self.note_task(task);
                self.abandoned.insert(task.to_string(), why.to_string());
            }
            Event::TaskDone { task, counters } => {
                self.ended.insert(task.to_string(), *counters);
            }
            kind => on_worker_event(&mut self.workers, kind),
        }
    }
}

impl LastRunEvents {
    fn note_task(&mut self, task: &str) {
        if !self.tasks.contains(task) {
            self.tasks.insert(task.to_string());
        }
    }

    /// Keeps the last failure of each block (a block done later in the
    /// run failed only retried attempts: not for good).
    fn on_failure(&mut self, task: &str, kind: &Event) {
        let Event::BlockFailed {
            block_id,
            worker_id,
            error,
            for_good,
            ..
        } = kind
        else {
            return;
        };
        self.note_task(task);
        let failed = self.failed.entry(task.to_string()).or_default();
        let failure = failed.entry(*block_id).or_insert(Failure {
            attempts: 0,
            error: String::new(),
            worker_id: None,
            for_good: false,
        });
        failure.attempts += 1;
        failure.error = error.to_string();
        failure.worker_id = *worker_id;
        failure.for_good = *for_good;
    }
}

/// Failures and abandoned tasks of the last run, by task index; tasks the
/// pipeline lacks are warned about.
fn take_last_run(findings: &mut Findings, last_run: &LastRunEvents) {
    let mut unknown: Vec<&String> = (last_run.tasks.iter())
        .filter(|task| findings.graph.task_index(task).is_none())
        .collect();
    unknown.sort();
    for task in unknown {
        findings.warnings.push(format!(
            "events.jsonl names task {task:?}, which the pipeline does not have (was it renamed?)"
        ));
    }
    for (task, failed) in &last_run.failed {
        if let Some(index) = findings.graph.task_index(task) {
            findings.failed[index.index()] = failed.clone();
        }
    }
    for (task, why) in &last_run.abandoned {
        if let Some(index) = findings.graph.task_index(task) {
            findings.abandoned[index.index()] = Some(why.clone());
        }
    }
}

/// Keeps the failures that were for good and whose block is not done
/// (its marker may have been set after the event, e.g. by a later run of
/// daisy 2.0); returns their blocks. Each is looked up by its id, so this
/// costs per failure, not per block of the task.
fn keep_failed_not_done(findings: &mut Findings) -> Vec<Block> {
    let mut blocks = Vec::new();
    for task in findings.graph.task_indices() {
        findings.failed[task.index()].retain(|_, f| f.for_good);
        let not_done: Vec<Block> = (findings.failed[task.index()].keys())
            .filter_map(|&id| block_by_id(&findings.graph, task, id))
            .filter(|block| !findings.is_done(block))
            .collect();
        let kept: HashSet<u64> = not_done.iter().map(|b| b.id.spatial).collect();
        findings.failed[task.index()].retain(|id, _| kept.contains(id));
        blocks.extend(not_done);
    }
    blocks
}

/// Every block downstream of a failed block, transitively, that is not
/// done. Done blocks are passed through: what waits for them may also
/// wait for the failed block.
fn orphan_downstream(findings: &mut Findings, failed: Vec<Block>) {
    let mut seen: HashSet<BlockId> = failed.iter().map(|b| b.id).collect();
    let mut to_visit: Vec<Block> = failed
        .iter()
        .flat_map(|b| findings.graph.downstream(b))
        .collect();
    while let Some(block) = to_visit.pop() {
        if !seen.insert(block.id) {
            continue;
        }
        if !findings.is_done(&block) {
            findings.orphaned[block.id.task.index()].insert(block.id.spatial);
        }
        to_visit.extend(findings.graph.downstream(&block));
    }
}

/// A task the last run abandoned had its remaining blocks orphaned.
fn orphan_abandoned_tasks(findings: &mut Findings) {
    for task in findings.graph.task_indices() {
        if findings.abandoned[task.index()].is_none() {
            continue;
        }
        let rest: Vec<u64> = findings
            .graph
            .task_graph(task)
            .all_blocks()
            .filter(|b| !findings.is_done(b))
            .map(|b| b.id.spatial)
            .filter(|id| !findings.failed[task.index()].contains_key(id))
            .collect();
        findings.orphaned[task.index()].extend(rest);
    }
}

fn task_status(findings: &Findings, run_dir: &RunDir, task: TaskIdx) -> TaskStatus {
    let id = findings.graph.task(task).id.clone();
    let total = findings.graph.task_graph(task).num_blocks();
    let done = findings.done_count(task);
    let failed_blocks: Vec<FailedBlock> = findings.failed[task.index()]
        .iter()
        .map(|(&block_id, f)| FailedBlock {
            block_id,
            write_roi: block_by_id(&findings.graph, task, block_id)
                .map(|block| WireRoi::from(&block.write_roi)),
            attempts: f.attempts,
            error: f.error.clone(),
            worker_id: f.worker_id,
            log: user_log(run_dir, &id, f.worker_id),
        })
        .collect();
    let failed = failed_blocks.len() as u64;
    let orphaned = findings.orphaned[task.index()].len() as u64;
    let skipped = findings.masked[task.index()];
    let costs: Option<TaskCosts> = cost_summary::summarise(&findings.measured_blocks(task));
    TaskStatus {
        costs,
        remaining: total.saturating_sub(done + skipped + failed + orphaned),
        skipped,
        abandoned: findings.abandoned[task.index()].clone(),
        id,
        total,
        done,
        failed,
        orphaned,
        failed_blocks,
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

/// The last run's start, end and workers.
pub(super) fn last_run(events: &LastRunEvents, running: bool) -> Option<LastRun> {
    let (started, mode, retry_failed) = events.started.clone()?;
    let mut workers: Vec<WorkerStatus> = events.workers.values().cloned().collect();
    workers.sort_by_key(|w| w.worker_id);
    for worker in &mut workers {
        if running && worker.end == WorkerEnd::Unrecorded {
            worker.end = WorkerEnd::Running;
        }
    }
    Some(LastRun {
        started,
        mode,
        retry_failed,
        finished: events.finished.clone(),
        workers,
        tasks_ended: events.ended.clone(),
    })
}

impl LastRunEvents {
    /// The last run started and has not recorded its end.
    pub(super) fn unfinished(&self) -> bool {
        self.started.is_some() && self.finished.is_none()
    }
}

fn worker_entry<'a>(
    workers: &'a mut HashMap<u64, WorkerStatus>,
    task: &str,
    worker_id: u64,
) -> &'a mut WorkerStatus {
    workers.entry(worker_id).or_insert_with(|| WorkerStatus {
        task: task.to_string(),
        worker_id,
        job: None,
        host: None,
        pid: None,
        by_hand: false,
        end: WorkerEnd::Unrecorded,
        why: None,
    })
}

/// A worker's submission, connection and end, by worker id. An end not
/// recorded is `Unrecorded` (see [`last_run`]).
fn on_worker_event(workers: &mut HashMap<u64, WorkerStatus>, kind: &Event) {
    match kind {
        Event::WorkerSubmitted {
            task,
            worker_id,
            job,
        } => worker_entry(workers, task, *worker_id).job = Some(job.to_string()),
        Event::WorkerConnected {
            task,
            worker_id,
            host,
            pid,
            by_hand,
            ..
        } => {
            // Also a requeued job connecting again: running anew.
            let worker = worker_entry(workers, task, *worker_id);
            (worker.host, worker.pid) = (Some(host.to_string()), Some(*pid));
            (worker.end, worker.why) = (WorkerEnd::Unrecorded, None);
            worker.by_hand = *by_hand;
        }
        Event::WorkerStartFailed {
            task,
            worker_id,
            error,
        } => {
            let worker = worker_entry(workers, task, *worker_id);
            (worker.end, worker.why) = (WorkerEnd::FailedStart, Some(error.to_string()));
        }
        Event::WorkerGone {
            task,
            worker_id,
            clean,
            why,
        } => {
            let worker = worker_entry(workers, task, *worker_id);
            worker.end = if *clean {
                WorkerEnd::Clean
            } else {
                WorkerEnd::Lost
            };
            worker.why = Some(why.to_string());
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn read(lines: &[&str]) -> LastRunEvents {
        let text = lines.join("\n");
        let history =
            RunHistory::from_reader(Path::new("e"), text.as_bytes(), LastRunEvents::default);
        history.unwrap().last_run.unwrap()
    }

    fn failed(block_id: u64, for_good: bool) -> String {
        format!(
            r#"{{"time": 2, "event": "block_failed", "task": "t", "block_id": {block_id}, "error": "e", "for_good": {for_good}}}"#
        )
    }

    #[test]
    fn blocks_failed_for_good_are_found_with_done_lines_or_summed_up_records() {
        let started = r#"{"time": 1, "event": "run_started", "pipeline": "p", "mode": "serial"}"#;
        let done_line = r#"{"time": 3, "event": "block_done", "task": "t", "block_id": 1}"#;
        let done_record =
            r#"{"time": 3, "event": "blocks_done", "task": "t", "count": 1, "first": 3}"#;
        let (retried, again, for_good) = (failed(1, false), failed(2, false), failed(2, true));
        for done in [done_line, done_record] {
            let events = read(&[started, &retried, done, &again, &for_good]);
            let failed = &events.failed["t"];
            let for_good: Vec<u64> = (failed.iter())
                .filter(|(_, f)| f.for_good)
                .map(|(id, _)| *id)
                .collect();
            assert_eq!(for_good, [2], "{done}");
            assert_eq!(failed[&2].attempts, 2);
            assert_eq!(events.tasks, HashSet::from(["t".to_string()]));
        }
    }
}
