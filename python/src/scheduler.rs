//! daisy-core's scheduler state machine, for `daisy_rs.scheduler`.
//!
//! The driver's `daisy_core::Scheduler` driven by hand, one call at a
//! time: the same ready order, retries and orphans as a run, with no
//! driver, workers or sockets. Blocks are wire tuples (see
//! [`crate::graphs`]).

use crate::graphs::{task_index, wire_block, Graph};
use daisy_core::block::BlockId;
use daisy_core::scheduler::Released;
use daisy_core::{Block, BlockOutcome, TaskIdx};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::sync::Arc;

/// Which blocks of a graph are ready, in flight, done, failed or orphaned.
#[pyclass(module = "daisy_rs._native")]
pub struct Scheduler {
    inner: daisy_core::Scheduler,
}

#[pymethods]
impl Scheduler {
    #[new]
    fn new(graph: &Graph) -> Self {
        Self {
            inner: daisy_core::Scheduler::new(Arc::clone(&graph.inner)),
        }
    }

    /// The graph this scheduler walks.
    fn graph(&self) -> Graph {
        Graph {
            inner: Arc::clone(self.inner.graph()),
        }
    }

    /// The next ready block of `task`, or `None`. `is_done(block)`, if
    /// given, is asked first for each ready block; a block it calls done
    /// is skipped (counted completed and skipped, its downstream
    /// unlocked) and the next one asked. If it raises, the block goes
    /// back to the ready queue unused and the error propagates.
    #[pyo3(signature = (task, is_done=None))]
    fn acquire<'py>(
        &mut self,
        py: Python<'py>,
        task: u32,
        is_done: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let task = self.task(task)?;
        let mut error = None;
        let block = {
            let mut ask = |block: &Block| match &is_done {
                Some(check) if error.is_none() => match is_done_by(py, check, block) {
                    Ok(done) => done,
                    Err(e) => {
                        error = Some(e);
                        false
                    }
                },
                _ => false,
            };
            self.inner.acquire(task, &mut ask)
        };
        if let Some(error) = error {
            if let Some(block) = &block {
                self.inner.release(block.id, BlockOutcome::Returned);
            }
            return Err(error);
        }
        block.map(|b| wire_block(py, &b)).transpose()
    }

    /// Records how the block `spatial_id` of `task` ended; what it did is
    /// `"ignored"` (not in flight), `"completed"`, `"retrying"` or
    /// `"failed"` (for good, its downstream orphaned).
    fn release(&mut self, task: u32, spatial_id: u64, succeeded: bool) -> PyResult<&'static str> {
        let id = BlockId {
            task: self.task(task)?,
            spatial: spatial_id,
        };
        let outcome = match succeeded {
            true => BlockOutcome::Success,
            false => BlockOutcome::Failure,
        };
        Ok(match self.inner.release(id, outcome) {
            Released::Ignored => "ignored",
            Released::Succeeded { .. } => "completed",
            Released::Retrying { .. } => "retrying",
            Released::FailedForGood { .. } => "failed",
            Released::Requeued => "returned",
        })
    }

    /// `task`'s counters by daisy's names (`completed_count` counts
    /// skipped blocks, as in daisy).
    fn counters<'py>(&self, py: Python<'py>, task: u32) -> PyResult<Bound<'py, PyDict>> {
        let c = self.inner.counters(self.task(task)?);
        let counters = PyDict::new(py);
        for (name, count) in [
            ("total_block_count", c.total),
            ("ready_count", c.ready),
            ("processing_count", c.processing),
            ("completed_count", c.completed),
            ("skipped_count", c.skipped),
            ("failed_count", c.failed),
            ("orphaned_count", c.orphaned),
            ("pending_count", c.pending()),
        ] {
            counters.set_item(name, count)?;
        }
        Ok(counters)
    }

    /// True when every block of every task completed, failed or was
    /// orphaned.
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
}

fn is_done_by(py: Python<'_>, check: &Bound<'_, PyAny>, block: &Block) -> PyResult<bool> {
    check.call1((wire_block(py, block)?,))?.is_truthy()
}

impl Scheduler {
    fn task(&self, task: u32) -> PyResult<TaskIdx> {
        task_index(self.inner.graph(), task)
    }
}
