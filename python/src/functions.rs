//! A task's function, from the driver's `TaskCode` to code daisy-worker
//! can run: the loading is Python's (`daisy_rs._code.load`: the search
//! path, an import or an unpickling, the check function), the calling
//! is done here.

use crate::process_function::ProcessFunction;
use crate::worker_function::WorkerFunction;
use daisy_core::protocol::{CodeKind, FunctionSource, TaskCode};
use daisy_worker::embedded::{self, EmbeddedCode};
use pyo3::prelude::*;

/// Makes daisy-worker (and the driver's serial run) call this
/// interpreter's functions for function tasks. A worker loads them on
/// its main thread, as daisy does: a module may install a signal handler
/// when it is imported.
pub fn register_factory() {
    embedded::register(Box::new(
        |task_id: &str, worker_id: u64, code: &TaskCode| {
            let loaded = crate::main_thread::call(|py| {
                load(py, task_id, worker_id, code).map_err(|error| describe(py, &error))
            });
            loaded.unwrap_or_else(|| Err("the worker is ending".to_string()))
        },
    ));
}

fn load(
    py: Python<'_>,
    task_id: &str,
    worker_id: u64,
    code: &TaskCode,
) -> PyResult<Box<dyn EmbeddedCode>> {
    let function = code
        .function
        .as_ref()
        .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("the task names no function"))?;
    let (source_kind, source) = match &function.source {
        FunctionSource::Reference(reference) => ("reference", reference),
        FunctionSource::Pickle(path) => ("pickle", path),
    };
    let helpers = py.import("daisy_rs._code")?;
    let loaded = helpers.getattr("load")?.call1((
        task_id,
        worker_id,
        source_kind,
        source,
        function.search_path.clone(),
    ))?;
    let (call, check): (Py<PyAny>, Py<PyAny>) = loaded.extract()?;
    Ok(match code.kind {
        CodeKind::WorkerFunction => {
            Box::new(WorkerFunction::new(task_id, worker_id, call, check, code))
        }
        _ => Box::new(ProcessFunction::new(py, task_id, call, check)?),
    })
}

/// A Python exception as one message: its type, text and the end of its
/// traceback, as `daisy_rs._code.describe` formats it.
pub fn describe(py: Python<'_>, error: &PyErr) -> String {
    let formatted = py.import("daisy_rs._code").and_then(|helpers| {
        helpers
            .getattr("describe")?
            .call1((error.value(py),))?
            .extract()
    });
    formatted.unwrap_or_else(|_| error.to_string())
}
