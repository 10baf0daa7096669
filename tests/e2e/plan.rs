//! `daisy-driver plan`: the dry run, its JSON, and the validation report.

use crate::util::*;

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
    assert!(text.contains("1 blocks per request, prefetch 0"), "{text}");
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
}
