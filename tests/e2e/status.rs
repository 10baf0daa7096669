//! `daisy-driver status`, `run --retry-failed` and `--reset` on runs made
//! here: blocks that fail, a driver killed part-way, a driver still
//! running. Status numbers are checked against the done markers' bytes
//! and events.jsonl; retries against the events of the retry run.

use crate::util::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Stdio;

/// Task "a" (40 blocks) fails blocks 3 and 5 until `fixed` exists and
/// sleeps a little per block; task "b" reads what "a" writes, block for
/// block; task "c" is unrelated.
fn pipeline(name: &str) -> String {
    let flaky = "if [ ! -e fixed ] && ([ {block_id} = 3 ] || [ {block_id} = 5 ]); then echo broken {block_id} >&2; exit 1; fi; sleep 0.1";
    format!(
        "name = \"{name}\"\n{}{}{}",
        task("a", 40, flaky, "max_retries = 0\nmax_workers = 2"),
        task("b", 40, "true", "upstream = [\"a\"]"),
        task("c", 5, "true", ""),
    )
}

/// `status --json RUN_DIR`: the parsed output and the exit code.
fn status_json(dir: &TestDir, run_dir: &str) -> (Value, i32) {
    let mut command = dir.driver(&["status", "--json", run_dir]);
    let output = run(&mut command);
    let json = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json is not JSON: {e}\n{}",
            describe(&command, &output)
        )
    });
    (json, output.status.code().unwrap())
}

fn task_status<'a>(status: &'a Value, task: &str) -> &'a Value {
    status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == task)
        .unwrap_or_else(|| panic!("no task {task} in {status:#}"))
}

fn ids(values: &Value, key: &str) -> BTreeSet<u64> {
    values
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v[key].as_u64().unwrap())
        .collect()
}

#[test]
fn status_of_a_killed_run_with_failures_matches_markers_and_events_and_retry_failed_runs_exactly_those(
) {
    let dir = TestDir::new();
    dir.write("p.toml", &pipeline("killed"));
    let run_dir = dir.join("daisy_run/killed");
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "p.toml"]));
    wait_until("both bad blocks failed and 10 blocks are done", || {
        let events = events(&run_dir);
        let failed = events
            .iter()
            .filter(|e| e["event"] == "block_failed" && e["for_good"] == true)
            .count();
        failed == 2 && event_blocks(&events, "block_done", "a").len() >= 10
    });
    drop(driver); // kill -9, part-way
    for pid in worker_pids(&run_dir) {
        wait_until("the workers notice and exit", || !process_alive(pid));
    }

    let (status, code) = status_json(&dir, "daisy_run/killed");
    assert_eq!(code, 1, "failed: {status:#}");
    assert_eq!(status["state"], "failed");
    assert_eq!(status["running"], false);
    assert!(status["last_run"]["finished"].is_null(), "{status:#}");
    let events = events(&run_dir);
    let (a, b) = (task_status(&status, "a"), task_status(&status, "b"));
    let done_a = marked_done(&run_dir, "a").0;
    let done_b = marked_done(&run_dir, "b").0;
    assert_eq!(a["done"], done_a.len() as u64, "the marker is the truth");
    assert_eq!(b["done"], done_b.len() as u64);
    for (task, done) in [("a", &done_a), ("b", &done_b)] {
        let logged: BTreeSet<u64> = event_blocks(&events, "block_done", task)
            .into_iter()
            .collect();
        assert!(
            logged.is_subset(done),
            "every block_done line is in the marker"
        );
    }
    let failed: BTreeSet<u64> = events
        .iter()
        .filter(|e| e["event"] == "block_failed" && e["for_good"] == true)
        .map(|e| e["block_id"].as_u64().unwrap())
        .collect();
    assert_eq!(failed, BTreeSet::from([3, 5]));
    assert_eq!(ids(&a["failed_blocks"], "block_id"), failed);
    let bad = &a["failed_blocks"][0];
    assert!(bad["error"].as_str().unwrap().contains("broken 3"), "{bad}");
    let log = bad["log"].as_str().expect("the failed attempt's log");
    assert!(std::fs::read_to_string(dir.join(log))
        .unwrap()
        .contains("broken 3"));
    // b's block k reads what a's block k writes: b's 3 and 5 are orphans.
    assert_eq!(
        (a["orphaned"].as_u64(), b["orphaned"].as_u64()),
        (Some(0), Some(2))
    );
    for t in [a, b] {
        let sum = ["done", "failed", "orphaned", "remaining"]
            .iter()
            .map(|k| t[k].as_u64().unwrap())
            .sum::<u64>();
        assert_eq!(sum, t["total"].as_u64().unwrap(), "{t}");
    }
    assert!(a["remaining"].as_u64().unwrap() > 0, "killed part-way");
    let text = run_fails(&mut dir.driver(&["status", "daisy_run/killed"]), 1);
    assert!(text.contains("driver killed or crashed?"), "{text}");
    assert!(text.contains("block 3 (1 attempts"), "{text}");

    // Retry: exactly the failed blocks and their orphans run.
    dir.write("fixed", "");
    let out = run_fails(&mut dir.driver(&["run", "p.toml", "--retry-failed"]), 3);
    assert!(
        out.contains("left for a later run without --retry-failed"),
        "{out}"
    );
    let retry = last_run_events(&run_dir);
    assert_eq!(retry[0]["retry_failed"], true);
    let ran = |task: &str| -> BTreeSet<u64> {
        ["block_done", "block_failed"]
            .iter()
            .flat_map(|kind| event_blocks(&retry, kind, task))
            .collect()
    };
    assert_eq!(ran("a"), BTreeSet::from([3, 5]));
    assert_eq!(ran("b"), BTreeSet::from([3, 5]));
    assert!(ran("c").is_empty());
    let (status, code) = status_json(&dir, "daisy_run/killed");
    assert_eq!((code, &status["state"]), (3, &Value::from("incomplete")));
    assert_eq!(status["last_run"]["retry_failed"], true);

    // A plain run does what was left.
    run_ok(&mut dir.driver(&["run", "p.toml"]));
    let (status, code) = status_json(&dir, "daisy_run/killed");
    assert_eq!(
        (code, &status["state"]),
        (0, &Value::from("finished")),
        "{status:#}"
    );
}

