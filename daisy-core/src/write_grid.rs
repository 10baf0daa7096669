//! Where a task's writes land in a chunked array (Zarr): the array's
//! chunk and shard grids in world units, what a task's blocks do to them
//! ([`WriteLayout`]), and the lock cells a block writes.
//!
//! A chunk is the unit an array store rewrites: a write to part of one
//! reads it, changes it and writes it back, and a shard (Zarr v3's
//! `sharding_indexed`) is one object holding many chunks. Two blocks
//! writing into one such unit at once lose one of the writes. A block's
//! **lock cells** are the units it must have to itself: the shards it
//! writes into, or the chunks of an unsharded array.

use crate::coordinate::Coordinate;
use crate::geometry::BlockGrid;
use crate::roi::Roi;
use crate::task::Fit;

/// One array a task writes, placed in world units on the task's
/// dimensions (an array's leading channel dimensions left out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteGrid {
    /// Names the array (its path): tasks naming one array share its locks.
    pub array: String,
    /// The array's extent: its `offset` and its shape times its voxel size.
    pub region: Roi,
    /// A chunk's shape.
    pub chunk: Coordinate,
    /// A shard's shape, for a sharded array.
    pub shard: Option<Coordinate>,
}

impl WriteGrid {
    /// The unit a block must hold alone: a shard, or a chunk.
    pub fn lock_shape(&self) -> Coordinate {
        self.shard.unwrap_or(self.chunk)
    }

    /// Lock cells per dimension over the array.
    pub fn lock_cells(&self) -> Coordinate {
        self.region.shape().div_ceil(&self.lock_shape())
    }

    /// The lock cells `roi` writes into, as a box `[begin, end)` of cells
    /// clipped to the array; `None` if it writes none of the array.
    pub fn lock_cells_of(&self, roi: &Roi) -> Option<(Coordinate, Coordinate)> {
        let roi = roi.intersect(&self.region);
        if roi.is_empty() {
            return None;
        }
        let shape = self.lock_shape();
        let origin = self.region.offset();
        let begin = (roi.begin() - origin) / shape;
        let end = (roi.end() - origin).div_ceil(&shape);
        Some((begin, end))
    }

    /// The row-major index of lock cell `cell`. Wrapping: past 2^64
    /// cells two cells may share an index, which only locks more.
    pub fn lock_index(&self, cell: Coordinate) -> u64 {
        let cells = self.lock_cells();
        (0..cell.dims()).fold(0u64, |index, d| {
            index
                .wrapping_mul(cells[d] as u64)
                .wrapping_add(cell[d] as u64)
        })
    }

    /// Why this grid cannot place writes of a task with `dims` dimensions.
    pub fn problem(&self, dims: usize) -> Option<String> {
        let shapes = [Some(self.region.shape()), Some(self.chunk), self.shard];
        if self.region.dims() != dims {
            Some(format!(
                "{} has {} spatial dimensions, the task {dims}",
                self.array,
                self.region.dims()
            ))
        } else if !shapes.iter().flatten().all(|s| s.all(|v| v > 0)) {
            Some(format!("{} has an empty shape, chunk or shard", self.array))
        } else {
            None
        }
    }
}

/// What a task's blocks do to one array they write: the numbers `plan`
/// shows and the check that refuses blocks splitting chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteLayout {
    /// Blocks that write part of a chunk another block also writes.
    pub blocks_sharing_chunks: u64,
    /// The most chunks one block writes into.
    pub chunks_per_block: u64,
    /// The most shards one block writes into (`None`: unsharded).
    pub shards_per_block: Option<u64>,
    /// The most blocks writing into one lock cell (shard, or chunk).
    pub blocks_per_lock: u64,
    /// Lock cells the task writes into: the most blocks it can have in
    /// flight at once.
    pub locks_written: u64,
    /// The block write shape rounded up to whole chunks, which aligns
    /// where the blocks' first write region begins on a chunk boundary.
    pub aligned_write_shape: Coordinate,
    /// The blocks' first write region begins on a chunk boundary.
    pub origin_aligned: bool,
}

