//! The resource budget with real workers: peak concurrency, read back
//! from the driver's events, never exceeds `max_workers` or the budget,
//! and tasks on disjoint resources run side by side.

use crate::util::*;
use std::collections::HashMap;

/// A task of `blocks` independent blocks that each take a moment.
fn task(id: &str, blocks: u32, max_workers: u32, requires: &str, upstream: &str) -> String {
    format!(
        r#"
[[task]]
id = "{id}"
{upstream}
total_roi = {{ offset = [0], shape = [{blocks}] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
max_workers = {max_workers}
requires = {{ {requires} }}
block_command = ["sleep", "0.3"]
"#
    )
}

fn pipeline(resources: &str, tasks: &[String]) -> String {
    format!(
        "name = \"res\"\n[resources]\n{resources}\n{}",
        tasks.concat()
    )
}

/// Replays worker_connected / worker_gone events: the connected workers
/// per task at every moment, as a list of snapshots.
fn concurrency(dir: &TestDir) -> Vec<HashMap<String, i64>> {
    let mut now: HashMap<String, i64> = HashMap::new();
    let mut history = Vec::new();
    for event in events(&dir.join("daisy_run/res")) {
        let task = event["task"].as_str().unwrap_or_default().to_string();
        match event["event"].as_str() {
            Some("worker_connected") => *now.entry(task).or_default() += 1,
            Some("worker_gone") => *now.entry(task).or_default() -= 1,
            _ => continue,
        }
        history.push(now.clone());
    }
    history
}

fn peak(history: &[HashMap<String, i64>], score: impl Fn(&HashMap<String, i64>) -> i64) -> i64 {
    history.iter().map(score).max().unwrap_or(0)
}

fn of(task: &'static str) -> impl Fn(&HashMap<String, i64>) -> i64 {
    move |snapshot| snapshot.get(task).copied().unwrap_or(0)
}

fn total(snapshot: &HashMap<String, i64>) -> i64 {
    snapshot.values().sum()
}

#[test]
fn max_workers_caps_a_task_without_requirements() {
    let dir = TestDir::new();
    dir.write("res.toml", &pipeline("", &[task("a", 24, 3, "", "")]));
    run_ok(&mut dir.driver(&["run", "res.toml"]));
    assert_eq!(peak(&concurrency(&dir), of("a")), 3);
}

#[test]
fn the_budget_caps_a_task_below_its_max_workers() {
    let dir = TestDir::new();
    dir.write(
        "res.toml",
        &pipeline("cpu = 2", &[task("a", 12, 8, "cpu = 1", "")]),
    );
    run_ok(&mut dir.driver(&["run", "res.toml"]));
    assert_eq!(peak(&concurrency(&dir), of("a")), 2);
}

#[test]
fn two_tasks_sharing_a_budget_never_exceed_it_together() {
    let dir = TestDir::new();
    let tasks = [
        task("a", 12, 4, "cpu = 1", ""),
        task("b", 12, 4, "cpu = 1", ""),
    ];
    dir.write("res.toml", &pipeline("cpu = 4", &tasks));
    run_ok(&mut dir.driver(&["run", "res.toml"]));
    let history = concurrency(&dir);
    assert_eq!(peak(&history, total), 4);
    assert!(peak(&history, of("a")) >= 1 && peak(&history, of("b")) >= 1);
}

#[test]
fn tasks_on_disjoint_resources_reach_their_max_workers_at_once() {
    let dir = TestDir::new();
    let tasks = [
        task("a", 32, 4, "cpu = 1", ""),
        task("b", 16, 2, "gpu = 1", ""),
    ];
    dir.write("res.toml", &pipeline("cpu = 4\ngpu = 2", &tasks));
    run_ok(&mut dir.driver(&["run", "res.toml"]));
    let both_full = concurrency(&dir)
        .iter()
        .any(|s| of("a")(s) == 4 && of("b")(s) == 2);
    assert!(both_full, "{:?}", concurrency(&dir));
}

#[test]
fn requires_over_the_budget_is_a_startup_error() {
    let dir = TestDir::new();
    dir.write(
        "res.toml",
        &pipeline("gpu = 1", &[task("predict", 4, 1, "gpu = 8", "")]),
    );
    let out = run_fails(&mut dir.driver(&["run", "res.toml"]), 2);
    assert!(
        out.contains("task \"predict\" requires {gpu: 8} but the global budget only has {gpu: 1}"),
        "{out}"
    );
    assert!(
        !dir.join("daisy_run/res/events.jsonl").exists(),
        "nothing started"
    );
}

#[test]
fn workers_move_downstream_as_the_upstream_drains_within_the_budget() {
    let dir = TestDir::new();
    let tasks = [
        task("up", 9, 3, "cpu = 1", ""),
        task("down", 9, 3, "cpu = 1", "upstream = [\"up\"]"),
    ];
    dir.write("res.toml", &pipeline("cpu = 3", &tasks));
    run_ok(&mut dir.driver(&["run", "res.toml"]));
    let history = concurrency(&dir);
    assert!(peak(&history, total) <= 3, "{history:?}");
    assert!(
        peak(&history, of("down")) >= 2,
        "the downstream task got the freed share: {history:?}"
    );
}
