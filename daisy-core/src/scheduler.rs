//! The scheduler: a synchronous state machine over the dependency graph.
//!
//! It owns which blocks are ready, in flight, done, failed or orphaned,
//! and nothing else: no sockets, no clocks, no files. Callers (the serial
//! runner, the driver's block server) feed it events (`acquire`,
//! `release`) and act on what it returns, so daisy 2.0's semantics are
//! tested here without any I/O.
//!
//! Memory is a few bits per block, never a whole block:
//! - root blocks are enumerated lazily from the graph, as grid cells;
//! - the ready queue, the blocks in flight and the delayed retries hold
//!   blocks by their cell index (8 bytes; the block, 304 bytes, is built
//!   again where it is needed: handed out, or released when blocks may
//!   wait for it or it failed for good). Each copy of a block costs a
//!   `memcpy`; a block handed out is built where it ends up, in the
//!   caller's batch, from one copy of the grid's template;
//! - per task, a bit per **completed** block (run or skipped) and per
//!   **dead** block (failed for good, orphaned or left), in [`CellSet`]s:
//!   a block is ready when all its upstream blocks are completed, and no
//!   block is ever counted twice. With conflict levels a level's worth of
//!   blocks waits at once (an eighth of a 3-D task): as ids in a hash
//!   map that was ~50 bytes per block of the task, as bits it is 1.
//!
//! A failed block that may be retried goes to the back of its task's
//! ready queue, behind every block already ready and every root block not
//! yet enumerated, so a block that fails every time does not use up its
//! retries before the rest of the task had a turn. With a task's
//! `retry_backoff` it first waits, **delayed**, until a due time the
//! caller computed from its own clock (`release_at`); the caller moves
//! due retries to the ready queue with `promote_due`. A delayed block
//! counts as pending (neither ready nor processing), so the run is
//! neither done nor stalled while it waits.
//!
//! A block becomes ready when all its upstream blocks completed;
//! at the start, level-0 blocks of root tasks are ready, and so are the
//! blocks of other tasks that wait for nothing (see
//! [`DependencyGraph::blocks_without_upstream`]).
//!
//! Skipping is bounded per call if the caller wants
//! ([`Scheduler::limit_skips_per_call`]): a resumed run of 10⁸ blocks may
//! find tens of millions of done blocks ahead of the first one to run,
//! about a minute of skipping that a driver must not spend without
//! answering its workers. A call that reaches the limit stops, answers
//! "nothing" and leaves the task **catching up**; the caller serves
//! others, then calls [`Scheduler::has_runnable`] again to go on.
//!
//! A run may be **restricted** to some blocks ([`Scheduler::run_only`],
//! for `run --retry-failed`): a ready block outside them that is not done
//! is **left** instead of handed out, and so is everything downstream of
//! it, transitively; left blocks are dead and count as `left`, neither
//! failed nor orphaned.
//!
//! Blocks of tasks that write chunked arrays ([`TaskSpec::writes`]) take
//! **write locks** on the shards (or chunks) they write into while in
//! flight. A ready block whose shard another block in flight holds is
//! **parked** on that shard, still counted as ready; when the shard is
//! given back, its task takes the shard's parked blocks first, one at a
//! time, so a shard's blocks run in sequence (mostly on the worker that
//! just finished one) while other workers run other shards.

use crate::block::{Block, BlockId, TaskIdx};
use crate::cell_set::CellSet;
use crate::coordinate::Coordinate;
use crate::geometry::{BlockGrid, GridWalk};
use crate::graph::DependencyGraph;
use crate::id_hash::IdMap;
use crate::write_grid::WriteLayout;
use crate::write_locks::{Holder, LockKey, WriteLocks};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::slice;
use std::sync::Arc;
use std::time::Instant;