impl WriteLayout {
    /// The layout of `grid`'s blocks on `array`, axis by axis: the blocks
    /// form a product of intervals, so every count is a product of
    /// per-axis counts.
    pub fn of(grid: &BlockGrid, array: &WriteGrid) -> Self {
        let dims = grid.write_shape.dims();
        let mut layout = Self {
            blocks_sharing_chunks: 0,
            chunks_per_block: 1,
            shards_per_block: array.shard.map(|_| 1),
            blocks_per_lock: 1,
            locks_written: 1,
            aligned_write_shape: grid.write_shape.div_ceil(&array.chunk) * array.chunk,
            origin_aligned: true,
        };
        let mut blocks = 1u64;
        let mut clear_blocks = 1u64;
        for d in 0..dims {
            let axis = Axis::of(grid, array, d);
            let chunks = axis.cells(array.chunk[d]);
            let locks = axis.cells(array.lock_shape()[d]);
            blocks = blocks.saturating_mul(axis.intervals.len() as u64);
            clear_blocks = clear_blocks.saturating_mul(chunks.unshared());
            layout.chunks_per_block =
                (layout.chunks_per_block).saturating_mul(chunks.most_per_interval());
            if let (Some(n), Some(shard)) = (&mut layout.shards_per_block, array.shard) {
                *n = n.saturating_mul(axis.cells(shard[d]).most_per_interval());
            }
            layout.blocks_per_lock = (layout.blocks_per_lock).saturating_mul(locks.most_per_cell());
            layout.locks_written = layout.locks_written.saturating_mul(locks.distinct());
            let first = grid.total_write.offset()[d] - array.region.offset()[d];
            layout.origin_aligned &= first.rem_euclid(array.chunk[d]) == 0;
        }
        layout.blocks_sharing_chunks = blocks - clear_blocks;
        layout
    }
}

/// The write intervals of a task's blocks along one axis, clipped to the
/// array, relative to the array's origin.
struct Axis {
    intervals: Vec<(i64, i64)>,
}

impl Axis {
    fn of(grid: &BlockGrid, array: &WriteGrid, d: usize) -> Self {
        let width = grid.write_shape[d];
        let first = grid.total_write.offset()[d];
        let total_end = grid.total_write.end()[d];
        let (array_begin, array_end) = (array.region.begin()[d], array.region.end()[d]);
        let intervals = (0..grid.cells()[d])
            .map(|j| {
                let begin = first + j * width;
                let mut end = begin + width;
                if grid.fit == Fit::Shrink {
                    end = end.min(total_end);
                }
                (begin.max(array_begin), end.min(array_end))
            })
            .map(|(b, e)| (b - array_begin, e - array_begin))
            .collect();
        Self { intervals }
    }

    /// Which cells of size `size` each interval touches; an interval
    /// outside the array touches none.
    fn cells(&self, size: i64) -> AxisCells {
        let ranges = (self.intervals.iter())
            .map(|&(b, e)| match b < e {
                true => (b.div_euclid(size), (e + size - 1).div_euclid(size)),
                false => (0, 0),
            })
            .collect();
        AxisCells { ranges }
    }
}

/// Per interval of an [`Axis`], the cells `[begin, end)` it touches, in
/// increasing order.
struct AxisCells {
    ranges: Vec<(i64, i64)>,
}

impl AxisCells {
    /// Intervals that share no cell with a neighbour.
    fn unshared(&self) -> u64 {
        let n = self.ranges.len();
        let shares = |i: usize, j: usize| {
            let ((b0, e0), (b1, e1)) = (self.ranges[i], self.ranges[j]);
            b0 < e0 && b1 < e1 && b0 < e1 && b1 < e0
        };
        let shares_with_a_neighbour =
            |i: usize| (i > 0 && shares(i - 1, i)) || (i + 1 < n && shares(i, i + 1));
        (0..n).filter(|&i| !shares_with_a_neighbour(i)).count() as u64
    }

    fn most_per_interval(&self) -> u64 {
        let sizes = self.ranges.iter().map(|&(b, e)| (e - b) as u64);
        sizes.max().unwrap_or(0).max(1)
    }

    /// The most intervals touching one cell (the intervals are in order,
    /// so a cell's intervals are consecutive).
    fn most_per_cell(&self) -> u64 {
        let mut most = 0u64;
        let mut current: Option<(i64, u64)> = None;
        for &(b, e) in self.ranges.iter().filter(|(b, e)| b < e) {
            for cell in b..e {
                let count = match current {
                    Some((c, n)) if c == cell => n + 1,
                    _ => 1,
                };
                current = Some((cell, count));
                most = most.max(count);
            }
        }
        most.max(1)
    }

