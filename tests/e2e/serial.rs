//! `daisy-driver run --serial`: blocks run in the driver itself; failures
//! are retried and orphan their downstream blocks, and a killed run
//! resumes without losing or redoing a block it reported done.

use crate::util::*;
use std::collections::{BTreeSet, HashMap};

/// A 1-D task of `blocks` blocks whose command appends its block id to
/// `ran.txt` (then runs `extra` shell code).
fn line_task(blocks: u64, conflict: bool, extra: &str) -> String {
    format!(
        r#"name = "line"
[[task]]
id = "line"
total_roi = {{ offset = [0], shape = [{total}] }}
read_roi = {{ offset = [0], shape = [3] }}
write_roi = {{ offset = [1], shape = [1] }}
read_write_conflict = {conflict}
block_command = ["sh", "-c", "echo {{block_id}} >> ran.txt; {extra}"]
"#,
        total = blocks + 2
    )
}

fn ran(dir: &TestDir) -> Vec<u64> {
    dir.read("ran.txt")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[test]
fn a_run_processes_every_block_once_and_a_rerun_skips_them() {
    let dir = TestDir::new();
    dir.write("line.toml", &line_task(30, true, "true"));
    let out = run_ok(&mut dir.driver(&["run", "--serial", "line.toml"]));
    assert!(out.contains("30 blocks run"), "{out}");
    let mut ids = ran(&dir);
    ids.sort();
    assert_eq!(ids, (1..=30).collect::<Vec<u64>>());
    let events = events(&dir.join("daisy_run/line"));
    assert_eq!(event_blocks(&events, "block_done", "line").len(), 30);

    let again = run_ok(&mut dir.driver(&["run", "--serial", "line.toml"]));
    assert!(again.contains("0 blocks run"), "{again}");
    assert_eq!(ran(&dir).len(), 30, "nothing ran twice");
}

#[test]
fn a_failing_block_is_retried_then_orphans_its_downstream_blocks() {
    let dir = TestDir::new();
    dir.write(
        "line.toml",
        &line_task(10, true, "echo broken >&2; test {block_id} -ne 4"),
    );
    let out = run_fails(&mut dir.driver(&["run", "--serial", "line.toml"]), 1);
    let counts: HashMap<u64, usize> = ran(&dir).into_iter().fold(HashMap::new(), |mut m, id| {
        *m.entry(id).or_default() += 1;
        m
    });
    assert_eq!(counts[&4], 3, "block 4 ran once and was retried twice");
    let run_dir = dir.join("daisy_run/line");
    let events = events(&run_dir);
    let failures: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "block_failed")
        .collect();
    assert_eq!(failures.len(), 3);
    assert!(failures.iter().all(|e| e["block_id"] == 4));
    assert_eq!(failures[2]["for_good"], true);
    let error = failures[0]["error"].as_str().unwrap();
    assert!(
        error.contains("exit status 1") && error.contains("broken"),
        "{error}"
    );
    let summary = events.iter().find(|e| e["event"] == "task_done").unwrap();
    let c = &summary["counters"];
    assert_eq!(c["failed"], 1);
    let orphaned = c["orphaned"].as_u64().unwrap();
    assert!(
        orphaned > 0,
        "block 4 has downstream blocks in the next level"
    );
    assert_eq!(c["completed"].as_u64().unwrap() + 1 + orphaned, 10);
    assert!(
        out.contains("logs are in"),
        "the summary points at the logs: {out}"
    );
    assert!(
        std::fs::read_to_string(run_dir.join("logs/line/serial.err"))
            .unwrap()
            .contains("broken")
    );
}

/// A run's block events without what differs from run to run (times,
/// workers), in block order.
fn block_events(run_dir: &std::path::Path) -> Vec<serde_json::Value> {
    let mut blocks: Vec<serde_json::Value> = events(run_dir)
        .into_iter()
        .filter(|e| e["event"] == "block_done" || e["event"] == "block_failed")
        .map(|mut e| {
            let fields = e.as_object_mut().unwrap();
            for varying in ["time", "worker_id", "seconds"] {
                fields.remove(varying);
            }
            e
        })
        .collect();
    blocks.sort_by_key(|e| (e["block_id"].as_u64(), e["for_good"].as_bool()));
    blocks
}

/// Issue 13: a serial run recorded a block failed for good with its
/// orphans in the error text; both modes now record outcomes alike.
#[test]
fn serial_and_distributed_runs_record_the_same_block_events() {
    let dir = TestDir::new();
    dir.write(
        "line.toml",
        &line_task(6, true, "echo broken >&2; test {block_id} -ne 4"),
    );
    let serial = ["run", "--serial", "line.toml", "--run-dir", "serial"];
    run_fails(&mut dir.driver(&serial), 1);
    run_fails(
        &mut dir.driver(&["run", "line.toml", "--run-dir", "distributed"]),
        1,
    );
    let serial = block_events(&dir.join("serial"));
    let failed = serial.iter().filter(|e| e["event"] == "block_failed");
    assert_eq!(failed.count(), 3, "block 4, retried twice: {serial:#?}");
    assert_eq!(serial, block_events(&dir.join("distributed")));
}

