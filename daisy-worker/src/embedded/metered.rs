//! What each block of in-process code cost: the worker process's own
//! counters ([`WorkerMeter`] on itself), read as blocks start and end.
//! A block that runs alone (a process function) gets exactly what the
//! process did meanwhile, its heartbeats included (a few µs); blocks
//! that overlap (a worker function fed ahead) share the windows between
//! their ends, as a worker command's do.

use super::BlockControl;
use crate::cost::WorkerMeter;
use daisy_core::protocol::BlockCost;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Wraps the caller's control, measuring blocks between its `start` and
/// `finished`.
pub struct Metered<'a> {
    inner: &'a dyn BlockControl,
    /// The meter and how many blocks run now.
    meter: &'a Mutex<(WorkerMeter, usize)>,
}

/// The meter of this process, for [`Metered`]; one per task's code.
pub fn own_meter() -> Mutex<(WorkerMeter, usize)> {
    let group = nix::unistd::getpgrp().as_raw();
    Mutex::new((WorkerMeter::tracking(std::process::id(), group), 0))
}

impl<'a> Metered<'a> {
    pub fn new(inner: &'a dyn BlockControl, meter: &'a Mutex<(WorkerMeter, usize)>) -> Self {
        Self { inner, meter }
    }

    /// What block `block_id` cost, once it finished.
    pub fn take(&self, block_id: u64) -> Option<BlockCost> {
        self.lock().0.take(block_id)
    }

    fn lock(&self) -> MutexGuard<'_, (WorkerMeter, usize)> {
        self.meter.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl BlockControl for Metered<'_> {
    fn start(&self, block_id: u64) -> bool {
        let may = self.inner.start(block_id);
        let mut meter = self.lock();
        if may && meter.1 == 0 {
            meter.0.begin();
        }
        meter.1 += usize::from(may);
        may
    }

    fn finished(&self, block_id: u64) {
        let mut meter = self.lock();
        meter.0.answered(block_id);
        meter.1 = meter.1.saturating_sub(1);
        drop(meter);
        self.inner.finished(block_id);
    }
}
