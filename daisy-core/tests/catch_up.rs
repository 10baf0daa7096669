//! Catching up: a resumed run skips the blocks done before, at most a
//! limited number per call (`limit_skips_per_call`), so that a driver
//! resuming 10⁸ blocks keeps answering its workers between calls (issue
//! 15: a minute of skipping in one call made every worker give the driver
//! up for lost). Bounded or not, the same blocks run in the same order.

use daisy_core::{Block, BlockId, BlockOutcome, DependencyGraph, Roi, Scheduler, TaskIdx};
use daisy_core::{TaskCounters, TaskSpec};
use std::cell::Cell;
use std::collections::HashSet;
use std::sync::Arc;

const T: TaskIdx = TaskIdx(0);

/// A 2-D task of 20×20 blocks with a context of 1: 4 conflict levels.
fn conflicted() -> Scheduler {
    let spec = TaskSpec::new(
        "t",
        Roi::from_slices(&[0, 0], &[42, 42]),
        Roi::from_slices(&[0, 0], &[4, 4]),
        Roi::from_slices(&[1, 1], &[2, 2]),
    );
    Scheduler::new(Arc::new(DependencyGraph::new(vec![spec]).unwrap()))
}

/// Runs every block, one at a time, each succeeding, with blocks in
/// `done` done before. When a call stops to catch up, `has_runnable` goes
/// on. The blocks run in order, the counters at the end, and the most
/// blocks one call looked at.
fn run(mut scheduler: Scheduler, done: &HashSet<BlockId>) -> (Vec<BlockId>, TaskCounters, usize) {
    let (mut order, mut most_looked_at) = (Vec::new(), 0);
    let looked_at = Cell::new(0);
    let mut is_done = |b: &Block| {
        looked_at.set(looked_at.get() + 1);
        done.contains(&b.id)
    };
    loop {
        let acquired = scheduler.acquire(T, &mut is_done);
        most_looked_at = most_looked_at.max(looked_at.replace(0));
        match acquired {
            Some(block) => {
                order.push(block.id);
                scheduler.release(block.id, BlockOutcome::Success);
            }
            None if scheduler.is_catching_up(T) => {
                scheduler.has_runnable(T, &mut is_done);
                most_looked_at = most_looked_at.max(looked_at.replace(0));
            }
            None => break,
        }
    }
    assert!(scheduler.is_done());
    (order, scheduler.counters(T), most_looked_at)
}

#[test]
fn a_resumed_run_skips_a_few_blocks_per_call_and_runs_the_rest_in_the_same_order() {
    let (all, ..) = run(conflicted(), &HashSet::new());
    assert_eq!(all.len(), 400);
    let done: HashSet<BlockId> = all[..300].iter().copied().collect();
    let (unbounded, counters, looked_at) = run(conflicted(), &done);
    assert_eq!(unbounded, all[300..]);
    assert!(looked_at > 100, "one call skipped {looked_at} blocks");
    let mut bounded = conflicted();
    bounded.limit_skips_per_call(3);
    let (order, bounded_counters, looked_at) = run(bounded, &done);
    assert_eq!(order, unbounded);
    assert_eq!(bounded_counters, counters);
    assert_eq!((counters.skipped, counters.completed), (300, 400));
    // At most three skipped, and the one to run.
    assert!(looked_at <= 4, "one call looked at {looked_at} blocks");
}

#[test]
fn a_task_caught_up_with_nothing_left_is_not_catching_up() {
    let (all, ..) = run(conflicted(), &HashSet::new());
    let done: HashSet<BlockId> = all.iter().copied().collect();
    let mut scheduler = conflicted();
    scheduler.limit_skips_per_call(7);
    let mut is_done = |b: &Block| done.contains(&b.id);
    assert_eq!(scheduler.acquire(T, &mut is_done), None);
    assert!(scheduler.is_catching_up(T));
    let mut calls = 1;
    while scheduler.is_catching_up(T) {
        assert!(!scheduler.has_runnable(T, &mut is_done));
        calls += 1;
    }
    assert!(scheduler.is_done());
    assert_eq!(scheduler.counters(T).skipped, 400);
    assert_eq!(calls, 400_usize.div_ceil(7));
}