#[test]
fn live_status_shows_the_running_drivers_workers_and_blocks_in_flight() {
    let dir = TestDir::new();
    // Block 5 takes long: it is in flight while status looks.
    let slow = "if [ {block_id} = 5 ]; then sleep 60; fi";
    dir.write(
        "live.toml",
        &format!(
            "name = \"live\"\n{}",
            task("t", 10, slow, "max_workers = 2")
        ),
    );
    let run_dir = dir.join("daisy_run/live");
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "live.toml"]));
    wait_until("every block but 5 is done", || {
        event_blocks(&events(&run_dir), "block_done", "t").len() == 9
    });
    let (status, code) = status_json(&dir, "daisy_run/live");
    assert_eq!(code, 3, "incomplete while it runs: {status:#}");
    assert_eq!(status["running"], true);
    let live = &status["live"]["tasks"][0];
    assert_eq!(live["task_id"], "t");
    assert_eq!(live["counters"]["processing"], 1);
    assert!(
        live["workers"]["connected"].as_u64().unwrap() >= 1,
        "{live}"
    );
    let in_flight = live["in_flight"].as_array().unwrap();
    assert_eq!(in_flight.len(), 1, "{live}");
    assert_eq!(in_flight[0]["block_id"], 5);
    assert!(in_flight[0]["seconds"].as_f64().unwrap() >= 0.0);
    assert!(
        live["blocks_per_s"].as_f64().unwrap() > 0.0,
        "9 blocks just now"
    );
    assert!(live["eta_s"].as_f64().is_some(), "{live}");
    let running: Vec<&Value> = status["last_run"]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["end"] == "running")
        .collect();
    assert!(!running.is_empty(), "{status:#}");
    let text = run_fails(&mut dir.driver(&["status", "daisy_run/live"]), 3);
    assert!(text.contains("driver running"), "{text}");
    assert!(text.contains("block 5 on worker"), "{text}");

    let pid = nix::unistd::Pid::from_raw(driver.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert_eq!(driver.wait_for_exit().code(), Some(130));
    let (status, code) = status_json(&dir, "daisy_run/live");
    assert_eq!((code, status["running"].as_bool()), (3, Some(false)));
    assert_eq!(task_status(&status, "t")["remaining"], 1);
    let text = run_fails(&mut dir.driver(&["status", "daisy_run/live"]), 3);
    assert!(
        text.contains("interrupted after") && !text.contains("finished after"),
        "stopped by SIGTERM, not finished: {text}"
    );
}

