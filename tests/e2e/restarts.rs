//! The restart budget: unclean worker exits (crash, lost connection,
//! failed start) count against a task's `max_worker_restarts`; once used
//! up the task is abandoned with its downstream tasks, and unrelated tasks
//! go on. Clean exits (drain, idle release, Shutdown) never count.

use crate::util::*;
use std::collections::BTreeSet;

fn count(events: &[serde_json::Value], event: &str, task: &str) -> usize {
    events
        .iter()
        .filter(|e| e["event"] == event && e["task"] == task)
        .count()
}

/// The summary row of `task`: blocks, completed, skipped, failed,
/// orphaned, workers, restarts.
fn summary_row(out: &str, task: &str) -> Vec<u64> {
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(task))
        .unwrap_or_else(|| panic!("no summary row for {task}: {out}"));
    line.split_whitespace()
        .skip(1)
        .take(7)
        .map(|v| v.parse().unwrap())
        .collect()
}

#[test]
fn a_restart_cap_of_3_allows_3_restarts_then_abandons_the_task_and_its_downstream() {
    let dir = TestDir::new();
    let pipeline = format!(
        "name = \"cap\"\n{}{}{}",
        task("doomed", 10, "kill -STOP $PPID", "max_worker_restarts = 3"),
        task("after", 10, "true", "upstream = [\"doomed\"]"),
        task("peer", 10, "true", ""),
    );
    dir.write("cap.toml", &pipeline);
    let out = run_fails(&mut dir.driver(&["run", "cap.toml"]), 1);
    assert!(
        out.contains("task \"doomed\" was abandoned: 4 unclean worker exits"),
        "{out}"
    );
    let events = events(&dir.join("daisy_run/cap"));
    let lost = events
        .iter()
        .filter(|e| e["event"] == "worker_gone" && e["task"] == "doomed")
        .inspect(|e| assert_eq!(e["clean"], false, "{e}"))
        .count();
    assert_eq!(lost, 4, "the first worker and 3 restarts all died");
    assert_eq!(count(&events, "worker_connected", "doomed"), 4);
    assert_eq!(summary_row(&out, "doomed")[5], 4, "4 workers started");
    let abandoned: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["event"] == "task_abandoned")
        .filter_map(|e| e["task"].as_str())
        .collect();
    assert_eq!(abandoned, BTreeSet::from(["doomed", "after"]));
    assert_eq!(summary_row(&out, "doomed")[4], 10, "doomed orphaned");
    assert_eq!(summary_row(&out, "after")[4], 10, "after orphaned");
    assert_eq!(summary_row(&out, "peer")[1], 10, "the peer task completed");
}

#[test]
fn workers_told_to_stop_never_count_as_restarts() {
    let dir = TestDir::new();
    // Block 11 is slow: the other workers run out of blocks while it runs
    // and are released idle (Shutdown), the last one when the task is
    // done. With a restart cap of 0, one counted exit would abandon it.
    let pipeline = format!(
        "name = \"clean\"\n{}",
        task(
            "wide",
            12,
            "if [ {block_id} -eq 11 ]; then sleep 1.5; else sleep 0.3; fi",
            "max_workers = 4\nmax_worker_restarts = 0"
        ),
    );
    dir.write("clean.toml", &pipeline);
    let out = run_ok(&mut dir.driver(&["run", "clean.toml"]));
    let events = events(&dir.join("daisy_run/clean"));
    let done = events
        .iter()
        .position(|e| e["event"] == "task_done")
        .unwrap();
    let gone: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "worker_gone")
        .collect();
    let row = summary_row(&out, "wide");
    assert!(row[5] >= 2, "several workers were started: {out}");
    assert_eq!(gone.len() as u64, row[5], "{gone:?}");
    assert!(gone.iter().all(|e| e["clean"] == true), "{gone:?}");
    let released_idle = events[..done]
        .iter()
        .filter(|e| e["event"] == "worker_gone")
        .count();
    assert!(
        released_idle >= 1,
        "idle workers were stopped before the end"
    );
    assert_eq!((row[1], row[6]), (12, 0), "all completed, no restarts");
    assert_eq!(count(&events, "task_abandoned", "wide"), 0);
}
