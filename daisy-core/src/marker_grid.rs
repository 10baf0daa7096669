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

use crate::block::cantor_number;
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

    /// The spatial id of the block at `cell` (the inverse of
    /// [`Self::index_of`]): the Cantor number of its grid index.
    pub fn block_id_of(&self, cell: usize) -> u64 {
        let mut rest = cell as u64;
        let mut index = vec![0i64; self.shape.len()];
        for (i, &n) in self.shape.iter().enumerate().rev() {
            index[i] = (rest % n.max(1)) as i64;
            rest /= n.max(1);
        }
        cantor_number(&Coordinate::new(&index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Roi, TaskIdx};

    #[test]
    fn a_cell_names_the_block_whose_cell_it_is() {
        let total = Roi::from_slices(&[0, 0], &[40, 30]);
        let spec = TaskSpec::new(
            "t",
            total,
            Roi::from_slices(&[0, 0], &[10, 10]),
            Roi::from_slices(&[0, 0], &[10, 10]),
        );
        let grid = MarkerGrid::of(&spec);
        for x in (0..40).step_by(10) {
            for y in (0..30).step_by(10) {
                let roi = Roi::from_slices(&[x, y], &[10, 10]);
                let block = Block::new(TaskIdx(0), &total, roi, roi);
                let cell = grid.index_of(&block).unwrap();
                assert_eq!(grid.block_id_of(cell), block.id.spatial);
            }
        }
    }
}
