//! The driver on a thread of the user's interpreter: `run_blockwise`'s
//! distributed run without a process of its own (a process costs a small
//! run an interpreter's start and this module's load, the larger part of
//! its time).
//!
//! It is `daisy-driver run` as `driver_main` runs it, with one difference:
//! no signal handler is installed (the interpreter keeps its own, so
//! Ctrl-C is a `KeyboardInterrupt` in Python); Python stops the run with
//! [`DriverRun::stop`], which the driver takes as the CLI takes Ctrl-C.

use crate::reserved::ReservedRun;
use clap::Parser;
use daisy_driver::exit;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// A driver running on its own thread.
#[pyclass(module = "daisy_rs._native")]
pub struct DriverRun {
    stop: Arc<Notify>,
    /// The exit status, once the run ended.
    status: Arc<(Mutex<Option<i32>>, Condvar)>,
}

/// Starts `daisy-driver ARGS…` (a `run`) on a thread; `reserved`: the
/// listener and token it serves with instead of its own.
#[pyfunction]
#[pyo3(signature = (args, reserved=None))]
pub fn start_driver(
    py: Python<'_>,
    args: Vec<String>,
    reserved: Option<PyRef<'_, ReservedRun>>,
) -> PyResult<DriverRun> {
    daisy_worker::init_logging(daisy_worker::DRIVER_LOG);
    crate::entry::embed_driver_in(py);
    let argv = std::iter::once("daisy-driver".to_string()).chain(args);
    let mut cli = daisy_driver::cli::Cli::try_parse_from(argv)
        .map_err(|usage| PyRuntimeError::new_err(usage.to_string()))?;
    if let (Some(reserved), daisy_driver::cli::Command::Run(opts)) = (reserved, &mut cli.command) {
        opts.reserved = reserved.take()?;
    }
    let stop = Arc::new(Notify::new());
    let status = Arc::new((Mutex::new(None), Condvar::new()));
    let stopped = Arc::clone(&stop);
    let ended = Arc::clone(&status);
    // The driver says, when it stops, what a re-run will do.
    let stop_signal = Box::pin(async move { stopped.notified().await });
    std::thread::Builder::new()
        .name("daisy-driver".into())
        .spawn(move || {
            // A panic must still end the wait, as a crashed driver process
            // ended it with its exit status.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                daisy_driver::cli::main_stopped_by(cli, stop_signal)
            }));
            let code = i32::from(ran.map_or(exit::PANICKED, exit::status_of));
            let (lock, ended_now) = &*ended;
            *lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(code);
            ended_now.notify_all();
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the driver's thread: {e}")))?;
    Ok(DriverRun { stop, status })
}

#[pymethods]
impl DriverRun {
    /// The exit status, waiting at most `timeout_s` with the interpreter
    /// detached; `None` while the run goes on.
    fn wait(&self, py: Python<'_>, timeout_s: f64) -> Option<i32> {
        py.detach(|| {
            let (lock, ended) = &*self.status;
            let status = lock.lock().unwrap_or_else(|e| e.into_inner());
            let timeout = Duration::from_secs_f64(timeout_s.max(0.0));
            let (status, _) = ended
                .wait_timeout_while(status, timeout, |status| status.is_none())
                .unwrap_or_else(|e| e.into_inner());
            *status
        })
    }

    /// Stops the run as Ctrl-C stops the CLI: workers are stopped, what
    /// finished is kept.
    fn stop(&self) {
        self.stop.notify_one();
    }
}
