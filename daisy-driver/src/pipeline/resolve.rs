//! Raw to resolved: the file as written (`schema`) made into the
//! [`Pipeline`], with the rules between the fields of one table.
//!
//! Defaults that hang on other fields live here (a function task's batch
//! size and worker program, a task's `resource_tracking` from the
//! pipeline's), and so does the laying of a task's `launcher` over
//! `[launcher]`. A task is resolved as far as it goes even when some of
//! its fields failed, so that the checks between tasks in `validate` still
//! see its id, upstream list and dimensions; the [`Pipeline`] is only
//! assembled when the whole file is free of problems.

use super::problems::{show, Problem, Subject};
use super::reader::{read_table, Reading};
use super::schema::{Amounts, LauncherTable, PipelineFile, Table, TaskTable};
use super::skip_mask::SkipMask;
use super::syntax::Lines;
use super::writes;
use super::{budget, python_worker, validate};
use super::{LauncherConfig, Pipeline, TaskConfig, UserCommand};
use daisy_core::geometry::geometry_problems;
use daisy_core::protocol::{CodeKind, FunctionCode};
use daisy_core::TaskSpec;
use launchers::ClusterOptions;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The fields that say what a task runs; a task gives exactly one.
const CODE_FIELDS: [&str; 4] = [
    "command",
    "block_command",
    "process_function",
    "worker_function",
];

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

impl TaskDraft {
    /// The draft of the `n`-th task (from 1), read as `raw` from its table
    /// on `lines`.
    fn new(n: usize, raw: Option<&TaskTable>, lines: &Lines) -> Self {
        let id = raw.and_then(|raw| raw.id.clone());
        Self {
            subject: id.clone().map_or(Subject::UnnamedTask(n), Subject::Task),
            lines: lines.clone(),
            id,
            upstream: raw.map(|raw| raw.upstream.clone()).unwrap_or_default(),
            dims: None,
            config: None,
        }
    }

    /// `found` in this task's table, as this task's problems.
    fn claim(&self, found: Vec<Problem>, problems: &mut Vec<Problem>) {
        problems.extend(found.into_iter().map(|problem| self.subject.claim(problem)));
    }

    /// A problem with this task's `field`, on the line of its value.
    pub(super) fn problem(&self, field: &str, message: String) -> Problem {
        let problem = self.subject.problem(field, message);
        problem.on_line(self.lines.of(field))
    }
}

/// What every task is read against: the budget, `[launcher]` as written,
/// and the pipeline's own settings.
struct Run<'a> {
    budget: &'a Amounts,
    launcher: Option<&'a Table>,
    resource_tracking: bool,
    /// The pipeline file, which relative paths are beside.
    path: &'a Path,
    /// The interpreter of function tasks' workers.
    python: &'a str,
}

/// The pipeline in `tree` (read from `path`, its values on `lines`), or
/// every problem in it.
pub(super) fn pipeline(
    tree: &Value,
    lines: &Lines,
    path: &Path,
    python: &str,
) -> Result<Pipeline, Vec<Problem>> {
    if !tree.is_object() {
        let message = format!("the top level is {}, not a table", show(tree));
        return Err(vec![Subject::Pipeline.problem("", message)]);
    }
    let (top, mut problems) = read_table::<PipelineFile>(tree, lines, "");
    let Some(top) = top else {
        return Err(problems);
    };
    let top_launcher = top.launcher.as_ref();
    let (launcher, found) = launcher(top_launcher, None, lines.key("launcher"), path);
    problems.extend(found);
    let resources = budget::ids(&top.resources, &budget::Visible::of_this_process())
        .map_err(|message| problems.push(Subject::Pipeline.problem("resources.gpu", message)))
        .unwrap_or_default();
    let budget = budget::amounts(&top.resources);
    let run = Run {
        budget: &budget,
        launcher: top_launcher,
        resource_tracking: top.resource_tracking,
        path,
        python,
    };
    let tables = top.task.iter().flatten().enumerate();
    let mut drafts: Vec<TaskDraft> = (tables.map(|(i, table)| {
        let lines = lines.key("task").item(i);
        task(i + 1, (table, lines), &run, &mut problems)
    }))
    .collect();
    validate::link_tasks(&mut drafts, &mut problems);
    let tasks: Option<Vec<TaskConfig>> = drafts.into_iter().map(|draft| draft.config).collect();
    match (top.name, tasks) {
        (Some(name), Some(tasks)) if problems.is_empty() => Ok(Pipeline {
            path: path.to_path_buf(),
            name,
            resources,
            launcher,
            tasks,
        }),
        _ => Err(problems),
    }
}

