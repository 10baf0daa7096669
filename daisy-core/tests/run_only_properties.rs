//! Property tests of restricted runs (`run --retry-failed`,
//! [`Scheduler::run_only`]) on random pipelines of 1 to 3 tasks in 1 to 3
//! dimensions: a first plain run with random failures (stopped early or
//! not) leaves done blocks and failed ones; a second run restricted to
//! the failed blocks and what waits for them, or to a random set and what
//! waits for it, must account for every block exactly once, run nothing
//! outside the set, and leave no block it could have run. Runs hold
//! several blocks at once and release them in random order, with
//! failures, retries, blocks handed back and abandoned tasks, as a
//! distributed run does.

mod common;
mod xorshift;

use daisy_core::scheduler::Released;
use daisy_core::{Block, BlockId, BlockOutcome, DependencyGraph, Scheduler, TaskIdx, TaskSpec};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use xorshift::Rng;

fn task_spec(dims: usize) -> impl Strategy<Value = TaskSpec> {
    let max_total = [0, 16, 8, 5][dims];
    (
        proptest::collection::vec(common::dimension(3, 2, max_total), dims),
        -2i64..=2,
        common::fit(),
        any::<bool>(),
        0u32..=2,
    )
        .prop_map(|(dims, origin, fit, conflict, max_retries)| TaskSpec {
            max_retries,
            ..common::spec(&dims, origin, fit, conflict)
        })
}

/// 1 to 3 tasks over the same dimensions; each task after the first
/// reads from a non-empty set of earlier ones (chains and diamonds).
fn pipeline() -> impl Strategy<Value = Vec<TaskSpec>> {
    (1usize..=3, 1usize..=3)
        .prop_flat_map(|(dims, tasks)| {
            (
                proptest::collection::vec(task_spec(dims), tasks),
                proptest::collection::vec(any::<u8>(), tasks),
            )
        })
        .prop_map(|(specs, ups)| {
            specs
                .into_iter()
                .zip(ups)
                .enumerate()
                .map(|(i, (spec, up))| {
                    let upstream = match i {
                        0 => vec![],
                        _ => {
                            let chosen: Vec<TaskIdx> = (0..i)
                                .filter(|j| up & (1 << j) != 0)
                                .map(|j| TaskIdx(j as u32))
                                .collect();
                            match chosen.is_empty() {
                                true => vec![TaskIdx(i as u32 - 1)],
                                false => chosen,
                            }
                        }
                    };
                    TaskSpec {
                        id: format!("t{i}"),
                        upstream,
                        ..spec
                    }
                })
                .collect()
        })
}

/// How a run treats the blocks it hands out.
#[derive(Clone, Copy, Debug)]
struct Behaviour {
    /// Out of 8 attempts, how many fail.
    fail_in_8: u64,
    /// Out of 8 releases, how many hand the block back unprocessed.
    return_in_8: u64,
    /// Blocks held at once.
    width: usize,
    /// Stop handing out after this many releases (an interrupted run).
    stop_after: Option<usize>,
    /// Abandon this task after this many releases.
    abandon: Option<(usize, u32)>,
}

fn behaviour(allow_returns: bool) -> impl Strategy<Value = Behaviour> {
    (
        0u64..=4,
        0u64..=2,
        1usize..=4,
        prop::option::weighted(0.2, 0usize..40),
        prop::option::weighted(0.15, (0usize..40, 0u32..3)),
    )
        .prop_map(
            move |(fail_in_8, ret, width, stop_after, abandon)| Behaviour {
                fail_in_8,
                return_in_8: if allow_returns { ret } else { 0 },
                width,
                stop_after,
                abandon,
            },
        )
}

/// What one run did to each block, as seen from outside the scheduler.
#[derive(Default, Debug)]
struct Record {
    handed_out: Vec<BlockId>,
    skipped: HashSet<BlockId>,
    succeeded: HashSet<BlockId>,
    failed: HashSet<BlockId>,
    orphaned: HashSet<BlockId>,
    abandoned: bool,
    finished: bool,
}

fn all_blocks(graph: &DependencyGraph) -> Vec<Block> {
    graph
        .task_indices()
        .flat_map(|t| graph.task_graph(t).all_blocks().collect::<Vec<_>>())
        .collect()
}

