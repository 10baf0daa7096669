//! daisy 2.0's behaviour matrix: the configurations and outcomes that
//! project's own tests fix, reproduced against our scheduler.

use daisy_core::scheduler::Released;
use daisy_core::serial::{self, SerialEnd, Step};
use daisy_core::{BlockOutcome, DependencyGraph, Fit, Roi, Scheduler, TaskIdx, TaskSpec};
use std::sync::Arc;

fn roi(offset: &[i64], shape: &[i64]) -> Roi {
    Roi::from_slices(offset, shape)
}

fn task(id: &str, total: Roi, read: Roi, write: Roi, conflict: bool, fit: Fit) -> TaskSpec {
    TaskSpec {
        read_write_conflict: conflict,
        fit,
        ..TaskSpec::new(id, total, read, write)
    }
}

fn scheduler(tasks: Vec<TaskSpec>) -> Scheduler {
    Scheduler::new(Arc::new(DependencyGraph::new(tasks).unwrap()))
}

const T0: TaskIdx = TaskIdx(0);
const T1: TaskIdx = TaskIdx(1);

fn never_done(_: &daisy_core::Block) -> bool {
    false
}

/// Takes every ready block of `task`, returning their spatial ids in order.
fn acquire_all(s: &mut Scheduler, task: TaskIdx) -> Vec<u64> {
    std::iter::from_fn(|| s.acquire(task, &mut never_done))
        .map(|b| b.id.spatial)
        .collect()
}

fn release(s: &mut Scheduler, task: TaskIdx, spatial: u64, outcome: BlockOutcome) -> Released {
    s.release(daisy_core::BlockId { task, spatial }, outcome)
}

fn tiny_1d(conflict: bool) -> Scheduler {
    scheduler(vec![task(
        "t",
        roi(&[0], &[4]),
        roi(&[0], &[3]),
        roi(&[1], &[1]),
        conflict,
        Fit::Valid,
    )])
}

#[test]
fn one_dimension_without_conflict_hands_out_1_then_2() {
    let mut s = tiny_1d(false);
    assert_eq!(acquire_all(&mut s, T0), vec![1, 2]);
}

#[test]
fn one_dimension_with_conflict_hands_out_2_first() {
    let mut s = tiny_1d(true);
    assert_eq!(acquire_all(&mut s, T0), vec![2]);
    release(&mut s, T0, 2, BlockOutcome::Success);
    assert_eq!(acquire_all(&mut s, T0), vec![1]);
    release(&mut s, T0, 1, BlockOutcome::Success);
    assert!(s.is_done());
    assert_eq!(s.counters(T0).completed, 2);
}

#[test]
fn a_failed_block_comes_back_until_its_retries_run_out() {
    let mut s = tiny_1d(false);
    assert_eq!(acquire_all(&mut s, T0), vec![1, 2]);
    release(&mut s, T0, 2, BlockOutcome::Success);
    for attempt in 1..=2 {
        let released = release(&mut s, T0, 1, BlockOutcome::Failure);
        assert_eq!(released, Released::Retrying { attempt });
        assert_eq!(acquire_all(&mut s, T0), vec![1], "retry {attempt}");
    }
    let last = release(&mut s, T0, 1, BlockOutcome::Failure);
    assert_eq!(last, Released::FailedForGood { orphaned: vec![] });
    let c = s.counters(T0);
    assert_eq!((c.completed, c.failed, c.orphaned), (1, 1, 0));
    assert!(s.is_done());
}

#[test]
fn a_root_failing_for_good_orphans_its_downstream_block() {
    let mut s = tiny_1d(true);
    for _ in 0..3 {
        assert_eq!(acquire_all(&mut s, T0), vec![2]);
        release(&mut s, T0, 2, BlockOutcome::Failure);
    }
    let c = s.counters(T0);
    assert_eq!((c.completed, c.failed, c.orphaned, c.ready), (0, 1, 1, 0));
    assert!(s.is_done());
}

fn first_2d() -> TaskSpec {
    task(
        "first",
        roi(&[0, 0], &[6, 6]),
        roi(&[0, 0], &[3, 3]),
        roi(&[1, 1], &[1, 1]),
        true,
        Fit::Valid,
    )
}

const FIRST_LEVELS: [[u64; 4]; 4] = [
    [12, 23, 25, 40],
    [8, 17, 19, 32],
    [7, 16, 18, 31],
    [4, 11, 13, 24],
];

#[test]
fn two_dimensions_come_out_level_by_level() {
    let mut s = scheduler(vec![first_2d()]);
    for level in FIRST_LEVELS {
        assert_eq!(acquire_all(&mut s, T0), level.to_vec());
        assert!(
            acquire_all(&mut s, T0).is_empty(),
            "nothing more while a level runs"
        );
        for id in level {
            release(&mut s, T0, id, BlockOutcome::Success);
        }
    }
    assert!(acquire_all(&mut s, T0).is_empty());
    assert!(s.is_done());
    assert_eq!(s.counters(T0).completed, 16);
}

