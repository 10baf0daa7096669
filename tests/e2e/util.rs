//! Test harness: a temporary directory per test, the real binary run in
//! it, and failure messages that show the command, its directory and its
//! output.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A temporary working directory for one test, removed afterwards.
pub struct TestDir {
    dir: tempfile::TempDir,
}

impl TestDir {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("creating a temporary directory"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.join(name);
        std::fs::write(&path, contents).expect("writing a test file");
        path
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.join(name)).unwrap_or_default()
    }

    /// `daisy-driver ARGS` with this directory as its working directory,
    /// launching the `daisy-worker` built from this tree, with heartbeats
    /// fast enough for tests.
    pub fn driver(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_daisy-driver"));
        command
            .args(args)
            .current_dir(self.path())
            .env("DAISY_WORKER_BIN", worker_program())
            .env("DAISY_HEARTBEAT_INTERVAL", "500ms")
            .env("DAISY_STATUS_EVERY", "1s");
        command
    }

    /// `daisy-worker ARGS` in this directory.
    pub fn worker(&self, args: &[&str]) -> Command {
        let mut command = Command::new(worker_program());
        command.args(args).current_dir(self.path());
        command
    }
}

/// The `daisy-worker` binary of this tree. Cargo builds binaries only for
/// tests of their own package, so this builds it once per test process
/// (a no-op when it is up to date) instead of trusting a stale one.
pub fn worker_program() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let driver = Path::new(env!("CARGO_BIN_EXE_daisy-driver"));
            let profile_dir = driver.parent().expect("the driver is in a directory");
            let mut build = Command::new(env!("CARGO"));
            build.args(["build", "-q", "-p", "daisy-worker", "--bin", "daisy-worker"]);
            if profile_dir.ends_with("release") {
                build.arg("--release");
            }
            let output = run(&mut build);
            assert!(
                output.status.success(),
                "building daisy-worker failed\n{}",
                describe(&build, &output)
            );
            profile_dir.join("daisy-worker")
        })
        .clone()
}

/// Runs a command to completion and returns its output.
pub fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"))
}

/// Describes a finished command for assertion messages.
pub fn describe(command: &Command, output: &Output) -> String {
    format!(
        "command: {command:?}\ncwd: {:?}\nstatus: {}\n--- stdout\n{}\n--- stderr\n{}",
        command.get_current_dir(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs a command that must succeed; returns its stdout.
pub fn run_ok(command: &mut Command) -> String {
    let output = run(command);
    assert!(
        output.status.success(),
        "expected success\n{}",
        describe(command, &output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs a command that must fail with `code`; returns stdout + stderr.
pub fn run_fails(command: &mut Command, code: i32) -> String {
    let output = run(command);
    assert_eq!(
        output.status.code(),
        Some(code),
        "unexpected exit\n{}",
        describe(command, &output)
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A child process that is killed and reaped when the guard drops, so a
/// failing assertion never leaves a process behind.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    pub fn spawn(command: &mut Command) -> Self {
        command.stdout(Stdio::null()).stderr(Stdio::null());
        Self(
            command
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}")),
        )
    }
}

impl ChildGuard {
    /// Waits (at most two minutes) for the process to exit by itself.
    pub fn wait_for_exit(mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.0.try_wait().expect("waiting for a child") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the process did not exit in time"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// True if the process exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (at most a minute) until `condition` holds.
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The parsed lines of `events.jsonl` (a torn last line is skipped).
pub fn events(run_dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The ids of the blocks of `task` with an event of kind `event`.
pub fn event_blocks(events: &[serde_json::Value], event: &str, task: &str) -> Vec<u64> {
    events
        .iter()
        .filter(|e| e["event"] == event && e["task"] == task)
        .filter_map(|e| e["block_id"].as_u64())
        .collect()
}

/// A `[[task]]` table of `blocks` independent 1-D blocks (no context, so
/// one level) whose block command is `sh -c <command>`, plus `extra` lines.
pub fn task(id: &str, blocks: u32, command: &str, extra: &str) -> String {
    format!(
        r#"
[[task]]
id = "{id}"
total_roi = {{ offset = [0], shape = [{blocks}] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = false
block_command = ["sh", "-c", "{command}"]
{extra}
"#
    )
}
