//! Property tests of write locks ([`TaskSpec::writes`]) on random
//! pipelines of 1 or 2 tasks in 1 to 3 dimensions, writing into random
//! chunked arrays (offset, chunked, sharded or not, one array shared by
//! both tasks or one each), with conflict levels on or off, blocks done
//! in an earlier run, failures with retries and blocks handed back, and
//! up to 6 workers each holding up to 3 blocks, taking and releasing in
//! random order, some blocks taken without a holder:
//! - no two blocks in flight of different workers write into one lock
//!   cell (shard, or chunk), checked from their ROIs, not through the
//!   scheduler's own keys (a worker runs its own blocks one at a time);
//! - the run never stalls, and every block ends exactly once: run or
//!   skipped, or failed for good and its downstream orphaned.

mod common;
mod xorshift;

use daisy_core::scheduler::Released;
use daisy_core::{
    Block, BlockId, BlockOutcome, Coordinate, DependencyGraph, Holder, Roi, Scheduler, TaskIdx,
    TaskSpec, WriteGrid,
};
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::Arc;
use xorshift::Rng;

/// An array over roughly the task's region: its offset a little off the
/// block grid, chunks of 1 to 4, shards of 1 to 3 chunks or none.
fn array(name: &'static str, dims: usize) -> impl Strategy<Value = WriteGrid> {
    (
        proptest::collection::vec((-3i64..=3, 1i64..=4, 1i64..=3), dims),
        any::<bool>(),
        0i64..=40,
    )
        .prop_map(move |(axes, sharded, extent)| {
            let pick = |f: fn(&(i64, i64, i64)) -> i64| {
                Coordinate::new(&axes.iter().map(f).collect::<Vec<_>>())
            };
            let chunk = pick(|a| a.1);
            WriteGrid {
                array: name.into(),
                region: Roi::new(pick(|a| a.0), Coordinate::splat(dims, extent + 1)),
                chunk,
                shard: sharded.then(|| chunk * pick(|a| a.2)),
            }
        })
}

/// One or two tasks; the second reads the first or not, and writes the
/// first one's array or its own.
fn pipeline() -> impl Strategy<Value = Vec<TaskSpec>> {
    (1usize..=3, 1usize..=2).prop_flat_map(|(dims, tasks)| {
        let max_total = [0, 14, 7, 4][dims];
        let task = (
            proptest::collection::vec(common::dimension(4, 2, max_total), dims),
            -2i64..=2,
            common::fit(),
            any::<bool>(),
        );
        (
            proptest::collection::vec(task, tasks),
            array("shared.zarr", dims),
            array("own.zarr", dims),
            any::<(bool, bool)>(),
        )
            .prop_map(|(specs, shared, own, (downstream, same_array))| {
                let specs = specs.into_iter().enumerate();
                specs
                    .map(|(i, (axes, origin, fit, conflict))| {
                        let second = i == 1;
                        let writes = match second && !same_array {
                            true => own.clone(),
                            false => shared.clone(),
                        };
                        TaskSpec {
                            id: format!("t{i}"),
                            upstream: (second && downstream)
                                .then_some(TaskIdx(0))
                                .into_iter()
                                .collect(),
                            writes: vec![writes],
                            max_retries: 1,
                            ..common::spec(&axes, origin, fit, conflict)
                        }
                    })
                    .collect()
            })
    })
}

/// The lock cells of `array` that `roi` writes into, per dimension, from
/// the ROI's bounds.
fn cells_written(array: &WriteGrid, roi: &Roi) -> Option<Vec<(i64, i64)>> {
    let size = array.shard.unwrap_or(array.chunk);
    let (begin, end) = (array.region.begin(), array.region.end());
    (0..roi.dims())
        .map(|d| {
            let b = roi.begin()[d].max(begin[d]) - begin[d];
            let e = roi.end()[d].min(end[d]) - begin[d];
            (b < e).then(|| (b.div_euclid(size[d]), (e - 1).div_euclid(size[d])))
        })
        .collect()
}

/// True if `a` and `b` (blocks of `specs`) write into one lock cell.
fn share_a_lock(specs: &[TaskSpec], a: &Block, b: &Block) -> bool {
    let (wa, wb) = (
        &specs[a.id.task.index()].writes[0],
        &specs[b.id.task.index()].writes[0],
    );
    if wa.array != wb.array {
        return false;
    }
    let (Some(ca), Some(cb)) = (
        cells_written(wa, &a.write_roi),
        cells_written(wa, &b.write_roi),
    ) else {
        return false;
    };
    ca.iter().zip(&cb).all(|(x, y)| x.0 <= y.1 && y.0 <= x.1)
}

