//! The worker's main thread, lent to the user's code.
//!
//! daisy 1.x and 2.0 call a task's functions on their worker process's
//! main thread, and code relies on it: `signal.signal` works only there
//! (checkpointing on SIGTERM, some GPU libraries), and so do a few other
//! calls. So `python -m daisy_rs.worker` [`lend`]s its main thread: the
//! Rust runtime (connection, heartbeats, drain, watchdog) runs on a thread
//! of its own, and the main thread runs the jobs the task's code sends it
//! with [`call`] (a batch of a process function, loading the function)
//! and [`start`] (a worker function, for as long as it runs), one at a
//! time, attached to the interpreter.
//!
//! Where no thread is lent (a serial run, whose driver runs on the
//! caller's thread and calls the functions there), [`call`] runs the job
//! in place, and a worker function gets a thread of its own
//! ([`lent_elsewhere`] says which).
//!
//! When the runtime is done it hands its exit status to the main thread,
//! which returns it from [`lend`]. A main thread that is still in the
//! user's code by then (a block past its task's timeout, a worker
//! function that did not return) cannot be stopped from outside: the
//! runtime's thread ends the process itself, as `daisy_rs.worker._exit`
//! does (its children are ended first).

use pyo3::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Mutex, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

/// Work for the main thread, run attached to the interpreter.
pub type Job = Box<dyn for<'py> FnOnce(Python<'py>) + Send + 'static>;

/// How often the idle main thread runs the Python handlers of signals
/// that arrived meanwhile (a user's SIGTERM handler between two batches):
/// Python runs them only when its main thread asks.
pub const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// How long the runtime's thread waits between looks at a main thread
/// that has not taken its exit status yet.
const DONE_POLL: Duration = Duration::from_millis(50);

/// How long ending the process through Python may take (it needs the
/// interpreter, which code stuck in C may hold) before it ends without.
const EXIT_GRACE: Duration = Duration::from_secs(10);

enum Message {
    Run(Job),
    /// The runtime ended with `status`; `taken` tells it the main thread
    /// returns it.
    Done {
        status: i32,
        taken: Sender<()>,
    },
}

/// The lent thread: where jobs go, and which thread it is.
struct Lent {
    inbox: Sender<Message>,
    thread: ThreadId,
}

static LENT: Mutex<Option<Lent>> = Mutex::new(None);

/// The main thread runs a job now (so it may be stuck in user code).
static BUSY: AtomicBool = AtomicBool::new(false);

/// Lends the calling thread (the interpreter's main thread) to the jobs
/// of the task's code while `runtime` runs on a thread of its own
/// (`daisy-worker-runtime`); returns the status `runtime` returns.
/// `on_runtime_thread` runs first on that thread (to block signals there).
pub fn lend(
    py: Python<'_>,
    on_runtime_thread: impl FnOnce() + Send + 'static,
    runtime: impl FnOnce() -> i32 + Send + 'static,
) -> std::io::Result<i32> {
    let (inbox, jobs) = channel();
    let to_main = inbox.clone();
    *lent() = Some(Lent {
        inbox,
        thread: std::thread::current().id(),
    });
    let spawned = std::thread::Builder::new()
        .name("daisy-worker-runtime".into())
        .spawn(move || {
            on_runtime_thread();
            let status = catch_unwind(AssertUnwindSafe(runtime))
                .unwrap_or(i32::from(daisy_driver::exit::PANICKED));
            hand_over(status, &to_main);
        });
    let status = match spawned {
        Ok(_) => Ok(run_jobs(py, jobs)),
        Err(e) => Err(e),
    };
    *lent() = None;
    status
}

fn lent() -> std::sync::MutexGuard<'static, Option<Lent>> {
    LENT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs jobs until the runtime's status comes; runs the Python handlers
/// of signals while it waits. The jobs still queued after it are dropped
/// unrun (with `jobs`), which their waiters see.
fn run_jobs(py: Python<'_>, mut jobs: Receiver<Message>) -> i32 {
    loop {
        let (next, back) = py.detach(move || (jobs.recv_timeout(SIGNAL_POLL), jobs));
        jobs = back;
        match next {
            Ok(Message::Run(job)) => run_job(py, job),
            Ok(Message::Done { status, taken }) => {
                let _ = taken.send(());
                return status;
            }
            Err(RecvTimeoutError::Timeout) => run_signal_handlers(py),
            // Not reached: `LENT` holds a sender until this returns.
            Err(RecvTimeoutError::Disconnected) => return 1,
        }
    }
}