#[test]
fn a_driver_killed_mid_run_loses_no_reported_block_and_the_rerun_does_only_the_rest() {
    let dir = TestDir::new();
    let blocks = 300;
    dir.write("line.toml", &line_task(blocks, false, "sleep 0.01"));
    {
        let _driver = ChildGuard::spawn(&mut dir.driver(&["run", "--serial", "line.toml"]));
        wait_until("100 blocks ran", || ran(&dir).len() >= 100);
    } // SIGKILL, mid-run
    let run_dir = dir.join("daisy_run/line");
    let reported: BTreeSet<u64> = event_blocks(&events(&run_dir), "block_done", "line")
        .into_iter()
        .collect();
    let first_run = ran(&dir).len();
    assert!(
        reported.len() >= 90,
        "blocks were reported done before the kill"
    );

    let plan = run_ok(&mut dir.driver(&["plan", "line.toml", "--json"]));
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let marked = plan["tasks"][0]["done_blocks"].as_u64().unwrap();
    assert!(
        marked >= reported.len() as u64,
        "every reported block is marked"
    );

    let out = run_ok(&mut dir.driver(&["run", "--serial", "line.toml"]));
    let second_run: Vec<u64> = ran(&dir)[first_run..].to_vec();
    assert_eq!(
        second_run.len() as u64,
        blocks - marked,
        "only the rest ran\n{out}"
    );
    assert!(
        second_run.iter().all(|id| !reported.contains(id)),
        "no reported block ran again"
    );
    let all: BTreeSet<u64> = ran(&dir).into_iter().collect();
    assert_eq!(all, (1..=blocks).collect());
}

#[test]
fn a_changed_write_roi_is_refused_with_how_to_reset() {
    let dir = TestDir::new();
    dir.write("line.toml", &line_task(5, false, "true"));
    run_ok(&mut dir.driver(&["run", "--serial", "line.toml"]));
    let changed = line_task(5, false, "true").replace(
        "write_roi = { offset = [1], shape = [1] }",
        "write_roi = { offset = [0], shape = [2] }",
    );
    assert_ne!(changed, line_task(5, false, "true"));
    dir.write("line.toml", &changed);
    let out = run_fails(&mut dir.driver(&["run", "--serial", "line.toml"]), 2);
    assert!(out.contains("different task layout"), "{out}");
    assert!(out.contains("rm -rf daisy_run/line/done/line"), "{out}");
    let plan = run_fails(&mut dir.driver(&["plan", "line.toml"]), 2);
    assert!(plan.contains("different task layout"), "{plan}");
}

#[test]
fn a_worker_command_serves_blocks_over_json_lines() {
    let dir = TestDir::new();
    dir.write(
        "worker.py",
        r#"import json, sys
print("loading model", flush=True)
for line in sys.stdin:
    block = json.loads(line)
    ok = block["block_id"] != 3
    result = {"block_id": block["block_id"], "ok": ok}
    if not ok:
        result["error"] = "cannot handle block 3"
    print(json.dumps(result), flush=True)
"#,
    );
    dir.write(
        "worker.toml",
        r#"name = "worker"
[[task]]
id = "infer"
total_roi = { offset = [0], shape = [8] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
max_retries = 0
command = ["python3", "worker.py"]
"#,
    );
    let out = run_fails(&mut dir.driver(&["run", "--serial", "worker.toml"]), 1);
    let run_dir = dir.join("daisy_run/worker");
    let events = events(&run_dir);
    assert_eq!(
        event_blocks(&events, "block_done", "infer").len(),
        7,
        "{out}"
    );
    let failed = events
        .iter()
        .find(|e| e["event"] == "block_failed")
        .unwrap();
    assert_eq!(failed["block_id"], 3);
    assert!(failed["error"]
        .as_str()
        .unwrap()
        .contains("cannot handle block 3"));
    let log = std::fs::read_to_string(run_dir.join("logs/infer/serial.out")).unwrap();
    assert!(log.contains("loading model"));
    assert!(!log.contains("\"ok\""), "results are not logged as output");
}

#[test]
fn failed_attempts_are_counted_in_the_done_marker() {
    let dir = TestDir::new();
    let fail_4 = "if [ {block_id} = 4 ]; then exit 1; fi";
    let pipeline = line_task(6, false, fail_4).replace("[[task]]", "[[task]]\nmax_retries = 2");
    dir.write("line.toml", &pipeline);
    run_fails(&mut dir.driver(&["run", "--serial", "line.toml"]), 1);
    let counts = failure_counts(&dir.join("daisy_run/line"), "line");
    assert_eq!(counts, [(4, 3)].into(), "three attempts of block 4");
}
