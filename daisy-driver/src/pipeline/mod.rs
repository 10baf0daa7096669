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
//! - `fields`: typed reads of one table that record a problem and carry on.
//! - `resolve`: each table to its config (raw to resolved), single-field
//!   rules and defaults.
//! - `validate`: rules between fields and between tasks (budget, ids,
//!   upstream, cycles).

mod fields;
mod resolve;
pub(crate) mod skip_mask;
mod syntax;
mod validate;

use daisy_core::protocol::{CodeKind, FunctionCode, TaskCode};
use daisy_core::{DependencyGraph, TaskSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::io;
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
    /// The global budget, resource name to amount; empty when the file has
    /// no `[resources]` table.
    pub resources: BTreeMap<String, u64>,
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
    /// daisy-worker (`worker_program`; `python3 -m daisy_rs.worker` for
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

/// The `[launcher]` table: how workers are started. Unset strings are
/// left to the launcher's own defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LauncherConfig {
    pub kind: LauncherKind,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// Walltime in SLURM's format (`"04:00:00"`, `"1-12:00:00"`).
    pub time: Option<String>,
    /// Job-script template; a relative path is resolved against the
    /// pipeline file's directory.
    pub template: Option<PathBuf>,
    /// Extra scheduler directive lines, e.g. `--constraint=a100`.
    pub directives: Vec<String>,
    /// Environment setup lines run before the worker, e.g. `module load cuda`.
    pub setup: Vec<String>,
    /// At most this many workers of one job array run at once (`%N`).
    pub max_array_parallel: Option<u32>,
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
    /// Every kind, in the order error messages list them.
    pub const ALL: [LauncherKind; 4] = [
        LauncherKind::Local,
        LauncherKind::Sbatch,
        LauncherKind::Bsub,
        LauncherKind::Slurmrestd,
    ];

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

/// Why a pipeline file was refused. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The file could not be read: check the path and its permissions.
    #[error("cannot read pipeline file {}", file.display())]
    Read { file: PathBuf, source: io::Error },
    /// The text is not TOML (or JSON); nothing beyond syntax was checked.
    /// `message` says where: `TOML syntax error at line 3, column 7: ..`.
    #[error("pipeline file {}: {message}", file.display())]
    Syntax { file: PathBuf, message: String },
    /// The file parsed but breaks rules: every problem found, at once.
    #[error("{}", invalid_report(file, problems))]
    Invalid {
        file: PathBuf,
        problems: Vec<Problem>,
    },
}

/// The header line, then one problem per line, after its place in the
/// file when it has one: `pipeline.toml:12: task "p": ..`.
fn invalid_report(file: &Path, problems: &[Problem]) -> String {
    let count = match problems.len() {
        1 => "1 problem".to_string(),
        n => format!("{n} problems"),
    };
    let mut report = format!("pipeline file {} has {count}:", file.display());
    for problem in problems {
        match problem.line {
            Some(line) => report.push_str(&format!("\n  - {}:{line}: {problem}", file.display())),
            None => report.push_str(&format!("\n  - {problem}")),
        }
    }
    report
}

/// One thing wrong with a pipeline file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The id of the task at fault; `None` for pipeline-level problems and
    /// for a task without a usable id (its message then starts with
    /// `[[task]] #n:`, counting tables from 1).
    pub task: Option<String>,
    /// The field at fault, as a path: `fit`, `requires.gpu`,
    /// `launcher.kind`.
    pub field: String,
    /// What is wrong, naming the field and the value:
    /// `fit = "sideways" is not one of valid, overhang, shrink`.
    pub message: String,
    /// The line (from 1) of the value at fault, or of the table holding
    /// a field that is missing; `None` in a JSON file (serde_json keeps
    /// no positions) and for a problem of no one place (a cycle).
    pub line: Option<usize>,
}

impl Problem {
    /// This problem, placed on `line`.
    pub(super) fn on_line(self, line: Option<usize>) -> Self {
        Self { line, ..self }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.task {
            None => f.write_str(&self.message),
            // The budget check reads as one sentence about the task, the
            // wording users are told to expect:
            // `task "p" requires {gpu: 8} but the global budget only has {gpu: 1}`.
            Some(task) if self.message.starts_with("requires {") => {
                write!(f, "task {task:?} {}", self.message)
            }
            Some(task) => write!(f, "task {task:?}: {}", self.message),
        }
    }
}

