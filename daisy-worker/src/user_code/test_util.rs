//! Helpers for tests that run real processes: a sample block, and waits on
//! files and pids that always end (a hung test names what it waited for).

use daisy_core::protocol::{WireBlock, WireRoi};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// How long a test waits for a process to appear or disappear.
const PATIENCE: Duration = Duration::from_secs(10);

/// Block `id` of task "predict" with fixed 3-d ROIs.
pub(crate) fn block(id: u64) -> WireBlock {
    WireBlock {
        task_id: "predict".into(),
        block_id: id,
        read_roi: WireRoi {
            offset: vec![0, 64, 128],
            shape: vec![32, 32, 32],
        },
        write_roi: WireRoi {
            offset: vec![8, 72, 136],
            shape: vec![16, 16, 16],
        },
    }
}

/// The pid a test process wrote to `path`, once it has.
pub(crate) fn read_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Ok(pid) = text.trim().parse() {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` has ended within [`PATIENCE`]. A zombie counts as ended:
/// an orphan is reaped by init, and in a container init may never do so.
pub(crate) fn is_gone(pid: i32) -> bool {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) if state(&stat) == Some('Z') => return true,
            Ok(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
    false
}

/// The state letter of /proc/<pid>/stat, after the parenthesised name.
fn state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}
