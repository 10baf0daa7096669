//! The watcher: a tiny process outside the worker that ends the user's
//! process groups when the worker's process ends, however it ends.
//!
//! The worker stops its user processes itself whenever it can (a block's
//! end, a timeout, a drain, a lost driver: see `group`), and
//! PR_SET_PDEATHSIG kills a group's leader with it. But when the worker is
//! killed outright (SIGKILL: the local launcher's stop, the OOM killer,
//! `kill -9`), no code of the worker runs, and the leader's children (a
//! shell's `sleep &`, a Python pool) would live on under init. So the first
//! user process a worker starts also starts the watcher: `sh` in a process
//! group of its own (a signal to the worker's group does not reach it),
//! reading a socket whose other end only the worker holds (close-on-exec).
//!
//! Every user group is announced by the new process itself, before it
//! executes user code, so no descendant can exist unannounced: it writes
//! its group id into a *slot*, a fixed-width line of a memory file
//! (memfd) that the watcher holds too. The worker reserves the slot
//! before starting the process and blanks it once the leader is reaped;
//! a slot is reused only after that. Writing a slot wakes nobody (an
//! announcement per message on the socket woke the watcher's shell twice
//! per block, about 40 µs of CPU a block). When the worker's process
//! ends, the socket reads end-of-file, and the watcher reads the slots,
//! sends SIGTERM to every group still announced, then SIGKILL to what is
//! left after the grace period, and exits.
//!
//! A process that leaves its group (`setsid`, a daemon) is not followed;
//! in a cluster job the job's cgroup ends it with the job.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Waits for end-of-file on stdin, then reads the slots on descriptor 3
/// and ends the groups still announced: SIGTERM, then SIGKILL after `$1`
/// tenths of a second to any that is still there. It ignores the signals
/// a terminal or a job's end sends around, so that it outlives the worker.
const SCRIPT: &str = r#"
trap '' HUP INT TERM QUIT USR1 USR2 PIPE
while read -r _; do :; done
live=
while read -r group; do [ -n "$group" ] && live="$live $group"; done <&3
[ -z "$live" ] && exit 0
signal() { for g in $live; do kill -s "$1" -- "-$g" 2>/dev/null; done; }
alive() { for g in $live; do kill -s 0 -- "-$g" 2>/dev/null && return 0; done; return 1; }
signal TERM
tenths=0
while alive && [ "$tenths" -lt "$1" ]; do sleep 0.1; tenths=$((tenths + 1)); done
signal KILL
"#;

/// A slot: a group id right-aligned in 11 characters and a newline, or
/// 11 spaces and a newline when free.
const SLOT_BYTES: usize = 12;
const FREE_SLOT: &[u8; SLOT_BYTES] = b"           \n";

/// The worker's side of the watcher.
#[derive(Debug)]
pub(super) struct Watcher {
    /// The worker's end of the socket: its closing is the signal (only
    /// tests touch it otherwise).
    #[cfg_attr(not(test), allow(dead_code))]
    socket: UnixStream,
    /// The slots (a memfd; the watcher reads the same file).
    slots: File,
    /// The watcher's process, a child of the worker's.
    pid: u32,
    table: Mutex<SlotTable>,
}

/// Which slots are free, and how many the file holds.
#[derive(Debug, Default)]
struct SlotTable {
    free: Vec<u64>,
    len: u64,
}

/// One group's place in the slot file.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    watcher: &'static Watcher,
    index: u64,
}

/// `None` if the watcher could not be started (warned once;
/// PR_SET_PDEATHSIG still holds).
static WATCHER: OnceLock<Option<Watcher>> = OnceLock::new();

/// The watcher, started on first use.
pub(super) fn get(grace: Duration) -> Option<&'static Watcher> {
    let watcher = WATCHER.get_or_init(|| match Watcher::start(grace) {
        Ok(watcher) => Some(watcher),
        Err(e) => {
            tracing::warn!(
                "cannot start the user-process watcher ({e}): user processes that \
                 leave their group leader behind may outlive a killed worker"
            );
            None
        }
    });
    watcher.as_ref()
}

/// The watcher's pid, if one was started: the worker must not end it
/// with its other children (`adopted`); it ends by itself once the
/// worker's process has.
pub(super) fn started_pid() -> Option<u32> {
    Some(WATCHER.get()?.as_ref()?.pid)
}

