//! Write locks: which lock cells (shards, or chunks of an unsharded
//! array, see [`crate::write_grid`]) blocks in flight write into, so that
//! the scheduler never hands out two blocks writing into one at once.
//!
//! A block takes all its cells or none, and holds them only while it is
//! in flight: no block waits while holding a cell, so locks cannot
//! deadlock, whatever the levels and task dependencies around them.
//! Tasks that write one array (the same path) share its cells.
//!
//! A cell is held by a [`Holder`], a worker: a worker runs its blocks one
//! at a time, so the blocks of one batch, or those it is fed ahead
//! (prefetch), may share a cell. The cell is free again once the last of
//! them leaves flight.

use crate::block::{Block, TaskIdx};
use crate::geometry::GridWalk;
use crate::id_hash::IdMap;
use crate::task::TaskSpec;
use crate::write_grid::WriteGrid;

/// One lock cell of one array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockKey {
    /// The array, by its place among the run's arrays.
    pub array: u32,
    /// The cell's row-major index in the array's lock grid.
    pub cell: u64,
}

/// Who holds the blocks it was handed: one worker, which runs them one
/// after another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder(pub u64);

/// The run's arrays and the cells held by blocks in flight.
#[derive(Debug, Default)]
pub(crate) struct WriteLocks {
    arrays: Vec<WriteGrid>,
    /// Per task, the arrays it writes.
    of_task: Vec<Vec<u32>>,
    /// Per array, the tasks writing it.
    writers: Vec<Vec<TaskIdx>>,
    /// Each cell held, by whom, and by how many of its blocks; `None`
    /// holds alone (a block handed out without a holder).
    held: IdMap<LockKey, (Option<Holder>, u32)>,
}

impl WriteLocks {
    /// The arrays `tasks` write, those of one path merged.
    pub fn new<'a>(tasks: impl Iterator<Item = &'a TaskSpec>) -> Self {
        let mut locks = Self::default();
        for (task, spec) in tasks.enumerate() {
            let task = TaskIdx(task as u32);
            let arrays = spec.writes.iter().map(|grid| locks.array_of(grid, task));
            let arrays = arrays.collect();
            locks.of_task.push(arrays);
        }
        locks
    }

    fn array_of(&mut self, grid: &WriteGrid, writer: TaskIdx) -> u32 {
        let known = self.arrays.iter().position(|a| a.array == grid.array);
        let index = known.unwrap_or_else(|| {
            self.arrays.push(grid.clone());
            self.writers.push(Vec::new());
            self.arrays.len() - 1
        });
        self.writers[index].push(writer);
        index as u32
    }

    /// True if `task` writes into a locked array.
    pub fn guards(&self, task: TaskIdx) -> bool {
        self.of_task
            .get(task.index())
            .is_some_and(|arrays| !arrays.is_empty())
    }

    /// The cells `block` writes into, appended to `out`.
    pub fn keys_of(&self, block: &Block, out: &mut Vec<LockKey>) {
        let Some(arrays) = self.of_task.get(block.id.task.index()) else {
            return;
        };
        for &array in arrays {
            let grid = &self.arrays[array as usize];
            if let Some((begin, end)) = grid.lock_cells_of(&block.write_roi) {
                let cells = GridWalk::new(begin, end).map(|cell| LockKey {
                    array,
                    cell: grid.lock_index(cell),
                });
                out.extend(cells);
            }
        }
    }

    /// The first of `keys` that blocks of another holder than `holder`
    /// hold (any holder, for `None`).
    pub fn first_held_against(&self, keys: &[LockKey], holder: Option<Holder>) -> Option<LockKey> {
        let shared = |owner: &Option<Holder>| holder.is_some() && *owner == holder;
        let against = |key: &LockKey| self.held.get(key).is_some_and(|(owner, _)| !shared(owner));
        keys.iter().copied().find(against)
    }

    pub fn is_held(&self, key: LockKey) -> bool {
        self.held.contains_key(&key)
    }

    /// Takes `keys` for `holder`, which no other holder holds.
    pub fn take(&mut self, keys: &[LockKey], holder: Option<Holder>) {
        for &key in keys {
            let (owner, count) = self.held.entry(key).or_insert((holder, 0));
            debug_assert!(*count == 0 || (holder.is_some() && *owner == holder));
            *count += 1;
        }
    }

    /// Gives back a block's `keys`; keeps those that are free now.
    pub fn give_back(&mut self, keys: &mut Vec<LockKey>) {
        keys.retain(|key| {
            let Some((_, count)) = self.held.get_mut(key) else {
                return false;
            };
            *count -= 1;
            let free = *count == 0;
            if free {
                self.held.remove(key);
            }
            free
        });
    }

    /// The tasks that write into `key`'s array.
    pub fn writers(&self, key: LockKey) -> &[TaskIdx] {
        &self.writers[key.array as usize]
    }
}