/// What happened to a block a worker held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOutcome {
    /// The block was processed; its downstream blocks may become ready.
    Success,
    /// User code found the block done already (a check function): a
    /// success that counts as skipped, as a block done before does.
    Skipped,
    /// The block failed; it is retried up to the task's `max_retries`.
    Failure,
    /// The block was handed back unprocessed (a worker draining or lost);
    /// it becomes ready again without using up a retry.
    Returned,
}

/// Per-task block counts. `completed` includes `skipped`; a task is done
/// when `completed + failed + orphaned + left == total`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCounters {
    pub total: u64,
    pub ready: u64,
    pub processing: u64,
    pub completed: u64,
    pub skipped: u64,
    pub failed: u64,
    pub orphaned: u64,
    /// Not run because the run was restricted to other blocks (see
    /// [`Scheduler::run_only`]); a later unrestricted run runs them.
    #[serde(default)]
    pub left: u64,
}

impl TaskCounters {
    /// Blocks still waiting: for upstream blocks, or as a retry for its
    /// backoff delay.
    pub fn pending(&self) -> u64 {
        self.total
            .saturating_sub(self.ready + self.processing + self.completed)
            .saturating_sub(self.failed + self.orphaned + self.left)
    }

    pub fn is_done(&self) -> bool {
        self.completed + self.failed + self.orphaned + self.left == self.total
    }

    /// Blocks not yet completed, failed, orphaned or left: ready, in
    /// flight or pending.
    pub fn unresolved(&self) -> u64 {
        self.total
            .saturating_sub(self.completed + self.failed)
            .saturating_sub(self.orphaned + self.left)
    }
}

/// What a release did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Released {
    /// The block was not in flight (late, duplicate or unknown): nothing
    /// changed.
    Ignored,
    /// The block succeeded; `unlocked` blocks became ready.
    Succeeded { unlocked: usize },
    /// The block failed and is queued again; `attempt` retries used so far.
    Retrying { attempt: u32 },
    /// The block failed for good; these blocks can now never run.
    FailedForGood { orphaned: Vec<BlockId> },
    /// The block was handed back and is ready again.
    Requeued,
}

/// Where one task's ready blocks come from.
struct TaskQueue {
    counters: TaskCounters,
    /// The cells of level-0 blocks of a root task not yet handed out.
    roots: Option<GridWalk>,
    /// Blocks made ready by their upstream, and retries, in FIFO order,
    /// by cell index.
    ready: VecDeque<u64>,
    /// The cell of a ready block looked at by `has_runnable` and not
    /// handed out yet; it comes first.
    peeked: Option<Coordinate>,
    /// Failures so far of blocks that failed and may still be retried.
    retries: IdMap<BlockId, u32>,
    /// Blocks that succeeded (in this run or an earlier one).
    completed: CellSet,
    /// Blocks failed for good, orphaned or left.
    dead: CellSet,
    /// Given up on: nothing is handed out or made ready any more.
    abandoned: bool,
    /// The last call stopped skipping at the limit with blocks still
    /// ready: more done blocks may come before a runnable one.
    catching_up: bool,
    /// Ready blocks waiting for a write lock another block holds, by the
    /// lock, in the order they were parked.
    parked: IdMap<LockKey, VecDeque<u64>>,
    parked_count: u64,
    /// Locks with parked blocks that were given back, to look at before
    /// any other ready block. A lock may be listed twice or held again by
    /// the time it is looked at; it is then passed over.
    unparked: VecDeque<LockKey>,
}

impl TaskQueue {
    /// The queue of a task at the start of a run: level-0 blocks of a root
    /// task (enumerated lazily), plus blocks that wait for nothing.
    fn seeded(graph: &DependencyGraph, task: TaskIdx) -> Self {
        let task_graph = graph.task_graph(task);
        let root = graph.is_root(task) && task_graph.num_levels() > 0;
        let roots = root.then(|| task_graph.level_walk(0));
        let grid = task_graph.grid();
        let seeds: VecDeque<u64> = (graph.blocks_without_upstream(task).iter())
            .map(|block| grid.cell_index_of(block))
            .collect();
        let num_roots = if root {
            task_graph.num_level_blocks(0)
        } else {
            0
        };
        Self {
            counters: TaskCounters {
                total: task_graph.num_blocks(),
                ready: num_roots + seeds.len() as u64,
                ..TaskCounters::default()
            },
            roots,
            ready: seeds,
            peeked: None,
            retries: IdMap::default(),
            completed: CellSet::default(),
            dead: CellSet::default(),
            abandoned: false,
            catching_up: false,
            parked: IdMap::default(),
            parked_count: 0,
            unparked: VecDeque::new(),
        }
    }
}

