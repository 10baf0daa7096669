//! `daisy-driver plan`: the dry run, its JSON, and the validation report.

use crate::util::*;
use daisy_driver::run::resource_env::THREAD_VARIABLES;
use std::os::unix::fs::PermissionsExt;

fn executable(path: &std::path::Path) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

const TWO_TASKS: &str = r#"
name = "seg"
[resources]
cpu = 8
gpu = 2

[[task]]
id = "predict"
total_roi = { offset = [0, 0], shape = [6, 6] }
read_roi = { offset = [0, 0], shape = [3, 3] }
write_roi = { offset = [1, 1], shape = [1, 1] }
requires = { gpu = 1, cpu = 2 }
max_workers = 4
command = ["python", "predict.py"]

[[task]]
id = "relabel"
upstream = ["predict"]
total_roi = { offset = [1, 1], shape = [4, 4] }
read_roi = { offset = [0, 0], shape = [3, 3] }
write_roi = { offset = [1, 1], shape = [1, 1] }
block_command = ["./relabel", "{block_id}"]
"#;

#[test]
fn plan_reports_blocks_levels_roots_and_workers() {
    let dir = TestDir::new();
    dir.write("seg.toml", TWO_TASKS);
    executable(&dir.write("relabel", "#!/bin/sh\n"));
    let json = run_ok(&mut dir.driver(&["plan", "seg.toml", "--json"]));
    let plan: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(plan["pipeline"], "seg");
    let predict = &plan["tasks"][0];
    assert_eq!(predict["blocks"], 16);
    assert_eq!(predict["levels"], 4);
    assert_eq!(predict["root_blocks"], 4);
    assert_eq!(predict["done_blocks"], 0);
    assert_eq!(predict["workers"], 2, "gpu = 2 allows 2 of the 4 workers");
    assert_eq!(predict["command_kind"], "worker");
    assert_eq!(
        predict["total_write_roi"]["offset"],
        serde_json::json!([1, 1])
    );
    let relabel = &plan["tasks"][1];
    assert_eq!(relabel["blocks"], 4);
    assert_eq!(relabel["upstream"], serde_json::json!(["predict"]));
    assert_eq!(relabel["root_blocks"], 0);

    let text = run_ok(&mut dir.driver(&["plan", "seg.toml"]));
    assert!(text.contains("16 in 4 levels, 4 roots"), "{text}");
    assert!(text.contains("1 block per request, prefetch 0"), "{text}");
    assert_eq!(
        (predict["batch_size"].clone(), predict["prefetch"].clone()),
        (1.into(), 0.into())
    );
    assert!(!dir.join("daisy_run").exists(), "planning creates nothing");
}

