//! Abandoning a task whose workers keep dying: its remaining blocks and
//! those of its downstream tasks are orphaned, unrelated tasks go on, and
//! the counters still add up.

mod lines;

use daisy_core::{BlockOutcome, DependencyGraph, Scheduler, TaskIdx};
use lines::line;
use std::sync::Arc;

#[test]
fn abandoning_orphans_the_rest_of_the_task_and_its_downstream_tasks_only() {
    let graph = DependencyGraph::new(vec![
        line("a", 10, vec![]),
        line("b", 10, vec![TaskIdx(0)]),
        line("peer", 10, vec![]),
    ])
    .unwrap();
    let (a, b, peer) = (TaskIdx(0), TaskIdx(1), TaskIdx(2));
    let mut s = Scheduler::new(Arc::new(graph));
    let first = s.acquire(a, &mut |_| false).unwrap();
    s.release(first.id, BlockOutcome::Success);
    let held = s.acquire(a, &mut |_| false).unwrap();

    assert_eq!(s.abandon(a), vec![a, b]);
    assert!(s.acquire(a, &mut |_| false).is_none());
    let c = s.counters(a);
    assert_eq!((c.completed, c.processing, c.orphaned), (1, 1, 8));
    s.release(held.id, BlockOutcome::Success);
    let c = s.counters(a);
    assert_eq!((c.completed, c.orphaned), (2, 8));
    assert!(c.is_done());

    let b_counters = s.counters(b);
    assert_eq!(b_counters.completed + b_counters.orphaned, 10);
    assert!(b_counters.is_done());
    assert!(
        s.acquire(b, &mut |_| false).is_none(),
        "nothing of b is handed out"
    );

    let mut peer_done = 0;
    while let Some(block) = s.acquire(peer, &mut |_| false) {
        s.release(block.id, BlockOutcome::Success);
        peer_done += 1;
    }
    assert_eq!(peer_done, 10, "the unrelated task finishes");
    assert!(s.is_done());
    assert_eq!(s.abandon(a), vec![], "abandoning twice does nothing");
}
