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
//! Every user group is announced on it (`+ <pgid>`) by the new process
//! itself, before it executes user code, so no descendant can exist
//! unannounced, and withdrawn (`- <pgid>`) once its leader is reaped. When
//! the worker's process ends, the socket reads end-of-file, and the
//! watcher sends SIGTERM to every group still announced, then SIGKILL to
//! what is left after the grace period, and exits.
//!
//! A process that leaves its group (`setsid`, a daemon) is not followed;
//! in a cluster job the job's cgroup ends it with the job.

use nix::sys::socket::{send, MsgFlags};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// Reads `+ <pgid>` and `- <pgid>` lines until end-of-file, then ends the
/// groups still announced: SIGTERM, then SIGKILL after `$1` tenths of a
/// second to any that is still there. It ignores the signals a terminal or
/// a job's end sends around, so that it outlives the worker.
const SCRIPT: &str = r#"
trap '' HUP INT TERM QUIT USR1 USR2 PIPE
live=' '
while read -r op group; do
  case "$op$live" in
    +*) live="$live$group " ;;
    -*" $group "*) live="${live%% $group *} ${live#* $group }" ;;
  esac
done
[ "$live" = ' ' ] && exit 0
signal() { for g in $live; do kill -s "$1" -- "-$g" 2>/dev/null; done; }
alive() { for g in $live; do kill -s 0 -- "-$g" 2>/dev/null && return 0; done; return 1; }
signal TERM
tenths=0
while alive && [ "$tenths" -lt "$1" ]; do sleep 0.1; tenths=$((tenths + 1)); done
signal KILL
"#;

/// The worker's end of the watcher's socket; `None` if the watcher could
/// not be started (warned once; PR_SET_PDEATHSIG still holds).
static WATCHER: OnceLock<Option<UnixStream>> = OnceLock::new();

/// The socket to announce groups on, starting the watcher on first use.
pub(super) fn socket(grace: Duration) -> Option<RawFd> {
    let socket = WATCHER.get_or_init(|| match start(grace) {
        Ok(socket) => Some(socket),
        Err(e) => {
            tracing::warn!(
                "cannot start the user-process watcher ({e}): user processes that \
                 leave their group leader behind may outlive a killed worker"
            );
            None
        }
    });
    socket.as_ref().map(AsRawFd::as_raw_fd)
}

/// Starts `sh` reading the other end of a fresh socket pair. The watcher
/// is never waited for: it outlives the worker by design.
fn start(grace: Duration) -> std::io::Result<UnixStream> {
    let (ours, theirs) = UnixStream::pair()?;
    let tenths = grace.as_millis().div_ceil(100).to_string();
    Command::new("sh")
        .args(["-c", SCRIPT, "daisy-user-process-watcher", &tenths])
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    Ok(ours)
}

/// Announces a new group (`+`) or withdraws a reaped one (`-`). Safe
/// between fork and exec: no allocation, one `send` (atomic for a message
/// this short), and MSG_NOSIGNAL, so a dead watcher cannot raise SIGPIPE.
pub(super) fn announce(socket: RawFd, sign: u8, pgid: i32) -> nix::Result<()> {
    // Filled from the end: the newline, the digits, a space, the sign.
    let mut line = [0u8; 16];
    let mut start = line.len() - 1;
    line[start] = b'\n';
    let mut rest = pgid.unsigned_abs();
    loop {
        start -= 1;
        line[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    start -= 2;
    line[start..start + 2].copy_from_slice(&[sign, b' ']);
    send(socket, &line[start..], MsgFlags::MSG_NOSIGNAL).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user_code::test_util::is_gone;
    use std::io::Read;

    fn sleep_in_own_group() -> std::process::Child {
        let mut sleep = Command::new("sleep");
        sleep.arg("600").process_group(0).spawn().unwrap()
    }

    #[test]
    fn the_groups_still_announced_when_the_socket_closes_are_ended() {
        let socket = start(Duration::from_secs(5)).unwrap();
        let (mut announced, mut withdrawn) = (sleep_in_own_group(), sleep_in_own_group());
        let fd = socket.as_raw_fd();
        announce(fd, b'+', withdrawn.id() as i32).unwrap();
        announce(fd, b'+', announced.id() as i32).unwrap();
        announce(fd, b'-', withdrawn.id() as i32).unwrap();
        announce(fd, b'-', 12345).unwrap();
        drop(socket);
        assert!(is_gone(announced.id() as i32));
        announced.wait().unwrap();
        assert!(withdrawn.try_wait().unwrap().is_none(), "left alone");
        withdrawn.kill().unwrap();
        withdrawn.wait().unwrap();
    }

    #[test]
    fn announcements_are_one_line_each() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        announce(ours.as_raw_fd(), b'+', 4_194_304).unwrap();
        announce(ours.as_raw_fd(), b'-', 7).unwrap();
        drop(ours);
        let mut text = String::new();
        theirs.read_to_string(&mut text).unwrap();
        assert_eq!(text, "+ 4194304\n- 7\n");
    }
}
