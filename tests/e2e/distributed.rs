//! `daisy-driver run` with real `daisy-worker` processes over real
//! sockets: chained tasks with several workers, failures, workers killed
//! mid-block, worker commands, workers started by hand, and a driver
//! killed mid-run.

use crate::util::*;
use std::collections::{BTreeSet, HashMap};
use std::process::Command;

/// Two chained 2-D tasks over a 12×12 region (25 + 25 blocks); each block
/// appends `<task> <block id>` to ran.txt, after `extra` shell code.
pub fn chained(max_workers: u32, extra: &str) -> String {
    chained_with(max_workers, max_workers, extra)
}

/// As [`chained`], with each task's own `max_workers`.
pub fn chained_with(first_workers: u32, second_workers: u32, extra: &str) -> String {
    let task = |id: &str, upstream: &str, max_workers: u32| {
        format!(
            r#"
[[task]]
id = "{id}"
{upstream}
total_roi = {{ offset = [0, 0], shape = [12, 12] }}
read_roi = {{ offset = [0, 0], shape = [4, 4] }}
write_roi = {{ offset = [1, 1], shape = [2, 2] }}
fit = "shrink"
max_workers = {max_workers}
block_command = ["sh", "-c", "{extra}; echo {id} {{block_id}} >> ran.txt"]
"#
        )
    };
    format!(
        "name = \"chain\"\n{}{}",
        task("first", "", first_workers),
        task("second", "upstream = [\"first\"]", second_workers)
    )
}

fn ran(dir: &TestDir) -> Vec<(String, u64)> {
    dir.read("ran.txt")
        .lines()
        .filter_map(|l| {
            let (task, id) = l.split_once(' ')?;
            Some((task.to_string(), id.trim().parse().ok()?))
        })
        .collect()
}

fn counts(ran: &[(String, u64)]) -> HashMap<(String, u64), usize> {
    let mut counts = HashMap::new();
    for entry in ran {
        *counts.entry(entry.clone()).or_insert(0) += 1;
    }
    counts
}

#[test]
fn several_workers_run_every_block_of_a_chain_exactly_once() {
    let dir = TestDir::new();
    dir.write("chain.toml", &chained(3, "sleep 0.05"));
    let out = run_ok(&mut dir.driver(&["run", "chain.toml"]));
    let counts = counts(&ran(&dir));
    assert_eq!(counts.len(), 50, "{out}");
    assert!(
        counts.values().all(|&n| n == 1),
        "no block ran twice: {counts:?}"
    );
    let events = events(&dir.join("daisy_run/chain"));
    let workers: BTreeSet<u64> = events
        .iter()
        .filter(|e| e["event"] == "block_done")
        .filter_map(|e| e["worker_id"].as_u64())
        .collect();
    assert!(
        workers.len() >= 2,
        "blocks were spread over workers: {workers:?}"
    );
    assert!(out.contains("50 blocks run"), "{out}");
}

#[test]
fn failing_blocks_are_retried_then_orphan_their_downstream_and_the_exit_says_so() {
    let dir = TestDir::new();
    let fail_12 = r#"if [ {block_id} = 12 ]; then echo no luck >&2; exit 3; fi"#;
    dir.write("chain.toml", &chained(2, fail_12));
    let out = run_fails(&mut dir.driver(&["run", "chain.toml"]), 1);
    let events = events(&dir.join("daisy_run/chain"));
    let failures: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "block_failed" && e["task"] == "first")
        .collect();
    assert_eq!(failures.len(), 3, "tried once and retried twice");
    assert_eq!(failures[2]["for_good"], true);
    assert!(failures[0]["error"].as_str().unwrap().contains("no luck"));
    let done: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "task_done")
        .collect();
    let second = done.iter().find(|e| e["task"] == "second").unwrap();
    assert!(second["counters"]["orphaned"].as_u64().unwrap() > 0);
    assert!(
        out.contains("task \"first\": 1 block failed; its logs are in"),
        "{out}"
    );
}

