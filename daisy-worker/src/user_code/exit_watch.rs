//! Whether a worker command may have exited, known without a system call.
//!
//! Before each batch the relay makes sure its worker command still runs
//! (one that exited between batches is started again, and the batch is
//! not failed on it). Asking the kernel (`waitid`) every time was one of
//! the seven system calls of a block at batch 1. On the worker's runtime
//! the process's pidfd (Linux ≥ 5.3) is registered with the reactor
//! instead: it turns readable when the process exits, and the runtime
//! learns that in the `epoll_wait` it makes anyway while waiting for the
//! driver. Only then, or without a pidfd, is the kernel asked.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::task::{Context, Waker};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A process's pidfd, once registered with the runtime's reactor.
#[derive(Debug, Default)]
pub(super) enum ExitWatch {
    /// Not tried yet (it needs a runtime).
    #[default]
    Unopened,
    Watching(AsyncFd<OwnedFd>),
    /// No pidfd (an older kernel): the kernel is asked every time.
    Unavailable,
}

impl ExitWatch {
    /// Starts watching `pid`, once; must be called on a tokio runtime.
    pub(super) fn watch(&mut self, pid: u32) {
        if matches!(self, Self::Unopened) {
            *self = match open(pid) {
                Ok(fd) => Self::Watching(fd),
                Err(e) => {
                    tracing::debug!("no pidfd for the worker command ({e}): waitid per batch");
                    Self::Unavailable
                }
            };
        }
    }

    /// True while the process surely runs: its pidfd is watched and has
    /// not turned readable.
    pub(super) fn surely_running(&self) -> bool {
        let Self::Watching(fd) = self else {
            return false;
        };
        let mut cx = Context::from_waker(Waker::noop());
        fd.poll_read_ready(&mut cx).is_pending()
    }
}

/// A pidfd of `pid` (Linux ≥ 5.3): readable once the process has exited.
pub(super) fn pidfd(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn open(pid: u32) -> io::Result<AsyncFd<OwnedFd>> {
    let fd = pidfd(pid)?;
    // SAFETY: the fd lives inside the registration, so it stays open as
    // long as the registration.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into_parts().1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    #[test]
    fn a_watched_process_is_surely_running_until_it_exits() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut child = Command::new("sleep").arg("60").spawn().unwrap();
        let mut watch = ExitWatch::default();
        assert!(!watch.surely_running(), "unwatched: the kernel is asked");
        let _entered = runtime.enter();
        watch.watch(child.id());
        assert!(matches!(watch, ExitWatch::Watching(_)), "{watch:?}");
        assert!(watch.surely_running());
        child.kill().unwrap();
        // The reactor learns of the exit when the runtime next turns.
        let started = Instant::now();
        while watch.surely_running() && started.elapsed() < Duration::from_secs(30) {
            runtime.block_on(tokio::time::sleep(Duration::from_millis(10)));
        }
        assert!(!watch.surely_running(), "the exit was never seen");
        child.wait().unwrap();
    }
}
