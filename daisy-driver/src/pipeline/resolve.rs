//! Raw to resolved: each table of the pipeline file read into its config.
//!
//! Single-field rules live here (types, ranges, id characters, durations,
//! walltimes, command lines) and so do the defaults. A task is read even
//! when some of its fields fail, so that the checks between tasks in
//! `validate` still see its id, upstream list and dimensions; a config is
//! only assembled when the whole file is free of problems.

use super::fields::{
    boolean, count, hint, non_empty, object, one_of, show, string, strings, Amounts, Fields,
    Subject, Table,
};
use super::syntax::Lines;
use super::validate;
use super::{
    LauncherConfig, LauncherKind, Pipeline, Problem, TaskConfig, UserCommand, DEFAULT_MAX_WORKERS,
    DEFAULT_MAX_WORKER_RESTARTS, MAX_BATCH_SIZE, MAX_PREFETCH,
};
use crate::pipeline::skip_mask::SkipMask;
use daisy_core::coordinate::{MAX_COORDINATE, MAX_DIMS};
use daisy_core::geometry::geometry_problems;
use daisy_core::protocol::{CodeKind, FunctionCode, FunctionSource};
use daisy_core::template::CommandTemplate;
use daisy_core::{Fit, Roi, TaskSpec};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const PIPELINE_FIELDS: &[&str] = &["name", "resources", "launcher", "resource_tracking", "task"];
const LAUNCHER_FIELDS: &[&str] = &[
    "kind",
    "partition",
    "account",
    "qos",
    "time",
    "template",
    "directives",
    "setup",
    "max_array_parallel",
];
const TASK_FIELDS: &[&str] = &[
    "id",
    "total_roi",
    "read_roi",
    "write_roi",
    "fit",
    "read_write_conflict",
    "requires",
    "max_workers",
    "max_retries",
    "retry_backoff",
    "retry_backoff_max",
    "max_worker_restarts",
    "timeout",
    "idle_timeout",
    "batch_size",
    "prefetch",
    "upstream",
    "command",
    "block_command",
    "process_function",
    "worker_function",
    "python_path",
    "worker_program",
    "env",
    "launcher",
    "skip_mask",
    "resource_tracking",
];
const ROI_FIELDS: &[&str] = &["offset", "shape"];
const FITS: [Fit; 3] = [Fit::Valid, Fit::Overhang, Fit::Shrink];

/// Longest per-block timeout accepted: a longer one is a typo, and
/// deadlines that far out overflow clock arithmetic.
const MAX_TIMEOUT: Duration = Duration::from_secs(366 * 24 * 3600);

/// One `[[task]]` table as far as it could be read: what the checks
/// between tasks need, even when the task's own fields failed.
pub(super) struct TaskDraft {
    pub(super) subject: Subject,
    /// Where the task's table is in the file.
    pub(super) lines: Lines,
    pub(super) id: Option<String>,
    pub(super) upstream: Vec<String>,
    /// Dimensions of the task's ROIs, once all three were read.
    pub(super) dims: Option<usize>,
    /// The resolved task; its `spec.upstream` is filled in by `validate`.
    pub(super) config: Option<TaskConfig>,
}

/// The pipeline in `tree` (read from `path`, its values on `lines`), or
/// every problem in it.
pub(super) fn pipeline(tree: &Value, lines: &Lines, path: &Path) -> Result<Pipeline, Vec<Problem>> {
    let Some(table) = tree.as_object() else {
        let message = format!("the top level is {}, not a table", show(tree));
        return Err(vec![Subject::Pipeline.problem("", message)]);
    };
    let mut problems = Vec::new();
    let top = TopLevel::read(table, lines, path, &mut problems);
    let mut drafts: Vec<TaskDraft> = Vec::with_capacity(top.tasks.len());
    for (i, table) in top.tasks.iter().enumerate() {
        let run = Run {
            budget: &top.resources,
            launcher: &top.launcher,
            resource_tracking: top.resource_tracking,
            path,
        };
        let lines = lines.key("task").item(i);
        drafts.push(task(i + 1, (table, lines), &run, &mut problems));
    }
    validate::link_tasks(&mut drafts, &mut problems);
    let tasks: Option<Vec<TaskConfig>> = drafts.into_iter().map(|draft| draft.config).collect();
    match (top.name, tasks) {
        (Some(name), Some(tasks)) if problems.is_empty() => Ok(Pipeline {
            path: path.to_path_buf(),
            name,
            resources: top.resources,
            launcher: top.launcher,
            tasks,
        }),
        _ => Err(problems),
    }
}

impl TaskDraft {
    /// A problem with this task's `field`, on the line of its value.
    pub(super) fn problem(&self, field: &str, message: String) -> Problem {
        let problem = self.subject.problem(field, message);
        problem.on_line(self.lines.of(field))
    }
}