fn second_2d() -> TaskSpec {
    TaskSpec {
        upstream: vec![T0],
        ..task(
            "second",
            roi(&[1, 1], &[4, 4]),
            roi(&[0, 0], &[3, 3]),
            roi(&[1, 1], &[1, 1]),
            true,
            Fit::Valid,
        )
    }
}

fn spatial_ids(blocks: Vec<daisy_core::Block>, task: TaskIdx) -> Vec<u64> {
    blocks
        .into_iter()
        .filter(|b| b.id.task == task)
        .map(|b| b.id.spatial)
        .collect()
}

#[test]
fn chained_tasks_have_the_upstream_and_downstream_sets_of_daisy() {
    let graph = DependencyGraph::new(vec![first_2d(), second_2d()]).unwrap();
    let second_block = graph
        .task_graph(T1)
        .all_blocks()
        .find(|b| b.read_roi == roi(&[2, 2], &[3, 3]))
        .unwrap();
    let upstream = spatial_ids(graph.upstream(&second_block), T0);
    assert_eq!(upstream, vec![12, 17, 18, 23, 24, 25, 31, 32, 40]);
    let first_block = graph
        .task_graph(T0)
        .all_blocks()
        .find(|b| b.read_roi == roi(&[2, 2], &[3, 3]))
        .unwrap();
    assert_eq!(
        spatial_ids(graph.downstream(&first_block), T1),
        vec![4, 7, 8, 12]
    );
}

#[test]
fn chained_blocks_become_ready_one_by_one_as_the_last_upstream_level_completes() {
    let mut s = scheduler(vec![first_2d(), second_2d()]);
    for level in &FIRST_LEVELS[..3] {
        assert_eq!(acquire_all(&mut s, T0), level.to_vec());
        for &id in level {
            release(&mut s, T0, id, BlockOutcome::Success);
        }
        assert!(acquire_all(&mut s, T1).is_empty());
    }
    assert_eq!(acquire_all(&mut s, T0), vec![4, 11, 13, 24]);
    for (first, second) in [(24, 12), (13, 8), (11, 7), (4, 4)] {
        assert!(acquire_all(&mut s, T1).is_empty());
        release(&mut s, T0, first, BlockOutcome::Success);
        assert_eq!(
            acquire_all(&mut s, T1),
            vec![second],
            "after first's {first}"
        );
        release(&mut s, T1, second, BlockOutcome::Success);
    }
    assert!(s.is_done());
    assert_eq!(s.counters(T1).completed, 4);
}

fn count_1d(write: Roi, fit: Fit) -> (u64, usize, u64) {
    let spec = task("t", roi(&[0], &[12]), roi(&[0], &[5]), write, true, fit);
    let graph = DependencyGraph::new(vec![spec.clone()]).unwrap();
    let counted = graph.task_graph(T0).num_blocks();
    let enumerated = graph.task_graph(T0).all_blocks().count();
    let mut s = scheduler(vec![spec]);
    let end = serial::run(&mut s, &mut |_: &daisy_core::Block| {
        Step::Continue(BlockOutcome::Success)
    });
    assert_eq!(end, SerialEnd::Finished);
    (counted, enumerated, s.counters(T0).completed)
}

#[test]
fn block_counts_under_every_fit_match_daisy() {
    for fit in [Fit::Valid, Fit::Overhang, Fit::Shrink] {
        assert_eq!(count_1d(roi(&[2], &[1]), fit), (8, 8, 8), "{fit}");
    }
    assert_eq!(count_1d(roi(&[1], &[3]), Fit::Valid), (3, 3, 3));
    assert_eq!(count_1d(roi(&[1], &[3]), Fit::Overhang), (4, 4, 4));
    assert_eq!(count_1d(roi(&[1], &[3]), Fit::Shrink), (4, 4, 4));
}

fn deep_context() -> Scheduler {
    scheduler(vec![task(
        "t",
        roi(&[0, 0], &[10, 10]),
        roi(&[0, 0], &[9, 9]),
        roi(&[4, 4], &[1, 1]),
        true,
        Fit::Overhang,
    )])
}

#[test]
fn a_context_wider_than_the_volume_serialises_every_block() {
    let mut s = deep_context();
    let total = s.counters(T0).total;
    for _ in 0..total {
        let ready = acquire_all(&mut s, T0);
        assert_eq!(ready.len(), 1);
        release(&mut s, T0, ready[0], BlockOutcome::Success);
    }
    assert!(s.is_done());
    assert_eq!(s.counters(T0).completed, total);
}

#[test]
fn a_context_wider_than_the_volume_orphans_the_rest_when_one_fails() {
    let mut s = deep_context();
    let first = acquire_all(&mut s, T0)[0];
    release(&mut s, T0, first, BlockOutcome::Success);
    for _ in 0..3 {
        let ready = acquire_all(&mut s, T0);
        release(&mut s, T0, ready[0], BlockOutcome::Failure);
    }
    let c = s.counters(T0);
    assert_eq!(c.completed + c.failed + c.orphaned, c.total);
    assert_eq!((c.completed, c.failed), (1, 1));
    assert!(s.is_done());
}

