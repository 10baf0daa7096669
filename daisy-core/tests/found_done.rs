//! Blocks user code found done already (a check function): released as
//! `Skipped`, they count as completed and skipped, as daisy counts them,
//! and unlock their downstream blocks like any success.

mod lines;

use daisy_core::{BlockOutcome, DependencyGraph, Scheduler, TaskIdx};
use lines::line;
use std::sync::Arc;

fn two_tasks() -> Scheduler {
    let graph = DependencyGraph::new(vec![line("a", 4, vec![]), line("b", 4, vec![TaskIdx(0)])]);
    Scheduler::new(Arc::new(graph.unwrap()))
}

#[test]
fn a_block_found_done_counts_as_completed_and_skipped_and_unlocks_downstream() {
    let (a, b) = (TaskIdx(0), TaskIdx(1));
    let mut s = two_tasks();
    let mut found_done = 0;
    while let Some(block) = s.acquire(a, &mut |_| false) {
        let outcome = match block.id.spatial % 2 {
            0 => BlockOutcome::Skipped,
            _ => BlockOutcome::Success,
        };
        found_done += usize::from(outcome == BlockOutcome::Skipped);
        s.release(block.id, outcome);
    }
    let c = s.counters(a);
    assert_eq!((c.completed, c.skipped), (4, found_done as u64));
    assert!(c.is_done());
    let mut downstream = 0;
    while let Some(block) = s.acquire(b, &mut |_| false) {
        s.release(block.id, BlockOutcome::Success);
        downstream += 1;
    }
    assert_eq!(downstream, 4, "every block of b became ready");
    assert!(s.is_done());
}

#[test]
fn a_block_found_done_after_its_task_was_abandoned_still_counts() {
    let a = TaskIdx(0);
    let mut s = two_tasks();
    let held = s.acquire(a, &mut |_| false).unwrap();
    s.abandon(a);
    s.release(held.id, BlockOutcome::Skipped);
    let c = s.counters(a);
    assert_eq!((c.completed, c.skipped, c.orphaned), (1, 1, 3));
    assert!(c.is_done());
}