impl TaskQueue {
    /// The cell index of the first block parked on a lock that was given
    /// back and is still free. The lock stays listed while blocks remain
    /// parked on it: the one taken now may not take it after all (it
    /// waits for another lock too, or another task took this one).
    fn next_unparked(&mut self, locks: &WriteLocks) -> Option<u64> {
        while let Some(lock) = self.unparked.pop_front() {
            if locks.is_held(lock) {
                continue; // listed again when it is given back
            }
            let Some(parked) = self.parked.get_mut(&lock) else {
                continue;
            };
            let index = parked.pop_front();
            if parked.is_empty() {
                self.parked.remove(&lock);
            } else {
                self.unparked.push_front(lock);
            }
            if let Some(index) = index {
                self.parked_count -= 1;
                return Some(index);
            }
        }
        None
    }
}

/// A failed block waiting for its backoff delay; ordered by due time,
/// then by when it failed, so that equal due times keep FIFO order.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct DelayedRetry {
    due: Instant,
    seq: u64,
    id: BlockId,
}

/// The scheduling state of one run.
pub struct Scheduler {
    graph: Arc<DependencyGraph>,
    tasks: Vec<TaskQueue>,
    /// The cell index of each block handed out.
    in_flight: IdMap<BlockId, u64>,
    /// Retries waiting for their backoff delay, earliest due first.
    delayed: BinaryHeap<Reverse<DelayedRetry>>,
    /// The cell index of each block of `delayed`, by id.
    delayed_blocks: IdMap<BlockId, u64>,
    /// Counts delayed retries, to order equal due times.
    delayed_seq: u64,
    /// The blocks this run may hand out, if restricted (see
    /// [`Scheduler::run_only`]), and how many of them each task has.
    only: Option<Arc<HashSet<BlockId>>>,
    only_per_task: Vec<u64>,
    /// The most blocks one call skips (see [`Scheduler::limit_skips_per_call`]).
    most_skips: u64,
    locks: WriteLocks,
    /// Per task, the most blocks it can have in flight for its write
    /// locks (see [`Scheduler::most_at_once`]).
    at_once: Vec<Option<u64>>,
    /// The lock keys of the block at hand, kept to save allocations.
    keys: Vec<LockKey>,
}

impl Scheduler {
    pub fn new(graph: Arc<DependencyGraph>) -> Self {
        let tasks = graph
            .task_indices()
            .map(|task| TaskQueue::seeded(&graph, task))
            .collect();
        let locks = WriteLocks::new(graph.task_indices().map(|t| graph.task(t)));
        let at_once = graph
            .task_indices()
            .map(|t| most_at_once(&graph, t))
            .collect();
        Self {
            graph,
            locks,
            at_once,
            keys: Vec::new(),
            tasks,
            in_flight: IdMap::default(),
            delayed: BinaryHeap::new(),
            delayed_blocks: IdMap::default(),
            delayed_seq: 0,
            only: None,
            only_per_task: Vec::new(),
            most_skips: u64::MAX,
        }
    }

    /// Makes `acquire` and `has_runnable` skip at most `most` blocks (done
    /// before, or left outside a restriction) per call; without a limit
    /// they skip until they find a block to run.
    pub fn limit_skips_per_call(&mut self, most: u64) {
        self.most_skips = most.max(1);
    }