/// The pipeline-level fields, and the task tables still to be read.
struct TopLevel<'t> {
    name: Option<String>,
    resources: Amounts,
    launcher: LauncherConfig,
    /// Every task's `resource_tracking` unless it says otherwise.
    resource_tracking: bool,
    tasks: Vec<&'t Table>,
}

impl<'t> TopLevel<'t> {
    fn read(table: &'t Table, lines: &'t Lines, path: &Path, problems: &mut Vec<Problem>) -> Self {
        let mut fields = Fields::new(table, lines, Subject::Pipeline, problems);
        fields.reject_unknown(PIPELINE_FIELDS);
        Self {
            name: fields.required("name", |v| string(v).and_then(directory_name)),
            resources: fields.amounts("resources"),
            launcher: launcher(&mut fields, path),
            resource_tracking: (fields.optional("resource_tracking", boolean)).unwrap_or(false),
            tasks: fields.required("task", task_tables).unwrap_or_default(),
        }
    }
}

fn task_tables(value: &Value) -> Result<Vec<&Table>, String> {
    let tables: Option<Vec<&Table>> = value
        .as_array()
        .and_then(|items| items.iter().map(Value::as_object).collect());
    match tables {
        None => Err("is not an array of tables ([[task]])".into()),
        Some(tables) if tables.is_empty() => Err("lists no tasks".into()),
        Some(tables) => Ok(tables),
    }
}

/// `[launcher]`; what it leaves out is the launcher's default (local).
fn launcher(top: &mut Fields, pipeline_path: &Path) -> LauncherConfig {
    let Some(table) = top.optional("launcher", object) else {
        return LauncherConfig::default();
    };
    let mut fields = top.nested("launcher", table);
    fields.reject_unknown(LAUNCHER_FIELDS);
    let kind = fields.optional("kind", |v| one_of(v, &LauncherKind::ALL));
    LauncherConfig {
        kind: kind.unwrap_or_default(),
        ..launcher_options(&mut fields, pipeline_path, LauncherConfig::default())
    }
}

/// A task's own `launcher` table: its launcher kind and the options of
/// `[launcher]` it overrides for its workers (a cheap task as local
/// processes, a GPU task as SLURM jobs on another partition).
fn task_launcher(task: &mut Fields, run: &Run) -> LauncherConfig {
    let Some(table) = task.optional("launcher", object) else {
        return run.launcher.clone();
    };
    let mut fields = task.nested("launcher", table);
    fields.reject_unknown(LAUNCHER_FIELDS);
    let kind = fields.optional("kind", |v| one_of(v, &LauncherKind::ALL));
    LauncherConfig {
        kind: kind.unwrap_or(run.launcher.kind),
        ..launcher_options(&mut fields, run.path, run.launcher.clone())
    }
}

/// The launcher options in `fields`, each falling back to `base`.
fn launcher_options(
    fields: &mut Fields,
    pipeline_path: &Path,
    base: LauncherConfig,
) -> LauncherConfig {
    let template = fields.optional("template", non_empty);
    let at_least_one = |v| {
        count(v).and_then(|n| {
            if n > 0 {
                Ok(n)
            } else {
                Err("must be at least 1".into())
            }
        })
    };
    let max_array_parallel = fields.optional("max_array_parallel", at_least_one);
    LauncherConfig {
        kind: base.kind,
        partition: fields.optional("partition", non_empty).or(base.partition),
        account: fields.optional("account", non_empty).or(base.account),
        qos: fields.optional("qos", non_empty).or(base.qos),
        time: fields.optional("time", walltime).or(base.time),
        template: template
            .map(|t| beside(pipeline_path, &t))
            .or(base.template),
        directives: fields
            .optional("directives", strings)
            .unwrap_or(base.directives),
        setup: fields.optional("setup", strings).unwrap_or(base.setup),
        max_array_parallel: max_array_parallel.or(base.max_array_parallel),
    }
}

/// What every task is read against: the budget and the run's launcher.
struct Run<'a> {
    budget: &'a Amounts,
    launcher: &'a LauncherConfig,
    resource_tracking: bool,
    path: &'a Path,
}

/// `path` relative to the directory of the pipeline file, so a pipeline
/// runs the same from any working directory.
fn beside(pipeline_path: &Path, path: &str) -> PathBuf {
    match pipeline_path.parent() {
        Some(dir) => dir.join(path),
        None => PathBuf::from(path),
    }
}

