//! User processes die with their worker, descendants included, however
//! the worker ends: its block's end, a timeout, a drain, SIGKILL of a
//! launched or hand-started worker, Ctrl-C of the driver; for block
//! commands and worker commands; and a descendant that left its group
//! (`setsid`) ends with its worker. (A lost driver:
//! `failures::a_lost_driver_leaves_no_user_process_behind`.)
//!
//! The user code leaves a grandchild of the worker behind, as a shell's
//! `sleep &` or a Python pool would: `sleep <marker>`, a duration unique
//! to the test and the test process, so that the test can tell from every
//! command line on the machine that it is gone.

use crate::util::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::time::Duration;

/// How long a process killed with its worker may take to be gone: the
/// watcher's SIGTERM is immediate, its SIGKILL comes after the 5 s grace.
const GONE_WITHIN: Duration = Duration::from_secs(30);

/// `sleep`'s argument, unique to `test` and this test process.
fn marker(test: u32) -> String {
    format!("{test}.{}", std::process::id())
}

/// Shell lines that, the first time only, start `sleep <marker>` in the
/// background and record its pid and the worker's (the shell's parent).
/// (No braces: a block command's arguments are templates.)
fn leave_grandchild(marker: &str) -> String {
    format!(
        "if [ ! -e child.pid ]; then echo $PPID > worker.pid; \
         sleep {marker} & echo $! > child.pid; fi"
    )
}

/// User code that leaves the grandchild and waits for it (the first time
/// only; later it goes on at once).
fn and_wait(marker: &str) -> String {
    format!("{}; wait", leave_grandchild(marker))
}

/// The pid in `file` of `dir`, once written.
fn pid_in(dir: &TestDir, file: &str) -> i32 {
    wait_until(&format!("{file} is written"), || {
        dir.read(file).trim().parse::<i32>().is_ok()
    });
    dir.read(file).trim().parse().unwrap()
}

/// The grandchild runs now, and is the test's `sleep`.
fn running_grandchild(dir: &TestDir, marker: &str) -> i32 {
    let pid = pid_in(dir, "child.pid");
    wait_until("the grandchild runs sleep", || {
        command_line(pid) == format!("sleep {marker}")
    });
    pid
}

/// No process on the machine runs `sleep <marker>` (after a bounded wait).
fn assert_gone(marker: &str) {
    let line = format!("sleep {marker}");
    let running = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .any(|pid| process_alive(pid) && command_line(pid) == line)
    };
    wait_within("the user's grandchild is gone", GONE_WITHIN, || !running());
}

fn signal(pid: i32, signal: Signal) {
    kill(Pid::from_raw(pid), signal).unwrap();
}

/// A driver running `pipeline` (named `p`) in `dir`.
fn driver(dir: &TestDir, pipeline: &str) -> ChildGuard {
    dir.write("p.toml", &format!("name = \"p\"\n{pipeline}"));
    ChildGuard::spawn(&mut dir.driver(&["run", "p.toml"]))
}

/// A worker started by hand for task `t` of the run in `dir`.
fn hand_worker(dir: &TestDir) -> ChildGuard {
    let context = dir.join("daisy_run/p/context.json");
    wait_until("the driver wrote its context", || context.exists());
    let args = ["--context-file", context.to_str().unwrap(), "--task", "t"];
    ChildGuard::spawn(&mut dir.worker(&args))
}

fn assert_success(driver: ChildGuard) {
    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}");
}

#[test]
fn sigkill_of_a_launched_worker_ends_its_blocks_grandchild() {
    let (dir, marker) = (TestDir::new(), marker(3001));
    let driver = driver(&dir, &task("t", 1, &and_wait(&marker), ""));
    running_grandchild(&dir, &marker);
    signal(pid_in(&dir, "worker.pid"), Signal::SIGKILL);
    assert_gone(&marker);
    assert_success(driver);
}

#[test]
fn sigkill_of_a_hand_started_worker_ends_its_blocks_grandchild() {
    let (dir, marker) = (TestDir::new(), marker(3002));
    let tasks = task("t", 1, &and_wait(&marker), "max_workers = 0");
    let driver = driver(&dir, &tasks);
    let worker = hand_worker(&dir);
    running_grandchild(&dir, &marker);
    signal(worker.0.id() as i32, Signal::SIGKILL);
    assert_gone(&marker);
    let _rescuer = hand_worker(&dir);
    assert_success(driver);
}