    /// True if the last call for `task` stopped skipping at the limit
    /// with blocks still ready: `has_runnable` goes on from there.
    pub fn is_catching_up(&self, task: TaskIdx) -> bool {
        self.tasks[task.index()].catching_up
    }

    /// Restricts the run to `blocks` (call it before handing anything
    /// out): a ready block that is not done and not among them is left,
    /// with everything downstream of it, instead of handed out. Blocks
    /// done in an earlier run are still skipped and unlock their
    /// downstream as usual.
    pub fn run_only(&mut self, blocks: Arc<HashSet<BlockId>>) {
        self.only_per_task = vec![0; self.tasks.len()];
        for block in blocks.iter() {
            if let Some(count) = self.only_per_task.get_mut(block.task.index()) {
                *count += 1;
            }
        }
        self.only = Some(blocks);
    }

    /// The most blocks of `task` this run may hand out, if it is
    /// restricted: callers size their workers by it, since `ready` also
    /// counts blocks that will be left.
    pub fn most_to_run(&self, task: TaskIdx) -> Option<u64> {
        self.only.as_ref()?;
        self.only_per_task.get(task.index()).copied()
    }

    pub fn graph(&self) -> &Arc<DependencyGraph> {
        &self.graph
    }

    /// The most blocks of `task` that may be in flight at once, if its
    /// write locks limit it: the shards (or chunks) it writes into.
    /// Callers size their workers by it, since `ready` also counts
    /// blocks parked on a lock.
    pub fn most_at_once(&self, task: TaskIdx) -> Option<u64> {
        self.at_once[task.index()]
    }

    pub fn counters(&self, task: TaskIdx) -> TaskCounters {
        self.tasks[task.index()].counters
    }

    /// True when every block of every task is completed, failed or orphaned.
    pub fn is_done(&self) -> bool {
        self.tasks.iter().all(|t| t.counters.is_done())
    }

    /// True when work remains but nothing is ready, in flight or waiting
    /// to be retried, so nothing can ever become ready. The graph rules
    /// make this impossible; callers check it anyway so that a bug shows
    /// as an error, not a hang.
    pub fn is_stalled(&self) -> bool {
        !self.is_done()
            && self.in_flight.is_empty()
            && self.delayed.is_empty()
            && self.tasks.iter().all(|t| t.counters.ready == 0)
    }

    /// When the earliest retry waiting for its backoff delay is due, if
    /// any: a caller with nothing else to do sleeps until then and calls
    /// [`Scheduler::promote_due`].
    pub fn next_due(&self) -> Option<Instant> {
        self.delayed.peek().map(|Reverse(d)| d.due)
    }

    /// Moves the retries due at `now` to the back of their tasks' ready
    /// queues; returns how many became ready.
    pub fn promote_due(&mut self, now: Instant) -> usize {
        let mut promoted = 0;
        while self.next_due().is_some_and(|due| due <= now) {
            let Some(Reverse(retry)) = self.delayed.pop() else {
                break;
            };
            if let Some(cell) = self.delayed_blocks.remove(&retry.id) {
                self.push_ready(retry.id.task, cell);
            }
            promoted += 1;
        }
        promoted
    }

    /// Number of blocks handed out and not yet released.
    pub fn num_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Hands out the next ready block of `task`. Blocks for which
    /// `is_done` says true (done in an earlier run) are skipped: counted
    /// as completed and skipped, their downstream unlocked, and the next
    /// one tried.
    pub fn acquire(
        &mut self,
        task: TaskIdx,
        is_done: &mut dyn FnMut(&Block) -> bool,
    ) -> Option<Block> {
        let mut block = *self.graph.task_graph(task).grid().some_block();
        self.acquire_into(task, None, is_done, &mut block)
            .then_some(block)
    }