/// The launcher table `own` laid over `base` (a task's over `[launcher]`):
/// the backend and the options of its jobs, a relative template taken as
/// beside the pipeline file. Its problems are those of `own`'s keys, since
/// `base`'s were reported with `base`.
fn launcher(
    own: Option<&Table>,
    base: Option<&Table>,
    lines: &Lines,
    pipeline_path: &Path,
) -> (LauncherConfig, Vec<Problem>) {
    let mut table = base.cloned().unwrap_or_default();
    table.extend(own.cloned().unwrap_or_default());
    let table = Value::Object(table);
    let mut reading = Reading::new(&table, lines, "launcher");
    let backend: LauncherTable = reading.read().unwrap_or_default();
    let mut cluster: ClusterOptions = reading.read().unwrap_or_default();
    let mut problems = reading.finish();
    let is_own = |field: &str| {
        let key = field.strip_prefix("launcher.").unwrap_or(field);
        own.is_some_and(|own| own.contains_key(key))
    };
    problems.retain(|problem| is_own(&problem.field));
    cluster.template = (cluster.template).map(|template| beside(pipeline_path, &template));
    let kind = backend.kind;
    (LauncherConfig { kind, cluster }, problems)
}

/// `path` relative to the directory of the pipeline file, so a pipeline
/// runs the same from any working directory.
fn beside(pipeline_path: &Path, path: &Path) -> PathBuf {
    match pipeline_path.parent() {
        Some(dir) => dir.join(path),
        None => path.to_path_buf(),
    }
}

/// The `n`-th `[[task]]` table (from 1), at its place in the file, its
/// `requires` checked against the global budget.
fn task(n: usize, at: (&Value, &Lines), run: &Run, problems: &mut Vec<Problem>) -> TaskDraft {
    let (mut draft, own) = own_fields(n, at, run, problems);
    let Some(OwnFields {
        raw,
        spec,
        command,
        launcher,
    }) = own
    else {
        return draft;
    };
    if let (Some(id), Some(spec), Some(command)) = (draft.id.clone(), spec, command) {
        let mut spec = TaskSpec { id, ..spec };
        let written = writes::write_grids(&raw.writes, raw.share_chunks, &spec, |path| {
            beside(run.path, path)
        });
        spec.writes = written.unwrap_or_else(|message| {
            problems.push(draft.problem("writes", message));
            Vec::new()
        });
        let skip_mask = skip_mask(raw.skip_mask.as_deref(), &spec, run.path);
        let skip_mask = skip_mask.unwrap_or_else(|message| {
            problems.push(draft.problem("skip_mask", message));
            None
        });
        let resolved = Resolved {
            spec,
            command,
            launcher,
            skip_mask,
        };
        draft.config = Some(task_config(raw, resolved, run));
    }
    draft
}

/// One `[[task]]` table alone, without a file around it: every problem
/// `task` finds in its own fields (types, rules, geometry, the code
/// fields, its launcher, `requires` against `budget`), none of those that
/// need other tasks (upstream ids) or files beside the pipeline
/// (`skip_mask`, `writes`). The Python side checks each `Task` with it.
pub(super) fn lone_task(table: &Value, budget: &Amounts) -> Vec<Problem> {
    let run = Run {
        budget,
        launcher: None,
        resource_tracking: false,
        path: Path::new(""),
        python: "",
    };
    let mut problems = Vec::new();
    own_fields(1, (table, &Lines::default()), &run, &mut problems);
    problems
}

/// A task table's fields read and checked as far as they need only the
/// table (and the run's budget and `[launcher]`).
struct OwnFields {
    raw: TaskTable,
    spec: Option<TaskSpec>,
    command: Option<UserCommand>,
    launcher: LauncherConfig,
}