    fn distinct(&self) -> u64 {
        let mut count = 0u64;
        let mut last = i64::MIN;
        for &(b, e) in self.ranges.iter().filter(|(b, e)| b < e) {
            let from = b.max(last + 1);
            count += (e - from).max(0) as u64;
            last = last.max(e - 1);
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::TaskIdx;
    use crate::task::TaskSpec;

    fn array(shape: &[i64], chunk: &[i64], shard: Option<&[i64]>) -> WriteGrid {
        WriteGrid {
            array: "a.zarr".into(),
            region: Roi::from_slices(&vec![0; shape.len()], shape),
            chunk: chunk.into(),
            shard: shard.map(Coordinate::from),
        }
    }

    fn blocks(total: &[i64], write: &[i64]) -> BlockGrid {
        let zero = vec![0; total.len()];
        let total = Roi::from_slices(&zero, total);
        let block = Roi::from_slices(&zero, write);
        BlockGrid::new(TaskIdx(0), &TaskSpec::new("t", total, block, block))
    }

    #[test]
    fn one_chunk_per_block_in_shards_of_64() {
        let layout = WriteLayout::of(
            &blocks(&[128, 128], &[8, 8]),
            &array(&[128, 128], &[8, 8], Some(&[64, 64])),
        );
        assert_eq!(layout.blocks_sharing_chunks, 0);
        assert_eq!(layout.chunks_per_block, 1);
        assert_eq!(layout.shards_per_block, Some(1));
        assert_eq!(layout.blocks_per_lock, 64);
        assert_eq!(layout.locks_written, 4);
    }

    #[test]
    fn blocks_splitting_chunks_are_counted_with_the_shape_that_aligns() {
        // Blocks of 12 on chunks of 8: along an axis of 96, block 0 ends
        // inside chunk 1, which block 1 begins in; only every second
        // boundary (24, 48, 72) falls on a chunk boundary.
        let layout = WriteLayout::of(&blocks(&[96], &[12]), &array(&[96], &[8], None));
        assert_eq!(layout.blocks_sharing_chunks, 8, "every block shares one");
        assert_eq!(layout.chunks_per_block, 2);
        assert_eq!(layout.aligned_write_shape, Coordinate::from([16]));
        assert_eq!(layout.blocks_per_lock, 2);
        assert!(layout.origin_aligned);
    }

    #[test]
    fn a_shared_row_counts_every_block_of_it() {
        // Rows 0-10, 10-20, 20-30 on chunks of 4: the boundary at 10
        // splits a chunk, the one at 20 does not. Both blocks of the first
        // two rows share, those of the last do not.
        let layout = WriteLayout::of(
            &blocks(&[30, 16], &[10, 8]),
            &array(&[30, 16], &[4, 8], None),
        );
        assert_eq!(layout.blocks_sharing_chunks, 4);
    }

    #[test]
    fn an_offset_array_moves_the_grid() {
        let mut shifted = array(&[64], &[8], None);
        shifted.region = Roi::from_slices(&[4], &[64]);
        let layout = WriteLayout::of(&blocks(&[68], &[8]), &shifted);
        assert!(!layout.origin_aligned);
        assert!(layout.blocks_sharing_chunks > 0);
    }

    #[test]
    fn lock_cells_are_clipped_to_the_array() {
        let grid = array(&[128, 128], &[8, 8], Some(&[64, 64]));
        let roi = Roi::from_slices(&[60, 120], &[8, 40]);
        let (begin, end) = grid.lock_cells_of(&roi).expect("overlaps");
        assert_eq!((begin, end), ([0, 1].into(), [2, 2].into()));
        assert_eq!(grid.lock_index([1, 1].into()), 3);
        assert!(grid
            .lock_cells_of(&Roi::from_slices(&[200, 0], &[8, 8]))
            .is_none());
    }

    #[test]
    fn mismatched_dimensions_are_a_problem() {
        let grid = array(&[128, 128], &[8, 8], None);
        assert!(grid.problem(2).is_none());
        assert!(grid
            .problem(3)
            .expect("3 vs 2")
            .contains("2 spatial dimensions"));
    }
}