    /// [`Self::acquire`] onto the end of `batch`, where the block is built,
    /// for `holder`, whose blocks in flight may share write locks: false
    /// (and `batch` unchanged) if none is ready.
    pub fn acquire_onto(
        &mut self,
        task: TaskIdx,
        holder: Holder,
        is_done: &mut dyn FnMut(&Block) -> bool,
        batch: &mut Vec<Block>,
    ) -> bool {
        // Copied from where it lies: a push would copy it twice.
        batch.extend_from_slice(slice::from_ref(
            self.graph.task_graph(task).grid().some_block(),
        ));
        let block = batch.last_mut().expect("just pushed");
        let acquired = self.acquire_into(task, Some(holder), is_done, block);
        if !acquired {
            batch.pop();
        }
        acquired
    }

    /// [`Self::acquire`] into `block`, a block of `task`'s grid.
    fn acquire_into(
        &mut self,
        task: TaskIdx,
        holder: Option<Holder>,
        is_done: &mut dyn FnMut(&Block) -> bool,
        block: &mut Block,
    ) -> bool {
        let Some(cell) = self.next_runnable(task, holder, is_done, block) else {
            return false;
        };
        if self.locks.guards(task) {
            self.keys.clear();
            self.locks.keys_of(block, &mut self.keys);
            self.locks.take(&self.keys, holder);
        }
        self.tasks[task.index()].counters.processing += 1;
        let index = self.graph.task_graph(task).grid().index_of_cell(cell);
        self.in_flight.insert(block.id, index);
        true
    }

    /// The cell of the next ready block of `task` that needs running, that
    /// block built into `block`, skipping blocks done in an earlier run,
    /// leaving those outside a restriction and parking those whose write
    /// locks are held, up to the limit of skips per call.
    fn next_runnable(
        &mut self,
        task: TaskIdx,
        holder: Option<Holder>,
        is_done: &mut dyn FnMut(&Block) -> bool,
        block: &mut Block,
    ) -> Option<Coordinate> {
        self.tasks[task.index()].catching_up = false;
        for _ in 0..self.most_skips {
            let cell = self.next_ready(task)?;
            self.graph.task_graph(task).grid().move_to_cell(cell, block);
            if is_done(block) {
                self.tasks[task.index()].counters.skipped += 1;
                self.on_success(block);
            } else if self
                .only
                .as_ref()
                .is_some_and(|only| !only.contains(&block.id))
            {
                self.leave(block);
            } else if let Some(lock) = self.lock_held_against(block, holder) {
                self.park(task, lock, cell);
            } else {
                return Some(cell);
            }
        }
        let queue = &mut self.tasks[task.index()];
        queue.catching_up = queue.counters.ready > queue.parked_count;
        None
    }

    /// A write lock of `block` that blocks of another holder hold.
    fn lock_held_against(&mut self, block: &Block, holder: Option<Holder>) -> Option<LockKey> {
        if !self.locks.guards(block.id.task) {
            return None;
        }
        self.keys.clear();
        self.locks.keys_of(block, &mut self.keys);
        self.locks.first_held_against(&self.keys, holder)
    }

    /// Parks the ready block of `task` in `cell` until `lock` is given
    /// back.
    fn park(&mut self, task: TaskIdx, lock: LockKey, cell: Coordinate) {
        let index = self.graph.task_graph(task).grid().index_of_cell(cell);
        let queue = &mut self.tasks[task.index()];
        queue.parked.entry(lock).or_default().push_back(index);
        queue.parked_count += 1;
        queue.counters.ready += 1;
    }

    /// Gives back the write locks of a block that left flight, and lists
    /// each one now free with parked blocks to be looked at first by
    /// their tasks.
    fn unlock(&mut self, task: TaskIdx, cell: u64) {
        if !self.locks.guards(task) {
            return;
        }
        let block = self.block_at(task, cell);
        self.keys.clear();
        self.locks.keys_of(&block, &mut self.keys);
        self.locks.give_back(&mut self.keys);
        for &key in &self.keys {
            for &writer in self.locks.writers(key) {
                let queue = &mut self.tasks[writer.index()];
                if queue.parked.contains_key(&key) {
                    queue.unparked.push_back(key);
                }
            }
        }
    }