/// The draft of the `n`-th task and its [`OwnFields`], their problems
/// pushed onto `problems`; no fields if the table could not be read.
fn own_fields(
    n: usize,
    at: (&Value, &Lines),
    run: &Run,
    problems: &mut Vec<Problem>,
) -> (TaskDraft, Option<OwnFields>) {
    let (table, lines) = at;
    let (raw, found) = read_table::<TaskTable>(table, lines, "");
    let mut draft = TaskDraft::new(n, raw.as_ref(), lines);
    draft.claim(found, problems);
    let Some(raw) = raw else {
        return (draft, None);
    };
    let spec = task_spec(&raw, &draft, problems);
    draft.dims = spec.as_ref().map(|spec| spec.total_roi.dims());
    for message in validate::budget_problems(&raw.requires, run.budget) {
        problems.push(draft.problem("requires", message));
    }
    let command = user_command(&raw, table, &draft, problems);
    let own_launcher = raw.launcher.as_ref();
    let (launcher, found) = launcher(own_launcher, run.launcher, lines.key("launcher"), run.path);
    draft.claim(found, problems);
    let own = OwnFields {
        raw,
        spec,
        command,
        launcher,
    };
    (draft, Some(own))
}

/// What a task's config holds beyond its fields as written: each made of
/// several of them.
struct Resolved {
    spec: TaskSpec,
    command: UserCommand,
    launcher: LauncherConfig,
    skip_mask: Option<Arc<SkipMask>>,
}

/// The task's config: `raw`'s fields, their defaults applied, and what
/// was resolved from them. Every field is named, so that none is
/// forgotten.
fn task_config(raw: TaskTable, resolved: Resolved, run: &Run) -> TaskConfig {
    let TaskTable {
        requires,
        pin,
        max_workers,
        max_worker_restarts,
        timeout,
        idle_timeout,
        batch_size,
        prefetch,
        upstream,
        worker_program,
        env,
        resource_tracking,
        // In `resolved`:
        id: _,
        total_roi: _,
        read_roi: _,
        write_roi: _,
        fit: _,
        read_write_conflict: _,
        max_retries: _,
        retry_backoff: _,
        retry_backoff_max: _,
        command: _,
        block_command: _,
        process_function: _,
        worker_function: _,
        python_path: _,
        launcher: _,
        skip_mask: _,
        writes: _,
        share_chunks: _,
    } = raw;
    let Resolved {
        spec,
        command,
        launcher,
        skip_mask,
    } = resolved;
    TaskConfig {
        spec,
        upstream,
        requires,
        pin,
        max_workers,
        max_worker_restarts,
        timeout,
        idle_timeout,
        batch_size: batch_size.unwrap_or_else(|| default_batch_size(&command)),
        prefetch,
        resource_tracking: resource_tracking.unwrap_or(run.resource_tracking),
        worker_program: worker_program.or_else(|| default_worker_program(&command, run.python)),
        command,
        env,
        launcher,
        skip_mask,
    }
}

/// `skip_mask`: a Zarr array (a path relative to the pipeline file), read
/// now so that its shape is checked against the task's block grid at load;
/// the problem if it cannot be.
fn skip_mask(
    path: Option<&str>,
    spec: &TaskSpec,
    pipeline_path: &Path,
) -> Result<Option<Arc<SkipMask>>, String> {
    let Some(path) = path else {
        return Ok(None);
    };
    match SkipMask::load(&beside(pipeline_path, Path::new(path)), spec) {
        Ok(mask) => Ok(Some(Arc::new(mask))),
        Err(error) => Err(format!("skip_mask = {path:?}: {error}")),
    }
}

/// The scheduling half of a task, its id left empty and its geometry
/// checked by daisy-core's own rules; `None` if a ROI could not be read.
fn task_spec(raw: &TaskTable, draft: &TaskDraft, problems: &mut Vec<Problem>) -> Option<TaskSpec> {
    let backoff = retry_backoff(raw, draft, problems);
    let mut spec = TaskSpec::new("", raw.total_roi?, raw.read_roi?, raw.write_roi?);
    spec.fit = raw.fit.unwrap_or(spec.fit);
    spec.read_write_conflict = raw.read_write_conflict.unwrap_or(spec.read_write_conflict);
    spec.max_retries = raw.max_retries.unwrap_or(spec.max_retries);
    (spec.retry_backoff, spec.retry_backoff_max) =
        backoff.unwrap_or((None, spec.retry_backoff_max));
    for problem in geometry_problems(&spec) {
        let message = format!("{} {}", problem.field, problem.message);
        problems.push(draft.problem(problem.field, message));
    }
    Some(spec)
}

