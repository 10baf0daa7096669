//! The Python interpreter a driver runs in, when the Python package runs
//! the CLI in-process (`daisy-rs-driver`, `python -m daisy_rs.driver`,
//! `run_blockwise`). Such a driver has no `daisy-worker` beside it (its
//! executable is the interpreter, and a `pip install` built no binary),
//! so its workers are that interpreter's [`python_worker`]: the whole
//! `daisy-worker`, block and worker commands included, with nothing to
//! build on the compute nodes. The interpreter is the one the user ran
//! (a virtual environment's `python`, not the base one it links to), so
//! workers import what the driver's interpreter imports.
//!
//! Process-wide, like [`daisy_worker::embedded`]: one interpreter embeds
//! the process.

use crate::pipeline::python_worker;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static PYTHON: OnceLock<PathBuf> = OnceLock::new();

/// Registers the interpreter this process is (Python's `sys.executable`);
/// a second registration is ignored.
pub fn embed_in_python(executable: PathBuf) {
    let _ = PYTHON.set(executable);
}

/// The interpreter this driver runs in, if it runs in one.
pub fn python() -> Option<&'static Path> {
    PYTHON.get().map(PathBuf::as_path)
}

/// The Python interpreter that runs function tasks' workers by default
/// (what the driver passes to pipeline resolution): this driver's own if
/// it runs in one, else `python3` from PATH.
pub fn python_for_workers() -> String {
    python().map_or_else(
        || python_worker::PYTHON_ON_PATH.to_string(),
        |p| p.display().to_string(),
    )
}

/// `python -m daisy_rs.worker` of the embedding interpreter, as a program
/// and its first arguments.
pub fn python_worker() -> Option<(PathBuf, Vec<String>)> {
    python().map(|python| (python.to_path_buf(), python_worker::args()))
}