    /// The cell of the next ready block of `task`: one it looked at
    /// before, one parked on a lock just given back, a root block, or the
    /// first of its ready queue.
    fn next_ready(&mut self, task: TaskIdx) -> Option<Coordinate> {
        let grid = self.graph.task_graph(task).grid();
        let queue = &mut self.tasks[task.index()];
        if queue.counters.ready == 0 {
            return None;
        }
        let cell = match queue.peeked.take() {
            Some(peeked) => peeked,
            None => match queue.next_unparked(&self.locks) {
                Some(index) => grid.cell_at_index(index)?,
                None => match queue.roots.as_mut().and_then(Iterator::next) {
                    Some(root) => root,
                    None => {
                        queue.roots = None;
                        grid.cell_at_index(queue.ready.pop_front()?)?
                    }
                },
            },
        };
        queue.counters.ready -= 1;
        Some(cell)
    }

    /// True if `task` has a ready block that still needs running. Blocks
    /// done in an earlier run are skipped on the way (as `acquire` would),
    /// so a resumed run does not start workers for work that is done.
    pub fn has_runnable(&mut self, task: TaskIdx, is_done: &mut dyn FnMut(&Block) -> bool) -> bool {
        if self.tasks[task.index()].peeked.is_some() {
            return true;
        }
        let mut block = *self.graph.task_graph(task).grid().some_block();
        let Some(cell) = self.next_runnable(task, None, is_done, &mut block) else {
            return false;
        };
        let queue = &mut self.tasks[task.index()];
        queue.peeked = Some(cell);
        queue.counters.ready += 1;
        true
    }

    /// As [`Scheduler::release_at`] for a caller without a clock: a
    /// failed block is retried at once, ignoring the task's
    /// `retry_backoff`.
    pub fn release(&mut self, id: BlockId, outcome: BlockOutcome) -> Released {
        self.release_with(id, outcome, None)
    }

    /// Records what happened to a block that was handed out, `now` being
    /// the caller's time of the release: a failed block of a task with a
    /// `retry_backoff` waits until `now` plus its delay. A block that is
    /// not in flight (released twice, released after it was reclaimed, or
    /// never handed out) is ignored.
    pub fn release_at(&mut self, id: BlockId, outcome: BlockOutcome, now: Instant) -> Released {
        self.release_with(id, outcome, Some(now))
    }

    fn release_with(
        &mut self,
        id: BlockId,
        outcome: BlockOutcome,
        now: Option<Instant>,
    ) -> Released {
        let Some(cell) = self.in_flight.remove(&id) else {
            return Released::Ignored;
        };
        self.unlock(id.task, cell);
        let queue = &mut self.tasks[id.task.index()];
        queue.counters.processing -= 1;
        if outcome == BlockOutcome::Skipped {
            queue.counters.skipped += 1;
        }
        if queue.abandoned {
            return Self::release_abandoned(&mut queue.counters, outcome);
        }
        match outcome {
            BlockOutcome::Success | BlockOutcome::Skipped => Released::Succeeded {
                unlocked: self.on_released_success(id, cell),
            },
            BlockOutcome::Returned => {
                self.push_ready(id.task, cell);
                Released::Requeued
            }
            BlockOutcome::Failure => self.on_failure(id, cell, now),
        }
    }

    /// A block of an abandoned task comes back: work that was done counts,
    /// anything else joins the task's orphans.
    fn release_abandoned(counters: &mut TaskCounters, outcome: BlockOutcome) -> Released {
        match outcome {
            BlockOutcome::Success | BlockOutcome::Skipped => {
                counters.completed += 1;
                Released::Succeeded { unlocked: 0 }
            }
            BlockOutcome::Failure | BlockOutcome::Returned => {
                counters.orphaned += 1;
                Released::FailedForGood { orphaned: vec![] }
            }
        }
    }