/// The `n`-th `[[task]]` table (from 1), its `requires` checked against
/// the global `budget`.
fn task(n: usize, at: (&Table, &Lines), run: &Run, problems: &mut Vec<Problem>) -> TaskDraft {
    let (table, lines) = at;
    let mut unnamed = Fields::new(table, lines, Subject::UnnamedTask(n), problems);
    let id = unnamed.required("id", |v| string(v).and_then(directory_name));
    let subject = id.clone().map_or(Subject::UnnamedTask(n), Subject::Task);
    let mut fields = Fields::new(table, lines, subject.clone(), problems);
    fields.reject_unknown(TASK_FIELDS);
    let upstream = fields.optional("upstream", strings).unwrap_or_default();
    let spec = task_spec(&mut fields);
    let launch = Launch::read(&mut fields, run);
    let dims = spec.as_ref().map(|spec| spec.total_roi.dims());
    let config = match (id.clone(), spec, launch) {
        (Some(id), Some(spec), Some(launch)) => {
            let spec = TaskSpec { id, ..spec };
            let mask = skip_mask(&mut fields, run.path, &spec);
            Some(launch.into_config(spec, upstream.clone(), mask))
        }
        _ => None,
    };
    TaskDraft {
        subject,
        lines: lines.clone(),
        id,
        upstream,
        dims,
        config,
    }
}

/// `skip_mask`: a Zarr array (a path relative to the pipeline file), read
/// now so that its shape is checked against the task's block grid at load.
fn skip_mask(fields: &mut Fields, pipeline_path: &Path, spec: &TaskSpec) -> Option<Arc<SkipMask>> {
    let path = fields.optional("skip_mask", non_empty)?;
    match SkipMask::load(&beside(pipeline_path, &path), spec) {
        Ok(mask) => Some(Arc::new(mask)),
        Err(error) => {
            fields.report("skip_mask", format!("skip_mask = {path:?}: {error}"));
            None
        }
    }
}

/// The scheduling half of a task, its id left empty and its geometry
/// checked by daisy-core's own rules; `None` if a ROI could not be read.
fn task_spec(fields: &mut Fields) -> Option<TaskSpec> {
    let total = fields.required("total_roi", roi);
    let read = fields.required("read_roi", roi);
    let write = fields.required("write_roi", roi);
    let fit = fields.optional("fit", |v| one_of(v, &FITS));
    let conflict = fields.optional("read_write_conflict", boolean);
    let retries = fields.optional("max_retries", count);
    let backoff = retry_backoff(fields);
    let mut spec = TaskSpec::new("", total?, read?, write?);
    spec.fit = fit.unwrap_or(spec.fit);
    spec.read_write_conflict = conflict.unwrap_or(spec.read_write_conflict);
    spec.max_retries = retries.unwrap_or(spec.max_retries);
    (spec.retry_backoff, spec.retry_backoff_max) =
        backoff.unwrap_or((None, spec.retry_backoff_max));
    for problem in geometry_problems(&spec) {
        fields.report(
            problem.field,
            format!("{} {}", problem.field, problem.message),
        );
    }
    Some(spec)
}

/// `retry_backoff` and its cap `retry_backoff_max` (which must not be
/// shorter); `None` after a problem.
fn retry_backoff(fields: &mut Fields) -> Option<(Option<Duration>, Duration)> {
    let backoff = fields.optional("retry_backoff", duration);
    let max = fields.optional("retry_backoff_max", duration);
    let max = max.unwrap_or(daisy_core::task::DEFAULT_RETRY_BACKOFF_MAX);
    if backoff.is_some_and(|backoff| backoff > max) {
        let show = |d| humantime::format_duration(d).to_string();
        let message = format!(
            "retry_backoff_max = \"{}\" is shorter than retry_backoff = \"{}\"",
            show(max),
            show(backoff?)
        );
        fields.report("retry_backoff_max", message);
        return None;
    }
    Some((backoff, max))
}

/// The launch half of a task: what its workers cost, how many may run,
/// and what they run.
struct Launch {
    requires: Amounts,
    max_workers: u32,
    max_worker_restarts: u32,
    timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    batch_size: u32,
    prefetch: u32,
    resource_tracking: bool,
    command: UserCommand,
    env: BTreeMap<String, String>,
    worker_program: Option<Vec<String>>,
    launcher: LauncherConfig,
}

