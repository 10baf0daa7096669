//! A run restricted to some blocks (`run --retry-failed`): only those
//! run, done blocks are still skipped, every other block is left with
//! everything downstream of it, and the counters add up.

mod lines;

use daisy_core::serial::{self, SerialEnd, Step};
use daisy_core::{Block, BlockId, BlockOutcome, DependencyGraph, Scheduler, TaskIdx};
use lines::line;
use std::collections::HashSet;
use std::sync::Arc;

fn id(task: u32, spatial: u64) -> BlockId {
    BlockId {
        task: TaskIdx(task),
        spatial,
    }
}

#[test]
fn only_the_chosen_blocks_run_and_the_rest_is_left_with_its_downstream() {
    let graph =
        DependencyGraph::new(vec![line("a", 10, vec![]), line("b", 10, vec![TaskIdx(0)])]).unwrap();
    let (a, b) = (TaskIdx(0), TaskIdx(1));
    let mut s = Scheduler::new(Arc::new(graph));
    s.run_only(Arc::new(HashSet::from([id(0, 3), id(1, 3)])));
    let mut ran = Vec::new();
    // Task a is done but for blocks 3 and 7; nothing of b is done.
    let mut runner = |block: &Block| {
        ran.push(block.id);
        Step::Continue(BlockOutcome::Success)
    };
    struct Resumed<'a, F>(&'a mut F);
    impl<F: FnMut(&Block) -> Step> serial::BlockRunner for Resumed<'_, F> {
        fn is_done(&mut self, block: &Block) -> bool {
            block.id.task == TaskIdx(0) && ![3, 7].contains(&block.id.spatial)
        }
        fn process(&mut self, block: &Block) -> Step {
            (self.0)(block)
        }
    }
    assert_eq!(
        serial::run(&mut s, &mut Resumed(&mut runner)),
        SerialEnd::Finished
    );
    ran.sort();
    assert_eq!(ran, [id(0, 3), id(1, 3)]);
    let ca = s.counters(a);
    assert_eq!((ca.completed, ca.skipped, ca.left), (9, 8, 1), "{ca:?}");
    let cb = s.counters(b);
    assert_eq!((cb.completed, cb.left, cb.orphaned), (1, 9, 0), "{cb:?}");
    assert!(ca.is_done() && cb.is_done() && s.is_done());
}

#[test]
fn a_chosen_block_failing_again_orphans_its_downstream_once() {
    let graph =
        DependencyGraph::new(vec![line("a", 10, vec![]), line("b", 10, vec![TaskIdx(0)])]).unwrap();
    let mut s = Scheduler::new(Arc::new(graph));
    let chosen: HashSet<BlockId> = [id(0, 2), id(1, 2)].into();
    s.run_only(Arc::new(chosen));
    let end = serial::run(&mut s, &mut |block: &Block| {
        assert_eq!(block.id, id(0, 2), "only a's block 2 can run");
        Step::Continue(BlockOutcome::Failure)
    });
    assert_eq!(end, SerialEnd::Finished);
    let (ca, cb) = (s.counters(TaskIdx(0)), s.counters(TaskIdx(1)));
    assert_eq!((ca.failed, ca.left), (1, 9));
    assert_eq!((cb.orphaned, cb.left), (1, 9), "b's block 2 counted once");
    assert!(!s.has_runnable(TaskIdx(1), &mut |_| false));
}

#[test]
fn a_restricted_run_says_how_many_blocks_each_task_may_run_at_most() {
    let graph =
        DependencyGraph::new(vec![line("a", 10, vec![]), line("b", 10, vec![TaskIdx(0)])]).unwrap();
    let mut s = Scheduler::new(Arc::new(graph));
    assert_eq!(s.most_to_run(TaskIdx(0)), None, "an unrestricted run");
    s.run_only(Arc::new(HashSet::from([id(0, 3), id(1, 3), id(1, 4)])));
    assert_eq!(s.most_to_run(TaskIdx(0)), Some(1));
    assert_eq!(s.most_to_run(TaskIdx(1)), Some(2));
}