#[test]
fn retry_failed_in_a_serial_run_reruns_only_failed_blocks_and_their_orphans() {
    let dir = TestDir::new();
    dir.write("s.toml", &pipeline("serial"));
    let run_dir = dir.join("daisy_run/serial");
    run_fails(&mut dir.driver(&["run", "--serial", "s.toml"]), 1);
    let (status, _) = status_json(&dir, "daisy_run/serial");
    let bad = &task_status(&status, "a")["failed_blocks"][0];
    assert!(bad["worker_id"].is_null(), "{bad}");
    assert!(bad["log"].as_str().unwrap().ends_with("logs/a/serial.err"));
    dir.write("fixed", "");
    run_ok(&mut dir.driver(&["run", "--serial", "--retry-failed", "s.toml"]));
    let retry = last_run_events(&run_dir);
    for task in ["a", "b"] {
        assert_eq!(event_blocks(&retry, "block_done", task), [3, 5], "{task}");
    }
    assert!(event_blocks(&retry, "block_done", "c").is_empty());
    let (status, code) = status_json(&dir, "daisy_run/serial");
    assert_eq!((code, &status["state"]), (0, &Value::from("finished")));
}

#[test]
fn reset_deletes_a_task_and_its_downstream_markers_and_asks_first() {
    let dir = TestDir::new();
    dir.write("fixed", "");
    dir.write("r.toml", &pipeline("reset"));
    let run_dir = dir.join("daisy_run/reset");
    run_ok(&mut dir.driver(&["run", "--serial", "r.toml"]));
    let mut no_terminal = dir.driver(&["reset", "r.toml", "a"]);
    no_terminal.stdin(Stdio::null());
    let out = run_fails(&mut no_terminal, 2);
    assert!(out.contains("without --yes"), "{out}");
    assert!(
        out.contains("done/a") && out.contains("done/b") && !out.contains("done/c"),
        "{out}"
    );
    assert_eq!(marked_done(&run_dir, "a").0.len(), 40, "nothing deleted");
    run_fails(&mut dir.driver(&["reset", "r.toml", "nope"]), 2);

    let out = run_ok(&mut dir.driver(&["run", "--serial", "r.toml", "--reset", "b", "--yes"]));
    let rerun = last_run_events(&run_dir);
    assert_eq!(event_blocks(&rerun, "block_done", "b").len(), 40, "{out}");
    assert!(event_blocks(&rerun, "block_done", "a").is_empty());

    run_ok(&mut dir.driver(&["reset", "r.toml", "a", "--yes"]));
    assert!(!run_dir.join("done/a").exists() && !run_dir.join("done/b").exists());
    assert_eq!(marked_done(&run_dir, "c").0.len(), 5, "unrelated task kept");
}

