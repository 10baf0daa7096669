//! The pipeline file: what a user writes to describe a run, parsed, then
//! validated, then handed out resolved.
//!
//! A pipeline file (TOML, or JSON when its name ends in `.json`) names the
//! run, sets the global resource budget, picks a launcher and lists the
//! tasks. This module turns its text into a [`Pipeline`] whose every field
//! is resolved (defaults applied, upstream ids turned into task positions,
//! durations parsed, a relative launcher template anchored at the file's
//! directory), or into one [`PipelineError::Invalid`] that lists every
//! problem at once, so a user fixes a file in one round rather than one
//! error per attempt, and bad input fails before anything is submitted.
//!
//! It leaves to others what only they can check: launchers check the
//! cluster settings against the cluster, workers run the commands. ROI
//! geometry rules live in `daisy_core::geometry`, so the file is refused
//! exactly when the scheduler could not handle it.
//!
//! Terms: a **problem** is one thing wrong with the file, naming the task,
//! the field and the value, and in a TOML file its line; the **budget** is
//! the `[resources]` table.
//!
//! # Layout
//! - `syntax`: text to a value tree (TOML or JSON) and the lines its
//!   values start on (TOML only), line and column of syntax errors.
//! - `schema`: the file as written, every table and field declared once
//!   as a serde struct, with its doc, its default and its rule.
//! - `reader`: serde over the value tree, every problem recorded and the
//!   read carried on; `rules`: what values keep beyond their type.
//! - `resolve`: the structs to the resolved [`Pipeline`] (raw to
//!   resolved), rules between the fields of one table.
//! - `validate`: rules between tasks (budget, ids, upstream, cycles).
//! - `problems`: the error, its problems, and their wording.
//! - `skip_mask`, `writes`: the Zarr arrays a task names, read at load.

pub(crate) mod budget;
mod problems;
pub mod python_worker;
mod reader;
mod resolve;
mod rules;
mod schema;
pub(crate) mod skip_mask;
mod syntax;
#[cfg(test)]
pub(super) mod tests;
mod validate;
mod writes;

pub use problems::{PipelineError, Problem, TaskProblem};

use daisy_core::protocol::{CodeKind, FunctionCode, TaskCode};
use daisy_core::{DependencyGraph, TaskSpec};
use launchers::ClusterOptions;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Workers a task gets when it does not set `max_workers`: one, as in daisy.
pub const DEFAULT_MAX_WORKERS: u32 = 1;

/// Unclean worker exits a task survives, when it does not set
/// `max_worker_restarts`, before it is abandoned.
pub const DEFAULT_MAX_WORKER_RESTARTS: u32 = 10;

/// Largest `batch_size`: a batch is one message each way, and a worker
/// lost with it hands it all back, so it stays far below a frame's limit.
pub const MAX_BATCH_SIZE: u32 = 1024;

/// Largest `prefetch`: blocks written ahead sit in a pipe buffer and in
/// the user's reader, which should stay small.
pub const MAX_PREFETCH: u32 = 64;

/// A validated pipeline file with every default applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipeline {
    /// The file it was read from (as given, not canonicalised).
    pub path: PathBuf,
    /// Names the run: the default run directory is `daisy_run/<name>`.
    pub name: String,
    /// The global budget, resource name to the ids workers are given
    /// (`cpu = 4` is `0` to `3`); empty when the file has no
    /// `[resources]` table.
    pub resources: BTreeMap<String, Vec<String>>,
    pub launcher: LauncherConfig,
    /// In file order: `TaskIdx(i)` in every `spec.upstream` is `tasks[i]`.
    pub tasks: Vec<TaskConfig>,
}

