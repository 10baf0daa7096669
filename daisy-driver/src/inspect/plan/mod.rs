//! `daisy-driver plan`: what a run of a pipeline would do, without doing
//! anything. Blocks, levels and roots per task from the graph, blocks
//! already done from the done markers (read-only: planning never creates
//! or changes a file), the workers each task gets phase by phase as tasks
//! drain ([`allocation`]), the job scripts a run would submit
//! ([`scripts`]), and every problem that would stop a run.
//!
//! [`render`] turns the plan into text; `--json` prints it as it is.

pub mod allocation;
mod check;
mod render;
pub mod scripts;

use crate::pipeline::{LauncherKind, Pipeline, TaskConfig, UserCommand};
use crate::run::budget::Budget;
use crate::run::launching::per_kind::TaskLaunchers;
use crate::run::launching::LaunchSettings;
use crate::run::program_check::check_programs;
use crate::run_dir::done_marker::DoneMarker;
use crate::run_dir::RunDir;
use allocation::Phase;
use daisy_core::geometry::BlockGrid;
use daisy_core::protocol::{CodeKind, FunctionCode, FunctionSource, WireRoi};
use daisy_core::{DependencyGraph, Fit, Scheduler, TaskIdx, WriteGrid, WriteLayout};
use scripts::{Submission, WorkerProgram};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The plan of a whole pipeline (`plan --json` prints this).
#[derive(Debug, Serialize)]
pub struct Plan {
    pub pipeline: String,
    pub file: PathBuf,
    pub run_dir: PathBuf,
    pub resources: BTreeMap<String, u64>,
    pub tasks: Vec<TaskPlan>,
    /// The pipeline's `[launcher]` kind: the tasks' unless they name their own.
    pub launcher: LauncherKind,
    /// The workers each task gets, phase by phase as tasks drain.
    pub phases: Vec<Phase>,
    /// The first submission of each task that gets workers.
    pub submissions: Vec<Submission>,
    /// Problems that would stop a run: done markers of another layout, a
    /// job script that cannot be rendered, a launcher that cannot start.
    pub problems: Vec<String>,
    /// What may go wrong but need not: a program not found here that may
    /// exist on the compute nodes.
    pub warnings: Vec<String>,
    /// What the scheduler said of each first submission (`--check`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<check::SubmissionCheck>,
}

/// The plan of one task.
#[derive(Debug, Serialize)]
pub struct TaskPlan {
    pub id: String,
    pub upstream: Vec<String>,
    pub total_roi: WireRoi,
    pub total_write_roi: WireRoi,
    pub read_roi: WireRoi,
    pub write_roi: WireRoi,
    pub fit: Fit,
    pub read_write_conflict: bool,
    pub blocks: u64,
    pub levels: usize,
    /// Blocks ready when the run starts.
    pub root_blocks: u64,
    pub done_blocks: u64,
    /// Blocks its `skip_mask` removes (never run, counted as skipped).
    pub masked_blocks: u64,
    pub remaining_blocks: u64,
    pub requires: BTreeMap<String, u64>,
    /// The launcher that starts its workers.
    pub launcher: LauncherKind,
    /// Workers one cluster job runs, each its own job step.
    pub workers_per_job: u32,
    pub max_workers: u32,
    /// Workers the task may run at once when it has the budget to itself.
    pub workers: u32,
    /// Blocks a worker takes per request and releases together.
    pub batch_size: u32,
    /// Blocks a worker command is fed ahead of the one it works on.
    pub prefetch: u32,
    /// Whether what each block costs is measured and stored.
    pub resource_tracking: bool,
    pub command_kind: &'static str,
    pub command: Vec<String>,
    /// The Zarr arrays its blocks write into (`writes`).
    pub writes: Vec<WritePlan>,
}

