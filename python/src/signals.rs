//! The worker's stop signals (SIGTERM, SIGINT, SIGUSR1, SIGUSR2: drain)
//! in an interpreter whose user code may install handlers of its own.
//!
//! A process has one handler per signal, and `signal.signal` replaces it:
//! had the runtime installed its own (as the `daisy-worker` binary does),
//! a worker function that installs a SIGTERM handler to checkpoint would
//! silently turn the worker's drain off. So here the interpreter owns the
//! four signals, and the runtime hears them through Python's wakeup fd
//! (`signal.set_wakeup_fd`): Python's C-level handler writes the number of
//! every signal it catches there, whichever Python function handles it,
//! the user's included. The worker gives each of the four a Python handler
//! that does nothing (`daisy_rs.worker._drains`), so that Python catches
//! them at all (and Ctrl-C raises no `KeyboardInterrupt` in the user's
//! code: the worker drains instead, as before); a handler of the user's
//! replaces it and runs on the main thread, and the worker drains all the
//! same. Only a handler set to `SIG_DFL` or `SIG_IGN`, or another wakeup
//! fd (asyncio's `add_signal_handler` sets one), takes the signal away
//! from the worker. A process the user's code forks gets its signals
//! back (`daisy_rs.worker._not_a_worker`): its SIGTERM is not the
//! worker's.
//!
//! The runtime's threads block the four signals, so the kernel delivers
//! them to Python's threads: a main thread asleep in a system call wakes
//! and runs its handler at once (PEP 475), as in a daisy 1.x worker.
//!
//! Once the task's code is finished ([`ignore_from_now`]) the worker only
//! says goodbye and exits, and ignores the four: the driver ends a worker
//! that has not exited yet with SIGTERM as the run ends, which must
//! neither run the user's handler nor turn a clean exit into a death by
//! signal. The worker owns its process, so nothing is put back.

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::signal::{pthread_sigmask, signal, SigHandler, SigSet, SigmaskHow, Signal};
use pyo3::prelude::*;
use std::future::Future;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};

/// The signals that drain a worker (`daisy-worker --help`).
const STOP_SIGNALS: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Whether this process listens through Python ([`listen`]).
static LISTENING: AtomicBool = AtomicBool::new(false);

/// Resolves with why (`"received SIGTERM"`) when the first stop signal
/// arrives.
pub type Stop = Pin<Box<dyn Future<Output = String> + Send>>;

/// Takes the stop signals over in the interpreter, for the rest of the
/// process (on its main thread: Python allows signal handlers and the
/// wakeup fd nowhere else).
pub fn listen(py: Python<'_>) -> PyResult<Stop> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(os_error)?;
    fcntl(write.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(os_error)?;
    let (heard, stop) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("daisy-worker-signals".into())
        .spawn(move || {
            block_stop_signals();
            read_stops(read, heard);
        })?;
    // Last: where it fails (not the main thread), the pipe closes with
    // nothing pointing to it, and the reading thread ends.
    let worker = py.import("daisy_rs.worker")?;
    worker.call_method1("_listen", (write.as_raw_fd(),))?;
    LISTENING.store(true, Ordering::SeqCst);
    // Open for as long as the process lives: Python writes to it.
    let _ = write.into_raw_fd();
    Ok(Box::pin(async move {
        match stop.await {
            Ok(reason) => reason,
            // The reading thread ended (it could not read): never.
            Err(_) => std::future::pending().await,
        }
    }))
}

fn os_error(errno: nix::errno::Errno) -> PyErr {
    std::io::Error::from(errno).into()
}

/// Reads signal numbers from the wakeup fd for the process's life;
/// the first stop signal is sent to `heard`, other signals (those the
/// user's code handles in Python) are not the worker's.
fn read_stops(read: OwnedFd, heard: tokio::sync::oneshot::Sender<String>) {
    let mut heard = Some(heard);
    let mut numbers = [0u8; 64];
    loop {
        let count = match nix::unistd::read(read.as_raw_fd(), &mut numbers) {
            Ok(0) => return,
            Ok(count) => count,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(error) => {
                tracing::warn!(
                    "cannot read the signals: only the driver can stop this worker: {error}"
                );
                return;
            }
        };
        for &number in &numbers[..count] {
            let Some(stop) = STOP_SIGNALS
                .iter()
                .find(|s| **s as i32 == i32::from(number))
            else {
                continue;
            };
            if let Some(heard) = heard.take() {
                let _ = heard.send(format!("received {}", stop.as_str()));
            }
        }
    }
}

/// Blocks the stop signals in the calling thread (and the threads it
/// starts): the kernel then delivers them to a thread of Python's.
pub fn block_stop_signals() {
    let mut set = SigSet::empty();
    STOP_SIGNALS.iter().for_each(|stop| set.add(*stop));
    if let Err(error) = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None) {
        tracing::debug!("cannot block the stop signals in this thread: {error}");
    }
}

/// The task's code is finished: from now on the stop signals are ignored
/// (see the module's doc). Nothing in a process that does not listen
/// through Python (a serial run in the user's interpreter).
pub fn ignore_from_now() {
    if !LISTENING.load(Ordering::SeqCst) {
        return;
    }
    for stop in STOP_SIGNALS {
        // SAFETY: SIG_IGN runs no code of ours in a signal handler.
        if let Err(error) = unsafe { signal(stop, SigHandler::SigIgn) } {
            tracing::debug!("cannot ignore {stop} from now on: {error}");
        }
    }
}
