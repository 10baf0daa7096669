//! What a task's geometry means for its marker, derived once from the
//! spec so lookups do no more than a subtraction and a division.
//!
//! Terms: a block's *grid index* is `(block write offset - total_roi
//! offset) / task write shape` (per dimension), and the *grid shape*, the
//! shape of every array of the marker, is `ceil(total_roi shape / write
//! shape)`. A block is *addressable* if its grid index lies inside the
//! grid shape; its element is then at the row-major (C order) position of
//! that index, as in daisy 2.0.0. Other blocks are never reported done and
//! marking them does nothing.

use super::error::DoneMarkerError;
use super::hash::{legacy_task_hash, task_hash};
use daisy_core::geometry::geometry_problems;
use daisy_core::{Block, Coordinate, TaskSpec};
use std::path::Path;

pub(super) struct Layout {
    total_offset: Coordinate,
    /// The task's write shape: shrink-fit border blocks have smaller
    /// write regions, but their grid index is still counted in full steps.
    write_shape: Coordinate,
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
        let shape = spec.total_roi.shape().div_ceil(&spec.write_roi.shape());
        let grid: Vec<u64> = shape.iter().map(|n| n as u64).collect();
        // u32 failure counts are the widest elements: their bytes must be
        // addressable too.
        let cells = grid
            .iter()
            .try_fold(1usize, |len, &n| len.checked_mul(usize::try_from(n).ok()?))
            .filter(|cells| cells.checked_mul(4).is_some())
            .ok_or_else(|| geometry(format!("block grid {grid:?} is too large to address")))?;
        Ok(Self {
            total_offset: spec.total_roi.offset(),
            write_shape: spec.write_roi.shape(),
            grid,
            cells,
            hash: task_hash(spec),
            legacy_hash: legacy_task_hash(spec),
        })
    }

    /// The element of `block`: the row-major position of its grid index,
    /// or `None` if the block is not addressable. A write region never
    /// starts before the total region (validation keeps it inside the
    /// read region), so floor division here agrees with daisy 2.0.0's
    /// truncating one.
    pub fn index_of(&self, block: &Block) -> Option<usize> {
        let offset = block.write_roi.offset();
        if offset.dims() != self.grid.len() {
            return None;
        }
        let grid_index = (offset - self.total_offset) / self.write_shape;
        let mut position = 0u64;
        for (i, &n) in grid_index.iter().zip(&self.grid) {
            let i = u64::try_from(i).ok().filter(|&i| i < n)?;
            position = position * n + i;
        }
        usize::try_from(position).ok()
    }
}
