//! The pipeline file's task schema lent to the Python `Task`: the fields
//! a `[[task]]` table declares, and one task table checked with the
//! file's own rules, so that `daisy_rs` declares no option again and
//! refuses a value where the `Task` was made, in Python's words.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Adds `TASK_FIELDS`: every field of a `[[task]]` table, in the
/// schema's order.
pub fn add_task_fields(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let fields = daisy_driver::pipeline::task_fields();
    m.add("TASK_FIELDS", PyTuple::new(m.py(), fields)?)
}

/// The problems of the task table `table` (JSON, as `run_blockwise`
/// writes it into the pipeline file), its `requires` against the
/// `[resources]` table `resources` (JSON): `(field, what)` pairs, `what`
/// naming the field but not its value, which the caller shows as its
/// user gave it. Empty when the table is valid on its own.
#[pyfunction]
pub fn task_problems(table: &str, resources: &str) -> PyResult<Vec<(String, String)>> {
    let parse = |text: &str| {
        serde_json::from_str(text).map_err(|error| PyValueError::new_err(error.to_string()))
    };
    let problems = daisy_driver::pipeline::task_problems(&parse(table)?, &parse(resources)?);
    Ok(problems
        .into_iter()
        .map(|problem| (problem.field, problem.what))
        .collect())
}