impl Launch {
    fn read(fields: &mut Fields, run: &Run) -> Option<Self> {
        let requires = fields.amounts("requires");
        for message in validate::budget_problems(&requires, run.budget) {
            fields.report("requires", message);
        }
        let max_workers = fields.optional("max_workers", count);
        let max_worker_restarts = fields.optional("max_worker_restarts", count);
        let timeout = fields.optional("timeout", duration);
        let idle_timeout = fields.optional("idle_timeout", duration);
        let env = fields.optional("env", environment).unwrap_or_default();
        let batch_size = fields.optional("batch_size", batch_size);
        let command = user_command(fields)?;
        Some(Self {
            requires,
            max_workers: max_workers.unwrap_or(DEFAULT_MAX_WORKERS),
            max_worker_restarts: max_worker_restarts.unwrap_or(DEFAULT_MAX_WORKER_RESTARTS),
            timeout,
            idle_timeout,
            batch_size: batch_size.unwrap_or_else(|| default_batch_size(&command)),
            prefetch: fields
                .optional("prefetch", |v| within(v, 0, MAX_PREFETCH))
                .unwrap_or(0),
            resource_tracking: (fields.optional("resource_tracking", boolean))
                .unwrap_or(run.resource_tracking),
            launcher: task_launcher(fields, run),
            worker_program: fields.optional("worker_program", command_line),
            command,
            env,
        })
    }

    fn into_config(
        self,
        spec: TaskSpec,
        upstream: Vec<String>,
        skip_mask: Option<Arc<SkipMask>>,
    ) -> TaskConfig {
        TaskConfig {
            spec,
            upstream,
            skip_mask,
            requires: self.requires,
            max_workers: self.max_workers,
            max_worker_restarts: self.max_worker_restarts,
            timeout: self.timeout,
            idle_timeout: self.idle_timeout,
            batch_size: self.batch_size,
            prefetch: self.prefetch,
            resource_tracking: self.resource_tracking,
            worker_program: self
                .worker_program
                .or_else(|| default_worker_program(&self.command)),
            command: self.command,
            env: self.env,
            launcher: self.launcher,
        }
    }
}

/// A count from `low` to `high`: batch sizes and prefetch depths, whose
/// bounds keep one batch (or the blocks written ahead) small.
fn within(value: &Value, low: u32, high: u32) -> Result<u32, String> {
    let n = count(value).ok().filter(|n| (low..=high).contains(n));
    n.ok_or_else(|| format!("is not a whole number from {low} to {high}"))
}

/// The fields that say what a task runs; a task gives exactly one.
const CODE_FIELDS: [&str; 4] = [
    "command",
    "block_command",
    "process_function",
    "worker_function",
];

/// Exactly one of `command` (a long-running worker), `block_command` (a
/// process per block), `process_function` and `worker_function` (Python
/// functions called in the worker's process): each feeds blocks its way.
fn user_command(fields: &mut Fields) -> Option<UserCommand> {
    let worker = fields.optional("command", command_line);
    let per_block = fields.optional("block_command", block_command_line);
    let function = function_command(fields);
    let given: Vec<&str> = CODE_FIELDS.into_iter().filter(|f| fields.has(f)).collect();
    match given.as_slice() {
        [_] => worker
            .map(UserCommand::Worker)
            .or(per_block.map(UserCommand::PerBlock))
            .or(function),
        [] => {
            let message = "missing required field \"command\" or \"block_command\" \
                           (or \"process_function\" or \"worker_function\")";
            fields.report("command", message.into());
            None
        }
        [first, second, ..] => {
            let message = format!(
                "{first} and {second} are both given; a task runs either a \
                 long-running worker (command), a process per block (block_command) \
                 or a Python function (process_function, worker_function)"
            );
            fields.report(second, message);
            None
        }
    }
}

/// A `process_function` or `worker_function`, with the `python_path` its
/// worker imports from.
fn function_command(fields: &mut Fields) -> Option<UserCommand> {
    let search_path = fields.optional("python_path", strings).unwrap_or_default();
    let (kind, source) = match (
        fields.optional("process_function", function_source),
        fields.optional("worker_function", function_source),
    ) {
        (Some(source), None) => (CodeKind::ProcessFunction, source),
        (None, Some(source)) => (CodeKind::WorkerFunction, source),
        _ => return None,
    };
    let code = FunctionCode {
        source,
        search_path,
    };
    Some(UserCommand::Function { kind, code })
}

/// `"package.module:function"`, or `{ pickle = "path" }`.
fn function_source(value: &Value) -> Result<FunctionSource, String> {
    if let Some(reference) = value.as_str() {
        let (module, attribute) = reference.split_once(':').unwrap_or_default();
        if module.is_empty() || attribute.is_empty() {
            return Err("is not \"module:function\" nor { pickle = \"path\" }".into());
        }
        return Ok(FunctionSource::Reference(reference.to_string()));
    }
    let pickle = value.as_object().filter(|table| table.len() == 1);
    match pickle
        .and_then(|table| table.get("pickle"))
        .and_then(Value::as_str)
    {
        Some(path) if !path.is_empty() => Ok(FunctionSource::Pickle(path.to_string())),
        _ => Err("is not \"module:function\" nor { pickle = \"path\" }".into()),
    }
}