/// One `[[task]]` table, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskConfig {
    /// What the scheduler needs, with `upstream` resolved to positions in
    /// [`Pipeline::tasks`].
    pub spec: TaskSpec,
    /// The upstream task ids as written, in the order of `spec.upstream`.
    pub upstream: Vec<String>,
    /// What one worker of this task takes from the budget; keys may be
    /// absent from the budget only with amount 0.
    pub requires: BTreeMap<String, u64>,
    /// Whether each local worker is bound to the `cpu` ids it was given.
    pub pin: bool,
    /// Workers the driver starts at most; 0 means hand-launched only.
    pub max_workers: u32,
    /// Unclean worker exits tolerated before the task is abandoned.
    pub max_worker_restarts: u32,
    /// Per-block time limit, after which the worker kills the block.
    pub timeout: Option<Duration>,
    /// How long a launched worker may wait for a block before it is let
    /// go (started again when blocks come); `None` keeps it until the task
    /// has nothing left to hand out.
    pub idle_timeout: Option<Duration>,
    /// Blocks a worker takes per request and releases together; 0 is
    /// "auto" (the worker fits batches to its blocks' run time).
    pub batch_size: u32,
    /// Blocks a worker command is fed ahead of the one it works on.
    pub prefetch: u32,
    /// Whether workers measure what each block cost (CPU, memory, IO,
    /// GPU) and the driver stores it beside the done markers.
    pub resource_tracking: bool,
    pub command: UserCommand,
    /// Extra environment variables for the user's command.
    pub env: BTreeMap<String, String>,
    /// What the launcher starts as this task's worker instead of
    /// daisy-worker (`worker_program`; [`python_worker::command`] for
    /// function tasks); `None` for the driver's own choice.
    pub worker_program: Option<Vec<String>>,
    /// How this task's workers are started: `[launcher]` with the task's
    /// own `launcher` table laid over it.
    pub launcher: LauncherConfig,
    /// Blocks not to run (`skip_mask`), loaded and checked.
    pub skip_mask: Option<std::sync::Arc<crate::pipeline::skip_mask::SkipMask>>,
}

/// What a worker of the task runs (DESIGN "Workers and user code").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserCommand {
    /// `command`: one long-running process per worker, fed blocks as JSON
    /// lines on stdin.
    Worker(Vec<String>),
    /// `block_command`: one process per block, `{placeholders}` filled in.
    PerBlock(Vec<String>),
    /// `process_function` or `worker_function`: a Python function, called
    /// inside the worker process (`kind` says which of the two).
    Function { kind: CodeKind, code: FunctionCode },
}

impl TaskConfig {
    /// The code as the driver sends it to the task's workers.
    /// Whether its `skip_mask` masks `block` (a block of this task).
    pub fn is_masked(&self, block: &daisy_core::Block) -> bool {
        (self.skip_mask.as_ref()).is_some_and(|mask| mask.is_masked(block))
    }

    pub fn task_code(&self) -> TaskCode {
        let (kind, argv, function) = match &self.command {
            UserCommand::PerBlock(argv) => (CodeKind::BlockCommand, argv.clone(), None),
            UserCommand::Worker(argv) => (CodeKind::WorkerCommand, argv.clone(), None),
            UserCommand::Function { kind, code } => (*kind, Vec::new(), Some(code.clone())),
        };
        TaskCode {
            kind,
            argv,
            env: self.env.clone(),
            timeout_s: self.timeout.map(|t| t.as_secs_f64()),
            batch_size: self.batch_size,
            prefetch: self.prefetch,
            resource_tracking: self.resource_tracking,
            function,
        }
    }
}

/// A launcher table (`[launcher]`, or a task's laid over it), resolved:
/// how workers are started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LauncherConfig {
    pub kind: LauncherKind,
    /// What the jobs of a cluster backend ask for, a relative template
    /// taken as beside the pipeline file; unset options are left to the
    /// cluster's own defaults.
    pub cluster: ClusterOptions,
}

/// Which backend starts workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LauncherKind {
    /// Child processes on this machine.
    #[default]
    Local,
    /// SLURM batch jobs.
    Sbatch,
    /// LSF batch jobs.
    Bsub,
    /// SLURM's REST API.
    Slurmrestd,
}

