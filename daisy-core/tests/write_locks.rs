//! Write locks on a sharded array, on the case that loses writes without
//! them: a 128×128 array in shards of 64×64 (4 shards), blocks of 8×8
//! (one chunk each, 64 per shard), no read/write conflict levels.

use daisy_core::{
    Block, BlockOutcome, Coordinate, DependencyGraph, Holder, Roi, Scheduler, TaskIdx, TaskSpec,
    WriteGrid,
};
use std::collections::HashSet;
use std::sync::Arc;

fn sharded() -> WriteGrid {
    WriteGrid {
        array: "out.zarr/labels".into(),
        region: Roi::from_slices(&[0, 0], &[128, 128]),
        chunk: Coordinate::from([8, 8]),
        shard: Some(Coordinate::from([64, 64])),
    }
}

fn writer(id: &str, upstream: Vec<TaskIdx>) -> TaskSpec {
    let block = Roi::from_slices(&[0, 0], &[8, 8]);
    TaskSpec {
        read_write_conflict: false,
        writes: vec![sharded()],
        upstream,
        ..TaskSpec::new(id, Roi::from_slices(&[0, 0], &[128, 128]), block, block)
    }
}

fn scheduler(tasks: Vec<TaskSpec>) -> Scheduler {
    Scheduler::new(Arc::new(DependencyGraph::new(tasks).expect("valid")))
}

fn shard_of(block: &Block) -> (i64, i64) {
    let offset = block.write_roi.offset();
    (offset[0] / 64, offset[1] / 64)
}

fn acquire(s: &mut Scheduler, task: u32) -> Option<Block> {
    s.acquire(TaskIdx(task), &mut |_| false)
}

#[test]
fn workers_get_one_shard_each_and_the_next_block_of_the_shard_they_finished() {
    let mut s = scheduler(vec![writer("write", vec![])]);
    assert_eq!(s.most_at_once(TaskIdx(0)), Some(4));
    let first: Vec<Block> = (0..4)
        .map(|_| acquire(&mut s, 0).expect("a shard free"))
        .collect();
    let shards: HashSet<_> = first.iter().map(shard_of).collect();
    assert_eq!(shards.len(), 4, "one block per shard: {shards:?}");
    assert!(acquire(&mut s, 0).is_none(), "every shard is held");
    let c = s.counters(TaskIdx(0));
    assert_eq!(
        (c.ready, c.processing),
        (252, 4),
        "parked blocks stay ready"
    );
    s.release(first[2].id, BlockOutcome::Success);
    let next = acquire(&mut s, 0).expect("its shard is free again");
    assert_eq!(shard_of(&next), shard_of(&first[2]));
}

#[test]
fn every_block_runs_with_never_two_of_a_shard_at_once() {
    let mut s = scheduler(vec![writer("write", vec![])]);
    let mut held: Vec<Block> = Vec::new();
    let mut ran = 0;
    while !s.is_done() {
        while let Some(block) = acquire(&mut s, 0) {
            assert!(held.iter().all(|h| shard_of(h) != shard_of(&block)));
            held.push(block);
        }
        // The oldest block ends first, as when workers take turns.
        let block = held.remove(0);
        s.release(block.id, BlockOutcome::Success);
        ran += 1;
    }
    assert_eq!(ran, 256);
}

#[test]
fn a_worker_batch_takes_blocks_of_the_shard_it_holds() {
    // A worker runs its blocks one at a time: a batch may hold several
    // blocks of one shard, and other workers take other shards.
    let mut s = scheduler(vec![writer("write", vec![])]);
    let mut batch = Vec::new();
    for _ in 0..8 {
        assert!(s.acquire_onto(TaskIdx(0), Holder(1), &mut |_| false, &mut batch));
    }
    let shards: HashSet<_> = batch.iter().map(shard_of).collect();
    assert_eq!(shards.len(), 1, "one shard's row of 8 blocks: {shards:?}");
    let mut other = Vec::new();
    assert!(s.acquire_onto(TaskIdx(0), Holder(2), &mut |_| false, &mut other));
    assert_ne!(shard_of(&other[0]), shard_of(&batch[0]));
    // The shard is free once the last block of the batch is back.
    for block in &batch[..7] {
        s.release(block.id, BlockOutcome::Success);
    }
    let before = s.counters(TaskIdx(0)).processing;
    while s.acquire_onto(TaskIdx(0), Holder(3), &mut |_| false, &mut other) {}
    let taken = s.counters(TaskIdx(0)).processing - before;
    assert_eq!(taken, 128, "every block of the two shards nobody holds");
    s.release(batch[7].id, BlockOutcome::Success);
    assert!(s.acquire_onto(TaskIdx(0), Holder(3), &mut |_| false, &mut other));
    assert_eq!(shard_of(other.last().unwrap()), shard_of(&batch[0]));
}

#[test]
fn two_tasks_writing_one_array_share_its_shards() {
    let mut s = scheduler(vec![writer("a", vec![]), writer("b", vec![])]);
    let held: Vec<Block> = (0..4).map(|_| acquire(&mut s, 0).expect("free")).collect();
    assert!(acquire(&mut s, 1).is_none(), "task a holds every shard");
    s.release(held[0].id, BlockOutcome::Success);
    // Task a's parked blocks and task b's all wait for that shard; the
    // first task to ask gets it, the other waits again.
    let b = acquire(&mut s, 1).expect("a shard was given back");
    assert_eq!(shard_of(&b), shard_of(&held[0]));
    assert!(acquire(&mut s, 0).is_none());
}

#[test]
fn a_failed_or_returned_block_gives_its_shard_back() {
    let mut s = scheduler(vec![writer("write", vec![])]);
    let held: Vec<Block> = (0..4).map(|_| acquire(&mut s, 0).expect("free")).collect();
    s.release(held[0].id, BlockOutcome::Failure);
    let next = acquire(&mut s, 0).expect("shard given back");
    assert_eq!(shard_of(&next), shard_of(&held[0]));
    s.release(held[1].id, BlockOutcome::Returned);
    let next = acquire(&mut s, 0).expect("shard given back");
    assert_eq!(shard_of(&next), shard_of(&held[1]));
}

#[test]
fn an_abandoned_task_forgets_its_parked_blocks() {
    let mut s = scheduler(vec![writer("write", vec![])]);
    let held: Vec<Block> = (0..4).map(|_| acquire(&mut s, 0).expect("free")).collect();
    assert!(acquire(&mut s, 0).is_none());
    s.abandon(TaskIdx(0));
    let c = s.counters(TaskIdx(0));
    assert_eq!((c.ready, c.orphaned), (0, 252));
    for block in held {
        s.release(block.id, BlockOutcome::Success);
    }
    assert!(s.is_done());
}

#[test]
fn parked_blocks_are_not_catching_up() {
    // With 10 skips per call, finding a free shard takes several calls
    // (a row of 8 blocks per shard is parked on the way); once every
    // ready block is parked, nothing is left to catch up on.
    let mut s = scheduler(vec![writer("write", vec![])]);
    s.limit_skips_per_call(10);
    let mut held = Vec::new();
    let mut calls = 0;
    loop {
        calls += 1;
        match acquire(&mut s, 0) {
            Some(block) => held.push(block),
            None if s.is_catching_up(TaskIdx(0)) => continue,
            None => break,
        }
    }
    assert_eq!(held.len(), 4);
    assert!(calls > 5, "the limit held: {calls} calls");
    assert!(!s.has_runnable(TaskIdx(0), &mut |_| false));
    assert!(!s.is_catching_up(TaskIdx(0)));
}