#[test]
fn two_chained_one_dimensional_tasks_complete_12_and_12_blocks() {
    let make = |id: &str| {
        task(
            id,
            roi(&[0], &[100]),
            roi(&[0], &[10]),
            roi(&[1], &[8]),
            true,
            Fit::Valid,
        )
    };
    let second = TaskSpec {
        upstream: vec![T0],
        ..make("second")
    };
    let mut s = scheduler(vec![make("first"), second]);
    let end = serial::run(&mut s, &mut |_: &daisy_core::Block| {
        Step::Continue(BlockOutcome::Success)
    });
    assert_eq!(end, SerialEnd::Finished);
    assert_eq!(s.counters(T0).completed, 12);
    assert_eq!(s.counters(T1).completed, 12);
}

#[test]
fn a_task_where_every_block_fails_keeps_its_counters_balanced() {
    let mut s = scheduler(vec![task(
        "t",
        roi(&[0, 0], &[25, 25]),
        roi(&[0, 0], &[7, 7]),
        roi(&[3, 3], &[1, 1]),
        true,
        Fit::Valid,
    )]);
    let mut attempts = 0;
    let end = serial::run(&mut s, &mut |_: &daisy_core::Block| {
        attempts += 1;
        Step::Continue(BlockOutcome::Failure)
    });
    assert_eq!(end, SerialEnd::Finished);
    let c = s.counters(T0);
    assert_eq!(c.total, 19 * 19);
    assert_eq!(c.completed, 0);
    assert_eq!(c.failed + c.orphaned, c.total);
    assert_eq!((c.ready, c.processing, c.pending()), (0, 0, 0));
    assert_eq!(
        attempts as u64,
        c.failed * 3,
        "each failed block ran 1 + 2 retries"
    );
}

#[test]
fn late_and_duplicate_releases_change_nothing() {
    let mut s = tiny_1d(false);
    assert_eq!(acquire_all(&mut s, T0), vec![1, 2]);
    assert!(matches!(
        release(&mut s, T0, 1, BlockOutcome::Success),
        Released::Succeeded { .. }
    ));
    let before = s.counters(T0);
    assert_eq!(
        release(&mut s, T0, 1, BlockOutcome::Success),
        Released::Ignored
    );
    assert_eq!(
        release(&mut s, T0, 1, BlockOutcome::Failure),
        Released::Ignored
    );
    assert_eq!(
        release(&mut s, T0, 99, BlockOutcome::Success),
        Released::Ignored
    );
    assert_eq!(
        release(&mut s, T1, 2, BlockOutcome::Success),
        Released::Ignored
    );
    assert_eq!(s.counters(T0), before);
}

#[test]
fn a_returned_block_is_ready_again_without_using_a_retry() {
    let mut s = tiny_1d(false);
    assert_eq!(acquire_all(&mut s, T0), vec![1, 2]);
    for _ in 0..5 {
        assert_eq!(
            release(&mut s, T0, 1, BlockOutcome::Returned),
            Released::Requeued
        );
        assert_eq!(acquire_all(&mut s, T0), vec![1]);
    }
    assert_eq!(
        release(&mut s, T0, 1, BlockOutcome::Failure),
        Released::Retrying { attempt: 1 }
    );
}

#[test]
fn skipped_blocks_count_as_completed_and_unlock_their_downstream() {
    let mut s = tiny_1d(true);
    let mut done_before = |b: &daisy_core::Block| b.id.spatial == 2;
    let block = s.acquire(T0, &mut done_before).unwrap();
    assert_eq!(block.id.spatial, 1);
    let c = s.counters(T0);
    assert_eq!((c.completed, c.skipped, c.processing), (1, 1, 1));
}

#[test]
fn has_runnable_skips_done_blocks_without_changing_the_order() {
    let mut s = scheduler(vec![first_2d()]);
    let mut done_in_level_0 = |b: &daisy_core::Block| b.id.spatial == 12 || b.id.spatial == 23;
    assert!(s.has_runnable(T0, &mut done_in_level_0));
    assert!(
        s.has_runnable(T0, &mut done_in_level_0),
        "asking twice changes nothing"
    );
    assert_eq!(s.counters(T0).skipped, 2);
    assert_eq!(
        s.counters(T0).ready,
        4,
        "25 and 40, and 8 and 17 that waited only for 12 and 23"
    );
    assert_eq!(acquire_all(&mut s, T0)[..2], [25, 40]);
    let mut everything_done = |_: &daisy_core::Block| true;
    let mut s = scheduler(vec![first_2d()]);
    assert!(!s.has_runnable(T0, &mut everything_done));
    assert!(
        s.is_done(),
        "a run whose blocks are all done ends without workers"
    );
}
