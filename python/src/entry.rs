//! The driver's and the worker's command lines, run inside Python.
//!
//! The driver runs with the interpreter detached (other Python threads go
//! on) and installs the Rust signal handlers of `daisy-driver`. The
//! worker lends its main thread to the task's functions and runs its
//! runtime on another ([`crate::main_thread`]); its stop signals are the
//! interpreter's, so that a function may install handlers of its own
//! ([`crate::signals`]). Both are processes of their own
//! (`python -m daisy_rs.driver`, `python -m daisy_rs.worker`).
//! `run_blockwise(multiprocessing=False)` runs the driver's serial run in
//! the user's interpreter instead; that path installs no handler (see
//! `daisy_rs.run`).

use clap::Parser;
use daisy_driver::exit;
use daisy_worker::cli::StopSignals;
use pyo3::prelude::*;

/// The driver's exit statuses as `EXIT_<NAME>` attributes of the module
/// (`daisy_driver::exit`), so Python compares with them instead of
/// declaring them again.
pub fn add_exit_statuses(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let statuses = [
        ("EXIT_SUCCESS", exit::SUCCESS),
        ("EXIT_FAILED", exit::FAILED),
        ("EXIT_ERROR", exit::ERROR),
        ("EXIT_INCOMPLETE", exit::INCOMPLETE),
        ("EXIT_EVENTS_LOST", exit::EVENTS_LOST),
        ("EXIT_PANICKED", exit::PANICKED),
        ("EXIT_INTERRUPTED", exit::INTERRUPTED),
    ];
    statuses
        .into_iter()
        .try_for_each(|(name, status)| m.add(name, status))
}

/// `daisy-driver ARGS…`; returns the exit status.
#[pyfunction]
pub fn driver_main(py: Python<'_>, args: Vec<String>) -> i32 {
    daisy_worker::init_logging(daisy_worker::DRIVER_LOG);
    embed_driver_in(py);
    let argv = std::iter::once("daisy-driver".to_string()).chain(args);
    let cli = match daisy_driver::cli::Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(usage) => return usage_exit(usage),
    };
    let status = py.detach(|| i32::from(exit::status_of(daisy_driver::cli::main(cli))));
    forget_signals_handled(py);
    status
}

/// `daisy-worker ARGS…`; returns the exit status. The calling thread
/// (the interpreter's main thread) runs the task's functions, as in a
/// daisy worker, and the runtime runs on a thread of its own
/// ([`crate::main_thread`]); the interpreter owns the stop signals
/// ([`crate::signals`]).
#[pyfunction]
pub fn worker_main(py: Python<'_>, args: Vec<String>) -> i32 {
    daisy_worker::init_logging(daisy_worker::DEFAULT_LOG);
    let argv = std::iter::once("daisy-worker".to_string()).chain(args);
    let cli = match daisy_worker::cli::Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(usage) => return usage_exit(usage),
    };
    let config = match daisy_worker::cli::prepare(cli) {
        Ok(config) => config,
        Err(status) => return i32::from(status),
    };
    let stops = match crate::signals::listen(py) {
        Ok(stop) => StopSignals::Given(stop),
        Err(why) => {
            // Not the main thread (Python refuses handlers elsewhere): the
            // runtime's own handlers, which a user's would replace.
            tracing::warn!("the worker's signals stay the runtime's: {why}");
            StopSignals::Listen
        }
    };
    let runtime = move || i32::from(daisy_worker::cli::serve(config, stops));
    let status = crate::main_thread::lend(py, crate::signals::block_stop_signals, runtime);
    status.unwrap_or_else(|error| {
        eprintln!("daisy-worker: error: cannot start the worker's runtime thread: {error}");
        i32::from(daisy_worker::cli::EXIT_FAILURE)
    })
}

/// Ctrl-C reached the interpreter too while the driver's CLI ran, which
/// handled it (a run stopped and said so, exit 130): the
/// `KeyboardInterrupt` Python has pending would only add a traceback and
/// replace the exit status, so it is dropped.
fn forget_signals_handled(py: Python<'_>) {
    if let Err(pending) = py.check_signals() {
        tracing::debug!("a signal the CLI handled reached Python too: {pending}");
    }
}

/// Tells the driver it runs in this interpreter, so that its workers are
/// this interpreter's `-m daisy_rs.worker` (`daisy_driver::run::embedding`).
pub fn embed_driver_in(py: Python<'_>) {
    let executable = py
        .import("sys")
        .and_then(|sys| sys.getattr("executable"))
        .and_then(|executable| executable.extract::<String>());
    match executable {
        Ok(path) if !path.is_empty() => daisy_driver::run::embedding::embed_in_python(path.into()),
        _ => tracing::debug!("sys.executable is unknown: workers are found as daisy-driver's are"),
    }
}

/// Prints clap's message (help, version or a usage error) and gives its
/// exit status.
fn usage_exit(usage: clap::Error) -> i32 {
    let _ = usage.print();
    usage.exit_code()
}

/// Every problem `daisy-driver` finds in the pipeline `text` (JSON, named
/// `path` in messages), each as the CLI prints it; empty when it is valid.
#[pyfunction]
pub fn pipeline_problems(text: &str, path: &str) -> Vec<String> {
    use daisy_driver::pipeline::{Pipeline, PipelineError};
    match Pipeline::from_str(
        text,
        std::path::Path::new(path),
        &daisy_driver::run::embedding::python_for_workers(),
    ) {
        Ok(_) => Vec::new(),
        Err(PipelineError::Invalid { problems, .. }) => {
            problems.iter().map(ToString::to_string).collect()
        }
        Err(other) => vec![other.to_string()],
    }
}

/// `daisy-driver status --json RUN_DIR`, as a string, without a process.
#[pyfunction]
pub fn status_json(py: Python<'_>, run_dir: std::path::PathBuf) -> PyResult<String> {
    let run_dir = daisy_driver::run_dir::RunDir::at(&run_dir);
    let status = py.detach(|| daisy_driver::inspect::status::status(&run_dir, None));
    let status = status.map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("{e:#}")))?;
    serde_json::to_string(&status)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))
}