/// Checks what must hold at every step: counters never over-count, and
/// blocks in flight are what the counters call processing.
fn check_counters(
    scheduler: &Scheduler,
    in_flight: &[Block],
    restricted: bool,
) -> Result<(), TestCaseError> {
    for task in scheduler.graph().task_indices() {
        let c = scheduler.counters(task);
        let accounted = c.ready + c.processing + c.completed + c.failed + c.orphaned + c.left;
        prop_assert!(accounted <= c.total, "over-counted: {:?}", c);
        prop_assert_eq!(c.pending() + accounted, c.total, "{:?}", c);
        prop_assert_eq!(
            c.unresolved(),
            c.ready + c.processing + c.pending(),
            "{:?}",
            c
        );
        prop_assert!(c.skipped <= c.completed, "{:?}", c);
        if !restricted {
            prop_assert_eq!(c.left, 0, "a plain run leaves nothing: {:?}", c);
        }
        let held = in_flight.iter().filter(|b| b.id.task == task).count() as u64;
        prop_assert_eq!(c.processing, held, "{:?}", c);
    }
    Ok(())
}

/// One run with `done` blocks from earlier runs, restricted to `only` if
/// given, as a distributed driver would drive it.
fn run(
    graph: &Arc<DependencyGraph>,
    done: &HashSet<BlockId>,
    only: Option<&HashSet<BlockId>>,
    how: Behaviour,
    seed: u64,
) -> Result<(Scheduler, Record), TestCaseError> {
    let mut scheduler = Scheduler::new(graph.clone());
    if let Some(only) = only {
        scheduler.run_only(Arc::new(only.clone()));
    }
    let mut rng = Rng(seed | 1);
    let mut record = Record::default();
    let mut in_flight: Vec<Block> = Vec::new();
    let tasks: Vec<TaskIdx> = graph.task_indices().collect();
    let mut releases = 0;
    for _ in 0..100_000 {
        if how.stop_after.is_some_and(|n| releases >= n) {
            return Ok((scheduler, record));
        }
        if let Some((at, task)) = how.abandon {
            let task = TaskIdx(task % tasks.len() as u32);
            if releases == at && !scheduler.is_abandoned(task) {
                scheduler.abandon(task);
                record.abandoned = true;
            }
        }
        let mut skipped = Vec::new();
        let mut is_done = |b: &Block| {
            let done = done.contains(&b.id);
            if done {
                skipped.push(b.id);
            }
            done
        };
        let start = rng.below(tasks.len() as u64) as usize;
        for i in 0..tasks.len() {
            let task = tasks[(start + i) % tasks.len()];
            while in_flight.len() < how.width {
                if rng.below(2) == 0 && !scheduler.has_runnable(task, &mut is_done) {
                    break;
                }
                let Some(block) = scheduler.acquire(task, &mut is_done) else {
                    break;
                };
                in_flight.push(block);
            }
        }
        for id in skipped {
            prop_assert!(record.skipped.insert(id), "{:?} skipped twice", id);
        }
        check_counters(&scheduler, &in_flight, only.is_some())?;
        if in_flight.is_empty() {
            prop_assert!(!scheduler.is_stalled(), "stalled");
            if scheduler.is_done() {
                record.finished = true;
                return Ok((scheduler, record));
            }
            // Blocks skipped in a task served later unlocked blocks of a
            // task served earlier: another round hands them out.
            continue;
        }
        let block = in_flight.swap_remove(rng.below(in_flight.len() as u64) as usize);
        let outcome = if rng.below(8) < how.return_in_8 {
            BlockOutcome::Returned
        } else if rng.below(8) < how.fail_in_8 {
            BlockOutcome::Failure
        } else {
            BlockOutcome::Success
        };
        if outcome != BlockOutcome::Returned {
            // Upstream of a block that was run: done before, or run now.
            for up in graph.upstream(&block) {
                prop_assert!(
                    record.skipped.contains(&up.id) || record.succeeded.contains(&up.id),
                    "{:?} ran before its upstream {:?}",
                    block.id,
                    up.id
                );
            }
            record.handed_out.push(block.id);
        }
        releases += 1;
        match scheduler.release(block.id, outcome) {
            Released::Succeeded { .. } => {
                prop_assert!(record.succeeded.insert(block.id), "{:?} twice", block.id)
            }
            Released::FailedForGood { orphaned } => {
                if outcome == BlockOutcome::Failure {
                    record.failed.insert(block.id);
                }
                for id in orphaned {
                    prop_assert!(record.orphaned.insert(id), "{:?} orphaned twice", id);
                }
            }
            Released::Retrying { .. } | Released::Requeued => {}
            Released::Ignored => prop_assert!(false, "{:?} in flight but ignored", block.id),
        }
    }
    prop_assert!(false, "the run did not end");
    unreachable!()
}

