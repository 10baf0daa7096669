//! A driver's listener and token, reserved before its run starts:
//! daisy 1.x binds its server before it calls a task's
//! `init_callback_fn(context)`, whose context names the server (a
//! documented pattern starts workers by hand from it), so
//! `run_blockwise` reserves both, tells the callbacks, then starts the
//! driver on them ([`crate::driver_thread::start_driver`]).

use daisy_driver::run::context::Reserved;
use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use std::sync::Mutex;

/// A bound listener and a run token, until a driver takes them.
#[pyclass(module = "daisy_rs._native", weakref)]
pub struct ReservedRun {
    reserved: Mutex<Option<Reserved>>,
    /// Where workers reach the listener, in the order they try (those of
    /// the driver's `context.json`).
    #[pyo3(get)]
    addresses: Vec<String>,
    /// The run's token, for the contexts of workers started by hand.
    #[pyo3(get)]
    token: String,
}

#[pymethods]
impl ReservedRun {
    /// Binds `address` (`host:port`, port 0 for a free one).
    #[new]
    fn new(address: &str) -> PyResult<Self> {
        let address = address
            .parse()
            .map_err(|e| PyOSError::new_err(format!("{address:?} is no host:port address: {e}")))?;
        let reserved = Reserved::bind(address).map_err(|e| PyOSError::new_err(format!("{e:#}")))?;
        let addresses = reserved
            .addresses()
            .map_err(|e| PyOSError::new_err(format!("{e:#}")))?;
        let token = reserved
            .token
            .as_ref()
            .map(|token| token.secret().to_string())
            .unwrap_or_default();
        Ok(Self {
            reserved: Mutex::new(Some(reserved)),
            addresses,
            token,
        })
    }

    /// Closes the listener if no driver took it (a run refused before it
    /// started; in a process forked before the driver took it, this
    /// process's copy). A lock held elsewhere at a fork is never released
    /// in the child: then nothing is closed.
    fn close(&self) {
        if let Ok(mut reserved) = self.reserved.try_lock() {
            reserved.take();
        }
    }
}

impl ReservedRun {
    /// The listener and token, for the driver; an error once taken.
    pub fn take(&self) -> PyResult<Reserved> {
        self.lock()
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this reserved listener was used or closed"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Reserved>> {
        self.reserved.lock().unwrap_or_else(|e| e.into_inner())
    }
}