/// `retry_backoff` and its cap `retry_backoff_max` (which must not be
/// shorter); `None` after a problem.
fn retry_backoff(
    raw: &TaskTable,
    draft: &TaskDraft,
    problems: &mut Vec<Problem>,
) -> Option<(Option<Duration>, Duration)> {
    let max = (raw.retry_backoff_max).unwrap_or(daisy_core::task::DEFAULT_RETRY_BACKOFF_MAX);
    if let Some(backoff) = raw.retry_backoff.filter(|&backoff| backoff > max) {
        let show = |d| humantime::format_duration(d).to_string();
        let message = format!(
            "retry_backoff_max = \"{}\" is shorter than retry_backoff = \"{}\"",
            show(max),
            show(backoff)
        );
        problems.push(draft.problem("retry_backoff_max", message));
        return None;
    }
    Some((raw.retry_backoff, max))
}

/// Exactly one of `command` (a long-running worker), `block_command` (a
/// process per block), `process_function` and `worker_function` (Python
/// functions called in the worker's process): each feeds blocks its way.
/// Which are given is read from the `table` as written, so that a refused
/// one still counts.
fn user_command(
    raw: &TaskTable,
    table: &Value,
    draft: &TaskDraft,
    problems: &mut Vec<Problem>,
) -> Option<UserCommand> {
    let given: Vec<&str> = (CODE_FIELDS.into_iter())
        .filter(|field| table.get(field).is_some())
        .collect();
    match given.as_slice() {
        [_] => (raw.command.clone().map(UserCommand::Worker))
            .or_else(|| raw.block_command.clone().map(UserCommand::PerBlock))
            .or_else(|| function_command(raw)),
        [] => {
            let message = "missing required field \"command\" or \"block_command\" \
                           (or \"process_function\" or \"worker_function\")";
            problems.push(draft.problem("command", message.into()));
            None
        }
        [first, second, ..] => {
            let message = format!(
                "{first} and {second} are both given; a task runs either a \
                 long-running worker (command), a process per block (block_command) \
                 or a Python function (process_function, worker_function)"
            );
            problems.push(draft.problem(second, message));
            None
        }
    }
}

/// A `process_function` or `worker_function`, with the `python_path` its
/// worker imports from.
fn function_command(raw: &TaskTable) -> Option<UserCommand> {
    let (kind, source) = match (&raw.process_function, &raw.worker_function) {
        (Some(source), None) => (CodeKind::ProcessFunction, source.clone()),
        (None, Some(source)) => (CodeKind::WorkerFunction, source.clone()),
        _ => return None,
    };
    let code = FunctionCode {
        source,
        search_path: raw.python_path.clone(),
    };
    Some(UserCommand::Function { kind, code })
}

/// Function tasks run in a Python worker of `python`; other tasks in
/// daisy-worker (the driver's choice).
fn default_worker_program(command: &UserCommand, python: &str) -> Option<Vec<String>> {
    let UserCommand::Function { .. } = command else {
        return None;
    };
    Some(python_worker::command(python))
}

/// Python functions cost microseconds a block, so their batches are
/// automatic unless the task says otherwise; commands take one at a time.
fn default_batch_size(command: &UserCommand) -> u32 {
    match command {
        UserCommand::Function { .. } => 0,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use crate::pipeline::tests::{assert_has, problems, task};
    use crate::pipeline::Pipeline;
    use daisy_core::protocol::{CodeKind, FunctionCode, FunctionSource};
    use std::path::Path;
    use std::time::Duration;

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
        let pipeline = Pipeline::from_str(
            &text,
            Path::new("p.toml"),
            crate::pipeline::python_worker::PYTHON_ON_PATH,
        )
        .unwrap();
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
    fn retry_backoff_is_read_and_its_cap_checked() {
        let spec = |extra: &str| {
            let text = format!("name = \"p\"\n{}", task("t", extra));
            let pipeline = Pipeline::from_str(
                &text,
                Path::new("p.toml"),
                crate::pipeline::python_worker::PYTHON_ON_PATH,
            )
            .unwrap();
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
                "resources.cpu = -1 is not a non-negative integer or a list of ids like [0, 2]",
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
        let error = Pipeline::from_str(
            "[1, 2]",
            Path::new("p.json"),
            crate::pipeline::python_worker::PYTHON_ON_PATH,
        )
        .unwrap_err();
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
        let pipeline = Pipeline::from_str(
            &text,
            Path::new("p.toml"),
            crate::pipeline::python_worker::PYTHON_ON_PATH,
        )
        .unwrap();
        assert_eq!(pipeline.launcher.cluster.time.as_deref(), Some("04:00:00"));
    }
}