/// What a task's blocks do to one array they write into.
#[derive(Debug, Serialize)]
pub struct WritePlan {
    pub array: String,
    /// A chunk's and a shard's shape, in world units.
    pub chunk: Vec<i64>,
    pub shard: Option<Vec<i64>>,
    pub chunks_per_block: u64,
    pub shards_per_block: Option<u64>,
    /// The most blocks writing into one shard (or, unsharded, one chunk).
    pub blocks_per_lock: u64,
    /// Shards (or chunks) the task writes into: the most blocks it can
    /// have in flight at once.
    pub locks_written: u64,
    /// Blocks writing parts of chunks other blocks write (`share_chunks`).
    pub blocks_sharing_chunks: u64,
}

impl WritePlan {
    fn of(grid: &BlockGrid, array: &WriteGrid) -> Self {
        let layout = WriteLayout::of(grid, array);
        Self {
            array: array.array.clone(),
            chunk: array.chunk.as_slice().to_vec(),
            shard: array.shard.map(|s| s.as_slice().to_vec()),
            chunks_per_block: layout.chunks_per_block,
            shards_per_block: layout.shards_per_block,
            blocks_per_lock: layout.blocks_per_lock,
            locks_written: layout.locks_written,
            blocks_sharing_chunks: layout.blocks_sharing_chunks,
        }
    }
}

/// Plans `pipeline` against the done markers in `run_dir`, with launched
/// workers running `worker`.
pub fn plan(pipeline: &Pipeline, run_dir: &RunDir, worker: WorkerProgram) -> Plan {
    let graph = Arc::new(pipeline.graph());
    let mut problems = Vec::new();
    let markers: Vec<Option<DoneMarker>> = pipeline
        .tasks
        .iter()
        .map(|task| {
            open_marker(run_dir, task).unwrap_or_else(|problem| {
                problems.push(problem);
                None
            })
        })
        .collect();
    let tasks: Vec<TaskPlan> = graph
        .task_indices()
        .map(|t| {
            let done = markers[t.index()]
                .as_ref()
                .map_or(0, DoneMarker::count_done);
            task_plan(pipeline, &graph, t, done)
        })
        .collect();
    let blocks_left = tasks.iter().map(|t| t.remaining_blocks).collect();
    let runnable = runnable_at_start(pipeline, graph.clone(), &markers);
    let allocation = allocation::simulate(pipeline, &graph, blocks_left, &runnable);
    let submissions =
        scripts::first_submissions(pipeline, run_dir, worker, &allocation.grants, &mut problems);
    problems.extend(launcher_problem(pipeline));
    let dir = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let programs = check_programs(pipeline, &dir, Some(worker.path));
    problems.extend(programs.problems);
    Plan {
        pipeline: pipeline.name.clone(),
        file: pipeline.path.clone(),
        run_dir: run_dir.path().to_path_buf(),
        resources: pipeline.budget_amounts(),
        tasks,
        launcher: pipeline.launcher.kind,
        phases: allocation.phases,
        submissions,
        problems,
        warnings: programs.warnings,
        checks: Vec::new(),
    }
}

fn open_marker(run_dir: &RunDir, task: &TaskConfig) -> Result<Option<DoneMarker>, String> {
    DoneMarker::open_existing(&run_dir.done_marker(&task.spec.id), &task.spec)
        .map_err(|error| format!("task {:?}: {error}", task.spec.id))
}

/// Per task, the blocks ready when a run starts, as the driver's first
/// tick finds them: the real scheduler, asked in task order, with blocks
/// done in an earlier run skipped.
fn runnable_at_start(
    pipeline: &Pipeline,
    graph: Arc<DependencyGraph>,
    markers: &[Option<DoneMarker>],
) -> Vec<u64> {
    let mut scheduler = Scheduler::new(graph.clone());
    graph
        .task_indices()
        .map(|task| {
            let marker = markers[task.index()].as_ref();
            let done = |block: &_| marker.is_some_and(|m| m.is_done(block));
            let mut is_done = |block: &_| done(block) || pipeline.is_masked(block);
            match scheduler.has_runnable(task, &mut is_done) {
                true => {
                    let counters = scheduler.counters(task);
                    counters.ready + counters.processing
                }
                false => 0,
            }
        })
        .collect()
}