/// The blocks not done downstream of `from`, transitively (through done
/// blocks too, as `status` finds orphans), with `from` itself.
fn with_downstream(
    graph: &DependencyGraph,
    from: &HashSet<BlockId>,
    done: &HashSet<BlockId>,
) -> HashSet<BlockId> {
    let by_id: HashMap<BlockId, Block> = all_blocks(graph).into_iter().map(|b| (b.id, b)).collect();
    let mut seen: HashSet<BlockId> = from.clone();
    let mut to_visit: Vec<Block> = from.iter().map(|id| by_id[id]).collect();
    while let Some(block) = to_visit.pop() {
        for down in graph.downstream(&block) {
            if seen.insert(down.id) {
                to_visit.push(down);
            }
        }
    }
    seen.retain(|id| !done.contains(id));
    seen
}

/// Checks a restricted run that ended: every block is in exactly one of
/// completed (skipped or run), failed, orphaned and left, as the counters
/// say; nothing outside `only` ran; no block was left that could run.
fn check_restricted_run(
    graph: &DependencyGraph,
    scheduler: &Scheduler,
    record: &Record,
    done: &HashSet<BlockId>,
    only: &HashSet<BlockId>,
) -> Result<(), TestCaseError> {
    prop_assert!(record.finished);
    let blocks = all_blocks(graph);
    let run: HashSet<BlockId> = record.handed_out.iter().copied().collect();
    for id in &run {
        prop_assert!(only.contains(id), "{:?} ran but is not chosen", id);
        prop_assert!(!done.contains(id), "{:?} ran but was done", id);
    }
    for id in &record.skipped {
        prop_assert!(done.contains(id));
    }
    let sets = [
        &record.skipped,
        &record.succeeded,
        &record.failed,
        &record.orphaned,
    ];
    for (i, a) in sets.iter().enumerate() {
        for b in &sets[i + 1..] {
            prop_assert!(a.is_disjoint(b), "a block in two states");
        }
    }
    // Abandoning a task orphans blocks no release names (a retry that
    // was waiting, say): then only the counters are checked.
    let left: HashSet<BlockId> = blocks
        .iter()
        .map(|b| b.id)
        .filter(|id| sets.iter().all(|s| !s.contains(id)))
        .collect();
    if !record.abandoned {
        prop_assert!(left.is_disjoint(&run), "a block both run and left");
    }
    for task in graph.task_indices() {
        let c = scheduler.counters(task);
        let count = |set: &HashSet<BlockId>| set.iter().filter(|id| id.task == task).count() as u64;
        prop_assert_eq!((c.ready, c.processing, c.pending()), (0, 0, 0), "{:?}", c);
        prop_assert!(c.is_done(), "{:?}", c);
        prop_assert_eq!(c.completed + c.failed + c.orphaned + c.left, c.total);
        if record.abandoned {
            continue;
        }
        prop_assert_eq!(c.skipped, count(&record.skipped), "{:?}", c);
        prop_assert_eq!(
            c.completed,
            count(&record.skipped) + count(&record.succeeded),
            "{:?}",
            c
        );
        prop_assert_eq!(c.failed, count(&record.failed), "{:?}", c);
        prop_assert_eq!(c.orphaned, count(&record.orphaned), "{:?}", c);
        prop_assert_eq!(c.left, count(&left), "{:?}", c);
    }
    if record.abandoned {
        return Ok(());
    }
    for block in &blocks {
        let upstream = graph.upstream(block);
        if left.contains(&block.id) && (only.contains(&block.id) || done.contains(&block.id)) {
            // It could run (or be skipped): only an upstream block left
            // first may have kept it from doing so.
            prop_assert!(
                upstream.iter().any(|up| left.contains(&up.id)),
                "{:?} left though no upstream block was (done: {}, chosen: {})",
                block.id,
                done.contains(&block.id),
                only.contains(&block.id)
            );
        }
        if record.orphaned.contains(&block.id) {
            prop_assert!(upstream
                .iter()
                .any(|up| record.failed.contains(&up.id) || record.orphaned.contains(&up.id)));
        }
    }
    Ok(())
}

