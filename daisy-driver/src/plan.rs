//! `daisy-driver plan`: what a run of a pipeline would do, without doing
//! anything. Blocks, levels and roots per task from the graph, blocks
//! already done from the done markers (read-only: planning never creates
//! or changes a file), and the workers each task may get under the
//! resource budget.

use crate::done_marker::DoneMarker;
use crate::pipeline::{Pipeline, TaskConfig, UserCommand};
use crate::run_dir::RunDir;
use daisy_core::protocol::WireRoi;
use daisy_core::{DependencyGraph, Fit, TaskIdx};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The plan of a whole pipeline (`plan --json` prints this).
#[derive(Debug, Serialize)]
pub struct Plan {
    pub pipeline: String,
    pub file: PathBuf,
    pub run_dir: PathBuf,
    pub resources: BTreeMap<String, u64>,
    pub tasks: Vec<TaskPlan>,
    /// Problems that would stop a run (done markers of another layout).
    pub problems: Vec<String>,
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
    pub remaining_blocks: u64,
    pub requires: BTreeMap<String, u64>,
    pub max_workers: u32,
    /// Workers the task may run at once when it has the budget to itself.
    pub workers: u32,
    /// Blocks a worker takes per request and releases together.
    pub batch_size: u32,
    /// Blocks a worker command is fed ahead of the one it works on.
    pub prefetch: u32,
    pub command_kind: &'static str,
    pub command: Vec<String>,
}

/// Plans `pipeline` against the done markers in `run_dir`.
pub fn plan(pipeline: &Pipeline, run_dir: &RunDir) -> Plan {
    let graph = pipeline.graph();
    let mut problems = Vec::new();
    let tasks = pipeline
        .tasks
        .iter()
        .enumerate()
        .map(|(i, task)| {
            let done = done_blocks(run_dir, task).unwrap_or_else(|problem| {
                problems.push(problem);
                0
            });
            task_plan(pipeline, &graph, TaskIdx(i as u32), done)
        })
        .collect();
    Plan {
        pipeline: pipeline.name.clone(),
        file: pipeline.path.clone(),
        run_dir: run_dir.path().to_path_buf(),
        resources: pipeline.resources.clone(),
        tasks,
        problems,
    }
}

fn done_blocks(run_dir: &RunDir, task: &TaskConfig) -> Result<u64, String> {
    match DoneMarker::open_existing(&run_dir.done_marker(&task.spec.id), &task.spec) {
        Ok(marker) => Ok(marker.map_or(0, |m| m.count_done())),
        Err(error) => Err(format!("task {:?}: {error}", task.spec.id)),
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
    };
    let spec = &config.spec;
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
        remaining_blocks: blocks.saturating_sub(done),
        requires: config.requires.clone(),
        max_workers: config.max_workers,
        workers: workers_under_budget(config, &pipeline.resources),
        batch_size: config.batch_size,
        prefetch: config.prefetch,
        command_kind,
        command,
    }
}

/// `min(max_workers, budget[k] / requires[k] for every required k)`.
pub fn workers_under_budget(task: &TaskConfig, budget: &BTreeMap<String, u64>) -> u32 {
    task.requires
        .iter()
        .filter(|(_, &need)| need > 0)
        .map(|(key, &need)| budget.get(key).copied().unwrap_or(0) / need)
        .fold(task.max_workers as u64, u64::min) as u32
}

impl Plan {
    /// True if a run could start as planned.
    pub fn is_runnable(&self) -> bool {
        self.problems.is_empty()
    }

    /// The human-readable plan.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "pipeline {:?} ({})",
            self.pipeline,
            self.file.display()
        );
        let _ = writeln!(out, "run dir  {}", self.run_dir.display());
        let _ = writeln!(out, "budget   {}", render_map(&self.resources));
        for task in &self.tasks {
            out.push('\n');
            task.render(&mut out);
        }
        for problem in &self.problems {
            let _ = writeln!(out, "\nproblem: {problem}");
        }
        out
    }
}

impl TaskPlan {
    fn render(&self, out: &mut String) {
        let upstream = match self.upstream.is_empty() {
            true => "none".to_string(),
            false => self.upstream.join(", "),
        };
        let conflict = if self.read_write_conflict {
            "on"
        } else {
            "off"
        };
        let _ = writeln!(out, "task {:?} (upstream: {upstream})", self.id);
        let _ = writeln!(
            out,
            "  total roi    {} (writes {})",
            roi(&self.total_roi),
            roi(&self.total_write_roi)
        );
        let _ = writeln!(
            out,
            "  block        read {} write {}, fit {}, read/write conflict {conflict}",
            roi(&self.read_roi),
            roi(&self.write_roi),
            self.fit
        );
        let levels = if self.levels == 1 { "level" } else { "levels" };
        let _ = writeln!(
            out,
            "  blocks       {} in {} {levels}, {} roots (ready when nothing is done)",
            self.blocks, self.levels, self.root_blocks
        );
        let _ = writeln!(
            out,
            "  done         {} done, {} to run",
            self.done_blocks, self.remaining_blocks
        );
        let _ = writeln!(
            out,
            "  workers      {} (max_workers {}, requires {})",
            self.workers,
            self.max_workers,
            render_map(&self.requires)
        );
        let _ = writeln!(
            out,
            "  batches      {} blocks per request, prefetch {}",
            self.batch_size, self.prefetch
        );
        let _ = writeln!(
            out,
            "  command      {} command: {}",
            self.command_kind,
            self.command.join(" ")
        );
    }
}

fn roi(roi: &WireRoi) -> String {
    let join = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    format!(
        "{{offset [{}], shape [{}]}}",
        join(&roi.offset),
        join(&roi.shape)
    )
}

fn render_map(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "{}".to_string();
    }
    let items: Vec<String> = map.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", items.join(", "))
}
