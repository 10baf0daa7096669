//! Issue 11, item 13: the summary `run` prints at its end says what
//! happened: lost workers are not "failures" with logs that do not exist,
//! hand-started workers are counted, and skipped blocks are explained.

use crate::util::*;

#[test]
fn workers_that_never_started_are_named_without_pointing_at_missing_logs() {
    let dir = TestDir::new();
    let pipeline = format!(
        "name = \"nostart\"\n{}",
        task("t", 4, "true", "max_worker_restarts = 1")
    );
    dir.write("p.toml", &pipeline);
    // A worker program that exits at once, writing nothing.
    let mut run = dir.driver(&["run", "p.toml", "--worker-bin", "/bin/true"]);
    let out = run_fails(&mut run, 1);
    assert!(
        out.contains(
            "task \"t\": 2 workers ended uncleanly (lost, or failed to start); \
             no worker of it wrote a log (see the events)"
        ),
        "{out}"
    );
    assert!(!out.contains("had failures"), "{out}");
}

#[test]
fn hand_started_workers_are_counted_and_skipped_blocks_explained() {
    let dir = TestDir::new();
    let pipeline = format!(
        "name = \"hand\"\n{}",
        task("t", 4, "true", "max_workers = 0")
    );
    dir.write("p.toml", &pipeline);
    let run_dir = dir.join("daisy_run/hand");
    let log = dir.join("driver.log");
    let driver = ChildGuard::spawn_logged(&mut dir.driver(&["run", "p.toml"]), &log);
    wait_until("the driver listens", || {
        run_dir.join("context.json").exists()
    });
    let context = run_dir.join("context.json");
    let args = ["--context-file", context.to_str().unwrap(), "--task", "t"];
    let worker = ChildGuard::spawn(&mut dir.worker(&args));
    assert!(driver.wait_for_exit().success());
    worker.wait_for_exit();
    let out = std::fs::read_to_string(&log).unwrap();
    let row = out.lines().find(|l| l.starts_with("t ")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[1..4], ["4", "4", "0"], "{out}");
    assert!(row.contains(" 0+1 by hand "), "{out}");
    assert!(!out.contains("completed includes skipped"), "{out}");

    let again = run_ok(&mut dir.driver(&["run", "p.toml"]));
    assert!(
        again.contains(daisy_driver::run::output::summary::SKIPPED_LEGEND),
        "{again}"
    );
}

/// Issue 11, item 13: raw control bytes from a block's stderr reached the
/// terminal (a colour, a carriage return, a bell).
#[test]
fn control_bytes_from_a_blocks_stderr_are_escaped_in_summary_and_status() {
    let dir = TestDir::new();
    let command = "printf 'bad \\\\033[31mred\\\\033[0m\\\\r\\\\007 end\\\\n' >&2; exit 3";
    let pipeline = format!(
        "name = \"ctl\"\n{}",
        task("t", 1, command, "max_retries = 0")
    );
    dir.write("p.toml", &pipeline);
    let escaped = "bad \\x1b[31mred\\x1b[0m\\x0d\\x07 end";
    let out = run_fails(&mut dir.driver(&["run", "p.toml"]), 1);
    let status = run(&mut dir.driver(&["status", "daisy_run/ctl"]));
    let status = String::from_utf8_lossy(&status.stdout);
    for text in [&*out, &*status] {
        assert!(text.contains(escaped), "missing {escaped:?} in:\n{text}");
        let raw = text
            .chars()
            .filter(|c| c.is_control() && *c != '\n' && *c != '\t');
        assert_eq!(raw.count(), 0, "raw control characters in:\n{text:?}");
    }
}

#[test]
fn a_stdout_nobody_reads_does_not_end_the_run() {
    for serial in [false, true] {
        let dir = TestDir::new();
        dir.write(
            "p.toml",
            &format!("name = \"gone\"\n{}", task("t", 6, "true", "")),
        );
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let args: &[&str] = if serial {
            &["run", "--serial", "p.toml"]
        } else {
            &["run", "p.toml"]
        };
        let status = dir
            .driver(args)
            .env("DAISY_STATUS_EVERY", "1ms")
            .stdout(writer)
            .status()
            .unwrap();
        assert!(status.success(), "serial {serial}: {status}");
        let (done, total) = marked_done(&dir.join("daisy_run/gone"), "t");
        assert_eq!(done.len() as u64, total, "serial {serial}");
    }
}

/// `run --quiet` prints nothing on stdout, in a distributed and in a
/// serial run (`run_blockwise(summary=False, progress=False)` runs the
/// serial driver inside the user's interpreter); the run still completes.
#[test]
fn a_quiet_run_prints_nothing_on_stdout_and_completes() {
    let dir = four_blocks_pipeline();
    for mode in [&[][..], &["--serial"]] {
        let _ = std::fs::remove_dir_all(dir.join("daisy_run"));
        let args = [&["run", "p.toml", "--quiet", "--status-every", "0s"], mode].concat();
        let out = run_ok(&mut dir.driver(&args));
        assert_eq!(out, "", "{mode:?}");
        let status = run_ok(&mut dir.driver(&["status", "daisy_run/q"]));
        assert!(
            status.contains("finished: every block is done"),
            "{mode:?}\n{status}"
        );
    }
}

/// `--no-summary` and `--no-progress` each leave out their part only.
#[test]
fn no_summary_and_no_progress_each_leave_out_their_part_only() {
    let dir = four_blocks_pipeline();
    let summary_header = "task               blocks completed";
    let serving = "daisy-driver: serving \"q\"";
    let run_with = |flag| {
        let _ = std::fs::remove_dir_all(dir.join("daisy_run"));
        run_ok(&mut dir.driver(&["run", "p.toml", flag, "--status-every", "0s"]))
    };
    let out = run_with("--no-summary");
    assert!(
        out.contains("[    0s] t 0/4") && out.contains(serving),
        "{out}"
    );
    assert!(!out.contains(summary_header), "{out}");
    let out = run_with("--no-progress");
    assert!(
        out.contains(summary_header) && out.contains(serving),
        "{out}"
    );
    assert!(!out.contains("[    0s] t "), "{out}");
}

/// A directory with `p.toml`: pipeline "q", one task "t" of 4 blocks.
fn four_blocks_pipeline() -> TestDir {
    let dir = TestDir::new();
    let pipeline = format!("name = \"q\"\n{}", task("t", 4, "true", ""));
    dir.write("p.toml", &pipeline);
    dir
}