impl Watcher {
    /// Starts `sh` reading the other end of a fresh socket pair, the slot
    /// file as its descriptor 3. The watcher is never waited for: it
    /// outlives the worker by design.
    fn start(grace: Duration) -> io::Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        let slots = memfd()?;
        let tenths = grace.as_millis().div_ceil(100).to_string();
        let slots_fd = slots.as_raw_fd();
        let mut command = Command::new("sh");
        command
            .args(["-c", SCRIPT, "daisy-user-process-watcher", &tenths])
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // SAFETY: dup2 is async-signal-safe; it clears close-on-exec on 3.
        unsafe {
            command.pre_exec(move || match libc::dup2(slots_fd, 3) {
                -1 => Err(io::Error::last_os_error()),
                _ => Ok(()),
            })
        };
        let child = command.spawn()?;
        Ok(Self {
            pid: child.id(),
            socket: ours,
            slots,
            table: Mutex::default(),
        })
    }

    /// A free slot for a new group, or `None` if the file cannot grow.
    pub(super) fn reserve(&'static self) -> Option<Slot> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let index = match table.free.pop() {
            Some(index) => index,
            None => {
                // Written out, so the file never has a hole of NULs.
                let index = table.len;
                self.slots
                    .write_all_at(FREE_SLOT, index * SLOT_BYTES as u64)
                    .ok()?;
                table.len += 1;
                index
            }
        };
        Some(Slot {
            watcher: self,
            index,
        })
    }
}

impl Slot {
    fn offset(self) -> u64 {
        self.index * SLOT_BYTES as u64
    }

    /// Writes `pgid` into the slot. Safe between fork (or clone) and exec:
    /// no allocation, one `pwrite` of a line this short.
    pub(super) fn announce(self, pgid: i32) -> io::Result<()> {
        let mut line = *FREE_SLOT;
        let mut end = SLOT_BYTES - 1;
        let mut rest = pgid.unsigned_abs();
        loop {
            end -= 1;
            line[end] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 || end == 0 {
                break;
            }
        }
        self.write(&line)
    }

    /// Blanks the slot and frees it for another group.
    pub(super) fn release(self) {
        if let Err(e) = self.write(FREE_SLOT) {
            tracing::warn!("cannot withdraw a group from the user-process watcher: {e}");
        }
        let mut table = (self.watcher.table.lock()).unwrap_or_else(|p| p.into_inner());
        table.free.push(self.index);
    }

    fn write(self, line: &[u8; SLOT_BYTES]) -> io::Result<()> {
        let fd = self.watcher.slots.as_raw_fd();
        // SAFETY: a write from a live buffer to a live descriptor.
        let written = unsafe {
            libc::pwrite(
                fd,
                line.as_ptr().cast(),
                SLOT_BYTES,
                self.offset() as libc::off_t,
            )
        };
        match written {
            n if n == SLOT_BYTES as isize => Ok(()),
            -1 => Err(io::Error::last_os_error()),
            _ => Err(io::Error::from(io::ErrorKind::WriteZero)),
        }
    }
}

/// A new memory file, closed on exec.
fn memfd() -> io::Result<File> {
    // SAFETY: a C string and flags in, a new descriptor or -1 out.
    let fd = unsafe { libc::memfd_create(c"daisy-user-groups".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nothing else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user_code::test_util::is_gone;

    fn sleep_in_own_group() -> std::process::Child {
        let mut sleep = Command::new("sleep");
        sleep.arg("600").process_group(0).spawn().unwrap()
    }

    /// A watcher of the test's own, leaked so that its slots are `'static`.
    fn watcher() -> &'static Watcher {
        Box::leak(Box::new(Watcher::start(Duration::from_secs(5)).unwrap()))
    }

    #[test]
    fn the_groups_still_announced_when_the_socket_closes_are_ended() {
        let watcher = watcher();
        let (mut announced, mut withdrawn) = (sleep_in_own_group(), sleep_in_own_group());
        let first = watcher.reserve().unwrap();
        first.announce(withdrawn.id() as i32).unwrap();
        let second = watcher.reserve().unwrap();
        second.announce(announced.id() as i32).unwrap();
        first.release();
        // Reused, then freed before it was announced.
        watcher.reserve().unwrap().release();
        // As if the worker's process ended.
        watcher.socket.shutdown(std::net::Shutdown::Both).unwrap();
        assert!(is_gone(announced.id() as i32));
        announced.wait().unwrap();
        assert!(withdrawn.try_wait().unwrap().is_none(), "left alone");
        withdrawn.kill().unwrap();
        withdrawn.wait().unwrap();
    }

    #[test]
    fn slots_are_fixed_width_lines_reused_once_freed() {
        let watcher = watcher();
        let (a, b) = (watcher.reserve().unwrap(), watcher.reserve().unwrap());
        a.announce(4_194_304).unwrap();
        b.announce(7).unwrap();
        let text = |watcher: &Watcher| {
            let mut bytes = vec![0; 64];
            let n = watcher.slots.read_at(&mut bytes, 0).unwrap();
            String::from_utf8(bytes[..n].to_vec()).unwrap()
        };
        assert_eq!(text(watcher), "    4194304\n          7\n");
        a.release();
        assert_eq!(text(watcher), "           \n          7\n");
        // Withdrawn: this watcher would signal group 7 when the test ends.
        b.release();
        assert_eq!(watcher.reserve().unwrap().index, b.index);
        assert_eq!(text(watcher), "           \n           \n");
    }
}
