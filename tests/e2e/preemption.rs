//! Workers that leave before their task is done without anything going
//! wrong: a stop signal (SIGTERM from `scancel`, preemption), a job's time
//! limit, a requeue, an idle worker let go. Each drains: what it ran is
//! reported, what it holds is handed back, no block counts as failed, no
//! exit counts against the restart budget, and the driver starts another
//! worker while work remains.

use crate::util::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;

/// The same on a real SLURM and the LSF stand-in.
mod slurm;

/// Asserts what every drain must leave: each block done exactly once,
/// none failed, every worker gone cleanly, the run complete.
fn assert_drained_cleanly(run_dir: &Path, task: &str, blocks: u64) {
    assert_each_block_done_once(run_dir, task, blocks);
    assert_completed_without_failures(run_dir, task, blocks);
    let events = events(run_dir);
    let failed = event_blocks(&events, "block_failed", task);
    assert!(failed.is_empty(), "no block counted failed: {failed:?}");
    let unclean: Vec<_> = events
        .iter()
        .filter(|e| e["event"] == "worker_gone" && e["clean"] == false)
        .collect();
    assert!(unclean.is_empty(), "no unclean exit: {unclean:?}");
    let finished = events.last().expect("events were written");
    assert_eq!(finished["completed"], true, "{finished}");
}

fn count(events: &[serde_json::Value], event: &str) -> usize {
    events.iter().filter(|e| e["event"] == event).count()
}

#[test]
fn a_sigtermed_worker_hands_its_batch_back_and_is_replaced() {
    let dir = TestDir::new();
    let command = "sleep 0.3; echo {block_id} >> ran.txt";
    let pipeline = format!(
        "name = \"term\"\n{}",
        task("t", 24, command, "max_workers = 1\nbatch_size = 6")
    );
    dir.write("p.toml", &pipeline);
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "p.toml"]));
    let run_dir = dir.join("daisy_run/term");
    wait_until("a block is done", || {
        !event_blocks(&events(&run_dir), "block_done", "t").is_empty()
    });
    let first = worker_pids(&run_dir)[0];
    kill(Pid::from_raw(first), Signal::SIGTERM).unwrap();
    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}");
    assert_drained_cleanly(&run_dir, "t", 24);
    let events = events(&run_dir);
    assert_eq!(count(&events, "worker_draining"), 1);
    let returned = events
        .iter()
        .find(|e| e["event"] == "blocks_returned")
        .expect("the rest of the batch was handed back");
    assert_eq!(returned["why"], "received SIGTERM");
    assert!(count(&events, "worker_connected") >= 2, "a new worker");
    assert_eq!(
        dir.read("ran.txt").lines().count(),
        24,
        "no block ran twice"
    );
}

#[test]
fn idle_workers_are_let_go_after_idle_timeout_and_started_again_for_new_work() {
    let dir = TestDir::new();
    // Task b's first half waits for a's fast block, its second half for
    // a's slow one: b's workers finish the first half, sit idle, are let
    // go, and new ones are started when the second half comes.
    let pipeline = r#"
name = "idle"
[[task]]
id = "a"
total_roi = { offset = [0], shape = [8] }
read_roi = { offset = [0], shape = [4] }
write_roi = { offset = [0], shape = [4] }
read_write_conflict = false
max_workers = 2
block_command = ["sh", "-c", "if [ {write_offset} = 4 ]; then sleep 3; fi"]

[[task]]
id = "b"
upstream = ["a"]
total_roi = { offset = [0], shape = [8] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
read_write_conflict = false
max_workers = 2
idle_timeout = "300ms"
block_command = ["sh", "-c", "echo {block_id} >> ran.txt"]
"#;
    dir.write("p.toml", pipeline);
    run_ok(&mut dir.driver(&["run", "p.toml"]));
    let run_dir = dir.join("daisy_run/idle");
    assert_drained_cleanly(&run_dir, "b", 8);
    let events = events(&run_dir);
    let of_b = |event: &str| {
        events
            .iter()
            .position(|e| e["event"] == event && e["task"] == "b")
    };
    let let_go = of_b("worker_released").expect("an idle worker of b was let go");
    assert!(events[let_go]["why"]
        .as_str()
        .unwrap()
        .contains("idle_timeout of 300ms"));
    let last_start = events
        .iter()
        .rposition(|e| e["event"] == "worker_connected" && e["task"] == "b")
        .unwrap();
    assert!(
        let_go < last_start,
        "a new worker of b came for the second half"
    );
}

#[test]
fn workers_whose_walltime_is_too_short_for_a_block_end_in_abandonment_not_a_loop() {
    let dir = TestDir::new();
    // 5 s of walltime, less than the margin kept free at a job's end:
    // every worker drains before its first block.
    let pipeline = format!(
        "name = \"short\"\n[launcher]\ntime = \"0:05\"\n{}",
        task("t", 4, "true", "max_worker_restarts = 2")
    );
    dir.write("p.toml", &pipeline);
    let out = run_fails(&mut dir.driver(&["run", "p.toml"]), 1);
    assert!(
        out.contains("task \"t\" was abandoned: 3 unclean worker exits, the last: drained before it reported a block (the job's walltime ends in"),
        "{out}"
    );
    assert_no_process_left_in(dir.path());
}