#[test]
fn status_survives_bad_input_and_names_what_is_wrong() {
    let dir = TestDir::new();
    let out = run_fails(&mut dir.driver(&["status", "no/such/dir"]), 2);
    assert!(out.contains("no/such/dir"), "{out}");
    dir.write("fixed", "");
    dir.write("ok.toml", &pipeline("ok"));
    run_ok(&mut dir.driver(&["run", "--serial", "ok.toml"]));
    let events = dir.join("daisy_run/ok/events.jsonl");
    let mut text = std::fs::read_to_string(&events).unwrap();
    text.insert_str(0, "{ garbage\n");
    text.push_str(r#"{"time": 1, "event": "block_do"#); // torn by a crash
    std::fs::write(&events, text).unwrap();
    let (status, code) = status_json(&dir, "daisy_run/ok");
    assert_eq!((code, &status["state"]), (0, &Value::from("finished")));
    let warnings = status["warnings"].to_string();
    assert!(warnings.contains("events.jsonl line 1"), "{warnings}");
    std::fs::remove_file(dir.join("daisy_run/ok/pipeline.json")).unwrap();
    let out = run_fails(&mut dir.driver(&["status", "daisy_run/ok"]), 2);
    assert!(out.contains("--pipeline"), "{out}");
    let (status, code) = {
        let mut command =
            dir.driver(&["status", "--json", "--pipeline", "ok.toml", "daisy_run/ok"]);
        let output = run(&mut command);
        (
            serde_json::from_slice::<Value>(&output.stdout).unwrap(),
            output.status.code().unwrap(),
        )
    };
    assert_eq!((code, &status["state"]), (0, &Value::from("finished")));
}

#[test]
fn a_run_after_a_crash_tore_the_last_event_line_is_a_run_of_its_own() {
    let dir = TestDir::new();
    dir.write("t.toml", &pipeline("torn"));
    let run_dir = dir.join("daisy_run/torn");
    run_fails(&mut dir.driver(&["run", "--serial", "t.toml"]), 1);
    // A crash (or a full disk) cut the last line short.
    let events = run_dir.join("events.jsonl");
    let mut text = std::fs::read_to_string(&events).unwrap();
    text.push_str(r#"{"time": 1, "event": "block_fa"#);
    std::fs::write(&events, text).unwrap();

    dir.write("fixed", "");
    run_ok(&mut dir.driver(&["run", "--serial", "--retry-failed", "t.toml"]));
    let (status, code) = status_json(&dir, "daisy_run/torn");
    assert_eq!((code, &status["state"]), (0, &Value::from("finished")));
    assert_eq!(
        status["last_run"]["retry_failed"], true,
        "the retry run is the last run: {status:#}"
    );
    let retry = last_run_events(&run_dir);
    assert_eq!(retry[0]["retry_failed"], true, "its run_started line reads");
    assert_eq!(event_blocks(&retry, "block_done", "a"), [3, 5]);
}

/// Blocks done per task in `events` as `blocks_done` records count them.
fn summed_up_blocks(events: &[Value], task: &str) -> u64 {
    (events.iter())
        .filter(|e| e["event"] == "blocks_done" && e["task"] == task)
        .map(|e| e["count"].as_u64().unwrap())
        .sum()
}

/// Makes a run sum up its done blocks, as one of more than 100,000
/// blocks does.
const SUM_UP: (&str, &str) = ("DAISY_BLOCK_LINES_UP_TO", "0");

#[test]
fn status_report_and_retry_failed_read_a_run_that_summed_up_its_done_blocks() {
    let dir = TestDir::new();
    dir.write("p.toml", &pipeline("summed"));
    let run_dir = dir.join("daisy_run/summed");
    run_fails(dir.driver(&["run", "p.toml"]).env(SUM_UP.0, SUM_UP.1), 1);
    let events = events(&run_dir);
    assert!(events.iter().all(|e| e["event"] != "block_done"));
    for task in ["a", "b", "c"] {
        let done = marked_done(&run_dir, task).0.len() as u64;
        assert_eq!(summed_up_blocks(&events, task), done, "{task}");
    }

    let (status, code) = status_json(&dir, "daisy_run/summed");
    assert_eq!(code, 1, "{status:#}");
    let (a, b) = (task_status(&status, "a"), task_status(&status, "b"));
    assert_eq!(ids(&a["failed_blocks"], "block_id"), BTreeSet::from([3, 5]));
    assert_eq!(
        (a["done"].as_u64(), b["done"].as_u64()),
        (Some(38), Some(38))
    );
    assert_eq!(b["orphaned"], 2);
    run_ok(&mut dir.driver(&["report", "daisy_run/summed", "-o", "report.html"]));
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("a: block run times"), "run times summed up");
    assert!(html.contains("<td>a</td><td>40</td><td>38</td>"), "{html}");

    dir.write("fixed", "");
    run_ok(
        dir.driver(&["run", "p.toml", "--retry-failed"])
            .env(SUM_UP.0, SUM_UP.1),
    );
    let retry = last_run_events(&run_dir);
    let counts: Vec<u64> = (["a", "b", "c"].iter())
        .map(|task| summed_up_blocks(&retry, task))
        .collect();
    assert_eq!(counts, [2, 2, 0], "a's 3 and 5, and b's that wait for them");
    let (status, code) = status_json(&dir, "daisy_run/summed");
    assert_eq!((code, &status["state"]), (0, &Value::from("finished")));
}

#[test]
fn a_run_directory_with_done_lines_then_summed_up_records_resumes_and_reads() {
    let dir = TestDir::new();
    dir.write("p.toml", &pipeline("mixed"));
    let run_dir = dir.join("daisy_run/mixed");
    run_fails(&mut dir.driver(&["run", "--serial", "p.toml"]), 1);
    let lines = event_blocks(&events(&run_dir), "block_done", "a");
    assert_eq!(lines.len(), 38, "a line per block in a small run");
    dir.write("fixed", "");
    let mut retry = dir.driver(&["run", "--serial", "--retry-failed", "p.toml"]);
    run_ok(retry.env(SUM_UP.0, SUM_UP.1));
    let retry = last_run_events(&run_dir);
    let counts: Vec<u64> = (["a", "b", "c"].iter())
        .map(|task| summed_up_blocks(&retry, task))
        .collect();
    assert_eq!(counts, [2, 2, 0]);
    let (status, code) = status_json(&dir, "daisy_run/mixed");
    assert_eq!((code, &status["state"]), (0, &Value::from("finished")));
    run_ok(&mut dir.driver(&["report", "daisy_run/mixed", "-o", "report.html"]));
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("the last of 2 runs"), "{html}");
}

