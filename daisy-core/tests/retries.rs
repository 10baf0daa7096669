//! Retries: a failed block goes to the back of the ready queue, and with
//! `retry_backoff` it waits (pending, neither ready nor processing) until
//! its due time. Times are explicit `Instant`s: nothing sleeps here except
//! the one serial run that checks it waits.

use daisy_core::scheduler::Released;
use daisy_core::serial::{self, SerialEnd, Step};
use daisy_core::{Block, BlockOutcome, DependencyGraph, Roi, Scheduler, TaskIdx, TaskSpec};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: TaskIdx = TaskIdx(0);

/// A 1-D task of `blocks` unit blocks without conflicts.
fn line(blocks: i64, backoff_ms: Option<u64>) -> Scheduler {
    let spec = TaskSpec {
        read_write_conflict: false,
        retry_backoff: backoff_ms.map(Duration::from_millis),
        retry_backoff_max: Duration::from_secs(3),
        ..TaskSpec::new(
            "t",
            Roi::from_slices(&[0], &[blocks]),
            Roi::from_slices(&[0], &[1]),
            Roi::from_slices(&[0], &[1]),
        )
    };
    Scheduler::new(Arc::new(DependencyGraph::new(vec![spec]).unwrap()))
}

fn take(s: &mut Scheduler) -> Block {
    s.acquire(T, &mut |_| false).expect("a ready block")
}

#[test]
fn a_failed_block_is_retried_after_every_other_block_had_its_turn() {
    let mut s = line(100, None);
    let bad = 0;
    let mut order = Vec::new();
    let end = serial::run(&mut s, &mut |b: &Block| {
        let ok = b.id.spatial != bad;
        order.push((b.id.spatial, ok));
        Step::Continue(if ok {
            BlockOutcome::Success
        } else {
            BlockOutcome::Failure
        })
    });
    assert_eq!(end, SerialEnd::Finished);
    let c = s.counters(T);
    assert_eq!((c.completed, c.failed), (99, 1));
    let attempts: Vec<usize> = (0..order.len()).filter(|&i| !order[i].1).collect();
    assert_eq!(attempts.len(), 3, "first try and 2 retries: {attempts:?}");
    let last_success = order.iter().rposition(|(_, ok)| *ok).unwrap();
    assert!(
        attempts[1] > last_success,
        "the first retry comes after all 99 other blocks: {attempts:?}"
    );
}

#[test]
fn a_delayed_retry_is_pending_until_due_and_the_delay_doubles_up_to_the_cap() {
    let mut s = line(1, Some(1000));
    let t0 = Instant::now();
    let block = take(&mut s);
    let released = s.release_at(block.id, BlockOutcome::Failure, t0);
    assert_eq!(released, Released::Retrying { attempt: 1 });
    let c = s.counters(T);
    assert_eq!((c.ready, c.processing, c.pending()), (0, 0, 1));
    assert!(
        !s.is_done() && !s.is_stalled(),
        "waiting, neither done nor stalled"
    );
    assert!(s.acquire(T, &mut |_| false).is_none());
    assert_eq!(s.next_due(), Some(t0 + Duration::from_secs(1)));
    assert_eq!(s.promote_due(t0 + Duration::from_millis(999)), 0);
    assert_eq!(s.promote_due(t0 + Duration::from_secs(1)), 1);
    assert_eq!((s.counters(T).ready, s.next_due()), (1, None));

    let t1 = t0 + Duration::from_secs(5);
    let block = take(&mut s);
    s.release_at(block.id, BlockOutcome::Failure, t1);
    assert_eq!(s.next_due(), Some(t1 + Duration::from_secs(2)), "doubled");
    s.promote_due(t1 + Duration::from_secs(2));
    let t2 = t1 + Duration::from_secs(10);
    let block = take(&mut s);
    // max_retries = 2: this failure is for good.
    let released = s.release_at(block.id, BlockOutcome::Failure, t2);
    assert!(matches!(released, Released::FailedForGood { .. }));
    assert!(s.is_done() && s.next_due().is_none());
}

#[test]
fn due_retries_join_the_back_of_the_queue_in_due_order() {
    let mut s = line(4, Some(100));
    let t0 = Instant::now();
    let a = take(&mut s);
    let b = take(&mut s);
    s.release_at(b.id, BlockOutcome::Failure, t0);
    s.release_at(a.id, BlockOutcome::Failure, t0 + Duration::from_millis(1));
    assert_eq!(s.promote_due(t0 + Duration::from_secs(1)), 2);
    let order: Vec<u64> = (0..4).map(|_| take(&mut s).id.spatial).collect();
    assert_eq!(&order[2..], [b.id.spatial, a.id.spatial], "{order:?}");
}

#[test]
fn release_without_a_clock_retries_at_once() {
    let mut s = line(1, Some(1000));
    let block = take(&mut s);
    s.release(block.id, BlockOutcome::Failure);
    assert_eq!((s.counters(T).ready, s.next_due()), (1, None));
}

#[test]
fn abandoning_a_task_orphans_its_delayed_retries() {
    let mut s = line(3, Some(1000));
    let block = take(&mut s);
    s.release_at(block.id, BlockOutcome::Failure, Instant::now());
    assert_eq!(s.abandon(T), vec![T]);
    let c = s.counters(T);
    assert_eq!((c.orphaned, c.pending()), (3, 0));
    assert!(s.is_done() && s.next_due().is_none());
    assert_eq!(s.promote_due(Instant::now() + Duration::from_secs(9)), 0);
}

#[test]
fn the_serial_runner_waits_for_delayed_retries() {
    let mut s = line(1, Some(20));
    let started = Instant::now();
    let mut tries = 0;
    let end = serial::run(&mut s, &mut |_: &Block| {
        tries += 1;
        Step::Continue(if tries < 3 {
            BlockOutcome::Failure
        } else {
            BlockOutcome::Success
        })
    });
    assert_eq!(end, SerialEnd::Finished);
    assert_eq!((tries, s.counters(T).completed), (3, 1));
    assert!(
        started.elapsed() >= Duration::from_millis(60),
        "20 ms + 40 ms"
    );
}