#[test]
fn ctrl_c_of_the_driver_ends_the_grandchildren_of_running_blocks() {
    let (dir, marker) = (TestDir::new(), marker(3003));
    let driver = driver(&dir, &task("t", 1, &and_wait(&marker), ""));
    running_grandchild(&dir, &marker);
    signal(driver.0.id() as i32, Signal::SIGINT);
    assert_eq!(driver.wait_for_exit().code(), Some(130), "interrupted");
    assert_gone(&marker);
    assert_no_process_left_in(dir.path());
}

#[test]
fn a_drained_worker_ends_what_its_last_block_left_running() {
    let (dir, marker) = (TestDir::new(), marker(3004));
    let block = format!(
        "{}; while [ ! -e go ]; do sleep 0.05; done",
        leave_grandchild(&marker)
    );
    let driver = driver(&dir, &task("t", 2, &block, "max_workers = 0"));
    let worker = hand_worker(&dir);
    running_grandchild(&dir, &marker);
    signal(worker.0.id() as i32, Signal::SIGTERM);
    dir.write("go", "");
    assert!(worker.wait_for_exit().success(), "drained cleanly");
    assert_gone(&marker);
    let _rescuer = hand_worker(&dir);
    assert_success(driver);
}

#[test]
fn a_block_that_exits_leaving_a_child_has_it_ended() {
    let (dir, marker) = (TestDir::new(), marker(3005));
    let driver = driver(&dir, &task("t", 1, &leave_grandchild(&marker), ""));
    assert_success(driver);
    assert_gone(&marker);
}

#[test]
fn a_descendant_that_left_its_group_and_ignores_sigterm_ends_with_its_worker() {
    let (dir, marker) = (TestDir::new(), marker(3007));
    // A daemon: a session of its own (out of the block's process group),
    // deaf to SIGTERM, outliving the block that started it.
    dir.write(
        "daemon.sh",
        &format!("trap '' TERM\necho $$ > child.pid\nexec sleep {marker}\n"),
    );
    let block = "if [ ! -e child.pid ]; then setsid sh daemon.sh & fi; \
                 while [ ! -e child.pid ]; do sleep 0.01; done";
    let driver = driver(&dir, &task("t", 2, block, "max_workers = 1"));
    assert_success(driver);
    assert_gone(&marker);
}

#[test]
fn a_block_past_its_timeout_has_its_grandchild_ended() {
    let (dir, marker) = (TestDir::new(), marker(3006));
    let extra = "timeout = \"1s\"\nmax_retries = 0";
    let driver = driver(&dir, &task("t", 1, &and_wait(&marker), extra));
    running_grandchild(&dir, &marker);
    assert_eq!(driver.wait_for_exit().code(), Some(1), "the block failed");
    assert_gone(&marker);
}

/// A worker command (`sh worker.sh`) that runs `prelude` when it starts,
/// then answers every block with success.
fn worker_command_task(dir: &TestDir, prelude: &str) -> String {
    let serve = r#"
while read -r line; do
  id=${line#*'"block_id":'}
  echo "{\"block_id\": ${id%%,*}, \"ok\": true}"
done
"#;
    dir.write("worker.sh", &format!("{prelude}{serve}"));
    r#"
[[task]]
id = "t"
total_roi = { offset = [0], shape = [3] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
read_write_conflict = false
command = ["sh", "worker.sh"]
"#
    .to_string()
}

#[test]
fn a_worker_command_that_ends_leaving_a_child_has_it_ended() {
    let (dir, marker) = (TestDir::new(), marker(3007));
    let tasks = worker_command_task(&dir, &leave_grandchild(&marker));
    let driver = driver(&dir, &tasks);
    assert_success(driver);
    assert_gone(&marker);
}

#[test]
fn sigkill_of_a_worker_ends_its_worker_commands_grandchild() {
    let (dir, marker) = (TestDir::new(), marker(3008));
    let tasks = worker_command_task(&dir, &and_wait(&marker)) + "max_workers = 0\n";
    let driver = driver(&dir, &tasks);
    let worker = hand_worker(&dir);
    running_grandchild(&dir, &marker);
    signal(worker.0.id() as i32, Signal::SIGKILL);
    assert_gone(&marker);
    let _rescuer = hand_worker(&dir);
    assert_success(driver);
}
