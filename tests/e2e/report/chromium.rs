//! The report in headless Chromium: no console errors, one row per
//! worker, a screenshot kept under `target/test-artifacts/`. These need
//! Chromium (`ci/test.sh` leaves them out without it).

use super::{failed_run, report, workers_in};
use crate::browser::{artifacts, assert_picture, chromium, file_url, png_size, ChromiumGroup};
use crate::util::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a headless Chromium printed.
struct Rendered {
    stdout: String,
    /// Console lines (`...:CONSOLE...] "message", source: ...`): messages
    /// and uncaught errors of the page.
    console: Vec<String>,
}

/// Runs headless Chromium with `args` (page last) in `dir`, with a fresh
/// profile and console logging on stderr.
fn headless(chromium: &Path, dir: &TestDir, args: &[String]) -> Rendered {
    let profile = tempfile::tempdir().unwrap();
    let (stdout_path, stderr_path) = (dir.join("chromium.out"), dir.join("chromium.err"));
    let mut command = Command::new(chromium);
    command
        .args(daisy_driver::inspect::report::headless_args(profile.path()))
        .args(["--enable-logging=stderr", "--v=0", "--log-level=0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    let mut group = ChromiumGroup::spawn(&mut command);
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = group.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "chromium did not finish: {command:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(group);
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(status.success(), "{command:?}: {status}\n{stderr}");
    Rendered {
        stdout: std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        console: stderr
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(String::from)
            .collect(),
    }
}

#[test]
fn the_console_check_catches_a_script_error() {
    let chromium = chromium("the_console_check_catches_a_script_error");
    let dir = TestDir::new();
    let page = dir.write(
        "broken.html",
        "<html><body><script>console.error('boom'); null.x;</script></body></html>",
    );
    let rendered = headless(&chromium, &dir, &["--dump-dom".into(), file_url(&page)]);
    assert_eq!(rendered.console.len(), 2, "{:?}", rendered.console);
}

#[test]
fn the_report_renders_in_chromium_with_a_row_per_worker() {
    let chromium = chromium("the_report_renders_in_chromium_with_a_row_per_worker");
    let dir = TestDir::new();
    let run_dir = failed_run(&dir);
    report(&dir, &["daisy_run/pictured"]);
    let page = file_url(&run_dir.join("report.html"));

    let rendered = headless(&chromium, &dir, &["--dump-dom".into(), page.clone()]);
    assert_eq!(rendered.console, Vec::<String>::new(), "console errors");
    let rows = rendered.stdout.matches(r#"class="worker-row""#).count();
    assert_eq!(rows, workers_in(&run_dir), "one row per worker");

    let screenshot = artifacts().join("report.png");
    let _ = std::fs::remove_file(&screenshot);
    let args = [
        format!("--screenshot={}", screenshot.display()),
        "--window-size=1160,1700".into(),
        page,
    ];
    headless(&chromium, &dir, &args);
    assert_picture(&screenshot, (1160, 1700), "the report");

    // `--format png` renders the one-SVG figure at its own size.
    let figure = artifacts().join("report-figure.png");
    let figure_arg = figure.display().to_string();
    let mut command = dir.driver(&["report", "daisy_run/pictured", "--format", "png"]);
    command
        .args(["-o", &figure_arg])
        .env("DAISY_CHROMIUM", &chromium);
    run_ok(&mut command);
    let (width, height) = png_size(&figure);
    assert_eq!(width, 1100);
    assert!(height > 800, "the figure holds every chart: {height} px");
}