impl Pipeline {
    /// Reads and validates the pipeline file at `path`.
    pub fn load(path: &Path) -> Result<Pipeline, PipelineError> {
        let text = std::fs::read_to_string(path).map_err(|source| PipelineError::Read {
            file: path.to_path_buf(),
            source,
        })?;
        Self::from_str(&text, path)
    }

    /// Parses and validates `text` as if read from `path`: the extension
    /// picks the format (`.json` is JSON, anything else TOML), the path
    /// names the file in errors and anchors a relative launcher template.
    pub fn from_str(text: &str, path: &Path) -> Result<Pipeline, PipelineError> {
        let file = || path.to_path_buf();
        let (tree, lines) =
            syntax::Format::of(path)
                .parse(text)
                .map_err(|message| PipelineError::Syntax {
                    file: file(),
                    message,
                })?;
        resolve::pipeline(&tree, &lines, path).map_err(|mut problems| {
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use daisy_core::{Fit, Roi, TaskIdx};
    use proptest::prelude::*;

    const SEGMENTATION_TOML: &str =
        include_str!("../../tests/fixtures/pipelines/segmentation.toml");
    const SEGMENTATION_JSON: &str =
        include_str!("../../tests/fixtures/pipelines/segmentation.json");

    /// A 1-D task table with everything required, plus `extra` lines.
    pub(crate) fn task(id: &str, extra: &str) -> String {
        format!(
            "[[task]]\nid = \"{id}\"\n\
             total_roi = {{ offset = [0], shape = [100] }}\n\
             read_roi = {{ offset = [0], shape = [10] }}\n\
             write_roi = {{ offset = [0], shape = [10] }}\n\
             command = [\"true\"]\n{extra}\n"
        )
    }

    /// The problems of an invalid TOML pipeline, rendered as Display shows them.
    pub(crate) fn problems(text: &str) -> Vec<String> {
        match Pipeline::from_str(text, Path::new("test.toml")) {
            Err(PipelineError::Invalid { problems, .. }) => {
                problems.iter().map(ToString::to_string).collect()
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    /// Fails unless some problem equals `expected`, showing them all.
    pub(crate) fn assert_has(problems: &[String], expected: &str) {
        assert!(
            problems.iter().any(|p| p == expected),
            "no problem {expected:?} in:\n{}",
            problems.join("\n")
        );
    }

    fn roi3(offset: [i64; 3], shape: [i64; 3]) -> Roi {
        Roi::from_slices(&offset, &shape)
    }

    #[test]
    fn full_example_resolves_every_field() {
        let path = Path::new("pipelines/segmentation.toml");
        let pipeline = Pipeline::from_str(SEGMENTATION_TOML, path).unwrap();
        assert_eq!(pipeline.path, path);
        assert_eq!(pipeline.name, "segmentation");
        let budget = BTreeMap::from([("cpu".to_string(), 32), ("gpu".to_string(), 4)]);
        assert_eq!(pipeline.resources, budget);
        let launcher = LauncherConfig {
            kind: LauncherKind::Sbatch,
            partition: Some("gpu".into()),
            account: Some("lab".into()),
            qos: Some("normal".into()),
            time: Some("04:00:00".into()),
            template: Some(PathBuf::from("pipelines/worker.sbatch")),
            directives: vec!["--constraint=a100".into()],
            setup: vec!["module load cuda".into()],
            max_array_parallel: Some(10),
        };
        assert_eq!(pipeline.launcher, launcher);
        assert_eq!(
            pipeline.task("relabel").unwrap().launcher,
            launcher,
            "the run's launcher"
        );
        let predict = pipeline.task("predict").unwrap();
        let mut spec = TaskSpec::new(
            "predict",
            roi3([0, 0, 0], [1024, 2048, 2048]),
            roi3([0, 0, 0], [96, 96, 96]),
            roi3([16, 16, 16], [64, 64, 64]),
        );
        spec.fit = Fit::Shrink;
        spec.read_write_conflict = false;
        spec.max_retries = 2;
        let expected = TaskConfig {
            spec,
            upstream: vec![],
            requires: BTreeMap::from([("cpu".to_string(), 4), ("gpu".to_string(), 1)]),
            max_workers: 4,
            max_worker_restarts: 10,
            timeout: Some(Duration::from_secs(600)),
            idle_timeout: Some(Duration::from_secs(300)),
            batch_size: 8,
            prefetch: 2,
            resource_tracking: false,
            command: UserCommand::Worker(vec!["python".into(), "predict.py".into()]),
            env: BTreeMap::from([("OMP_NUM_THREADS".to_string(), "4".to_string())]),
            worker_program: None,
            launcher: LauncherConfig {
                partition: Some("gpu-long".into()),
                time: Some("08:00:00".into()),
                ..launcher
            },
            skip_mask: None,
        };
        assert_eq!(predict, &expected);
    }

    #[test]
    fn batch_size_and_prefetch_are_bounded() {
        let fields = "batch_size = 0\nprefetch = 65";
        let problems = problems(&format!("name = \"m\"\n{}", task("t", fields)));
        assert_has(
            &problems,
            r#"task "t": batch_size = 0 is not a whole number from 1 to 1024, nor "auto""#,
        );
        assert_has(
            &problems,
            r#"task "t": prefetch = 65 is not a whole number from 0 to 64"#,
        );
    }

    #[test]
    fn resource_tracking_is_off_unless_the_pipeline_or_the_task_turns_it_on() {
        let text = |top: &str| {
            let tasks = task("plain", "") + &task("own", "resource_tracking = false");
            format!("name = \"m\"\n{top}\n{tasks}")
        };
        let tracking = |text: &str| {
            let pipeline = Pipeline::from_str(text, Path::new("m.toml")).unwrap();
            let tasks = pipeline.tasks.iter();
            tasks
                .map(|t| t.task_code().resource_tracking)
                .collect::<Vec<_>>()
        };
        assert_eq!(tracking(&text("")), [false, false]);
        assert_eq!(tracking(&text("resource_tracking = true")), [true, false]);
        let problems = problems(&text("resource_tracking = \"yes\""));
        assert_has(
            &problems,
            r#"resource_tracking = "yes" is not true or false"#,
        );
    }

    #[test]
    fn a_task_launcher_checks_its_kind_and_options_by_name() {
        let text = format!(
            "name = \"m\"\n{}",
            task(
                "t",
                "launcher = { kind = \"pbs\", partiton = \"x\", max_array_parallel = 0 }"
            )
        );
        let problems = problems(&text);
        assert_has(
            &problems,
            r#"task "t": launcher.kind = "pbs" is not one of local, sbatch, bsub, slurmrestd"#,
        );
        assert_has(
            &problems,
            r#"task "t": unknown field "partiton" in [launcher] (did you mean "partition"?)"#,
        );
        assert_has(
            &problems,
            r#"task "t": launcher.max_array_parallel = 0 must be at least 1"#,
        );
    }

    #[test]
    fn a_task_may_choose_its_launcher_kind_and_inherits_the_other_options() {
        let text = format!(
            "name = \"m\"\n[launcher]\nkind = \"sbatch\"\npartition = \"cpu\"\n{}{}",
            task("here", "launcher = { kind = \"local\" }"),
            task("gpu", "launcher = { partition = \"gpu\" }"),
        );
        let pipeline = Pipeline::from_str(&text, Path::new("m.toml")).unwrap();
        let here = &pipeline.task("here").unwrap().launcher;
        assert_eq!(
            (here.kind, here.partition.as_deref()),
            (LauncherKind::Local, Some("cpu"))
        );
        let gpu = &pipeline.task("gpu").unwrap().launcher;
        assert_eq!(
            (gpu.kind, gpu.partition.as_deref()),
            (LauncherKind::Sbatch, Some("gpu"))
        );
    }

    #[test]
    fn omitted_fields_get_their_defaults() {
        let path = Path::new("pipelines/segmentation.toml");
        let pipeline = Pipeline::from_str(SEGMENTATION_TOML, path).unwrap();
        let relabel = pipeline.task("relabel").unwrap();
        assert_eq!(relabel.spec.upstream, vec![TaskIdx(0)]);
        assert_eq!(relabel.upstream, vec!["predict".to_string()]);
        assert_eq!(relabel.spec.fit, Fit::Valid);
        assert!(relabel.spec.read_write_conflict);
        assert_eq!(relabel.spec.max_retries, 2);
        assert_eq!(relabel.max_workers, DEFAULT_MAX_WORKERS);
        assert_eq!(relabel.max_worker_restarts, DEFAULT_MAX_WORKER_RESTARTS);
        assert_eq!(relabel.timeout, None);
        assert_eq!((relabel.batch_size, relabel.prefetch), (1, 0));
        assert!(relabel.requires.is_empty() && relabel.env.is_empty());
        let argv = vec!["./relabel".to_string(), "{block_id}".to_string()];
        assert_eq!(relabel.command, UserCommand::PerBlock(argv));
        let minimal = format!("name = \"m\"\n{}", task("t", ""));
        let pipeline = Pipeline::from_str(&minimal, Path::new("m.toml")).unwrap();
        assert_eq!(pipeline.launcher, LauncherConfig::default());
        assert_eq!(pipeline.launcher.kind, LauncherKind::Local);
        assert!(pipeline.resources.is_empty());
        pipeline.graph();
    }

    #[test]
    fn json_equivalent_resolves_the_same() {
        let toml = Pipeline::from_str(SEGMENTATION_TOML, Path::new("p/segmentation.toml"));
        let json = Pipeline::from_str(SEGMENTATION_JSON, Path::new("p/segmentation.json"));
        let (toml, mut json) = (toml.unwrap(), json.unwrap());
        assert_eq!(json.path, Path::new("p/segmentation.json"));
        json.path = toml.path.clone();
        assert_eq!(json, toml);
    }

    #[test]
    fn load_reads_the_file_and_anchors_the_template_beside_it() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pipelines");
        let pipeline = Pipeline::load(&dir.join("segmentation.toml")).unwrap();
        assert_eq!(pipeline.launcher.template, Some(dir.join("worker.sbatch")));
        assert_eq!(pipeline.graph().num_tasks(), 2);
    }

    #[test]
    fn many_problems_come_in_one_report() {
        let text = r#"
            name = "broken"
            [resources]
            gpu = 1

            [[task]]
            id = "predict"
            total_roi = { offset = [0, 0, 0], shape = [100, 100, 100] }
            read_roi = { offset = [0, 0, 0], shape = [10, 10, 10] }
            write_roi = { offset = [5, 5, 5], shape = [10, 10, 10] }
            max_worker = 2
            requires = { gpu = 8 }
            upstream = ["ghost", "relabel"]
            command = ["python", "predict.py"]

            [[task]]
            id = "relabel"
            total_roi = { offset = [0, 0], shape = [100, 100] }
            read_roi = { offset = [0, 0], shape = [10, 10] }
            write_roi = { offset = [0, 0], shape = [10, 10] }
            upstream = ["predict"]
            block_command = ["./relabel"]

            [[task]]
            id = "predict"
            total_roi = { offset = [0, 0, 0], shape = [100, 100, 100] }
            read_roi = { offset = [0, 0], shape = [10, 10] }
            write_roi = { offset = [0, 0, 0], shape = [10, 10, 10] }
            fit = "sideways"
            command = ["x"]
        "#;
        let error = Pipeline::from_str(text, Path::new("daisy.toml")).unwrap_err();
        let PipelineError::Invalid { file, problems } = &error else {
            panic!("expected Invalid, got {error:?}");
        };
        assert_eq!(file, Path::new("daisy.toml"));
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        let write = roi3([5, 5, 5], [10, 10, 10]);
        let read = roi3([0, 0, 0], [10, 10, 10]);
        let expected = [
            r#"task "predict": unknown field "max_worker" (did you mean "max_workers"?)"#.to_string(),
            format!(r#"task "predict": write_roi {write} lies outside read_roi {read}"#),
            r#"task "predict" requires {gpu: 8} but the global budget only has {gpu: 1}"#.into(),
            r#"task "predict": fit = "sideways" is not one of valid, overhang, shrink"#.into(),
            r#"task "predict": read_roi has 2 dimensions but total_roi has 3"#.into(),
            r#"task "predict": id = "predict" is already the id of [[task]] #1"#.into(),
            r#"task "predict": upstream task "ghost" does not exist"#.into(),
            r#"task "predict": upstream task "relabel" has 2 dimensions but this task has 3"#
                .into(),
            r#"task "relabel": upstream task "predict" has 3 dimensions but this task has 2"#
                .into(),
            r#"upstream forms a cycle: "predict" -> "relabel" -> "predict" (each task lists the next as upstream)"#.into(),
        ];
        for line in &expected {
            assert_has(&lines, line);
        }
        assert_eq!(lines.len(), expected.len(), "{}", lines.join("\n"));
        let report = error.to_string();
        assert!(report.starts_with("pipeline file daisy.toml has 10 problems:\n  - "));
        assert_eq!(report.lines().count(), 11, "{report}");
        let unknown = problems
            .iter()
            .find(|p| p.message.starts_with("unknown"))
            .unwrap();
        assert_eq!(unknown.task.as_deref(), Some("predict"));
        assert_eq!(unknown.field, "max_worker");
        let placed: Vec<usize> = problems.iter().filter_map(|p| p.line).collect();
        assert!(placed.is_sorted(), "in the file's order: {placed:?}");
        assert!(problems.last().unwrap().line.is_none(), "the cycle last");
    }

    /// Issue 13: each problem of a TOML file is reported on the line of
    /// the value at fault (a missing field: of its table); JSON keeps none.
    #[test]
    fn problems_in_a_toml_file_name_their_line() {
        let top = "name = \"demo\"\n[resources]\ngpu = 1\n[launcher]\npartiton = \"x\"\n";
        let p = task("p", "requires = { gpu = 2 }\nupstream = [\"ghost\"]");
        let text = format!("{top}{p}[[task]]\ntimeout = \"soon\"\n");
        let error = Pipeline::from_str(&text, Path::new("p.toml")).unwrap_err();
        let report = error.to_string();
        let placed: Vec<String> = (report.lines())
            .filter_map(|line| Some(line.strip_prefix("  - ")?.to_string()))
            .collect();
        for expected in [
            r#"p.toml:5: unknown field "partiton" in [launcher] (did you mean "partition"?)"#,
            r#"p.toml:12: task "p" requires {gpu: 2} but the global budget only has {gpu: 1}"#,
            r#"p.toml:13: task "p": upstream task "ghost" does not exist"#,
            r#"p.toml:14: [[task]] #2: missing required field "id""#,
            r#"p.toml:15: [[task]] #2: timeout = "soon" is not a duration like "10m" or "90s" (expected number at 0)"#,
        ] {
            assert_has(&placed, expected);
        }
        let json = r#"{"name": "demo", "launcher": {"partiton": "x"}}"#;
        let error = Pipeline::from_str(json, Path::new("p.json")).unwrap_err();
        let PipelineError::Invalid { problems, .. } = error else {
            panic!("expected Invalid, got {error:?}");
        };
        assert!(problems.iter().all(|p| p.line.is_none()), "{problems:?}");
    }

    #[test]
    fn budget_problems_are_worded_exactly() {
        let budget = "name = \"b\"\n[resources]\ngpu = 1\ncpu = 2\n";
        let over = format!(
            "{budget}{}",
            task("predict", "requires = { gpu = 8, cpu = 2 }")
        );
        assert_eq!(
            problems(&over),
            [r#"task "predict" requires {gpu: 8} but the global budget only has {gpu: 1}"#]
        );
        let absent = format!(
            "{budget}{}",
            task("predict", "requires = { tpu = 1, fpga = 0 }")
        );
        assert_eq!(
            problems(&absent),
            [r#"task "predict" requires {tpu: 1} but the global budget has no tpu"#]
        );
        let no_table = format!(
            "name = \"b\"\n{}",
            task("predict", "requires = { gpu = 1 }")
        );
        assert_eq!(
            problems(&no_table),
            [r#"task "predict" requires {gpu: 1} but the global budget has no gpu"#]
        );
        let zero = format!(
            "name = \"b\"\n{}",
            task("predict", "requires = { gpu = 0 }")
        );
        assert!(Pipeline::from_str(&zero, Path::new("z.toml")).is_ok());
    }

    #[test]
    fn invalid_report_says_one_problem_in_the_singular() {
        let error = Pipeline::from_str("name = \"\"\n", Path::new("x/daisy.toml")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pipeline file x/daisy.toml has 2 problems:\n  \
             - x/daisy.toml:1: name = \"\" must not be empty\n  \
             - missing required field \"task\""
        );
        let one = invalid_report(Path::new("a.toml"), &[]);
        assert_eq!(one, "pipeline file a.toml has 0 problems:");
        let problem = Problem {
            task: None,
            field: "name".into(),
            message: "m".into(),
            line: None,
        };
        let one = invalid_report(Path::new("a.toml"), std::slice::from_ref(&problem));
        assert_eq!(one, "pipeline file a.toml has 1 problem:\n  - m");
        let placed = invalid_report(Path::new("a.toml"), &[problem.on_line(Some(3))]);
        assert_eq!(
            placed,
            "pipeline file a.toml has 1 problem:\n  - a.toml:3: m"
        );
    }

    #[test]
    fn toml_syntax_error_names_file_line_and_column() {
        let text = "name = \"x\"\n\n[resources\ncpu = 1\n";
        let error = Pipeline::from_str(text, Path::new("conf/daisy.toml")).unwrap_err();
        let PipelineError::Syntax { file, message } = &error else {
            panic!("expected Syntax, got {error:?}");
        };
        assert_eq!(file, Path::new("conf/daisy.toml"));
        assert_eq!(
            message,
            "TOML syntax error at line 3, column 11: invalid table header; expected `.`, `]`"
        );
        assert!(error
            .to_string()
            .starts_with("pipeline file conf/daisy.toml: TOML syntax"));
    }

    #[test]
    fn json_syntax_error_names_line_and_column() {
        let text = "{\n  \"name\": \"x\",\n  \"task\": [,]\n}";
        let error = Pipeline::from_str(text, Path::new("daisy.json")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pipeline file daisy.json: JSON syntax error at line 3, column 12: expected value"
        );
    }

    #[test]
    fn missing_file_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nowhere.toml");
        let error = Pipeline::load(&path).unwrap_err();
        let PipelineError::Read { file, source } = &error else {
            panic!("expected Read, got {error:?}");
        };
        assert_eq!(file, &path);
        assert_eq!(source.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            error.to_string(),
            format!("cannot read pipeline file {}", path.display())
        );
    }

    #[test]
    fn launcher_kind_names_match_serde() {
        for kind in LauncherKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{kind}\""));
        }
    }

    /// A TOML value that is right for some field and wrong for others.
    fn any_value() -> impl Strategy<Value = String> {
        const LITERALS: &str = r#"0|-1|4|9223372036854775807|1.5|nan|true|""|"t0"|"a b"|"shrink"
            |"10m"|"0s"|"sbatch"|"04:00:00"|[]|["t0"]|["t1", "t0"]|["t2"]|[1]|{ gpu = 1 }
            |{ A = "1" }|1979-05-27"#;
        let literals: Vec<&str> = LITERALS.split('|').map(str::trim).collect();
        let coordinate = || prop::collection::vec(-3i64..40, 0..3);
        let roi = (coordinate(), coordinate())
            .prop_map(|(o, s)| format!("{{ offset = {o:?}, shape = {s:?} }}"));
        prop_oneof![prop::sample::select(literals).prop_map(String::from), roi]
    }

    /// Keys and values to overwrite in, or add to, a valid task table.
    fn any_overrides() -> impl Strategy<Value = Vec<(&'static str, String)>> {
        const KEYS: &str = "id total_roi read_roi write_roi fit read_write_conflict requires \
                            max_workers timeout upstream command block_command env max_worker";
        let keys: Vec<&str> = KEYS.split_whitespace().collect();
        prop::collection::vec((prop::sample::select(keys), any_value()), 0..3)
    }

    /// Task `i`: valid, reading task `i - 1`, then `overrides` applied.
    fn task_with(i: usize, overrides: Vec<(&str, String)>) -> String {
        let mut table = BTreeMap::from([
            ("id", format!("\"t{i}\"")),
            ("total_roi", "{ offset = [0], shape = [30] }".into()),
            ("read_roi", "{ offset = [0], shape = [6] }".into()),
            ("write_roi", "{ offset = [1], shape = [4] }".into()),
            ("command", "[\"true\"]".into()),
        ]);
        if i > 0 {
            table.insert("upstream", format!("[\"t{}\"]", i - 1));
        }
        table.extend(overrides);
        let lines: String = table.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
        format!("[[task]]\n{lines}")
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in ".*", json in any::<bool>()) {
            let path = Path::new(if json { "p.json" } else { "p.toml" });
            if let Err(error) = Pipeline::from_str(&text, path) {
                error.to_string();
            }
        }

        #[test]
        fn random_pipelines_never_panic(
            tasks in prop::collection::vec(any_overrides(), 0..4),
            kind in prop::option::of(any_value()),
        ) {
            let launcher = kind.map(|kind| format!("[launcher]\nkind = {kind}\n"));
            let tasks: String = tasks.into_iter().enumerate().map(|(i, o)| task_with(i, o)).collect();
            let text = format!(
                "name = \"p\"\n[resources]\ngpu = 1\n{}{tasks}",
                launcher.unwrap_or_default()
            );
            match Pipeline::from_str(&text, Path::new("p.toml")) {
                Ok(pipeline) => drop(pipeline.graph()),
                Err(error) => drop(error.to_string()),
            }
        }
    }
}
