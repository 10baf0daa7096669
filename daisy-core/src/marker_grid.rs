//! A task's blocks as daisy 2.0.0's done markers and skip masks index
//! them: a grid over the total region, one cell per write shape. (Not the
//! grid the graph enumerates blocks on, [`crate::geometry::BlockGrid`],
//! which starts at the total write region.)
//!
//! A block's *grid index* is `(block write offset - total_roi offset) /
//! task write shape` (per dimension), and the *grid shape* is
//! `ceil(total_roi shape / write shape)`. A block is *addressable* if its
//! grid index lies inside the grid shape; its cell is then the row-major
//! (C order) position of that index.

use crate::{Block, Coordinate, TaskSpec};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerGrid {
    total_offset: Coordinate,
    /// The task's write shape: shrink-fit border blocks have smaller
    /// write regions, but their grid index is still counted in full steps.
    write_shape: Coordinate,
    shape: Vec<u64>,
}

impl MarkerGrid {
    /// The grid of `spec`, whose geometry must be valid (a write shape
    /// of zero has no grid).
    pub fn of(spec: &TaskSpec) -> Self {
        let shape = spec.total_roi.shape().div_ceil(&spec.write_roi.shape());
        Self {
            total_offset: spec.total_roi.offset(),
            write_shape: spec.write_roi.shape(),
            shape: shape.iter().map(|n| n as u64).collect(),
        }
    }

    /// Blocks per dimension.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The cell of `block`: the row-major position of its grid index,
    /// or `None` if the block is not addressable. A write region never
    /// starts before the total region (validation keeps it inside the
    /// read region), so floor division here agrees with daisy 2.0.0's
    /// truncating one.
    pub fn index_of(&self, block: &Block) -> Option<usize> {
        let offset = block.write_roi.offset();
        if offset.dims() != self.shape.len() {
            return None;
        }
        let grid_index = (offset - self.total_offset) / self.write_shape;
        let mut position = 0u64;
        for (i, &n) in grid_index.iter().zip(&self.shape) {
            let i = u64::try_from(i).ok().filter(|&i| i < n)?;
            position = position * n + i;
        }
        usize::try_from(position).ok()
    }
}
