//! Test harness: a temporary directory per test, the real binary run in
//! it, and failure messages that show the command, its directory and its
//! output.
//!
//! Every process of a test (the driver, its workers, their user code)
//! runs in the test's directory, so the directory is how a test finds
//! them: [`processes_in`] lists what is still running there, and
//! dropping the [`TestDir`] kills it, so that a failed test leaves
//! nothing behind. What a run must end with, whatever went wrong during
//! it, is checked by [`assert_each_block_done_once`] and friends.

use daisy_core::Block;
use daisy_driver::run_dir::done_marker::DoneMarker;
use daisy_driver::run_dir::RunDir;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long processes get to go away once nothing should be left.
const SETTLE: Duration = Duration::from_secs(10);

/// A temporary working directory for one test, removed afterwards; every
/// process still running in it is killed first.
pub struct TestDir {
    dir: tempfile::TempDir,
}

impl Drop for TestDir {
    fn drop(&mut self) {
        for (pid, _) in processes_in(self.path()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
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

/// Fails `test` for want of what it needs, saying how to get it. A test
/// never passes without running: `ci/test.sh` leaves out (and counts as
/// skipped) the tests whose requirements are missing.
pub fn missing(test: &str, why: &str, how: &str) -> ! {
    panic!(
        "{test}: cannot run: {why}; {how}. (ci/test.sh runs only the tests whose \
         requirements are met and reports the others as skipped)"
    );
}

/// This machine's first IPv4 address that is not loopback, if it has one.
pub fn non_loopback_ipv4() -> Option<std::net::Ipv4Addr> {
    let interfaces = nix::ifaddrs::getifaddrs().ok()?;
    interfaces
        .filter_map(|i| i.address?.as_sockaddr_in().map(|a| a.ip()))
        .find(|ip| !ip.is_loopback())
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
        Self::start(command)
    }

    /// As [`ChildGuard::spawn`], with stdout and stderr going to `log`.
    pub fn spawn_logged(command: &mut Command, log: &Path) -> Self {
        let out = File::create(log).expect("creating a log file");
        let err = out.try_clone().expect("duplicating a file handle");
        command.stdout(out).stderr(err);
        Self::start(command)
    }

    fn start(command: &mut Command) -> Self {
        Self(
            command
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}")),
        )
    }

    /// Waits (at most two minutes) for the process to exit by itself.
    pub fn wait_for_exit(self) -> std::process::ExitStatus {
        self.wait_for_exit_within(Duration::from_secs(120))
    }

    /// Waits at most `limit` for the process to exit by itself.
    pub fn wait_for_exit_within(mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().expect("waiting for a child") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the process did not exit within {limit:?}"
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
pub fn wait_until(what: &str, condition: impl FnMut() -> bool) {
    wait_within(what, Duration::from_secs(60), condition)
}

/// Waits at most `limit` until `condition` holds.
pub fn wait_within(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting {limit:?} until {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The live processes (zombies excluded) working in `dir` or below, with
/// their command lines: a test's driver, workers and user code all do,
/// and nothing else does.
pub fn processes_in(dir: &Path) -> Vec<(i32, String)> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir))
        })
        .filter(|pid| process_alive(*pid))
        .map(|pid| (pid, command_line(pid)))
        .collect()
}