impl LauncherKind {
    /// The name used in pipeline files (and by serde).
    pub fn as_str(self) -> &'static str {
        match self {
            LauncherKind::Local => "local",
            LauncherKind::Sbatch => "sbatch",
            LauncherKind::Bsub => "bsub",
            LauncherKind::Slurmrestd => "slurmrestd",
        }
    }
}

impl fmt::Display for LauncherKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Pipeline {
    /// The global budget as amounts: how many ids each key has.
    pub fn budget_amounts(&self) -> BTreeMap<String, u64> {
        let amounts = self.resources.iter();
        amounts
            .map(|(key, ids)| (key.clone(), ids.len() as u64))
            .collect()
    }

    /// Reads and validates the pipeline file at `path`; function tasks
    /// without a `worker_program` run `python -m daisy_rs.worker`
    /// (see [`python_worker`]).
    pub fn load(path: &Path, python: &str) -> Result<Pipeline, PipelineError> {
        let text = std::fs::read_to_string(path).map_err(|source| PipelineError::Read {
            file: path.to_path_buf(),
            source,
        })?;
        Self::from_str(&text, path, python)
    }

    /// Parses and validates `text` as if read from `path`: the extension
    /// picks the format (`.json` is JSON, anything else TOML), the path
    /// names the file in errors and anchors a relative launcher template;
    /// `python` runs function tasks' workers, as in [`Self::load`].
    pub fn from_str(text: &str, path: &Path, python: &str) -> Result<Pipeline, PipelineError> {
        let file = || path.to_path_buf();
        let (tree, lines) =
            syntax::Format::of(path)
                .parse(text)
                .map_err(|message| PipelineError::Syntax {
                    file: file(),
                    message,
                })?;
        resolve::pipeline(&tree, &lines, path, python).map_err(|mut problems| {
            // In the order of the file, as an editor goes through them;
            // those of no one place (a cycle) last.
            problems.sort_by_key(|problem| problem.line.unwrap_or(usize::MAX));
            PipelineError::Invalid {
                file: file(),
                problems,
            }
        })
    }

    /// The blockwise dependency graph of the tasks.
    pub fn graph(&self) -> DependencyGraph {
        let specs = self.tasks.iter().map(|task| task.spec.clone()).collect();
        DependencyGraph::new(specs)
            .expect("validation checks geometry, upstream, dimensions and cycles first")
    }

    /// The task with id `id`.
    pub fn task(&self, id: &str) -> Option<&TaskConfig> {
        self.tasks.iter().find(|task| task.spec.id == id)
    }

    /// Whether `block` is masked by its task's `skip_mask`: skipped like
    /// a block done before, never run.
    pub fn is_masked(&self, block: &daisy_core::Block) -> bool {
        let task = self.tasks.get(block.id.task.index());
        task.is_some_and(|task| task.is_masked(block))
    }
}

/// Every field a `[[task]]` table declares, in the schema's order; the
/// Python `Task` has a counterpart for each.
pub fn task_fields() -> &'static [&'static str] {
    schema::declared_fields::<schema::TaskTable>()
}

/// The problems of one `[[task]]` table, given as a value, read with the
/// file's own types and rules (`resolve::lone_task` says which),
/// its `requires` against `resources` (a `[resources]` table; an
/// unreadable one, whose problems the whole file's check reports, counts
/// as empty). Worded without the values the table holds, for the
/// Python side to name its own.
pub fn task_problems(table: &serde_json::Value, resources: &serde_json::Value) -> Vec<TaskProblem> {
    let pools = BTreeMap::<String, schema::Pool>::deserialize(resources);
    let budget = budget::amounts(&pools.unwrap_or_default());
    let problems = resolve::lone_task(table, &budget);
    (problems.iter())
        .map(|problem| TaskProblem::of(problem, table))
        .collect()
}
