//! Reaping a block's process with what it cost: its IO counters are read
//! while it is a zombie (after `waitid(WNOWAIT)`, before the reap, when
//! `/proc/<pid>/io` still exists), then `wait4` reaps it and returns its
//! resource usage.
//!
//! Both cover the process and every descendant it waited for itself (the
//! kernel adds a reaped child's usage to its parent's): a shell's commands,
//! `subprocess.run`, a joined multiprocessing pool. A process left running
//! in the background and killed with the group at the block's end is
//! reaped by someone else (init) and not counted.

use super::proc_files::{read_io, timeval_seconds, IoCounters};
use nix::errno::Errno;
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// What a reaped process used.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// User plus system time.
    pub cpu_seconds: f64,
    /// The largest resident set of the process or of one reaped descendant.
    pub peak_rss_bytes: u64,
    /// `None` unless asked for, or if `/proc` could not be read.
    pub io: Option<IoCounters>,
}

/// Reaps `pid`, which has exited or is about to (it was sent SIGKILL),
/// reading its IO counters first if `read_io_first`.
pub fn reap(pid: Pid, read_io_first: bool) -> io::Result<(ExitStatus, Usage)> {
    let io = match read_io_first {
        true => {
            wait_without_reaping(pid)?;
            read_io(pid.as_raw()).ok()
        }
        false => None,
    };
    let (status, rusage) = wait4(pid)?;
    let usage = Usage {
        cpu_seconds: timeval_seconds(rusage.ru_utime) + timeval_seconds(rusage.ru_stime),
        // Linux counts ru_maxrss in KiB.
        peak_rss_bytes: (rusage.ru_maxrss.max(0) as u64) * 1024,
        io,
    };
    Ok((status, usage))
}

fn wait_without_reaping(pid: Pid) -> io::Result<()> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::Pid(pid), flags) {
            Ok(_) | Err(Errno::EINVAL) => return Ok(()),
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

fn wait4(pid: Pid) -> io::Result<(ExitStatus, libc::rusage)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both pointers are to live locals of the right types.
        let reaped = unsafe { libc::wait4(pid.as_raw(), &mut status, 0, &mut rusage) };
        match reaped {
            -1 if Errno::last() == Errno::EINTR => {}
            -1 => return Err(io::Error::last_os_error()),
            _ => return Ok((ExitStatus::from_raw(status), rusage)),
        }
    }
}