/// A worker: its task and the blocks it holds, each with whether it
/// was taken as the worker's (a holder) or alone.
struct Worker {
    task: TaskIdx,
    held: Vec<(Block, bool)>,
}

fn run(
    specs: Vec<TaskSpec>,
    workers: usize,
    fail_in_8: u64,
    seed: u64,
) -> Result<(), TestCaseError> {
    let graph = Arc::new(DependencyGraph::new(specs.clone()).expect("valid pipeline"));
    let mut scheduler = Scheduler::new(graph.clone());
    let mut rng = Rng(seed | 1);
    let done_before: HashSet<BlockId> = (graph.task_indices())
        .flat_map(|t| graph.task_graph(t).all_blocks().collect::<Vec<_>>())
        .filter(|b| !graph.has_downstream(b.id.task) && b.id.spatial % 5 == seed % 5)
        .map(|b| b.id)
        .collect();
    let mut workers: Vec<Worker> = (0..workers.max(specs.len()))
        .map(|w| Worker {
            task: TaskIdx((w % specs.len()) as u32),
            held: Vec::new(),
        })
        .collect();
    let mut ended: HashSet<BlockId> = HashSet::new();
    for _ in 0..200_000 {
        if scheduler.is_done() {
            break;
        }
        prop_assert!(!scheduler.is_stalled(), "stalled");
        let w = rng.below(workers.len() as u64) as usize;
        let take = workers[w].held.len() < 3 && rng.below(3) > 0;
        if take {
            let task = workers[w].task;
            let mut skipped = Vec::new();
            let mut is_done = |b: &Block| {
                let done = done_before.contains(&b.id);
                if done {
                    skipped.push(b.id);
                }
                done
            };
            let as_holder = rng.below(4) > 0;
            let block = match as_holder {
                true => {
                    let mut batch = Vec::new();
                    let holder = Holder(w as u64);
                    scheduler.acquire_onto(task, holder, &mut is_done, &mut batch);
                    batch.pop()
                }
                false => scheduler.acquire(task, &mut is_done),
            };
            if let Some(block) = block {
                for (i, worker) in workers.iter().enumerate() {
                    for &(other, other_as_holder) in &worker.held {
                        let same_holder = i == w && as_holder && other_as_holder;
                        prop_assert!(
                            same_holder || !share_a_lock(&specs, &block, &other),
                            "{:?} and {:?} write into one lock cell at once",
                            block.write_roi,
                            other.write_roi
                        );
                    }
                }
                workers[w].held.push((block, as_holder));
            }
            for id in skipped {
                prop_assert!(ended.insert(id), "{id} ended twice");
            }
        } else if !workers[w].held.is_empty() {
            let at = rng.below(workers[w].held.len() as u64) as usize;
            let (block, _) = workers[w].held.swap_remove(at);
            let outcome = match rng.below(8) {
                r if r < fail_in_8 => BlockOutcome::Failure,
                7 => BlockOutcome::Returned,
                _ => BlockOutcome::Success,
            };
            match scheduler.release(block.id, outcome) {
                Released::Succeeded { .. } => prop_assert!(ended.insert(block.id), "ran twice"),
                Released::FailedForGood { orphaned } => {
                    prop_assert!(ended.insert(block.id));
                    for id in orphaned {
                        prop_assert!(ended.insert(id), "{id} orphaned twice");
                    }
                }
                Released::Retrying { .. } | Released::Requeued => {}
                Released::Ignored => prop_assert!(false, "a held block was ignored"),
            }
        }
    }
    prop_assert!(scheduler.is_done(), "the run did not end");
    let total: u64 = graph
        .task_indices()
        .map(|t| scheduler.counters(t).total)
        .sum();
    prop_assert_eq!(ended.len() as u64, total, "every block ends once");
    if fail_in_8 == 0 {
        for task in graph.task_indices() {
            let c = scheduler.counters(task);
            prop_assert_eq!(c.completed, c.total, "every block runs: {:?}", c);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn no_two_blocks_in_flight_write_one_shard(
        specs in pipeline(),
        workers in 1usize..=6,
        fail_in_8 in prop_oneof![Just(0u64), 0u64..=3],
        seed in any::<u64>(),
    ) {
        run(specs, workers, fail_in_8, seed)?;
    }
}