/// With no failures, a restricted run's fate of each block follows from
/// `done` and `only` alone: it completes if it is done or chosen and its
/// whole upstream completes, else it is left.
fn expected_completed(
    graph: &DependencyGraph,
    done: &HashSet<BlockId>,
    only: &HashSet<BlockId>,
) -> HashSet<BlockId> {
    let blocks = all_blocks(graph);
    let mut completed = HashSet::new();
    loop {
        let before = completed.len();
        for block in &blocks {
            if (done.contains(&block.id) || only.contains(&block.id))
                && graph
                    .upstream(block)
                    .iter()
                    .all(|up| completed.contains(&up.id))
            {
                completed.insert(block.id);
            }
        }
        if completed.len() == before {
            return completed;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Hypothesis 2: a plain run never leaves a block, and its counters
    /// add up whatever happens.
    #[test]
    fn a_plain_run_leaves_nothing(
        specs in pipeline(), how in behaviour(true), seed in any::<u64>(),
    ) {
        let graph = Arc::new(DependencyGraph::new(specs).unwrap());
        let (scheduler, record) =
            run(&graph, &HashSet::new(), None, Behaviour { stop_after: None, ..how }, seed)?;
        prop_assert!(record.finished);
        for task in graph.task_indices() {
            let c = scheduler.counters(task);
            prop_assert_eq!(c.left, 0);
            prop_assert_eq!(c.completed + c.failed + c.orphaned, c.total, "{:?}", c);
        }
    }

    /// A retry run after a first run with failures: restricted to the
    /// blocks that failed for good and what waits for them.
    #[test]
    fn retrying_failed_blocks_accounts_for_every_block(
        specs in pipeline(),
        first in behaviour(false),
        second in behaviour(true),
        seeds in any::<(u64, u64)>(),
    ) {
        let graph = Arc::new(DependencyGraph::new(specs).unwrap());
        let first = Behaviour { fail_in_8: first.fail_in_8.max(1), abandon: None, ..first };
        let (_, earlier) = run(&graph, &HashSet::new(), None, first, seeds.0)?;
        let done: HashSet<BlockId> = earlier.succeeded.clone();
        let only = with_downstream(&graph, &earlier.failed, &done);
        let second = Behaviour { stop_after: None, ..second };
        let (scheduler, record) = run(&graph, &done, Some(&only), second, seeds.1)?;
        check_restricted_run(&graph, &scheduler, &record, &done, &only)?;
        if second.fail_in_8 == 0 && !record.abandoned {
            let expected = expected_completed(&graph, &done, &only);
            let completed: HashSet<BlockId> =
                record.skipped.union(&record.succeeded).copied().collect();
            prop_assert_eq!(completed, expected);
        }
    }

    /// A run restricted to a random set of blocks and what waits for
    /// them, after a first run that may have been stopped early.
    #[test]
    fn a_run_restricted_to_random_blocks_accounts_for_every_block(
        specs in pipeline(),
        first in behaviour(false),
        second in behaviour(true),
        chosen in proptest::collection::vec(any::<u16>(), 0..6),
        seeds in any::<(u64, u64)>(),
    ) {
        let graph = Arc::new(DependencyGraph::new(specs).unwrap());
        let first = Behaviour { abandon: None, ..first };
        let (_, earlier) = run(&graph, &HashSet::new(), None, first, seeds.0)?;
        let done: HashSet<BlockId> = earlier.succeeded.clone();
        let not_done: Vec<BlockId> = all_blocks(&graph)
            .into_iter()
            .map(|b| b.id)
            .filter(|id| !done.contains(id))
            .collect();
        let from: HashSet<BlockId> = match not_done.is_empty() {
            true => HashSet::new(),
            false => chosen.iter().map(|i| not_done[*i as usize % not_done.len()]).collect(),
        };
        let only = with_downstream(&graph, &from, &done);
        let second = Behaviour { stop_after: None, ..second };
        let (scheduler, record) = run(&graph, &done, Some(&only), second, seeds.1)?;
        check_restricted_run(&graph, &scheduler, &record, &done, &only)?;
        if second.fail_in_8 == 0 && !record.abandoned {
            let expected = expected_completed(&graph, &done, &only);
            let completed: HashSet<BlockId> =
                record.skipped.union(&record.succeeded).copied().collect();
            prop_assert_eq!(completed, expected);
        }
    }
}