/// Function tasks run in a Python worker (of the driver's own
/// interpreter, if it runs in one); other tasks in daisy-worker (the
/// driver's choice).
fn default_worker_program(command: &UserCommand) -> Option<Vec<String>> {
    let UserCommand::Function { .. } = command else {
        return None;
    };
    let python = crate::run::embedding::python_for_workers();
    Some(vec![python, "-m".into(), "daisy_rs.worker".into()])
}

/// Python functions cost microseconds a block, so their batches are
/// automatic unless the task says otherwise; commands take one at a time.
fn default_batch_size(command: &UserCommand) -> u32 {
    match command {
        UserCommand::Function { .. } => 0,
        _ => 1,
    }
}

/// A batch size from 1 to the maximum, or `"auto"` (0 on the wire): the
/// worker fits its batches to how long blocks take.
fn batch_size(value: &Value) -> Result<u32, String> {
    if value.as_str() == Some("auto") {
        return Ok(0);
    }
    within(value, 1, MAX_BATCH_SIZE).map_err(|e| format!("{e}, nor \"auto\""))
}

fn command_line(value: &Value) -> Result<Vec<String>, String> {
    let argv = strings(value)?;
    match argv.first() {
        None => Err("must not be empty".into()),
        Some(program) if program.is_empty() => Err("has an empty program name".into()),
        Some(_) => Ok(argv),
    }
}

/// A block command whose `{placeholders}` the worker can fill in: caught
/// here, at load, rather than by every worker it would make refuse.
fn block_command_line(value: &Value) -> Result<Vec<String>, String> {
    let argv = command_line(value)?;
    CommandTemplate::parse(&argv).map_err(|e| e.to_string())?;
    Ok(argv)
}

/// Task ids and the pipeline name become directory names (`done/<task>/`,
/// `daisy_run/<name>`), so they keep to characters every file system and
/// shell takes, and are not `.` or `..`.
fn directory_name(name: String) -> Result<String, String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
    let bad: BTreeSet<char> = name.chars().filter(|&c| !allowed(c)).collect();
    if name.is_empty() {
        Err("must not be empty".into())
    } else if !bad.is_empty() {
        let bad: Vec<String> = bad.iter().map(|c| format!("{c:?}")).collect();
        Err(format!(
            "may only contain A-Z, a-z, 0-9, '_', '.' and '-' (found {})",
            bad.join(" ")
        ))
    } else if name == "." || name == ".." {
        Err("cannot be a directory name".into())
    } else {
        Ok(name)
    }
}

/// `{ offset = [..], shape = [..] }`, both of the same dimension.
fn roi(value: &Value) -> Result<Roi, String> {
    let table =
        (value.as_object()).ok_or("is not a table like { offset = [0, 0], shape = [10, 10] }")?;
    if let Some(key) = table.keys().find(|key| !ROI_FIELDS.contains(&key.as_str())) {
        let hint = hint(key, ROI_FIELDS.iter().copied());
        return Err(format!("has unknown field {key:?}{hint}"));
    }
    let offset = coordinate(table, "offset")?;
    let shape = coordinate(table, "shape")?;
    if offset.len() != shape.len() {
        let (o, s) = (offset.len(), shape.len());
        return Err(format!(
            "has a {o}-dimensional offset but a {s}-dimensional shape"
        ));
    }
    Ok(Roi::from_slices(&offset, &shape))
}

fn coordinate(table: &Table, key: &str) -> Result<Vec<i64>, String> {
    let value = table.get(key).ok_or_else(|| format!("has no {key}"))?;
    let values: Vec<i64> = (value.as_array())
        .and_then(|items| items.iter().map(Value::as_i64).collect())
        .ok_or_else(|| {
            format!(
                "has {key} {}, which is not an array of integers",
                show(value)
            )
        })?;
    if values.len() > MAX_DIMS {
        let dims = values.len();
        return Err(format!(
            "has {dims} dimensions in {key}, more than the {MAX_DIMS} supported"
        ));
    }
    match values.iter().find(|v| v.unsigned_abs() > MAX_COORDINATE) {
        Some(v) => Err(format!(
            "has {key} entry {v}, beyond the supported ±{MAX_COORDINATE}"
        )),
        None => Ok(values),
    }
}

/// A per-block timeout or a retry backoff: a humantime duration ("90s",
/// "10m", "1h 30m").
fn duration(value: &Value) -> Result<Duration, String> {
    let like = "a duration like \"10m\" or \"90s\"";
    let text = value.as_str().ok_or_else(|| format!("is not {like}"))?;
    match humantime::parse_duration(text) {
        Err(error) => Err(format!("is not {like} ({error})")),
        Ok(timeout) if timeout.is_zero() => Err("must be longer than zero".into()),
        Ok(timeout) if timeout > MAX_TIMEOUT => Err("is longer than a year".into()),
        Ok(timeout) => Ok(timeout),
    }
}

