//! Write locks: which lock cells (shards, or chunks of an unsharded
//! array, see [`crate::write_grid`]) blocks in flight write into, so that
//! the scheduler never hands out two blocks writing into one at once.
//!
//! A block takes all its cells or none, and holds them only while it is
//! in flight: no block waits while holding a cell, so locks cannot
//! deadlock, whatever the levels and task dependencies around them.
//! Tasks that write one array (the same path) share its cells.

use crate::block::{Block, TaskIdx};
use crate::geometry::GridWalk;
use crate::id_hash::IdSet;
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

/// The run's arrays and the cells held by blocks in flight.
#[derive(Debug, Default)]
pub(crate) struct WriteLocks {
    arrays: Vec<WriteGrid>,
    /// Per task, the arrays it writes.
    of_task: Vec<Vec<u32>>,
    /// Per array, the tasks writing it.
    writers: Vec<Vec<TaskIdx>>,
    held: IdSet<LockKey>,
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

    /// The first of `keys` a block in flight holds.
    pub fn first_held(&self, keys: &[LockKey]) -> Option<LockKey> {
        keys.iter().copied().find(|key| self.held.contains(key))
    }

    pub fn is_held(&self, key: LockKey) -> bool {
        self.held.contains(&key)
    }

    /// Takes `keys`, none of which is held.
    pub fn take(&mut self, keys: &[LockKey]) {
        for &key in keys {
            let fresh = self.held.insert(key);
            debug_assert!(fresh, "{key:?} was held");
        }
    }

    pub fn give_back(&mut self, keys: &[LockKey]) {
        for key in keys {
            self.held.remove(key);
        }
    }

    /// The tasks that write into `key`'s array.
    pub fn writers(&self, key: LockKey) -> &[TaskIdx] {
        &self.writers[key.array as usize]
    }
}
