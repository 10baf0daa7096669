//! `daisy.Client()` in a process started by hand with a context that
//! names the driver: daisy 1.x's `init_callback_fn(context)` gets one,
//! and a documented daisy 1.x pattern starts workers outside the spawn
//! function with it (`DAISY_CONTEXT={context.to_env()} python worker.py`).
//! Such a process joins the run as a worker started by hand, as
//! `python -m daisy_rs.worker --context-file … --task …` would, but the
//! blocks go to its own `acquire_block()` loop instead of the task's
//! function. It is daisy-worker's [`Client`]: heartbeats run on a
//! thread of their own while the process works on a block, so the driver
//! accounts for it as for any worker (a lost one's blocks go back).

use crate::process_function::roi;
use daisy_core::protocol::{BlockResult, FunctionSource, WireBlock};
use daisy_worker::{Acquired, Client, ConnectOpts};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a wait for the driver lets Python look at its signals, so
/// that Ctrl-C stops a hand-started process waiting for blocks.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// A worker started by hand, connected to the driver.
#[pyclass(module = "daisy_rs._native")]
pub struct DriverClient {
    /// Taken only when dropped (see `Drop`).
    runtime: Option<tokio::runtime::Runtime>,
    state: Mutex<State>,
    /// The process that made it: a forked child's copy is never ended.
    pid: u32,
    #[pyo3(get)]
    task_id: String,
    /// The id the driver gave this worker.
    #[pyo3(get)]
    worker_id: u64,
    /// The task's function as the driver describes it, `(kind, source,
    /// search_path)` with kind `"pickle"` or `"reference"`: where the
    /// task's check function comes from.
    #[pyo3(get)]
    function: Option<(String, String, Vec<String>)>,
}

struct State {
    /// None once closed.
    client: Option<Client>,
    /// Blocks received and not handed to the caller yet.
    queued: VecDeque<WireBlock>,
    /// Blocks handed to the caller, and since when.
    held: HashMap<u64, Instant>,
}

#[pymethods]
impl DriverClient {
    /// Connects to the driver at `addresses` (tried in order, retried
    /// while the driver starts) as a worker of `task_id`.
    #[new]
    fn new(
        py: Python<'_>,
        addresses: Vec<String>,
        token: String,
        task_id: String,
    ) -> PyResult<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("daisy-hand-client")
            .enable_all()
            .build()
            .map_err(|e| {
                PyRuntimeError::new_err(format!("cannot start the client's runtime: {e}"))
            })?;
        let opts = ConnectOpts::new(addresses, token, task_id.clone());
        let client = py
            .detach(|| runtime.block_on(Client::connect(opts)))
            .map_err(|e| {
                PyConnectionError::new_err(format!(
                    "daisy.Client(): cannot join the run as a worker of task {task_id:?}: {e}"
                ))
            })?;
        let welcome = client.welcome();
        let function = (welcome.code.as_ref())
            .and_then(|code| code.function.as_ref())
            .map(|function| {
                let (kind, source) = match &function.source {
                    FunctionSource::Reference(reference) => ("reference", reference),
                    FunctionSource::Pickle(path) => ("pickle", path),
                };
                (
                    kind.to_string(),
                    source.clone(),
                    function.search_path.clone(),
                )
            });
        Ok(Self {
            worker_id: welcome.worker_id,
            runtime: Some(runtime),
            pid: std::process::id(),
            state: Mutex::new(State {
                client: Some(client),
                queued: VecDeque::new(),
                held: HashMap::new(),
            }),
            task_id,
            function,
        })
    }

    /// The next block as `(task_id, block_id, read, write)`, waiting for
    /// it; `None` once the driver has no more for this worker.
    fn next_block<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let mut state = self.lock();
        let Some(block) = self.next_wire_block(py, &mut state)? else {
            return Ok(None);
        };
        state.held.insert(block.block_id, Instant::now());
        let read = roi(py, &block.read_roi)?;
        let write = roi(py, &block.write_roi)?;
        let fields = (self.task_id.as_str(), block.block_id, read, write);
        Ok(Some(fields.into_pyobject(py)?))
    }

    /// Reports a block: `error` is `None` for success.
    #[pyo3(signature = (block_id, error=None))]
    fn release(&self, py: Python<'_>, block_id: u64, error: Option<String>) -> PyResult<()> {
        self.report(py, block_id, error, false)
    }

    /// Reports a block the task's check function calls done: skipped.
    fn found_done(&self, py: Python<'_>, block_id: u64) -> PyResult<()> {
        self.report(py, block_id, None, true)
    }

    /// Leaves the run politely (what is held goes back to the driver).
    fn close(&self, py: Python<'_>) {
        let client = self.lock().client.take();
        if let Some(client) = client {
            if let Err(error) = py.detach(|| self.runtime().block_on(client.close())) {
                tracing::debug!("closing the connection to the driver: {error}");
            }
        }
    }
}

impl DriverClient {
    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime is taken only when dropped")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next block from the queue or the driver, looking at Python's
    /// signals while it waits.
    fn next_wire_block(&self, py: Python<'_>, state: &mut State) -> PyResult<Option<WireBlock>> {
        loop {
            if let Some(block) = state.queued.pop_front() {
                return Ok(Some(block));
            }
            let Some(client) = state.client.as_mut() else {
                return Ok(None);
            };
            let waited = py.detach(|| {
                self.runtime()
                    .block_on(async { tokio::time::timeout(SIGNAL_POLL, client.acquire(1)).await })
            });
            match waited {
                // Cancel safe: the request stays parked at the driver.
                Err(_elapsed) => py.check_signals()?,
                Ok(Ok(Acquired::Blocks(blocks))) => state.queued.extend(blocks),
                Ok(Ok(Acquired::Shutdown { .. })) => return Ok(None),
                Ok(Err(error)) => return Err(lost(&error)),
            }
        }
    }

    fn report(
        &self,
        py: Python<'_>,
        block_id: u64,
        error: Option<String>,
        skipped: bool,
    ) -> PyResult<()> {
        let mut state = self.lock();
        let seconds = (state.held.remove(&block_id)).map(|since| since.elapsed().as_secs_f64());
        let Some(client) = state.client.as_mut() else {
            return Err(PyConnectionError::new_err(
                "daisy.Client(): the connection to the driver was closed",
            ));
        };
        let result = BlockResult {
            block_id,
            ok: error.is_none(),
            skipped,
            error,
            seconds,
            cost: None,
        };
        py.detach(|| self.runtime().block_on(client.release(vec![result])))
            .map_err(|error| lost(&error))
    }
}

impl Drop for DriverClient {
    /// In a forked child (gunpowder forks its fetchers after making a
    /// `Client`) the runtime's threads are not there: ending it would wait
    /// for them forever, so the copy is left alone; the child's own
    /// `Client` joins the run again.
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            std::mem::forget(self.runtime.take());
            std::mem::forget(std::mem::take(&mut self.lock().client));
        }
    }
}

fn lost(error: &daisy_worker::ClientError) -> PyErr {
    PyConnectionError::new_err(format!("daisy.Client(): {error}"))
}