/// A process's arguments joined by spaces ("" once it is gone).
pub fn command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|arg| !arg.is_empty())
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Nothing of the test is left running in `dir` (given a few seconds to
/// go away: a user process killed with its worker dies asynchronously).
pub fn assert_no_process_left_in(dir: &Path) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let left = processes_in(dir);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left behind after {SETTLE:?}: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The parsed lines of `events.jsonl` (a torn last line is skipped).
pub fn events(run_dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The events of the last run in `run_dir`: from its `run_started` on.
pub fn last_run_events(run_dir: &Path) -> Vec<serde_json::Value> {
    let events = events(run_dir);
    let start = events
        .iter()
        .rposition(|e| e["event"] == "run_started")
        .unwrap_or_else(|| panic!("no run_started in {}", run_dir.display()));
    events[start..].to_vec()
}

/// The pids of the workers connected so far.
pub fn worker_pids(run_dir: &Path) -> Vec<i32> {
    events(run_dir)
        .iter()
        .filter(|e| e["event"] == "worker_connected")
        .filter_map(|e| e["pid"].as_i64().map(|pid| pid as i32))
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

/// The ids of the blocks of `task` that its done marker in `run_dir`
/// records as done, and how many blocks the task has. Read with the
/// driver's own code, from the pipeline the run recorded.
pub fn marked_done(run_dir: &Path, task: &str) -> (BTreeSet<u64>, u64) {
    let (marker, blocks) = open_marker(run_dir, task);
    let done = blocks
        .iter()
        .filter(|block| marker.as_ref().is_some_and(|m| m.is_done(block)))
        .map(|block| block.id.spatial)
        .collect();
    (done, blocks.len() as u64)
}

/// The failed attempts the done marker of `task` in `run_dir` counts, by
/// block id, for the blocks that have any.
pub fn failure_counts(run_dir: &Path, task: &str) -> BTreeMap<u64, u32> {
    let (marker, blocks) = open_marker(run_dir, task);
    let marker = marker.expect("a done marker");
    let count = |block: &Block| {
        marker
            .failure_count(block)
            .expect("readable failure counts")
    };
    blocks
        .iter()
        .map(|block| (block.id.spatial, count(block)))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// What the done marker of `task` in `run_dir` stores of each measured
/// block's cost, by block id (empty if the task never tracked resources).
pub fn stored_costs(
    run_dir: &Path,
    task: &str,
) -> BTreeMap<u64, daisy_driver::run_dir::done_marker::costs::StoredCost> {
    let (marker, blocks) = open_marker(run_dir, task);
    let marker = marker.expect("a done marker");
    let Some(table) = marker.read_costs().expect("readable cost arrays") else {
        return BTreeMap::new();
    };
    let cost = |block: &Block| table.get(marker.cell_of(block)?);
    (blocks.iter())
        .filter_map(|block| Some((block.id.spatial, cost(block)?)))
        .collect()
}

/// The done marker of `task` in `run_dir` (read-only) and the task's
/// blocks, from the pipeline the run recorded.
fn open_marker(run_dir: &Path, task: &str) -> (Option<DoneMarker>, Vec<Block>) {
    let pipeline = RunDir::at(run_dir)
        .load_recorded_pipeline(daisy_driver::pipeline::python_worker::PYTHON_ON_PATH)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let graph = pipeline.graph();
    let index = graph.task_index(task).expect("a task of the pipeline");
    let spec = &pipeline.tasks[index.index()].spec;
    let marker = DoneMarker::open_existing(&run_dir.join("done").join(task), spec)
        .expect("a readable done marker");
    (marker, graph.task_graph(index).all_blocks().collect())
}

/// Every one of the `total` blocks of `task` ended done exactly once: the
/// done marker has them all, and `events.jsonl` (across every run in
/// `run_dir`) has exactly one `block_done` line for each.
pub fn assert_each_block_done_once(run_dir: &Path, task: &str, total: u64) {
    let logged = assert_all_marked_and_none_logged_twice(run_dir, task, total);
    assert_eq!(
        logged, total,
        "task {task}: a block_done line for each of the {total} blocks"
    );
}

/// As [`assert_each_block_done_once`] for runs that include a `kill -9`
/// of the driver, which loses the `block_done` lines buffered since its
/// last tick: the markers are the truth, so every block is marked done,
/// and no block has two `block_done` lines (none was counted twice).
pub fn assert_each_block_done_once_across_kills(run_dir: &Path, task: &str, total: u64) {
    assert_all_marked_and_none_logged_twice(run_dir, task, total);
}

/// Returns how many blocks have a `block_done` line.
fn assert_all_marked_and_none_logged_twice(run_dir: &Path, task: &str, total: u64) -> u64 {
    let (done, blocks) = marked_done(run_dir, task);
    assert_eq!(blocks, total, "task {task} has {total} blocks");
    assert_eq!(
        done.len() as u64,
        total,
        "task {task}: every block is marked done"
    );
    let mut lines: BTreeMap<u64, usize> = BTreeMap::new();
    for id in event_blocks(&events(run_dir), "block_done", task) {
        *lines.entry(id).or_default() += 1;
    }
    let twice: Vec<(&u64, &usize)> = lines.iter().filter(|(_, &n)| n > 1).collect();
    assert!(
        twice.is_empty(),
        "task {task}: blocks with several block_done lines (block, lines): {twice:?}"
    );
    let unknown: Vec<&u64> = lines.keys().filter(|id| !done.contains(id)).collect();
    assert!(
        unknown.is_empty(),
        "task {task}: block_done lines for blocks not marked done: {unknown:?}"
    );
    lines.len() as u64
}

/// The counters of the last `task_done` event of `task` (the last run's).
pub fn task_done_counters(run_dir: &Path, task: &str) -> serde_json::Value {
    events(run_dir)
        .iter()
        .rev()
        .find(|e| e["event"] == "task_done" && e["task"] == task)
        .map(|e| e["counters"].clone())
        .unwrap_or_else(|| panic!("no task_done event for {task} in {}", run_dir.display()))
}

/// The last run of `task` completed all `total` blocks and none failed or
/// was orphaned.
pub fn assert_completed_without_failures(run_dir: &Path, task: &str, total: u64) {
    let counters = task_done_counters(run_dir, task);
    let counted = |name: &str| counters[name].as_u64();
    assert_eq!(
        (counted("completed"), counted("failed"), counted("orphaned")),
        (Some(total), Some(0), Some(0)),
        "task {task}: completed, failed, orphaned in {counters}"
    );
}
