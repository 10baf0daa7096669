//! Property tests of the dependency graph and scheduler on random tasks in
//! 1 to 4 dimensions under every fit, with and without conflicts, alone
//! and chained.

mod common;

use daisy_core::serial::{self, SerialEnd, Step};
use daisy_core::{
    Block, BlockId, BlockOutcome, DependencyGraph, Scheduler, TaskGraph, TaskIdx, TaskSpec,
};
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::Arc;

fn task_spec() -> impl Strategy<Value = TaskSpec> {
    (1usize..=4)
        .prop_flat_map(|dims| {
            let max_total = [0, 24, 14, 8, 5][dims];
            (
                proptest::collection::vec(common::dimension(4, 3, max_total), dims),
                -3i64..=3,
                common::fit(),
                any::<bool>(),
            )
        })
        .prop_map(|(dims, origin, fit, conflict)| common::spec(&dims, origin, fit, conflict))
}

/// A second task over the same dimensions, downstream of the first.
fn chained() -> impl Strategy<Value = (TaskSpec, TaskSpec)> {
    task_spec().prop_flat_map(|first| {
        let dims = first.total_roi.dims();
        (Just(first), task_spec())
            .prop_filter("same dimensions", move |(_, s)| s.total_roi.dims() == dims)
            .prop_map(|(first, second)| {
                let second = TaskSpec {
                    id: "second".into(),
                    upstream: vec![TaskIdx(0)],
                    ..second
                };
                (first, second)
            })
    })
}

fn all_blocks(graph: &DependencyGraph) -> Vec<Block> {
    graph
        .task_indices()
        .flat_map(|t| graph.task_graph(t).all_blocks().collect::<Vec<_>>())
        .collect()
}

fn ids(blocks: &[Block]) -> HashSet<BlockId> {
    blocks.iter().map(|b| b.id).collect()
}

fn check_enumeration(graph: &DependencyGraph) -> Result<(), TestCaseError> {
    for task in graph.task_indices() {
        let tg = graph.task_graph(task);
        let blocks: Vec<Block> = tg.all_blocks().collect();
        prop_assert_eq!(blocks.len() as u64, tg.num_blocks(), "counted = enumerated");
        prop_assert_eq!(ids(&blocks).len(), blocks.len(), "each block once");
        for level in 0..tg.num_levels() {
            let walked: Vec<Block> = tg.level_blocks(level).collect();
            prop_assert_eq!(walked.len() as u64, tg.num_level_blocks(level));
            let mut visited = Vec::new();
            tg.for_each_level_block(level, |block| visited.push(*block));
            prop_assert_eq!(visited, walked, "visited in place = iterated");
        }
        for block in &blocks {
            check_block_within_task(tg, block)?;
        }
    }
    Ok(())
}

/// A block built from its grid cell (the enumeration) equals the one
/// built from its grid position, and its neighbours within the task come
/// in id order, so that `DependencyGraph::upstream`'s sort moves nothing.
fn check_block_within_task(tg: &TaskGraph, block: &Block) -> Result<(), TestCaseError> {
    let grid = tg.grid();
    prop_assert_eq!(grid.block_at(grid.position_of(block)), Some(*block));
    let (mut up, mut down) = (Vec::new(), Vec::new());
    tg.upstream(block, &mut up);
    tg.downstream(block, &mut down);
    for neighbours in [up, down] {
        let order: Vec<u64> = neighbours.iter().map(|b| b.id.spatial).collect();
        prop_assert!(order.is_sorted(), "{:?}: neighbours {:?}", block.id, order);
    }
    Ok(())
}

fn check_symmetry(graph: &DependencyGraph) -> Result<(), TestCaseError> {
    let blocks = all_blocks(graph);
    let existing = ids(&blocks);
    for block in &blocks {
        for up in graph.upstream(block) {
            prop_assert!(existing.contains(&up.id), "upstream {:?} exists", up.id);
            prop_assert!(
                ids(&graph.downstream(&up)).contains(&block.id),
                "{:?} upstream of {:?} but not the reverse",
                up.id,
                block.id
            );
        }
        for down in graph.downstream(block) {
            prop_assert!(existing.contains(&down.id));
            prop_assert!(ids(&graph.upstream(&down)).contains(&block.id));
        }
    }
    Ok(())
}

/// Runs everything successfully; returns (end, blocks run in order).
fn run_all(graph: DependencyGraph) -> (SerialEnd, Vec<BlockId>, Scheduler) {
    let mut scheduler = Scheduler::new(Arc::new(graph));
    let mut ran = Vec::new();
    let end = serial::run(&mut scheduler, &mut |b: &Block| {
        ran.push(b.id);
        Step::Continue(BlockOutcome::Success)
    });
    (end, ran, scheduler)
}

fn check_every_block_runs_once(graph: DependencyGraph) -> Result<(), TestCaseError> {
    let expected = ids(&all_blocks(&graph));
    let (end, ran, scheduler) = run_all(graph);
    let ran_set: HashSet<BlockId> = ran.iter().copied().collect();
    prop_assert_eq!(ran_set.len(), ran.len(), "no block ran twice");
    prop_assert_eq!(ran_set, expected);
    prop_assert_eq!(end, SerialEnd::Finished);
    prop_assert!(scheduler.is_done());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn one_task_enumerates_each_block_once(spec in task_spec()) {
        check_enumeration(&DependencyGraph::new(vec![spec]).unwrap())?;
    }

    #[test]
    fn one_task_upstream_and_downstream_are_symmetric(spec in task_spec()) {
        check_symmetry(&DependencyGraph::new(vec![spec]).unwrap())?;
    }

    #[test]
    fn one_task_runs_every_block_exactly_once(spec in task_spec()) {
        check_every_block_runs_once(DependencyGraph::new(vec![spec]).unwrap())?;
    }

    #[test]
    fn chained_tasks_are_symmetric_and_run_every_block_once((first, second) in chained()) {
        let graph = DependencyGraph::new(vec![first, second]).unwrap();
        check_enumeration(&graph)?;
        check_symmetry(&graph)?;
        check_every_block_runs_once(graph)?;
    }

    #[test]
    fn random_failures_keep_counters_balanced(spec in task_spec(), seed in any::<u64>()) {
        let mut scheduler = Scheduler::new(Arc::new(DependencyGraph::new(vec![spec]).unwrap()));
        let mut state = seed | 1;
        let end = serial::run(&mut scheduler, &mut |_: &Block| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let fail = state % 3 == 0;
            Step::Continue(if fail { BlockOutcome::Failure } else { BlockOutcome::Success })
        });
        prop_assert_eq!(end, SerialEnd::Finished);
        let c = scheduler.counters(TaskIdx(0));
        prop_assert_eq!(c.completed + c.failed + c.orphaned, c.total);
        prop_assert_eq!((c.ready, c.processing, c.pending()), (0, 0, 0));
    }
}