#[test]
fn status_watch_follows_a_run_and_ends_with_its_final_state() {
    let dir = TestDir::new();
    // Block 2 waits for `go`, so the watch sees the run unfinished first.
    let gated = "if [ {block_id} = 2 ]; then while [ ! -e go ]; do sleep 0.05; done; fi";
    dir.write(
        "watched.toml",
        &format!("name = \"watched\"\n{}", task("t", 4, gated, "")),
    );
    let run_dir = dir.join("daisy_run/watched");
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "watched.toml"]));
    wait_until("the driver serves", || {
        run_dir.join("context.json").exists()
    });
    let mut watch = dir.driver(&[
        "status",
        "daisy_run/watched",
        "--watch",
        "--every",
        "100ms",
        "--json",
    ]);
    let watcher = ChildGuard::spawn_logged(&mut watch, &dir.join("watched.jsonl"));
    let snapshots = || -> Vec<Value> {
        let text = dir.read("watched.jsonl");
        let lines = text.lines().filter(|line| line.starts_with('{'));
        lines
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    wait_until("the watch shows the run going", || {
        snapshots().iter().any(|s| s["running"] == true)
    });
    dir.write("go", "");
    assert!(
        watcher.wait_for_exit().success(),
        "ends by itself, finished"
    );
    driver.wait_for_exit();
    let seen = snapshots();
    let last = seen.last().unwrap();
    assert_eq!(
        (&last["running"], &last["state"]),
        (&Value::from(false), &Value::from("finished"))
    );
    assert!(seen.len() >= 2, "{seen:?}");
    // On a file (not a terminal) plain snapshots follow each other, each
    // under its time.
    let text = run_ok(&mut dir.driver(&["status", "daisy_run/watched", "--watch"]));
    assert!(text.starts_with("--- "), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no terminal codes in a file: {text:?}"
    );
    let too_often = ["status", "daisy_run/watched", "--watch", "--every", "0s"];
    let refused = run_fails(&mut dir.driver(&too_often), 2);
    assert!(
        refused.contains("0s is too short: at least 100ms"),
        "{refused}"
    );
}

/// Issue 38: the lines of a multi-line error (a traceback) after the
/// first are indented under their block, not at the margin.
#[test]
fn status_indents_every_line_of_a_multi_line_error_under_its_block() {
    let dir = TestDir::new();
    let traceback =
        "echo Traceback >&2; echo '  File x.py' >&2; echo 'ValueError: bad' >&2; exit 1";
    let pipeline = format!(
        "name = \"tb\"\n{}",
        task("t", 1, traceback, "max_retries = 0")
    );
    dir.write("p.toml", &pipeline);
    run_fails(&mut dir.driver(&["run", "p.toml", "--serial"]), 1);
    let status = run_fails(&mut dir.driver(&["status", "daisy_run/tb"]), 1);
    let failed: Vec<&str> = status
        .lines()
        .skip_while(|line| !line.starts_with("failed blocks of task"))
        .skip(1)
        .take_while(|line| !line.is_empty())
        .collect();
    assert!(
        failed.len() > 1 && failed.iter().any(|line| line.contains("ValueError: bad")),
        "{status}"
    );
    assert!(
        failed.iter().all(|line| line.starts_with("  ")),
        "a line of the error is not indented:\n{status}"
    );
}

/// Issue 38: worker ids start at 1 in every run and logs are appended
/// to, so a worker's user log holds every run's output; each run's part
/// starts with a line naming the run, and `status` points at the last's.
#[test]
fn each_runs_part_of_a_user_log_is_marked_and_status_points_at_the_last() {
    let dir = TestDir::new();
    let failing = "echo output of a run >&2; exit 1";
    let pipeline = format!(
        "name = \"logs\"\n{}",
        task("t", 1, failing, "max_retries = 0")
    );
    dir.write("p.toml", &pipeline);
    for _ in 0..2 {
        run_fails(&mut dir.driver(&["run", "p.toml"]), 1);
    }
    let log = dir.read("daisy_run/logs/logs/t/worker-1-user.err");
    let lines: Vec<&str> = log.lines().collect();
    let header = "==== daisy run started ";
    let headers: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with(header))
        .collect();
    assert_eq!(headers, [0, 2], "{log}");
    assert!(
        lines[0].ends_with("(pipeline \"logs\"): worker 1 of task \"t\" ===="),
        "{log}"
    );
    assert_eq!(lines[1], "output of a run", "{log}");
    let status = run_fails(&mut dir.driver(&["status", "daisy_run/logs"]), 1);
    assert!(
        status.contains("worker-1-user.err (this run's part from line 3)"),
        "{status}\n{log}"
    );
}