    /// Gives up on a task (its workers keep dying): every block of it that
    /// is not completed, failed or in flight is orphaned (retries waiting
    /// for their backoff included), and so is every
    /// such block of its downstream tasks, transitively. Returns the tasks
    /// abandoned now. Blocks in flight may still be released.
    pub fn abandon(&mut self, task: TaskIdx) -> Vec<TaskIdx> {
        let mut abandoned = Vec::new();
        let mut to_visit = vec![task];
        while let Some(task) = to_visit.pop() {
            let queue = &mut self.tasks[task.index()];
            if queue.abandoned {
                continue;
            }
            queue.abandoned = true;
            queue.catching_up = false;
            queue.roots = None;
            queue.peeked = None;
            queue.ready.clear();
            queue.retries.clear();
            queue.parked.clear();
            queue.parked_count = 0;
            queue.unparked.clear();
            let c = &mut queue.counters;
            c.ready = 0;
            c.orphaned = c.total - c.completed - c.failed - c.left - c.processing;
            self.drop_delayed(task);
            abandoned.push(task);
            to_visit.extend_from_slice(self.graph.downstream_tasks(task));
        }
        abandoned
    }

    pub fn is_abandoned(&self, task: TaskIdx) -> bool {
        self.tasks[task.index()].abandoned
    }

    /// The cell index of a block that is handed out (see
    /// [`BlockGrid::block_at_cell_index`]), by id.
    pub fn cell_in_flight(&self, id: BlockId) -> Option<u64> {
        self.in_flight.get(&id).copied()
    }

    /// Parks a retry until `due`; it counts as pending meanwhile.
    fn delay(&mut self, id: BlockId, cell: u64, due: Instant) {
        self.delayed_seq += 1;
        self.delayed.push(Reverse(DelayedRetry {
            due,
            seq: self.delayed_seq,
            id,
        }));
        self.delayed_blocks.insert(id, cell);
    }

    /// Forgets the delayed retries of an abandoned task; they are counted
    /// among its orphans.
    fn drop_delayed(&mut self, task: TaskIdx) {
        self.delayed.retain(|Reverse(retry)| retry.id.task != task);
        self.delayed_blocks.retain(|id, _| id.task != task);
    }

    /// Queues the block of `task` in cell index `cell` as ready.
    fn push_ready(&mut self, task: TaskIdx, cell: u64) {
        let queue = &mut self.tasks[task.index()];
        if queue.abandoned {
            return;
        }
        queue.ready.push_back(cell);
        queue.counters.ready += 1;
    }

    /// The grid of `block`'s task, which keys its per-block state.
    fn grid(&self, block: &Block) -> &BlockGrid {
        self.graph.task_graph(block.id.task).grid()
    }

    fn is_completed(&self, block: &Block) -> bool {
        let cell = self.grid(block).cell_index_of(block);
        self.tasks[block.id.task.index()].completed.contains(cell)
    }

    fn is_dead(&self, block: &Block) -> bool {
        let cell = self.grid(block).cell_index_of(block);
        self.tasks[block.id.task.index()].dead.contains(cell)
    }

    fn on_failure(&mut self, id: BlockId, cell: u64, now: Option<Instant>) -> Released {
        let spec = self.graph.task(id.task);
        let max_retries = spec.max_retries;
        let queue = &mut self.tasks[id.task.index()];
        let attempts = queue.retries.entry(id).or_insert(0);
        if *attempts < max_retries {
            *attempts += 1;
            let attempt = *attempts;
            let delay = spec.retry_delay(attempt);
            match now.zip(delay).and_then(|(now, d)| now.checked_add(d)) {
                Some(due) => self.delay(id, cell, due),
                None => self.push_ready(id.task, cell),
            }
            return Released::Retrying { attempt };
        }
        queue.retries.remove(&id);
        queue.counters.failed += 1;
        let block = self.block_at(id.task, cell);
        self.bury(&block);
        Released::FailedForGood {
            orphaned: self.orphan_downstream_of(&block),
        }
    }

