//! Descendants of user code that left its process group on purpose
//! (`setsid`, `setpgid`, a daemon that double-forks): group signals miss
//! them. The worker makes itself their *child subreaper*
//! (PR_SET_CHILD_SUBREAPER), so when the process that started one ends,
//! it becomes the worker's child rather than init's; when the worker
//! ends, every child it still has is ended (SIGTERM, then SIGKILL after
//! the grace) and reaped.
//!
//! A worker killed outright cannot do this; its adopted descendants then
//! go to init (see docs/reliability.md).

use super::watcher;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::thread;
use std::time::{Duration, Instant};

const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How long adopted processes get between SIGTERM and SIGKILL when the
/// worker ends: short, since a launcher may kill a stopping worker half a
/// second after telling it to stop, and these processes are then lost.
pub const ADOPTED_GRACE: Duration = Duration::from_millis(250);

/// Makes this process the subreaper of its descendants.
pub fn adopt_orphans() {
    if let Err(error) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::debug!("cannot become a child subreaper: {error}");
    }
}

/// Ends every child this process still has (those it adopted included),
/// but the user-process watcher, which outlives the worker by design and
/// exits by itself once the worker's process has ended (ending it here
/// held every worker's exit up for the whole `grace`, as it ignores
/// SIGTERM): SIGTERM, then SIGKILL to those left after `grace`; all are
/// reaped.
pub fn end_children(grace: Duration) {
    let watcher = watcher::started_pid().map(|pid| Pid::from_raw(pid as i32));
    let children: Vec<Pid> = (children().into_iter())
        .filter(|child| Some(*child) != watcher)
        .collect();
    for &child in &children {
        let _ = kill(child, Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    let mut left: Vec<Pid> = children;
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&child| !reaped(child));
        thread::sleep(POLL_INTERVAL);
    }
    for child in left {
        let _ = kill(child, Signal::SIGKILL);
        let _ = waitpid(child, None);
    }
}

/// Whether `child` has ended, reaping it if so.
fn reaped(child: Pid) -> bool {
    !matches!(
        waitpid(child, Some(WaitPidFlag::WNOHANG)),
        Ok(WaitStatus::StillAlive)
    )
}

/// This process's children, of every thread (the kernel lists a child
/// under the thread that started it; adopted ones under the main thread).
fn children() -> Vec<Pid> {
    let Ok(threads) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    threads
        .flatten()
        .filter_map(|thread| std::fs::read_to_string(thread.path().join("children")).ok())
        .flat_map(|list| {
            let pids: Vec<Pid> = (list.split_whitespace())
                .filter_map(|pid| pid.parse().ok())
                .map(Pid::from_raw)
                .collect();
            pids
        })
        .collect()
}
