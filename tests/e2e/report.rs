//! `daisy-driver report` on real runs: a 2-D task with blocks failing for
//! good and a downstream task whose blocks they orphan. The page is
//! rendered in headless Chromium (no console errors, one row per worker)
//! and a screenshot of it is kept under `target/test-artifacts/`.
//!
//! The browser tests (`report::chromium`) fail without Chromium;
//! `ci/test.sh` leaves them out then (`.ci/run` installs Chromium).

use crate::util::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// `paint`: 6 × 6 blocks, blocks 4 and 12 (grid (1, 1) and (2, 2)) fail
/// for good. `smooth` reads 5 voxels around each of its 6 × 6 blocks, so
/// the 14 blocks next to those two are orphaned.
const PIPELINE: &str = r#"
name = "pictured"

[[task]]
id = "paint"
total_roi = { offset = [0, 0], shape = [60, 60] }
read_roi = { offset = [0, 0], shape = [10, 10] }
write_roi = { offset = [0, 0], shape = [10, 10] }
read_write_conflict = false
max_retries = 0
max_workers = 3
block_command = ["sh", "-c", "case {block_id} in 4|12) exit 1;; esac; sleep 0.05"]

[[task]]
id = "smooth"
upstream = ["paint"]
total_roi = { offset = [-5, -5], shape = [70, 70] }
read_roi = { offset = [0, 0], shape = [20, 20] }
write_roi = { offset = [5, 5], shape = [10, 10] }
read_write_conflict = false
max_workers = 2
block_command = ["true"]
"#;

/// Runs the pipeline (it fails: blocks fail and are orphaned) and returns
/// its run directory.
fn failed_run(dir: &TestDir) -> PathBuf {
    dir.write("pictured.toml", PIPELINE);
    run_fails(&mut dir.driver(&["run", "pictured.toml"]), 1);
    dir.join("daisy_run/pictured")
}

/// Workers in the run's events: the rows the timeline must have.
fn workers_in(run_dir: &Path) -> usize {
    events(run_dir)
        .iter()
        .filter(|e| {
            e["event"]
                .as_str()
                .is_some_and(|k| k.starts_with("worker_"))
        })
        .filter_map(|e| e["worker_id"].as_u64())
        .collect::<BTreeSet<u64>>()
        .len()
}

fn report(dir: &TestDir, args: &[&str]) -> String {
    let mut command = dir.driver(&["report"]);
    command.args(args);
    run_ok(&mut command)
}

