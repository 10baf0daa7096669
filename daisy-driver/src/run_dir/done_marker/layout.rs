//! What a task's geometry means for its marker, derived once from the
//! spec so lookups do no more than a subtraction and a division.
//!
//! Every array of the marker has the shape of the task's [`MarkerGrid`],
//! a block's element at its cell, as in daisy 2.0.0. Blocks that are not
//! addressable are never reported done and marking them does nothing.

use super::error::DoneMarkerError;
use super::hash::{legacy_task_hash, task_hash};
use daisy_core::geometry::geometry_problems;
use daisy_core::marker_grid::MarkerGrid;
use daisy_core::{Block, TaskSpec};
use std::path::Path;

pub(super) struct Layout {
    marker_grid: MarkerGrid,
    pub grid: Vec<u64>,
    /// Elements per array: the product of `grid`.
    pub cells: usize,
    pub hash: String,
    /// The hash a marker of the earlier layout holds for this task.
    pub legacy_hash: String,
}

impl Layout {
    pub fn of(dir: &Path, spec: &TaskSpec) -> Result<Self, DoneMarkerError> {
        let geometry = |reason| DoneMarkerError::Geometry {
            dir: dir.to_path_buf(),
            task: spec.id.clone(),
            reason,
        };
        let problems: Vec<String> = geometry_problems(spec)
            .iter()
            .map(|p| format!("{} {}", p.field, p.message))
            .collect();
        if !problems.is_empty() {
            return Err(geometry(problems.join("; ")));
        }
        let marker_grid = MarkerGrid::of(spec);
        let grid = marker_grid.shape().to_vec();
        // u64 costs are the widest elements: their bytes must be
        // addressable too.
        let cells = grid
            .iter()
            .try_fold(1usize, |len, &n| len.checked_mul(usize::try_from(n).ok()?))
            .filter(|cells| cells.checked_mul(8).is_some())
            .ok_or_else(|| geometry(format!("block grid {grid:?} is too large to address")))?;
        Ok(Self {
            marker_grid,
            grid,
            cells,
            hash: task_hash(spec),
            legacy_hash: legacy_task_hash(spec),
        })
    }

    /// The spatial id of the block at element `cell`.
    pub fn block_id_of(&self, cell: usize) -> u64 {
        self.marker_grid.block_id_of(cell)
    }

    /// The element of `block`, if it is addressable.
    pub fn index_of(&self, block: &Block) -> Option<usize> {
        self.marker_grid.index_of(block)
    }
}