#[test]
fn plan_of_a_bad_file_lists_every_problem_at_once() {
    let dir = TestDir::new();
    let bad = TWO_TASKS
        .replace("max_workers = 4", "max_workers = 4\nmax_worker = 2")
        .replace(
            "requires = { gpu = 1, cpu = 2 }",
            "requires = { gpu = 8, cpu = 2 }",
        )
        .replace("upstream = [\"predict\"]", "upstream = [\"predictt\"]")
        .replace(
            "write_roi = { offset = [1, 1], shape = [1, 1] }\nblock",
            "write_roi = { offset = [2, 2], shape = [2, 2] }\nblock",
        );
    dir.write("bad.toml", &bad);
    let out = run_fails(&mut dir.driver(&["plan", "bad.toml"]), 2);
    assert!(out.contains("bad.toml"), "names the file: {out}");
    for expected in [
        "unknown field \"max_worker\" (did you mean \"max_workers\"?)",
        "task \"predict\" requires {gpu: 8} but the global budget only has {gpu: 2}",
        "\"predictt\"",
        "lies outside read_roi",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}

/// Issue 11, item 10: a read region larger than the total region used to
/// plan 0 blocks, exit 0, and leave the downstream task failing.
#[test]
fn a_task_without_blocks_is_refused_naming_its_regions() {
    let dir = TestDir::new();
    let empty = TWO_TASKS.replace(
        "total_roi = { offset = [1, 1], shape = [4, 4] }",
        "total_roi = { offset = [1, 1], shape = [2, 4] }",
    );
    dir.write("empty.toml", &empty);
    let mut run = dir.driver(&["run", "empty.toml", "--run-dir", "run"]);
    for out in [
        run_fails(&mut dir.driver(&["plan", "empty.toml"]), 2),
        run_fails(&mut run, 2),
    ] {
        let expected = "task \"relabel\": total_roi {offset [1, 1], shape [2, 4]} holds no \
                        block: read_roi {offset [0, 0], shape [3, 3]} and write_roi \
                        {offset [1, 1], shape [1, 1]} leave a total write region \
                        {offset [2, 2], shape [0, 2]}, no room for a whole write_roi of \
                        shape [1, 1] (fit = \"valid\")";
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(!dir.join("run").exists(), "a refused run creates nothing");
}

#[test]
fn plan_counts_blocks_done_by_an_earlier_run() {
    let dir = TestDir::new();
    dir.write(
        "p.toml",
        r#"name = "p"
[[task]]
id = "t"
total_roi = { offset = [0], shape = [10] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
block_command = ["sh", "-c", "test {block_id} -lt 6"]
max_retries = 0
"#,
    );
    run_fails(&mut dir.driver(&["run", "--serial", "p.toml"]), 1);
    let json = run_ok(&mut dir.driver(&["plan", "p.toml", "--json"]));
    let plan: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(plan["tasks"][0]["done_blocks"], 6);
    assert_eq!(plan["tasks"][0]["remaining_blocks"], 4);
    // Once the rest is done too, nothing is left to start.
    let fixed = dir.read("p.toml").replace("test {block_id} -lt 6", "true");
    dir.write("p.toml", &fixed);
    run_ok(&mut dir.driver(&["run", "--serial", "p.toml"]));
    let text = run_ok(&mut dir.driver(&["plan", "p.toml"]));
    assert!(
        text.contains("nothing to run: every block is done, no worker would start"),
        "{text}"
    );
}

/// Budget cpu = 4: "a" (8 blocks) gets 3 workers and "c" (2 blocks) the
/// last cpu; "b" waits for "a". "c" is done first (2 rounds against 3),
/// yet its cpu goes to nobody: "a" wants no more workers for its last 2
/// blocks. When "a" is done, "b" gets all 4.
const DRAINING: &str = r#"
name = "p"
[resources]
cpu = 4
"#;

fn draining_pipeline() -> String {
    [
        DRAINING.to_string(),
        task("a", 8, "true", "max_workers = 3\nrequires = { cpu = 1 }"),
        task(
            "b",
            4,
            "true",
            "max_workers = 4\nrequires = { cpu = 1 }\nupstream = [\"a\"]",
        ),
        task("c", 2, "true", "max_workers = 2\nrequires = { cpu = 1 }"),
    ]
    .concat()
}

#[test]
fn plan_simulates_the_allocation_as_tasks_drain() {
    let dir = TestDir::new();
    dir.write("p.toml", &draining_pipeline());
    let json = run_ok(&mut dir.driver(&["plan", "p.toml", "--json"]));
    let plan: serde_json::Value = serde_json::from_str(&json).unwrap();
    let phases = plan["phases"].as_array().unwrap();
    let summary: Vec<String> = phases
        .iter()
        .map(|phase| {
            let tasks: Vec<String> = phase["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| format!("{}:{}:{}", t["id"], t["state"], t["workers"]))
                .collect();
            format!("after {} -> {}", phase["after"], tasks.join(" "))
        })
        .collect();
    assert_eq!(
        summary,
        [
            r#"after [] -> "a":"running":3 "b":"waits_for_upstream":null "c":"running":1"#,
            r#"after ["c"] -> "a":"running":3 "b":"waits_for_upstream":null"#,
            r#"after ["a"] -> "b":"running":4"#,
        ],
        "{json}"
    );
    assert_eq!(phases[1]["tasks"][0]["blocks_left"], 2, "a ran 2 rounds");
    let started = |phase: usize, task: usize| phases[phase]["tasks"][task]["started"].clone();
    assert_eq!(started(0, 0), serde_json::json!({"first": 1, "last": 3}));
    assert_eq!(started(0, 2), serde_json::json!({"first": 4, "last": 4}));
    assert_eq!(started(2, 0), serde_json::json!({"first": 5, "last": 8}));

    let text = run_ok(&mut dir.driver(&["plan", "p.toml"]));
    for line in [
        "phase 1, at start (budget in use {cpu: 4})",
        "    a  3 workers, starts workers 1-3; 8 blocks left",
        "    b  waits for a; 4 blocks left",
        "    c  1 worker, starts worker 4; 2 blocks left",
        "phase 3, after a is done (budget in use {cpu: 4})",
        "task \"b\", workers 5-8 (phase 3): 4 local processes",
        // Issue 38: one, not "1 local processes".
        "(phase 1): 1 local process\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(!dir.join("daisy_run").exists(), "planning creates nothing");
}

#[test]
fn plan_prints_the_local_command_lines_of_each_first_submission() {
    let dir = TestDir::new();
    dir.write("p.toml", &draining_pipeline());
    let mut plan = dir.driver(&["plan", "p.toml", "--scripts"]);
    for name in THREAD_VARIABLES {
        plan.env_remove(name);
    }
    let text = run_ok(&mut plan);
    let worker = worker_program().display().to_string();
    let header = "--- command lines for task \"c\" (worker 4), run in the driver's \
                  working directory with DAISY_CONTEXT set ---\n";
    // Worker 4 holds the budget's fourth cpu (the first three went to
    // task a's workers): it is told so, and to start one thread.
    let told = "DAISY_RESOURCES='{\"cpu\":[\"3\"]}' DAISY_RESOURCE_CPU=3 \
                OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
                NUMBA_NUM_THREADS=1 NUMEXPR_NUM_THREADS=1 VECLIB_MAXIMUM_THREADS=1";
    let command = format!(
        "{told} {worker} --log-dir daisy_run/p/logs/c >> daisy_run/p/logs/c/worker-4.out \
         2>> daisy_run/p/logs/c/worker-4.err\n"
    );
    assert!(
        text.contains(&format!("{header}{command}")),
        "missing\n{header}{command}in:\n{text}"
    );
}

#[test]
fn plan_lists_script_and_launcher_problems_and_exits_non_zero() {
    let dir = TestDir::new();
    dir.write("worker.sbatch", "#!/bin/sh\n#SBATCH --time={{walltime}}\n");
    let pipeline = draining_pipeline().replace(
        "[resources]",
        "[launcher]\nkind = \"sbatch\"\ntemplate = \"worker.sbatch\"\n[resources]",
    );
    dir.write("p.toml", &pipeline);
    let no_sbatch = dir.join("empty-path");
    std::fs::create_dir(&no_sbatch).unwrap();
    let mut plan = dir.driver(&["plan", "p.toml"]);
    plan.env("PATH", &no_sbatch);
    let out = run_fails(&mut plan, 2);
    for expected in [
        "problem: task \"a\": job template",
        "problem: task \"c\": job template",
        "unknown placeholder {{walltime}}",
        "problem: the pipeline's launcher is sbatch: cannot find sbatch",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}
