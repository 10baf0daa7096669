//! `daisy_rs._native`: the Rust half of the `daisy_rs` Python package.
//! (How the crates fit together: docs/architecture.md.)
//!
//! It holds no scheduler of its own: `driver_main` is `daisy-driver`'s
//! command line and `worker_main` is `daisy-worker`'s, run inside the
//! Python interpreter, so a Python worker is the same runtime as the
//! Rust one (heartbeats, drain, walltime, hand-back) with one difference:
//! a task's `process_function` or `worker_function` is called in this
//! process, with no program started and no pipe in between.
//!
//! # Layout
//! - `entry`: the two command lines, and logging.
//! - `main_thread`: the worker's main thread lent to the task's functions
//!   (daisy calls them there), the runtime on a thread of its own.
//! - `signals`: the worker's stop signals heard through the interpreter,
//!   so that a function may install handlers of its own.
//! - `driver_thread`: `run_blockwise`'s driver on a thread of the
//!   interpreter; `reserved`: its listener and token, bound before it
//!   starts (for daisy 1.x's `init_callback_fn`).
//! - `functions`: loading a task's function (through `daisy_rs._code`)
//!   and registering the embedded-code factory daisy-worker asks.
//! - `graphs`, `scheduler`: daisy-core's dependency graph and scheduler
//!   driven by hand, under `daisy_rs.dependency_graph` and `daisy_rs.scheduler`.
//! - `hand_client`: `daisy.Client()` in a process started by hand with
//!   a context naming the driver (daisy 1.x's `init_callback_fn`).
//! - `process_function`: a function called once per block.
//! - `task_schema`: the pipeline file's task fields and rules, which the
//!   Python `Task` is checked against.
//! - `worker_function`: a function that loops over its own `Client`,
//!   fed blocks through a [`worker_function::Feed`].

mod driver_thread;
mod entry;
mod functions;
mod graphs;
mod hand_client;
mod main_thread;
mod process_function;
mod reserved;
mod scheduler;
mod signals;
mod task_schema;
mod worker_function;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    functions::register_factory();
    entry::add_exit_statuses(m)?;
    m.add_function(wrap_pyfunction!(entry::driver_main, m)?)?;
    m.add_function(wrap_pyfunction!(driver_thread::start_driver, m)?)?;
    m.add_class::<driver_thread::DriverRun>()?;
    m.add_class::<reserved::ReservedRun>()?;
    m.add_class::<hand_client::DriverClient>()?;
    m.add_function(wrap_pyfunction!(entry::worker_main, m)?)?;
    m.add_function(wrap_pyfunction!(entry::pipeline_problems, m)?)?;
    m.add_function(wrap_pyfunction!(entry::status_json, m)?)?;
    task_schema::add_task_fields(m)?;
    m.add_function(wrap_pyfunction!(task_schema::task_problems, m)?)?;
    m.add_function(wrap_pyfunction!(graphs::no_block_reason, m)?)?;
    m.add_class::<worker_function::Feed>()?;
    m.add_class::<graphs::Graph>()?;
    m.add_class::<graphs::LevelIter>()?;
    m.add_class::<scheduler::Scheduler>()?;
    Ok(())
}