    /// The block of `task` in cell index `cell`, one the scheduler holds
    /// or handed out (see [`Self::cell_in_flight`]); built where it is
    /// returned, with no `Option` of a block to copy out of.
    pub fn block_at(&self, task: TaskIdx, cell: u64) -> Block {
        let grid = self.graph.task_graph(task).grid();
        let cell = grid.cell_at_index(cell);
        grid.block_in_held_cell(cell.expect("cells of the scheduler are cells of the grid"))
    }

    /// [`Self::on_success`] of a block released by a worker, known by its
    /// cell: the block is built again only if something may wait for it.
    fn on_released_success(&mut self, id: BlockId, cell: u64) -> usize {
        if !self.graph.has_downstream(id.task) {
            self.complete(id, cell);
            return 0;
        }
        let block = self.block_at(id.task, cell);
        self.on_success(&block)
    }

    /// Counts a block completed (run or skipped) in its task.
    fn complete(&mut self, id: BlockId, cell: u64) {
        let queue = &mut self.tasks[id.task.index()];
        queue.counters.completed += 1;
        queue.retries.remove(&id);
        queue.completed.insert(cell);
    }

    /// Marks a completed block (run or skipped) and returns how many
    /// blocks became ready.
    fn on_success(&mut self, block: &Block) -> usize {
        let cell = self.grid(block).cell_index_of(block);
        self.complete(block.id, cell);
        let mut unlocked = 0;
        let mut upstream = Vec::new();
        for down in self.graph.downstream(block) {
            let ready = !self.is_dead(&down) && {
                self.graph.upstream_into(&down, &mut upstream);
                upstream.iter().all(|up| self.is_completed(up))
            };
            if ready {
                let cell = self.grid(&down).cell_index_of(&down);
                self.push_ready(down.id.task, cell);
                unlocked += 1;
            }
        }
        unlocked
    }

    /// Marks a block dead (failed for good, orphaned or left); false if
    /// it was already.
    fn bury(&mut self, block: &Block) -> bool {
        let cell = self.grid(block).cell_index_of(block);
        self.tasks[block.id.task.index()].dead.insert(cell)
    }

    /// Orphans everything downstream of `failed`, transitively.
    fn orphan_downstream_of(&mut self, failed: &Block) -> Vec<BlockId> {
        self.bury_downstream_of(failed, |c| &mut c.orphaned)
    }

    /// Leaves a block outside the run's restriction, and everything
    /// downstream of it: none of them can run in this run.
    fn leave(&mut self, block: &Block) {
        if self.bury(block) {
            self.tasks[block.id.task.index()].counters.left += 1;
            self.bury_downstream_of(block, |c| &mut c.left);
        }
    }

    /// Buries everything downstream of `block`, transitively, counting
    /// each block in the counter `count` picks (unless its task was
    /// abandoned, which counted it already).
    fn bury_downstream_of(
        &mut self,
        block: &Block,
        count: fn(&mut TaskCounters) -> &mut u64,
    ) -> Vec<BlockId> {
        let mut buried = Vec::new();
        let mut to_visit = self.graph.downstream(block);
        while let Some(block) = to_visit.pop() {
            if self.bury(&block) {
                let queue = &mut self.tasks[block.id.task.index()];
                if !queue.abandoned {
                    *count(&mut queue.counters) += 1;
                }
                buried.push(block.id);
                to_visit.extend(self.graph.downstream(&block));
            }
        }
        buried
    }
}

/// [`Scheduler::most_at_once`] of `task`: the fewest lock cells its
/// blocks write into, over the arrays it writes.
fn most_at_once(graph: &DependencyGraph, task: TaskIdx) -> Option<u64> {
    let grid = graph.task_graph(task).grid();
    let writes = graph.task(task).writes.iter();
    writes
        .map(|array| WriteLayout::of(grid, array).locks_written)
        .min()
}