#[test]
fn the_report_shows_workers_failures_and_orphans_of_a_real_run() {
    let dir = TestDir::new();
    let run_dir = failed_run(&dir);
    let out = report(&dir, &["daisy_run/pictured"]);
    assert_eq!(out.trim(), "daisy_run/pictured/report.html");
    let html = std::fs::read_to_string(run_dir.join("report.html")).unwrap();
    let workers = workers_in(&run_dir);
    assert!(workers >= 2, "both tasks had workers");
    assert_eq!(html.matches(r#"<g class="worker-row">"#).count(), workers);
    assert!(html.contains("paint: 6 × 6 blocks"), "a 2-D slice per task");
    assert!(html.contains("failed 2</text>"), "paint's legend");
    assert!(html.contains("orphaned 14</text>"), "smooth's legend");
    assert!(html.contains("block 4: failed (grid index [1, 1])"));
    let failures = html
        .split("<h2>Failed blocks</h2>")
        .nth(1)
        .expect("a table of them");
    assert!(
        failures
            .contains("<td>paint</td><td>4</td><td>offset [10, 10], shape [10, 10]</td><td>1</td>"),
        "{failures}"
    );
    assert!(
        failures.contains("<td>12</td>") && failures.contains("exit status 1"),
        "{failures}"
    );
    assert!(
        !html.contains("src=") && !html.contains("href=") && !html.contains("<script"),
        "self-contained, nothing fetched"
    );
    report(
        &dir,
        &["daisy_run/pictured", "--format", "svg", "-o", "fig.svg"],
    );
    let svg = dir.read("fig.svg");
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_eq!(svg.matches(r#"<g class="worker-row">"#).count(), workers);
}

#[test]
fn the_report_of_a_rerun_that_ran_nothing_draws_the_last_run_that_did() {
    let dir = TestDir::new();
    dir.write(
        "once.toml",
        &format!("name = \"once\"\n{}", task("t", 4, "true", "")),
    );
    run_ok(&mut dir.driver(&["run", "once.toml"]));
    run_ok(&mut dir.driver(&["run", "once.toml"]));
    report(
        &dir,
        &["daisy_run/once", "--format", "json", "-o", "r.json"],
    );
    let facts = dir.read("r.json");
    assert!(
        facts.contains("run 1 of 2, the last that ran a block: run 2 ran none"),
        "{facts}"
    );
    report(&dir, &["daisy_run/once", "-o", "r.html"]);
    assert!(
        dir.read("r.html").contains(r#"<g class="worker-row">"#),
        "its workers"
    );
    report(
        &dir,
        &[
            "daisy_run/once",
            "--run",
            "2",
            "--format",
            "json",
            "-o",
            "r2.json",
        ],
    );
    assert!(dir.read("r2.json").contains("run 2 of 2, as asked"));
    let out = run_fails(
        &mut dir.driver(&["report", "daisy_run/once", "--run", "5"]),
        2,
    );
    assert!(
        out.contains("there is no run 5: this run directory holds 2"),
        "{out}"
    );
}

#[test]
fn a_failure_outside_the_drawn_slice_of_a_3d_task_is_shown_on_it() {
    let dir = TestDir::new();
    // 4 × 4 × 4 blocks; the one at z 0, y 1, x 2 fails: the picture is
    // the slice at z 2, and the failure is drawn where it projects.
    let command = "[ {write_offset} != 0,1,2 ] || exit 1";
    let extra = "max_retries = 0";
    let pipeline = format!(
        "name = \"cube\"\n[[task]]\nid = \"c\"\ntotal_roi = {{ offset = [0, 0, 0], shape = [4, 4, 4] }}\n\
         read_roi = {{ offset = [0, 0, 0], shape = [1, 1, 1] }}\nwrite_roi = {{ offset = [0, 0, 0], shape = [1, 1, 1] }}\n\
         read_write_conflict = false\nblock_command = [\"sh\", \"-c\", \"{command}\"]\n{extra}\n"
    );
    dir.write("cube.toml", &pipeline);
    run_fails(&mut dir.driver(&["run", "cube.toml"]), 1);
    report(&dir, &["daisy_run/cube", "-o", "cube.html"]);
    let html = dir.read("cube.html");
    assert!(html.contains("failed and orphaned blocks of every slice are drawn on it"));
    assert!(
        html.contains("(grid index [2, 1, 2])"),
        "the place it projects to"
    );
    let cell = html.split("(grid index [2, 1, 2])").next().unwrap();
    let title_start = cell.rfind("<title>").unwrap();
    assert!(
        cell[title_start..].contains(": failed"),
        "drawn as failed: {}",
        &cell[title_start..]
    );
}

#[test]
fn a_corrupt_events_line_is_skipped_with_a_warning_and_a_missing_run_dir_is_named() {
    let dir = TestDir::new();
    let run_dir = failed_run(&dir);
    let mut events = std::fs::OpenOptions::new()
        .append(true)
        .open(run_dir.join("events.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut events, b"{\"time\": 12, \"event\": \"blo\n\xff\n").unwrap();
    let mut command = dir.driver(&["report", "daisy_run/pictured"]);
    let output = run(&mut command);
    assert!(output.status.success(), "{}", describe(&command, &output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.matches("not an event, skipped").count(),
        2,
        "{stderr}"
    );
    let out = run_fails(&mut dir.driver(&["report", "no/such/run"]), 2);
    assert!(
        out.contains("run directory no/such/run does not exist"),
        "{out}"
    );
}

#[test]
fn a_running_run_can_be_reported() {
    let dir = TestDir::new();
    let pipeline = format!(
        "name = \"live\"\n{}",
        task("slow", 40, "sleep 0.2", "max_workers = 2")
    );
    dir.write("live.toml", &pipeline);
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "live.toml"]));
    let run_dir = dir.join("daisy_run/live");
    wait_until("blocks were done", || {
        event_blocks(&events(&run_dir), "block_done", "slow").len() >= 2
    });
    report(&dir, &["daisy_run/live"]);
    let html = std::fs::read_to_string(run_dir.join("report.html")).unwrap();
    assert!(
        html.contains("no run_finished event: still running"),
        "{html}"
    );
    assert!(html.contains("not done</td>"));
    let pid = nix::unistd::Pid::from_raw(driver.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    driver.wait_for_exit();
}

/// The report in a browser.
mod chromium;
