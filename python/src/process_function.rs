//! A `process_function`: called once per block on the interpreter's main
//! thread (a worker's, lent by [`crate::main_thread`]; in a serial run the
//! caller's), one hop there and one attach per batch.
//!
//! `daisy_rs._code.run_block` makes the `Block`, calls the check function
//! and the process function, and says how it went: `None` for success,
//! `True` for a block the check function calls done (it did not run), a
//! message (the traceback's end) for a failure. A `KeyboardInterrupt`
//! (Ctrl-C during a serial run in the user's interpreter) stops the
//! batch; the block is then not counted as run.

use daisy_core::protocol::{WireBlock, WireRoi};
use daisy_worker::embedded::{BlockControl, EmbeddedCode, EmbeddedRan};
use daisy_worker::user_code::{BlockFailure, Finished};
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyTuple};
use std::time::Instant;

pub struct ProcessFunction {
    task_id: String,
    function: Py<PyAny>,
    check: Py<PyAny>,
    run_block: Py<PyAny>,
    interrupted: bool,
}

impl ProcessFunction {
    pub fn new(
        py: Python<'_>,
        task_id: &str,
        function: Py<PyAny>,
        check: Py<PyAny>,
    ) -> PyResult<Self> {
        let run_block = py.import("daisy_rs._code")?.getattr("run_block")?.unbind();
        Ok(Self {
            task_id: task_id.to_string(),
            function,
            check,
            run_block,
            interrupted: false,
        })
    }

    /// Runs one block; `None` if Ctrl-C stopped it.
    fn run_one(&self, py: Python<'_>, block: &WireBlock) -> Option<Result<Finished, BlockFailure>> {
        let outcome = self.call(py, block);
        match outcome {
            Ok(Ok(finished)) => Some(Ok(finished)),
            Ok(Err(message)) => Some(Err(BlockFailure::new(message))),
            Err(error) if error.is_instance_of::<PyKeyboardInterrupt>(py) => None,
            Err(error) => Some(Err(BlockFailure::new(crate::functions::describe(
                py, &error,
            )))),
        }
    }

    /// What `daisy_rs._code.run_block` said: `None` (ran), `True` (the
    /// check function calls the block done) or why the block failed.
    fn call(&self, py: Python<'_>, block: &WireBlock) -> PyResult<Result<Finished, String>> {
        let args = (
            self.function.bind(py),
            self.check.bind(py),
            self.task_id.as_str(),
            block.block_id,
            roi(py, &block.read_roi)?,
            roi(py, &block.write_roi)?,
        );
        let answer = self.run_block.bind(py).call1(args)?;
        Ok(if answer.is_none() {
            Ok(Finished::Ran)
        } else if answer.is_instance_of::<PyBool>() {
            Ok(Finished::FoundDone)
        } else {
            Err(answer.extract()?)
        })
    }
}

/// `((offset…), (shape…))`, what `Block._from_wire` takes.
pub fn roi<'py>(py: Python<'py>, roi: &WireRoi) -> PyResult<Bound<'py, PyTuple>> {
    let offset = PyTuple::new(py, &roi.offset)?;
    let shape = PyTuple::new(py, &roi.shape)?;
    PyTuple::new(py, [offset, shape])
}

impl EmbeddedCode for ProcessFunction {
    fn run_batch(
        &mut self,
        blocks: Vec<WireBlock>,
        control: &dyn BlockControl,
    ) -> Vec<EmbeddedRan> {
        // `None`: the worker ends, and no block of the batch started.
        let ran = crate::main_thread::call(|py| {
            let mut ran = Vec::with_capacity(blocks.len());
            for block in blocks.iter().take_while(|b| control.start(b.block_id)) {
                let started = Instant::now();
                let outcome = self.run_one(py, block);
                control.finished(block.block_id);
                let Some(outcome) = outcome else {
                    self.interrupted = true;
                    break;
                };
                ran.push(EmbeddedRan {
                    block_id: block.block_id,
                    outcome,
                    took: started.elapsed(),
                });
            }
            ran
        });
        ran.unwrap_or_default()
    }

    fn interrupted(&self) -> bool {
        self.interrupted
    }

    fn finish(&mut self) {
        crate::signals::ignore_from_now();
    }
}
