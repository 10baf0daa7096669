//! How much memory the scheduler holds per block, counted by a global
//! allocator (so this is a test binary of its own, with one test).
//!
//! A 3-D task with context and read/write conflicts has 8 levels, and a
//! level's worth of blocks (an eighth of the task) waits at once. The
//! scheduler held them as whole `Block`s (304 bytes) in its ready queue
//! and their upstream blocks' ids in a hash map, about 50 bytes per block
//! of the task, and every dead block's id in a hash set: issue 15 wants a
//! run of 10⁸ blocks in 1 GB. It now holds cell indices and a bit per
//! completed or dead block.

use daisy_core::{Block, BlockOutcome, DependencyGraph, Roi, Scheduler, TaskIdx, TaskSpec};
use std::sync::Arc;

mod allocations;

/// Blocks per dimension: 110,592 blocks, a fixed cost (the graph, a
/// batch in flight) is then well below a byte per block.
const PER_DIM: i64 = 48;
/// Blocks handed out at once, as a driver serving batches would.
const BATCH: usize = 64;
/// What the scheduler may hold per block of the task, at most.
const MOST_BYTES_PER_BLOCK: f64 = 4.0;

/// One 3-D task of `PER_DIM³` blocks writing 8³ and reading 2 around it,
/// with read/write conflicts: 8 levels.
fn conflicted_task(max_retries: u32) -> TaskSpec {
    let total = PER_DIM * 8 + 4;
    TaskSpec {
        max_retries,
        ..TaskSpec::new(
            "scale",
            Roi::from_slices(&[0; 3], &[total; 3]),
            Roi::from_slices(&[0; 3], &[12; 3]),
            Roi::from_slices(&[2; 3], &[8; 3]),
        )
    }
}

/// Runs every block of the task to the end, each batch released with
/// `outcome`; the most bytes the scheduler allocated at once per block
/// of the task.
fn peak_bytes_per_block(spec: TaskSpec, outcome: BlockOutcome) -> f64 {
    let graph = Arc::new(DependencyGraph::new(vec![spec]).unwrap());
    let blocks = graph.task_graph(TaskIdx(0)).num_blocks();
    assert_eq!(blocks, (PER_DIM as u64).pow(3));
    let ((), allocated) = allocations::allocated_while(|| {
        let mut scheduler = Scheduler::new(graph.clone());
        let mut batch: Vec<Block> = Vec::with_capacity(BATCH);
        loop {
            batch.extend((0..BATCH).map_while(|_| scheduler.acquire(TaskIdx(0), &mut |_| false)));
            if batch.is_empty() {
                break;
            }
            for block in batch.drain(..) {
                scheduler.release(block.id, outcome);
            }
        }
        assert!(scheduler.is_done());
    });
    // Pages of bits and queues are all let go with the scheduler.
    assert_eq!(
        allocated.kept, 0,
        "bytes kept after the scheduler was dropped"
    );
    allocated.peak as f64 / blocks as f64
}

#[test]
fn a_conflicted_task_costs_the_scheduler_a_few_bytes_per_block() {
    let succeeding = peak_bytes_per_block(conflicted_task(2), BlockOutcome::Success);
    assert!(
        succeeding <= MOST_BYTES_PER_BLOCK,
        "every block succeeding: {succeeding:.1} bytes per block at once"
    );
    // Every level-0 block fails for good and orphans the rest: all dead.
    let failing = peak_bytes_per_block(conflicted_task(0), BlockOutcome::Failure);
    assert!(
        failing <= MOST_BYTES_PER_BLOCK,
        "every block failing: {failing:.1} bytes per block at once"
    );
}
