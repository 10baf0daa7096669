//! `daisy-driver report` on real runs: a 2-D task with blocks failing for
//! good and a downstream task whose blocks they orphan. The page is
//! rendered in headless Chromium (no console errors, one row per worker)
//! and a screenshot of it is kept under `target/test-artifacts/`.
//!
//! Without Chromium the browser tests are skipped with a loud notice;
//! with `CI` set they fail instead (`.ci/run` installs Chromium).

use crate::util::*;
use std::collections::BTreeSet;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// Chromium for the browser tests: `DAISY_CHROMIUM`, else `chromium` on
/// PATH. `None` (after a loud notice) if there is none, unless `CI` is set.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("DAISY_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| which::which("chromium").ok());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but Chromium is missing: apt-get install -y chromium (.ci/run does)"
        );
        eprintln!(
            "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
             !! SKIPPED: Chromium not found (apt-get install chromium, or set   !!\n\
             !! DAISY_CHROMIUM); the report was not checked in a browser.       !!\n\
             !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
        );
    }
    found
}

/// What a headless Chromium printed.
struct Rendered {
    stdout: String,
    /// Console lines (`...:CONSOLE...] "message", source: ...`): messages
    /// and uncaught errors of the page.
    console: Vec<String>,
}

/// Chromium in its own process group, which is killed when this drops:
/// Chromium's helper processes must not outlive the test.
struct ChromiumGroup(Child);

impl Drop for ChromiumGroup {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// Runs headless Chromium with `args` (page last) in `dir`, with a fresh
/// profile and console logging on stderr.
fn headless(chromium: &Path, dir: &TestDir, args: &[String]) -> Rendered {
    let profile = tempfile::tempdir().unwrap();
    let (stdout_path, stderr_path) = (dir.join("chromium.out"), dir.join("chromium.err"));
    let mut command = Command::new(chromium);
    command
        .args(daisy_driver::report::headless_args(profile.path()))
        .args(["--enable-logging=stderr", "--v=0", "--log-level=0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .process_group(0);
    let mut group = ChromiumGroup(command.spawn().expect("starting chromium"));
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

fn file_url(path: &Path) -> String {
    format!("file://{}", path.canonicalize().unwrap().display())
}

/// `target/test-artifacts/`, where screenshots are kept for people.
fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Width and height of a PNG file, checking its signature.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() > 24, "{path:?} is {} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{path:?} is not a PNG");
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (word(16), word(20))
}

#[test]
fn the_console_check_catches_a_script_error() {
    let Some(chromium) = chromium() else { return };
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
    let Some(chromium) = chromium() else { return };
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
    assert_eq!(png_size(&screenshot), (1160, 1700));
    let bytes = std::fs::metadata(&screenshot).unwrap().len();
    assert!(
        bytes > 20_000,
        "a blank page compresses to less: {bytes} bytes"
    );
    eprintln!("screenshot of the report: {}", screenshot.display());

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