/// Why a launcher the tasks use cannot start here (its commands are not on
/// PATH, slurmrestd settings are missing), as a run would find out.
fn launcher_problem(pipeline: &Pipeline) -> Option<String> {
    let settings = LaunchSettings {
        poll_interval: launchers::DEFAULT_POLL_INTERVAL,
        stop_grace: launchers::DEFAULT_GRACE,
        fork_server: None,
        fork_workers: false,
    };
    let error = TaskLaunchers::new(pipeline, settings).err()?;
    Some(format!("{error:#}"))
}

fn function_kind(kind: CodeKind) -> &'static str {
    match kind {
        CodeKind::WorkerFunction => "worker_function",
        _ => "process_function",
    }
}

/// A function as `plan` shows it, in the place of a command line.
fn function_shown(code: &FunctionCode) -> Vec<String> {
    match &code.source {
        FunctionSource::Reference(reference) => vec![reference.clone()],
        FunctionSource::Pickle(path) => vec![format!("pickle:{path}")],
    }
}

fn task_plan(pipeline: &Pipeline, graph: &DependencyGraph, task: TaskIdx, done: u64) -> TaskPlan {
    let config = &pipeline.tasks[task.index()];
    let task_graph = graph.task_graph(task);
    let blocks = task_graph.num_blocks();
    let roots = if graph.is_root(task) && task_graph.num_levels() > 0 {
        task_graph.num_level_blocks(0)
    } else {
        graph.blocks_without_upstream(task).len() as u64
    };
    let (command_kind, command) = match &config.command {
        UserCommand::Worker(argv) => ("worker", argv.clone()),
        UserCommand::PerBlock(argv) => ("block", argv.clone()),
        UserCommand::Function { kind, code } => (function_kind(*kind), function_shown(code)),
    };
    let spec = &config.spec;
    let masked = config.skip_mask.as_ref().map_or(0, |m| m.masked());
    let writes: Vec<WritePlan> = (spec.writes.iter())
        .map(|array| WritePlan::of(task_graph.grid(), array))
        .collect();
    let at_once = writes
        .iter()
        .map(|w| w.locks_written)
        .min()
        .unwrap_or(u64::MAX);
    TaskPlan {
        id: spec.id.clone(),
        upstream: config.upstream.clone(),
        total_roi: WireRoi::from(&spec.total_roi),
        total_write_roi: WireRoi::from(&task_graph.grid().total_write),
        read_roi: WireRoi::from(&spec.read_roi),
        write_roi: WireRoi::from(&spec.write_roi),
        fit: spec.fit,
        read_write_conflict: spec.read_write_conflict,
        blocks,
        levels: task_graph.num_levels(),
        root_blocks: roots,
        done_blocks: done,
        masked_blocks: masked,
        remaining_blocks: blocks.saturating_sub(done + masked),
        requires: config.requires.clone(),
        launcher: config.launcher.kind,
        workers_per_job: match config.launcher.kind {
            LauncherKind::Local => 1,
            _ => config.launcher.cluster.workers_per_job(),
        },
        max_workers: config.max_workers,
        workers: workers_under_budget(config, &pipeline.resources)
            .min(u32::try_from(at_once).unwrap_or(u32::MAX)),
        batch_size: config.batch_size,
        prefetch: config.prefetch,
        resource_tracking: config.resource_tracking,
        command_kind,
        command,
        writes,
    }
}

/// Workers `task` may run at once with the budget to itself.
fn workers_under_budget(task: &TaskConfig, budget: &BTreeMap<String, Vec<String>>) -> u32 {
    let shares = Budget::new(budget.clone()).allocate_up_to(&task.requires, task.max_workers);
    shares.len() as u32
}

impl Plan {
    /// True if a run could start as planned.
    pub fn is_runnable(&self) -> bool {
        self.problems.is_empty()
    }
}