/// A SLURM walltime: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M` or `D-H:M:S`
/// (launchers translate it for other schedulers).
fn walltime(value: &Value) -> Result<String, String> {
    let text = string(value)?;
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    let clock = match text.split_once('-') {
        Some((days, clock)) if digits(days) => clock,
        Some(_) => "",
        None => &text,
    };
    let parts: Vec<&str> = clock.split(':').collect();
    if parts.len() > 3 || !parts.iter().all(|part| digits(part)) {
        return Err("is not a walltime like \"04:00:00\" or \"1-12:00:00\"".into());
    }
    Ok(text)
}

/// `env`: variable name to value. Names must be settable: not empty,
/// without `=` or NUL.
fn environment(value: &Value) -> Result<BTreeMap<String, String>, String> {
    let table = value.as_object().ok_or("is not a table of strings")?;
    let variable = |(name, value): (&String, &Value)| {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(format!("has {name:?}, which cannot be a variable name"));
        }
        let text = value
            .as_str()
            .ok_or_else(|| format!("has {name} = {}, not a string", show(value)))?;
        Ok((name.clone(), text.to_string()))
    };
    table.iter().map(variable).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::{assert_has, problems, task};
    use serde_json::json;

    #[test]
    fn ids_and_names_must_be_directory_names() {
        let text = format!(
            "name = \"my run\"\n{}{}{}{}",
            task("a/b", ""),
            task("", ""),
            task("..", ""),
            task("ok.v2-final_1", "")
        );
        let found = problems(&text);
        assert_eq!(
            found,
            [
                r#"name = "my run" may only contain A-Z, a-z, 0-9, '_', '.' and '-' (found ' ')"#,
                r#"[[task]] #1: id = "a/b" may only contain A-Z, a-z, 0-9, '_', '.' and '-' (found '/')"#,
                r#"[[task]] #2: id = "" must not be empty"#,
                r#"[[task]] #3: id = ".." cannot be a directory name"#,
            ]
        );
    }

    #[test]
    fn a_task_without_id_is_counted_and_still_checked() {
        let text = "name = \"p\"\n[[task]]\nfit = 3\n";
        assert_eq!(
            problems(text),
            [
                "[[task]] #1: missing required field \"id\"",
                "[[task]] #1: missing required field \"total_roi\"",
                "[[task]] #1: missing required field \"read_roi\"",
                "[[task]] #1: missing required field \"write_roi\"",
                "[[task]] #1: missing required field \"command\" or \"block_command\" \
                 (or \"process_function\" or \"worker_function\")",
                "[[task]] #1: fit = 3 is not one of valid, overhang, shrink",
            ]
        );
    }

    #[test]
    fn commands_are_one_of_four_and_not_empty() {
        let both = task("t", "block_command = [\"x\"]");
        let neither = task("u", "").replace("command = [\"true\"]", "");
        let empty = task("v", "").replace("[\"true\"]", "[]");
        let no_program = task("w", "").replace("[\"true\"]", "[\"\", \"x\"]");
        let found = problems(&format!("name = \"p\"\n{both}{neither}{empty}{no_program}"));
        let both_message = "command and block_command are both given; a task runs either a \
                            long-running worker (command), a process per block (block_command) \
                            or a Python function (process_function, worker_function)";
        assert_eq!(
            found,
            [
                format!("task \"t\": {both_message}"),
                "task \"u\": missing required field \"command\" or \"block_command\" \
                 (or \"process_function\" or \"worker_function\")"
                    .into(),
                "task \"v\": command = [] must not be empty".into(),
                "task \"w\": command = [\"\",\"x\"] has an empty program name".into(),
            ]
        );
    }

    #[test]
    fn python_functions_are_references_or_pickles_and_run_in_a_python_worker() {
        let function = |id: &str, line: &str| task(id, line).replace("command = [\"true\"]\n", "");
        let text = format!(
            "name = \"p\"\n{}{}",
            function(
                "f",
                "process_function = \"seg.blocks:process\"\npython_path = [\"/src\"]"
            ),
            function(
                "w",
                "worker_function = { pickle = \"/runs/w.pickle\" }\nbatch_size = 4"
            ),
        );
        let pipeline = Pipeline::from_str(&text, Path::new("p.toml")).unwrap();
        let code = pipeline.tasks[0].task_code();
        assert_eq!(code.kind, CodeKind::ProcessFunction);
        let expected = FunctionCode {
            source: FunctionSource::Reference("seg.blocks:process".into()),
            search_path: vec!["/src".into()],
        };
        assert_eq!(code.function, Some(expected));
        assert_eq!(code.batch_size, 0, "auto unless the task says otherwise");
        let python = ["python3", "-m", "daisy_rs.worker"]
            .map(String::from)
            .to_vec();
        assert_eq!(pipeline.tasks[0].worker_program, Some(python));
        let worker = pipeline.tasks[1].task_code();
        assert_eq!(worker.kind, CodeKind::WorkerFunction);
        assert_eq!(worker.batch_size, 4);
        let pickle = FunctionSource::Pickle("/runs/w.pickle".into());
        assert_eq!(worker.function.map(|f| f.source), Some(pickle));
    }

    #[test]
    fn function_references_batch_sizes_and_worker_programs_are_checked() {
        let function = |id: &str, line: &str| task(id, line).replace("command = [\"true\"]\n", "");
        let text = format!(
            "name = \"p\"\n{}{}{}{}",
            function("a", "process_function = \"no_colon\""),
            function("b", "worker_function = { path = \"x\" }"),
            task("c", "batch_size = \"many\""),
            task("d", "worker_program = []"),
        );
        let found = problems(&text);
        let not_a_function = "is not \"module:function\" nor { pickle = \"path\" }";
        assert_has(
            &found,
            &format!("task \"a\": process_function = \"no_colon\" {not_a_function}"),
        );
        assert_has(
            &found,
            &format!("task \"b\": worker_function = {{\"path\":\"x\"}} {not_a_function}"),
        );
        assert_has(
            &found,
            "task \"c\": batch_size = \"many\" is not a whole number from 1 to 1024, nor \"auto\"",
        );
        assert_has(&found, "task \"d\": worker_program = [] must not be empty");
    }

    #[test]
    fn a_block_commands_placeholders_are_checked_at_load() {
        let block_command = |id: &str, argument: &str| {
            task(id, "").replace(
                "command = [\"true\"]",
                &format!("block_command = [\"sh\", \"-c\", {argument:?}]"),
            )
        };
        let unknown = block_command("u", "echo {blok_id}");
        let brace = block_command("b", "{ echo hi; }");
        let fine = block_command("f", "echo {block_id} {{literal}}");
        let found = problems(&format!("name = \"p\"\n{unknown}{brace}{fine}"));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with("task \"u\": block_command = "),
            "{}",
            found[0]
        );
        assert!(
            found[0].contains("unknown placeholder {blok_id}"),
            "{}",
            found[0]
        );
        assert!(
            found[1].contains("unknown placeholder { echo hi; }"),
            "{}",
            found[1]
        );
        assert!(
            found[1].contains("write {{ or }} for a literal brace"),
            "{}",
            found[1]
        );
    }

    #[test]
    fn rois_must_be_well_formed() {
        let rois = [
            json!({"offset": [0], "shape": [1, 2]}),
            json!({"ofset": [0], "shape": [1]}),
            json!({"offset": [0]}),
            json!({"offset": [0.5], "shape": [1]}),
            json!({"offset": vec![0; 9], "shape": vec![1; 9]}),
            json!({"offset": [i64::MIN], "shape": [1]}),
            json!([0, 1]),
        ];
        let errors: Vec<String> = rois.iter().map(|r| roi(r).unwrap_err()).collect();
        assert_eq!(
            errors,
            [
                "has a 1-dimensional offset but a 2-dimensional shape",
                "has unknown field \"ofset\" (did you mean \"offset\"?)",
                "has no shape",
                "has offset [0.5], which is not an array of integers",
                "has 9 dimensions in offset, more than the 8 supported",
                "has offset entry -9223372036854775808, beyond the supported ±1099511627776",
                "is not a table like { offset = [0, 0], shape = [10, 10] }",
            ]
        );
        let ok = roi(&json!({"offset": [-2, 0], "shape": [0, 3]})).unwrap();
        assert_eq!(ok, Roi::from_slices(&[-2, 0], &[0, 3]));
    }

    #[test]
    fn geometry_problems_name_the_roi() {
        let text = format!(
            "name = \"p\"\n{}",
            task("t", "").replace("shape = [10] }\ncommand", "shape = [0] }\ncommand")
        );
        let found = problems(&text);
        assert_eq!(
            found,
            ["task \"t\": write_roi shape [0] must be positive in every dimension"]
        );
    }

    #[test]
    fn durations_and_walltimes_are_checked() {
        assert_eq!(duration(&json!("1h 30m")), Ok(Duration::from_secs(5400)));
        assert!(duration(&json!("ten minutes"))
            .unwrap_err()
            .starts_with("is not a duration"));
        assert_eq!(
            duration(&json!("0s")).unwrap_err(),
            "must be longer than zero"
        );
        assert_eq!(
            duration(&json!("2years")).unwrap_err(),
            "is longer than a year"
        );
        assert_eq!(
            duration(&json!(600)).unwrap_err(),
            "is not a duration like \"10m\" or \"90s\""
        );
        for good in ["30", "30:00", "04:00:00", "1-12", "1-12:00", "1-12:00:00"] {
            assert_eq!(walltime(&json!(good)), Ok(good.to_string()));
        }
        for bad in ["", "4h", "1:2:3:4", "-1", "a-1", "1-", "04::00"] {
            assert!(walltime(&json!(bad)).is_err(), "{bad}");
        }
        let text = format!("name = \"p\"\n{}", task("t", "timeout = \"soon\""));
        let found = problems(&text);
        assert!(found[0].starts_with("task \"t\": timeout = \"soon\" is not a duration like"));
    }

    #[test]
    fn retry_backoff_is_read_and_its_cap_checked() {
        let spec = |extra: &str| {
            let text = format!("name = \"p\"\n{}", task("t", extra));
            let pipeline = Pipeline::from_str(&text, Path::new("p.toml")).unwrap();
            let spec = &pipeline.tasks[0].spec;
            (spec.retry_backoff, spec.retry_backoff_max)
        };
        let default_max = daisy_core::task::DEFAULT_RETRY_BACKOFF_MAX;
        assert_eq!(spec(""), (None, default_max), "off by default");
        let secs = Duration::from_secs;
        assert_eq!(spec("retry_backoff = \"5s\""), (Some(secs(5)), default_max));
        assert_eq!(
            spec("retry_backoff = \"5s\"\nretry_backoff_max = \"1m\""),
            (Some(secs(5)), secs(60))
        );
        let found = problems(&format!(
            "name = \"p\"\n{}",
            task("t", "retry_backoff = \"2m\"\nretry_backoff_max = \"1m\"")
        ));
        assert_eq!(
            found,
            [r#"task "t": retry_backoff_max = "1m" is shorter than retry_backoff = "2m""#]
        );
        let found = problems(&format!(
            "name = \"p\"\n{}",
            task("t", "retry_backoff = \"0s\"")
        ));
        assert_eq!(
            found,
            [r#"task "t": retry_backoff = "0s" must be longer than zero"#]
        );
    }

    #[test]
    fn launcher_values_are_checked() {
        let text = format!(
            "name = \"p\"\n[launcher]\nkind = \"pbs\"\npartition = \"\"\ntime = \"4h\"\n\
             setup = \"module load cuda\"\nqueue = \"x\"\n{}",
            task("t", "")
        );
        let found = problems(&text);
        assert_eq!(
            found,
            [
                r#"launcher.kind = "pbs" is not one of local, sbatch, bsub, slurmrestd"#,
                r#"launcher.partition = "" must not be empty"#,
                r#"launcher.time = "4h" is not a walltime like "04:00:00" or "1-12:00:00""#,
                r#"launcher.setup = "module load cuda" is not an array of strings"#,
                r#"unknown field "queue" in [launcher]"#,
            ]
        );
    }

    #[test]
    fn top_level_problems_are_named() {
        let text = format!(
            "nmae = \"p\"\nresources = {{ cpu = -1, gpu = 2 }}\n{}",
            task("t", "env = { \"A=B\" = \"1\" }\nmax_workers = 5000000000")
        );
        let found = problems(&text);
        assert_eq!(
            found,
            [
                r#"unknown field "nmae" (did you mean "name"?)"#,
                "resources.cpu = -1 is not a non-negative integer",
                r#"task "t": env = {"A=B":"1"} has "A=B", which cannot be a variable name"#,
                "task \"t\": max_workers = 5000000000 is not a whole number from 0 to 4294967295",
                r#"missing required field "name""#,
            ]
        );
        assert_has(
            &problems("task = 3\nname = \"p\""),
            "task = 3 is not an array of tables ([[task]])",
        );
        assert_has(
            &problems("task = []\nname = \"p\""),
            "task = [] lists no tasks",
        );
    }

    #[test]
    fn json_must_hold_a_table() {
        let error = Pipeline::from_str("[1, 2]", Path::new("p.json")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pipeline file p.json has 1 problem:\n  - the top level is [1,2], not a table"
        );
    }

    #[test]
    fn an_unquoted_walltime_is_taken_as_text() {
        let text = format!(
            "name = \"p\"\n[launcher]\ntime = 04:00:00\n{}",
            task("t", "")
        );
        let pipeline = Pipeline::from_str(&text, Path::new("p.toml")).unwrap();
        assert_eq!(pipeline.launcher.time.as_deref(), Some("04:00:00"));
    }
}
