//! Loading whole pipeline files: what resolves, what is refused and how
//! the report reads; the helpers other modules' tests write pipelines with.

use super::problems::invalid_report;
use super::*;
use daisy_core::{Fit, Roi, TaskIdx};
use proptest::prelude::*;
use std::io;

const SEGMENTATION_TOML: &str = include_str!("../../tests/fixtures/pipelines/segmentation.toml");
const SEGMENTATION_JSON: &str = include_str!("../../tests/fixtures/pipelines/segmentation.json");

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
    match Pipeline::from_str(
        text,
        Path::new("test.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    ) {
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
    let pipeline = Pipeline::from_str(
        SEGMENTATION_TOML,
        path,
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap();
    assert_eq!(pipeline.path, path);
    assert_eq!(pipeline.name, "segmentation");
    let budget = BTreeMap::from([("cpu".to_string(), 32), ("gpu".to_string(), 4)]);
    assert_eq!(pipeline.budget_amounts(), budget);
    assert_eq!(
        pipeline.resources["cpu"][31], "31",
        "a count is the ids 0 to n - 1"
    );
    let launcher = LauncherConfig {
        kind: LauncherKind::Sbatch,
        cluster: ClusterOptions {
            partition: Some("gpu".into()),
            account: Some("lab".into()),
            qos: Some("normal".into()),
            time: Some("04:00:00".into()),
            template: Some(PathBuf::from("pipelines/worker.sbatch")),
            directives: vec!["--constraint=a100".into()],
            setup: vec!["module load cuda".into()],
            max_array_parallel: Some(10),
            ..ClusterOptions::default()
        },
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
        pin: false,
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
            cluster: ClusterOptions {
                partition: Some("gpu-long".into()),
                time: Some("08:00:00".into()),
                ..launcher.cluster.clone()
            },
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
        let pipeline = Pipeline::from_str(
            text,
            Path::new("m.toml"),
            crate::pipeline::python_worker::PYTHON_ON_PATH,
        )
        .unwrap();
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
    let pipeline = Pipeline::from_str(
        &text,
        Path::new("m.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap();
    let here = &pipeline.task("here").unwrap().launcher;
    assert_eq!(
        (here.kind, here.cluster.partition.as_deref()),
        (LauncherKind::Local, Some("cpu"))
    );
    let gpu = &pipeline.task("gpu").unwrap().launcher;
    assert_eq!(
        (gpu.kind, gpu.cluster.partition.as_deref()),
        (LauncherKind::Sbatch, Some("gpu"))
    );
}

#[test]
fn omitted_fields_get_their_defaults() {
    let path = Path::new("pipelines/segmentation.toml");
    let pipeline = Pipeline::from_str(
        SEGMENTATION_TOML,
        path,
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap();
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
    let pipeline = Pipeline::from_str(
        &minimal,
        Path::new("m.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap();
    assert_eq!(pipeline.launcher, LauncherConfig::default());
    assert_eq!(pipeline.launcher.kind, LauncherKind::Local);
    assert!(pipeline.resources.is_empty());
    pipeline.graph();
}

#[test]
fn json_equivalent_resolves_the_same() {
    let toml = Pipeline::from_str(
        SEGMENTATION_TOML,
        Path::new("p/segmentation.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    );
    let json = Pipeline::from_str(
        SEGMENTATION_JSON,
        Path::new("p/segmentation.json"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    );
    let (toml, mut json) = (toml.unwrap(), json.unwrap());
    assert_eq!(json.path, Path::new("p/segmentation.json"));
    json.path = toml.path.clone();
    assert_eq!(json, toml);
}

#[test]
fn load_reads_the_file_and_anchors_the_template_beside_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pipelines");
    let pipeline = Pipeline::load(
        &dir.join("segmentation.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap();
    assert_eq!(
        pipeline.launcher.cluster.template,
        Some(dir.join("worker.sbatch"))
    );
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
    let error = Pipeline::from_str(
        text,
        Path::new("daisy.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap_err();
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
    let error = Pipeline::from_str(
        &text,
        Path::new("p.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap_err();
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
    let error = Pipeline::from_str(
        json,
        Path::new("p.json"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap_err();
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
    assert!(Pipeline::from_str(
        &zero,
        Path::new("z.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH
    )
    .is_ok());
}

#[test]
fn invalid_report_says_one_problem_in_the_singular() {
    let error = Pipeline::from_str(
        "name = \"\"\n",
        Path::new("x/daisy.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap_err();
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
    let error = Pipeline::from_str(
        text,
        Path::new("conf/daisy.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap_err();
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
    let error = Pipeline::from_str(
        text,
        Path::new("daisy.json"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "pipeline file daisy.json: JSON syntax error at line 3, column 12: expected value"
    );
}

#[test]
fn missing_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nowhere.toml");
    let error = Pipeline::load(&path, crate::pipeline::python_worker::PYTHON_ON_PATH).unwrap_err();
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
    let all = [
        LauncherKind::Local,
        LauncherKind::Sbatch,
        LauncherKind::Bsub,
        LauncherKind::Slurmrestd,
    ];
    for kind in all {
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
        if let Err(error) = Pipeline::from_str(&text, path, crate::pipeline::python_worker::PYTHON_ON_PATH) {
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
        match Pipeline::from_str(&text, Path::new("p.toml"), crate::pipeline::python_worker::PYTHON_ON_PATH) {
            Ok(pipeline) => drop(pipeline.graph()),
            Err(error) => drop(error.to_string()),
        }
    }
}

#[test]
fn a_budget_key_may_list_its_ids_and_bad_lists_are_named() {
    let text = format!(
        "name = \"p\"\nresources = {{ gpu = [0, \"MIG-1\", 3], cpu = 2 }}\n{}",
        task("t", "requires = { gpu = 1 }\npin = true")
    );
    let pipeline = Pipeline::from_str(
        &text,
        Path::new("p.toml"),
        crate::pipeline::python_worker::PYTHON_ON_PATH,
    )
    .unwrap();
    assert_eq!(pipeline.resources["gpu"], ["0", "MIG-1", "3"]);
    assert_eq!(pipeline.budget_amounts()["gpu"], 3);
    assert!(pipeline.tasks[0].pin);
    let bad = |resources: &str| {
        problems(&format!(
            "name = \"p\"\nresources = {resources}\n{}",
            task("t", "")
        ))
    };
    assert_eq!(
        bad("{ gpu = [0, 0] }"),
        ["resources.gpu = [0,0] lists 0 twice"]
    );
    assert_eq!(
        bad("{ gpu = [0, 1.5] }"),
        ["resources.gpu = [0,1.5] has 1.5, which is not an id (a number or a name without commas)"]
    );
}

#[test]
fn task_fields_are_the_schemas_own() {
    let fields = task_fields();
    assert_eq!(fields.first(), Some(&"id"));
    for field in [
        "max_workers",
        "timeout",
        "upstream",
        "python_path",
        "share_chunks",
    ] {
        assert!(fields.contains(&field), "{field} in {fields:?}");
    }
}

#[test]
fn a_lone_task_table_is_checked_by_the_files_rules_without_its_values() {
    let table = serde_json::json!({
        "id": "predict",
        "total_roi": {"offset": [0], "shape": [100]},
        "read_roi": {"offset": [0], "shape": [10]},
        "write_roi": {"offset": [0], "shape": [10]},
        "process_function": "blocks:touch",
        "upstream": ["elsewhere"],
        "max_retries": -1,
        "timeout": "0s",
        "requires": {"gpu": 2},
    });
    let found = task_problems(&table, &serde_json::json!({"gpu": 1}));
    let found: Vec<(&str, &str)> = (found.iter())
        .map(|problem| (problem.field.as_str(), problem.what.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "max_retries",
                "max_retries is not a whole number from 0 to 4294967295"
            ),
            ("timeout", "timeout must be longer than zero"),
            (
                "requires",
                "requires {gpu: 2} but the global budget only has {gpu: 1}"
            ),
        ]
    );
    let fixed = serde_json::json!({"max_retries": 1, "timeout": "1s"});
    let mut good = table;
    good.as_object_mut()
        .unwrap()
        .extend(fixed.as_object().unwrap().clone());
    assert_eq!(task_problems(&good, &serde_json::json!({"gpu": 2})), []);
}