#[test]
fn a_worker_killed_mid_block_loses_nothing_and_the_run_completes() {
    let dir = TestDir::new();
    dir.write(
        "chain.toml",
        &chained(2, "echo $PPID >> pids.txt; sleep 0.2"),
    );
    let mut driver = dir.driver(&["run", "chain.toml"]);
    let driver = ChildGuard::spawn(&mut driver);
    wait_until("a worker is busy", || !dir.read("pids.txt").is_empty());
    let victim: i32 = dir
        .read("pids.txt")
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let status = driver.wait_for_exit();
    assert!(status.success(), "the run completes: {status:?}");
    let counts = counts(&ran(&dir));
    assert_eq!(counts.len(), 50);
    let events = events(&dir.join("daisy_run/chain"));
    assert!(events
        .iter()
        .any(|e| e["event"] == "worker_gone" && e["clean"] == false));
    let done: Vec<u64> = event_blocks(&events, "block_done", "first");
    assert_eq!(done.len(), 25, "each block counted once");
}

#[test]
fn a_worker_command_serves_a_distributed_run() {
    let dir = TestDir::new();
    dir.write(
        "worker.py",
        r#"import json, sys
for line in sys.stdin:
    block = json.loads(line)
    with open("ran.txt", "a") as out:
        out.write(f"infer {block['block_id']}\n")
    print(json.dumps({"block_id": block["block_id"], "ok": True}), flush=True)
"#,
    );
    dir.write(
        "worker.toml",
        r#"name = "worker"
[[task]]
id = "infer"
total_roi = { offset = [0], shape = [40] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
max_workers = 2
command = ["python3", "worker.py"]
"#,
    );
    run_ok(&mut dir.driver(&["run", "worker.toml"]));
    let ids: BTreeSet<u64> = ran(&dir).into_iter().map(|(_, id)| id).collect();
    assert_eq!(ids, (0..40).collect());
}

#[test]
fn a_task_without_launched_workers_is_served_by_a_worker_started_by_hand() {
    let dir = TestDir::new();
    dir.write("chain.toml", &chained_with(1, 0, "true"));
    let mut driver = dir.driver(&["run", "chain.toml"]);
    let driver = ChildGuard::spawn(&mut driver);
    let commands = dir.join("daisy_run/chain/worker-commands.txt");
    wait_until("the driver wrote the worker commands", || commands.exists());
    let line = std::fs::read_to_string(&commands)
        .unwrap()
        .lines()
        .find(|l| l.ends_with("--task second"))
        .unwrap()
        .to_string();
    // Run as printed, by a shell whose PATH has no daisy-worker (as after
    // the README's `cargo run`).
    let mut as_printed = Command::new("sh");
    as_printed
        .args(["-c", &line])
        .current_dir(dir.path())
        .env("PATH", "/usr/bin:/bin");
    let _worker = ChildGuard::spawn(&mut as_printed);
    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}");
    let events = events(&dir.join("daisy_run/chain"));
    let by_hand = events
        .iter()
        .find(|e| e["event"] == "worker_connected" && e["task"] == "second")
        .unwrap();
    assert_eq!(by_hand["by_hand"], true);
    assert_eq!(counts(&ran(&dir)).len(), 50);
}

#[test]
fn a_driver_killed_mid_run_resumes_and_its_workers_leave() {
    let dir = TestDir::new();
    dir.write(
        "chain.toml",
        &chained(2, "echo $PPID >> pids.txt; sleep 0.05"),
    );
    {
        let _driver = ChildGuard::spawn(&mut dir.driver(&["run", "chain.toml"]));
        wait_until("20 blocks ran", || ran(&dir).len() >= 20);
    }
    let reported: BTreeSet<(String, u64)> = events(&dir.join("daisy_run/chain"))
        .iter()
        .filter(|e| e["event"] == "block_done")
        .map(|e| {
            (
                e["task"].as_str().unwrap().to_string(),
                e["block_id"].as_u64().unwrap(),
            )
        })
        .collect();
    let pids: BTreeSet<i32> = dir
        .read("pids.txt")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    wait_until("the orphaned workers exit", || {
        pids.iter().all(|pid| !process_alive(*pid))
    });
    let first_run = ran(&dir).len();
    run_ok(&mut dir.driver(&["run", "chain.toml"]));
    let second_run: Vec<(String, u64)> = ran(&dir)[first_run..].to_vec();
    assert!(
        second_run.iter().all(|b| !reported.contains(b)),
        "no reported block ran again"
    );
    assert_eq!(counts(&ran(&dir)).len(), 50, "everything ran in the end");
}
