//! What a block cost ([`BlockCost`]), measured when the task tracks
//! resources (`resource_tracking`; docs/user-guide.md, "What each block
//! cost").
//!
//! - A block command is its own process: [`reap`] reaps it with its
//!   CPU time and peak resident set (`wait4`) and its IO counters
//!   (`/proc/<pid>/io`, read just before the reap), and
//!   [`block_command_cost`] makes the block's cost of them.
//! - A worker command serves many blocks: [`WorkerMeter`] reads its
//!   counters (`/proc/<pid>/stat`, `io`, `status`) as each answer
//!   arrives, and charges each block what changed since the answer before
//!   it (or since its batch started). Exact when one block is in flight;
//!   with prefetch the blocks overlap, and each gets the window between
//!   two answers, an approximation. Its CPU time comes in 10 ms ticks.
//! - In-process code (a Python function) is measured the same way, on the
//!   worker's own process (`crate::embedded::Metered`).
//! - GPU figures come from [`gpu`], and only where a GPU is there.
//!
//! Wall time is not here: the runner times every block, tracked or not.

pub mod gpu;
pub mod proc_files;
mod reap;

pub use reap::{reap, Usage};

use daisy_core::protocol::BlockCost;
use proc_files::{IoCounters, ProcFiles};
use std::collections::HashMap;
use std::time::Instant;

/// The cost of a block command from how its process group `group`, which
/// started at `started`, was reaped.
pub fn block_command_cost(usage: &Usage, group: i32, started: Instant) -> BlockCost {
    let io = usage.io.unwrap_or_default();
    with_gpu(
        BlockCost {
            cpu_seconds: usage.cpu_seconds,
            peak_rss_bytes: usage.peak_rss_bytes,
            io_read_bytes: io.read,
            io_write_bytes: io.written,
            ..BlockCost::default()
        },
        group,
        started,
    )
}

/// Starts sampling the GPUs, if there are any, before the first block
/// runs (a block is found in the samples taken while it ran).
pub fn start_gpu_sampling() {
    gpu::sampler();
}

fn with_gpu(cost: BlockCost, group: i32, since: Instant) -> BlockCost {
    match gpu::sampler() {
        Some(sampler) => {
            let gpu = sampler.cost_of(group, since);
            BlockCost {
                gpu_util_pct: Some(gpu.util_pct),
                gpu_mem_bytes: Some(gpu.mem_bytes),
                ..cost
            }
        }
        None => cost,
    }
}

/// The counters of a worker command when a window began.
#[derive(Clone, Copy, Debug)]
struct Reading {
    at: Instant,
    cpu_seconds: f64,
    io: IoCounters,
}

impl Reading {
    fn now(files: &ProcFiles) -> Option<Self> {
        Some(Self {
            at: Instant::now(),
            cpu_seconds: files.cpu_seconds().ok()?,
            io: files.io().ok()?,
        })
    }
}

/// Per-block costs of a long-running process (a worker command, or the
/// worker itself running in-process code), or nothing when the task does
/// not track resources (then it is one pointer wide).
#[derive(Debug, Default)]
pub struct WorkerMeter(Option<Box<Tracking>>);

/// A process measured, and what its answered blocks cost.
#[derive(Debug)]
struct Tracking {
    group: i32,
    files: ProcFiles,
    since: Option<Reading>,
    /// Costs of blocks answered and not yet taken by the runner.
    costs: HashMap<u64, BlockCost>,
}

impl WorkerMeter {
    /// Measures the process `pid` of process group `group`, its window
    /// starting now (nothing, with a warning, if its counters cannot be
    /// read).
    pub fn tracking(pid: u32, group: i32) -> Self {
        let files = ProcFiles::open(pid as i32).inspect_err(|e| {
            tracing::warn!("cannot read the counters of process {pid}, no costs: {e}");
        });
        start_gpu_sampling();
        let tracking = files.ok().map(|files| Tracking {
            group,
            files,
            since: None,
            costs: HashMap::new(),
        });
        let mut meter = Self(tracking.map(Box::new));
        meter.begin();
        meter
    }

    /// Starts a window now: a batch begins, and the time before it (the
    /// process idle, or loading its model) is nobody's.
    pub fn begin(&mut self) {
        if let Some(tracking) = &mut self.0 {
            tracking.files.reset_peak_rss();
            tracking.since = Reading::now(&tracking.files);
        }
    }

    /// Block `block_id` was answered: it is charged the window that ends
    /// now, and the next window begins.
    pub fn answered(&mut self, block_id: u64) {
        if let Some(tracking) = &mut self.0 {
            tracking.answered(block_id);
        }
    }

    /// The cost of `block_id`, once it was answered.
    pub fn take(&mut self, block_id: u64) -> Option<BlockCost> {
        self.0.as_mut()?.costs.remove(&block_id)
    }
}

impl Tracking {
    fn answered(&mut self, block_id: u64) {
        let (Some(since), Some(now)) = (self.since, Reading::now(&self.files)) else {
            return;
        };
        let io = now.io.since(since.io);
        let cost = BlockCost {
            cpu_seconds: (now.cpu_seconds - since.cpu_seconds).max(0.0),
            peak_rss_bytes: self.files.peak_rss().unwrap_or(0),
            io_read_bytes: io.read,
            io_write_bytes: io.written,
            ..BlockCost::default()
        };
        self.files.reset_peak_rss();
        let cost = with_gpu(cost, self.group, since.at);
        self.costs.insert(block_id, cost);
        self.since = Some(now);
    }
}