fn run_job(py: Python<'_>, job: Job) {
    BUSY.store(true, Ordering::SeqCst);
    if catch_unwind(AssertUnwindSafe(|| job(py))).is_err() {
        tracing::error!("a job of the task's code panicked on the main thread");
    }
    BUSY.store(false, Ordering::SeqCst);
}

/// Runs the handlers of signals that arrived while the main thread
/// waited; one that raises is reported (no user code is there to get it).
fn run_signal_handlers(py: Python<'_>) {
    if let Err(error) = py.check_signals() {
        let why = crate::functions::describe(py, &error);
        tracing::warn!("a signal handler raised while the worker waited for work: {why}");
    }
}

/// Gives the main thread the runtime's exit status; ends the process
/// here if the main thread is stuck in the user's code instead.
fn hand_over(status: i32, to_main: &Sender<Message>) {
    let (taken, taking) = channel();
    if to_main.send(Message::Done { status, taken }).is_err() {
        return;
    }
    loop {
        match taking.recv_timeout(DONE_POLL) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) if BUSY.load(Ordering::SeqCst) => end_process(status),
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Ends the process with `status` from this thread, as
/// `daisy_rs.worker._exit` does (the output flushed, the children ended);
/// without Python if that cannot run within [`EXIT_GRACE`].
fn end_process(status: i32) -> ! {
    tracing::debug!("the main thread is still in the task's code: the worker ends it");
    let _ = std::thread::Builder::new()
        .name("daisy-worker-exit".into())
        .spawn(move || {
            std::thread::sleep(EXIT_GRACE);
            // SAFETY: `_exit` ends the process at once; nothing of Rust's
            // runs after it.
            unsafe { libc::_exit(status) }
        });
    let ended = Python::attach(|py| -> PyResult<()> {
        py.import("daisy_rs.worker")?
            .call_method1("_exit", (status,))
            .map(drop)
    });
    if let Err(error) = ended {
        tracing::warn!("cannot end the worker through Python: {error}");
    }
    // SAFETY: as above.
    unsafe { libc::_exit(status) }
}

/// Runs `work` on the lent main thread and waits for it; in place where
/// none is lent or this is that thread. `None`: the main thread no longer
/// takes work (the worker ends), and `work` did not run.
pub fn call<R: Send>(work: impl for<'py> FnOnce(Python<'py>) -> R + Send) -> Option<R> {
    let Some(inbox) = inbox_elsewhere() else {
        return Some(Python::attach(work));
    };
    let (reply, replied) = channel();
    let job: Box<dyn for<'py> FnOnce(Python<'py>) + Send + '_> = Box::new(move |py| {
        let _ = reply.send(work(py));
    });
    // SAFETY: the job borrows from this frame (lifetime '_), and is made
    // 'static only to travel through the channel. This frame outlives it:
    // `replied.recv()` returns only once `reply` (owned by the job) was
    // used or dropped, that is once the job ran or was dropped unrun (a
    // failed send hands it back, and it is dropped before the return);
    // nothing between the send and the receive can unwind.
    let job: Job = unsafe { std::mem::transmute(job) };
    if inbox.send(Message::Run(job)).is_err() {
        return None;
    }
    replied.recv().ok()
}

/// Whether a main thread is lent to jobs of this thread (so [`call`]
/// sends them there and [`start`] may be called).
pub fn lent_elsewhere() -> bool {
    inbox_elsewhere().is_some()
}

/// Starts `job` on the lent main thread, not waiting for it: the returned
/// receiver disconnects once it ended, or was dropped unrun (no thread is
/// lent, or it no longer takes work: the worker ends).
pub fn start(job: Job) -> Receiver<()> {
    let (ended, ending) = channel::<()>();
    let run: Job = Box::new(move |py| {
        job(py);
        drop(ended);
    });
    if let Some(inbox) = inbox_elsewhere() {
        let _ = inbox.send(Message::Run(run));
    }
    ending
}

/// Where to send a job, if a thread is lent and it is not this one.
fn inbox_elsewhere() -> Option<Sender<Message>> {
    let lent = lent();
    let lent = lent.as_ref()?;
    (lent.thread != std::thread::current().id()).then(|| lent.inbox.clone())
}
