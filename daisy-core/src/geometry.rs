//! `BlockGrid`: where the blocks of one task sit.
//!
//! Every block of a task reads `total.offset + k` and writes
//! `TW.offset + k` for a grid position `k` (a multiple of the write shape)
//! relative to the task's origin. This module turns positions into blocks
//! (applying the fit rule) and checks a task's geometry; the levels and
//! conflicts on top of it live in `graph`.

use crate::block::{cantor_number, cantor_number_of, Block, TaskIdx};
use crate::coordinate::{Coordinate, MAX_COORDINATE, MAX_DIMS};
use crate::divisor::Divisor;
use crate::graph::level_stride;
use crate::roi::Roi;
use crate::task::{Fit, TaskSpec};

/// The most levels a task may have: each level keeps its offset and its
/// conflict offsets in memory, and read/write conflicts make a level per
/// write shape that fits in the read context (8 for a typical 3-D task).
pub const MAX_LEVELS: u64 = 1 << 16;

/// The geometry of one task's blocks. `Copy` so that lazy block iterators
/// can own one without borrowing the graph.
#[derive(Clone, Copy, Debug)]
pub struct BlockGrid {
    pub task: TaskIdx,
    pub total_read: Roi,
    /// `TW`: the total read region shrunk by the block context.
    pub total_write: Roi,
    pub read_shape: Coordinate,
    pub write_shape: Coordinate,
    /// How far the write region begins after the read region begins.
    pub context_begin: Coordinate,
    /// How far the read region ends after the write region ends.
    pub context_end: Coordinate,
    pub fit: Fit,
    /// The fit rule keeps a block at grid position `k` when
    /// `0 <= k < position_end` in every dimension.
    pub position_end: Coordinate,
    /// Grid cells (positions divided by the write shape) kept by the fit
    /// rule: `0 <= j < cell_end`.
    cell_end: Coordinate,
    /// Cell `j`'s index in the total read region, from which its id comes,
    /// is `j + id_origin` (the context may not be a multiple of the write
    /// shape).
    id_origin: Coordinate,
    /// The unclipped block at grid position 0, which [`Self::place`] moves.
    template: Block,
    /// The write shape, to divide positions into cells.
    cell_size: Divisor,
}

impl BlockGrid {
    /// The grid of a task whose geometry passed [`geometry_problems`].
    pub fn new(task: TaskIdx, spec: &TaskSpec) -> Self {
        let context_begin = spec.write_roi.begin() - spec.read_roi.begin();
        let context_end = spec.read_roi.end() - spec.write_roi.end();
        let total_write = spec.total_roi.grow(-context_begin, -context_end);
        let write_shape = spec.write_roi.shape();
        // Valid keeps a block whose write region fits, the others one whose
        // write region begins inside the total write region.
        let rounding = match spec.fit {
            Fit::Valid => write_shape,
            Fit::Overhang | Fit::Shrink => Coordinate::splat(write_shape.dims(), 1),
        };
        let position_end = total_write.shape() + 1 - rounding;
        Self {
            task,
            total_read: spec.total_roi,
            total_write,
            read_shape: spec.read_roi.shape(),
            write_shape,
            context_begin,
            context_end,
            fit: spec.fit,
            position_end,
            cell_end: position_end.div_ceil(&write_shape).map(|n| n.max(0)),
            id_origin: context_begin / write_shape,
            cell_size: Divisor::new(write_shape),
            template: Block::new(
                task,
                &spec.total_roi,
                Roi::new(spec.total_roi.offset(), spec.read_roi.shape()),
                Roi::new(total_write.offset(), write_shape),
            ),
        }
    }

    /// The block at grid position `k`, or `None` if the fit rule drops it.
    #[inline]
    pub fn block_at(&self, k: Coordinate) -> Option<Block> {
        let kept = (0..k.dims()).all(|d| 0 <= k[d] && k[d] < self.position_end[d]);
        kept.then(|| {
            let mut block = self.template;
            self.place(k, (self.context_begin + k) / self.write_shape, &mut block);
            block
        })
    }

    /// The block in grid cell `j` (grid position `j * write_shape`), or
    /// `None` if the fit rule drops it. The graph's hot path: no division.
    #[inline]
    pub fn block_in_cell(&self, j: Coordinate) -> Option<Block> {
        self.holds_cell(j).then(|| self.block_in_held_cell(j))
    }

    /// The block in grid cell `j`, which [`Self::holds_cell`] accepts.
    #[inline(always)]
    pub(crate) fn block_in_held_cell(&self, j: Coordinate) -> Block {
        debug_assert!(self.holds_cell(j), "cell {j} is off the grid");
        let mut block = self.template;
        self.place_in_cell(j, &mut block);
        block
    }

    /// True if the fit rule keeps the block in grid cell `j`.
    #[inline]
    pub fn holds_cell(&self, j: Coordinate) -> bool {
        (0..j.dims()).all(|d| 0 <= j[d] && j[d] < self.cell_end[d])
    }

    /// Appends the block in grid cell `j`, which [`Self::holds_cell`]
    /// accepted, to `out`. Built where it lies: a block is 304 bytes, and a
    /// copy of one just built stalls on store forwarding.
    #[inline]
    pub fn push_block_in_cell(&self, j: Coordinate, out: &mut Vec<Block>) {
        out.push(self.template);
        if let Some(block) = out.last_mut() {
            self.place_in_cell(j, block);
        }
    }

    /// [`Self::push_block_in_cell`] for a grid of `D` dimensions whose fit
    /// rule clips nothing (not shrink): only the `D` used slots are
    /// computed and stored, where the general path moves all
    /// [`MAX_DIMS`].
    #[inline(always)]
    pub(crate) fn push_unclipped_block_in_cell<const D: usize>(
        &self,
        j: [i64; D],
        out: &mut Vec<Block>,
    ) {
        debug_assert!(self.fit != Fit::Shrink && D == self.cell_end.dims());
        out.push(self.template);
        let Some(block) = out.last_mut() else { return };
        let index: [i64; D] = std::array::from_fn(|d| j[d] + self.id_origin[d]);
        block.id.spatial = cantor_number_of(&index);
        for (d, j) in j.into_iter().enumerate() {
            let k = j * self.write_shape[d];
            (block.read_roi).set_offset_at(d, self.total_read.offset()[d] + k);
            (block.write_roi).set_offset_at(d, self.total_write.offset()[d] + k);
        }
    }

    /// Turns `block`, a block of this grid, into the block in grid cell
    /// `j`, which [`Self::holds_cell`] accepted, in place: cheaper than
    /// building a new one, which is 304 bytes to copy.
    #[inline(always)]
    pub fn move_to_cell(&self, j: Coordinate, block: &mut Block) {
        if self.fit == Fit::Shrink {
            // Its ROIs may be clipped; the next cell's clip starts afresh.
            *block = self.template;
        }
        self.place_in_cell(j, block);
    }

    /// Some block of this grid, to move with [`Self::move_to_cell`].
    pub fn some_block(&self) -> &Block {
        &self.template
    }

    #[inline(always)]
    fn place_in_cell(&self, j: Coordinate, block: &mut Block) {
        self.place(j * self.write_shape, j + self.id_origin, block);
    }

    /// Turns `block`, a copy of `template`, into the block at grid
    /// position `k` whose write region has grid index `index` in the total
    /// read region.
    #[inline(always)]
    fn place(&self, k: Coordinate, index: Coordinate, block: &mut Block) {
        // The id comes from the unclipped write region; shrink clips after.
        block.id.spatial = cantor_number(&index);
        block.read_roi.set_offset(self.total_read.offset() + k);
        block.write_roi.set_offset(self.total_write.offset() + k);
        if self.fit == Fit::Shrink {
            block.read_roi = self.total_read.intersect(&block.read_roi);
            block.write_roi = self.total_write.intersect(&block.write_roi);
        }
    }

    /// The grid position of a block of this task.
    #[inline]
    pub fn position_of(&self, block: &Block) -> Coordinate {
        block.read_roi.offset() - self.total_read.offset()
    }

    /// The grid cell of a block of this task; `None` if its position is
    /// not on the grid (not a block of this task).
    #[inline]
    pub fn cell_of(&self, block: &Block) -> Option<Coordinate> {
        let position = self.position_of(block);
        let (cell, offgrid) = self.cell_size.div_rem(position);
        offgrid.all(|r| r == 0).then_some(cell)
    }

    /// Cells per dimension that the fit rule keeps.
    pub fn cells(&self) -> Coordinate {
        self.cell_end
    }

    /// The row-major position of a block of this task among the grid's
    /// cells (last dimension fastest): a dense key for per-block state,
    /// 8 bytes where the block is 304. Below the task's block count, which
    /// the geometry check keeps within u64.
    #[inline]
    pub fn cell_index_of(&self, block: &Block) -> u64 {
        let (cell, _) = self.cell_size.div_rem(self.position_of(block));
        self.index_of_cell(cell)
    }

    /// The row-major position of grid cell `j` (see [`Self::cell_index_of`]).
    #[inline]
    pub fn index_of_cell(&self, j: Coordinate) -> u64 {
        (0..j.dims()).fold(0, |index, d| {
            index * self.cell_end[d] as u64 + j[d].max(0) as u64
        })
    }

    /// The block at row-major cell position `index` (the inverse of
    /// [`Self::cell_index_of`]); `None` past the last cell.
    pub fn block_at_cell_index(&self, index: u64) -> Option<Block> {
        self.block_in_cell(self.cell_at_index(index)?)
    }

    /// The grid cell at row-major position `index` (the inverse of
    /// [`Self::index_of_cell`]); `None` past the last cell.
    #[inline]
    pub fn cell_at_index(&self, mut index: u64) -> Option<Coordinate> {
        let mut cell = self.cell_end;
        for d in (0..cell.dims()).rev() {
            let n = cell[d].max(1) as u64;
            cell.set(d, (index % n) as i64);
            index /= n;
        }
        (index == 0).then_some(cell)
    }

    /// Blocks whose write region, as far as other tasks see it (clipped to
    /// the total write region), overlaps `region`, in row-major order.
    pub fn blocks_writing(&self, region: &Roi) -> Vec<Block> {
        self.cells_overlapping(&region.intersect(&self.total_write))
    }

    /// Blocks whose read region, as the block carries it (clipped to the
    /// total for shrink), overlaps `region`, in row-major order.
    pub fn blocks_reading(&self, region: &Roi) -> Vec<Block> {
        let region = match self.fit {
            Fit::Shrink => region.intersect(&self.total_read),
            Fit::Valid | Fit::Overhang => *region,
        };
        if region.is_empty() {
            return Vec::new();
        }
        // A read region reaches `context_begin` before its write region and
        // `context_end` past it, so the write regions that matter lie that
        // far the other way round. (daisy 2.0 grows the wrong way, which
        // only shows with asymmetric contexts.)
        self.cells_overlapping(&region.grow(self.context_end, self.context_begin))
    }

    /// Blocks whose unclipped write region overlaps `region`. Not clipped
    /// to the total write region: an overhanging block's cell sticks out of
    /// it, and what it reads there still counts.
    fn cells_overlapping(&self, region: &Roi) -> Vec<Block> {
        if region.is_empty() {
            return Vec::new();
        }
        let origin = self.total_write.offset();
        let begin = ((region.begin() - origin) / self.write_shape).map(|j| j.max(0));
        let end = (region.end() - origin)
            .div_ceil(&self.write_shape)
            .min(&self.cell_end);
        GridWalk::new(begin, end)
            .filter_map(|j| self.block_in_cell(j))
            .collect()
    }
}

/// An odometer over the integer box `[begin, end)` stepping by `step`,
/// last dimension fastest; allocation-free.
#[derive(Clone, Debug)]
pub struct GridWalk {
    begin: Coordinate,
    end: Coordinate,
    step: Coordinate,
    next: Option<Coordinate>,
}

impl GridWalk {
    pub fn new(begin: Coordinate, end: Coordinate) -> Self {
        Self::with_step(begin, end, Coordinate::splat(begin.dims(), 1))
    }

    pub fn with_step(begin: Coordinate, end: Coordinate, step: Coordinate) -> Self {
        let empty = (0..begin.dims()).any(|d| begin[d] >= end[d]);
        Self {
            begin,
            end,
            step,
            next: (!empty).then_some(begin),
        }
    }
}

impl Iterator for GridWalk {
    type Item = Coordinate;

    #[inline]
    fn next(&mut self) -> Option<Coordinate> {
        let current = self.next?;
        // Advance in place: a fresh copy written slot by slot and copied
        // back at once stalls on store forwarding (hot in the graph).
        let advanced = self.next.as_mut()?;
        for d in (0..current.dims()).rev() {
            let v = advanced[d] + self.step[d];
            if v < self.end[d] {
                advanced.set(d, v);
                return Some(current);
            }
            advanced.set(d, self.begin[d]);
        }
        self.next = None;
        Some(current)
    }
}

/// One thing wrong with a task's geometry, naming the field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeometryProblem {
    pub field: &'static str,
    pub message: String,
    /// The regions are sound but leave no block. A pipeline file refuses
    /// such a task (its downstream tasks would wait for output that never
    /// comes); daisy runs it with no blocks, and so does the Python package.
    pub holds_no_block: bool,
}

impl GeometryProblem {
    fn new(field: &'static str, message: String) -> Self {
        Self {
            field,
            message,
            holds_no_block: false,
        }
    }
}

/// Everything wrong with a task's ROIs, all at once: dimension counts,
/// coordinates beyond [`MAX_COORDINATE`], non-positive shapes; once those
/// are right, a write region outside the read region, and then a task
/// with no block at all or with more than 64-bit counters hold.
pub fn geometry_problems(spec: &TaskSpec) -> Vec<GeometryProblem> {
    let rois = [
        ("total_roi", spec.total_roi),
        ("read_roi", spec.read_roi),
        ("write_roi", spec.write_roi),
    ];
    let dims = spec.total_roi.dims();
    let mut problems: Vec<GeometryProblem> = (rois.iter())
        .flat_map(|&(field, roi)| roi_problems(field, &roi, dims))
        .collect();
    if problems.is_empty() && !spec.read_roi.contains_roi(&spec.write_roi) {
        problems.push(GeometryProblem::new(
            "write_roi",
            format!("{} lies outside read_roi {}", spec.write_roi, spec.read_roi),
        ));
    }
    if problems.is_empty() {
        problems.extend(block_count_problem(spec));
    }
    let writes = spec.writes.iter().filter_map(|grid| grid.problem(dims));
    problems.extend(writes.map(|message| GeometryProblem::new("writes", message)));
    problems
}

/// What is wrong with one ROI on its own, or against `dims`, the
/// dimensions of the total ROI.
fn roi_problems(field: &'static str, roi: &Roi, dims: usize) -> Vec<GeometryProblem> {
    let mut problems = Vec::new();
    let mut report = |message| problems.push(GeometryProblem::new(field, message));
    if roi.dims() == 0 || roi.dims() > MAX_DIMS {
        report(format!(
            "has {} dimensions, expected 1 to {MAX_DIMS}",
            roi.dims()
        ));
    } else if roi.dims() != dims {
        report(format!(
            "has {} dimensions but total_roi has {dims}",
            roi.dims()
        ));
    }
    let beyond = |c: Coordinate| c.iter().find(|v| v.unsigned_abs() > MAX_COORDINATE);
    if let Some(v) = beyond(roi.offset()).or(beyond(roi.shape())) {
        report(format!(
            "{roi} has an entry {v}, beyond the supported ±{MAX_COORDINATE}"
        ));
    }
    if !roi.shape().all(|s| s > 0) {
        report(format!(
            "shape {} must be positive in every dimension",
            roi.shape()
        ));
    }
    problems
}

/// A task whose regions leave no block (its downstream tasks would wait
/// for output that never comes), or more blocks than 64-bit counters and
/// block ids hold. Needs regions that passed [`roi_problems`], whose
/// coordinates are small enough for the arithmetic here.
fn block_count_problem(spec: &TaskSpec) -> Option<GeometryProblem> {
    let grid = BlockGrid::new(TaskIdx(0), spec);
    let per_axis = blocks_per_axis(&grid);
    let count = (per_axis.iter()).try_fold(1u64, |n, k| n.checked_mul(k.max(0) as u64));
    let problem = match count {
        Some(0) => {
            return Some(GeometryProblem {
                holds_no_block: true,
                ..GeometryProblem::new("total_roi", no_blocks(spec, &grid))
            })
        }
        Some(_) => return level_count_problem(spec, &grid),
        None => format!(
            "{} splits into {per_axis} blocks per axis, more than 2^64 in all",
            spec.total_roi
        ),
    };
    Some(GeometryProblem::new("total_roi", problem))
}

/// A read region so much larger than the write region that conflicts put
/// blocks in more levels than [`MAX_LEVELS`] (the graph keeps each level's
/// offset and conflicts in memory).
fn level_count_problem(spec: &TaskSpec, grid: &BlockGrid) -> Option<GeometryProblem> {
    let per_axis = level_stride(grid, spec.read_write_conflict) / grid.write_shape;
    let levels = (per_axis.iter()).try_fold(1u64, |n, k| n.checked_mul(k as u64));
    if levels.is_some_and(|n| n <= MAX_LEVELS) {
        return None;
    }
    let message = format!(
        "{} around write_roi {} puts the blocks in {per_axis} levels per axis, more than \
         {MAX_LEVELS} in all; use a larger write_roi or read_write_conflict = false",
        spec.read_roi, spec.write_roi
    );
    Some(GeometryProblem::new("read_roi", message))
}

/// How many grid positions the fit rule keeps along each axis (negative
/// when the total write region is smaller than the rule needs).
fn blocks_per_axis(grid: &BlockGrid) -> Coordinate {
    let ws = grid.write_shape;
    let needed = match grid.fit {
        Fit::Valid => ws,
        Fit::Overhang | Fit::Shrink => Coordinate::splat(ws.dims(), 1),
    };
    (grid.total_write.shape() + 1 - needed).div_ceil(&ws)
}

fn no_blocks(spec: &TaskSpec, grid: &BlockGrid) -> String {
    let room = match spec.fit {
        Fit::Valid => format!(
            "no room for a whole write_roi of shape {}",
            grid.write_shape
        ),
        Fit::Overhang | Fit::Shrink => "which is empty".to_string(),
    };
    format!(
        "{} holds no block: read_roi {} and write_roi {} leave a total write region \
         {}, {room} (fit = \"{}\")",
        spec.total_roi, spec.read_roi, spec.write_roi, grid.total_write, spec.fit
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_walk_runs_last_dimension_fastest() {
        let walk: Vec<Coordinate> = GridWalk::new([0, 0].into(), [2, 3].into()).collect();
        let expected: Vec<Coordinate> = [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
            .into_iter()
            .map(Coordinate::from)
            .collect();
        assert_eq!(walk, expected);
        assert_eq!(GridWalk::new([0, 5].into(), [2, 5].into()).count(), 0);
        let stepped: Vec<Coordinate> =
            GridWalk::with_step([1].into(), [8].into(), [3].into()).collect();
        assert_eq!(stepped, vec![[1].into(), [4].into(), [7].into()]);
    }

    #[test]
    fn shrink_cuts_border_blocks_to_the_totals() {
        let mut spec = TaskSpec::new(
            "t",
            Roi::from_slices(&[0], &[11]),
            Roi::from_slices(&[0], &[4]),
            Roi::from_slices(&[1], &[2]),
        );
        spec.fit = Fit::Shrink;
        let grid = BlockGrid::new(TaskIdx(0), &spec);
        let block = grid.block_at([6].into()).unwrap();
        assert_eq!(block.write_roi, Roi::from_slices(&[7], &[2]));
        let last = grid.block_at([8].into()).unwrap();
        assert_eq!(last.write_roi, Roi::from_slices(&[9], &[1]));
        assert_eq!(last.read_roi, Roi::from_slices(&[8], &[3]));
        spec.fit = Fit::Valid;
        assert!(BlockGrid::new(TaskIdx(0), &spec)
            .block_at([8].into())
            .is_none());
    }

    #[test]
    fn cell_indices_number_the_blocks_row_major_and_back() {
        for fit in [Fit::Valid, Fit::Overhang, Fit::Shrink] {
            let spec = TaskSpec {
                fit,
                ..TaskSpec::new(
                    "t",
                    Roi::from_slices(&[-3, 5], &[14, 11]),
                    Roi::from_slices(&[0, 0], &[5, 4]),
                    Roi::from_slices(&[1, 1], &[3, 2]),
                )
            };
            let grid = BlockGrid::new(TaskIdx(0), &spec);
            let cells = grid.cells();
            let blocks: Vec<Block> = GridWalk::new(Coordinate::zeros(2), cells)
                .map(|j| grid.block_in_cell(j).unwrap())
                .collect();
            for (index, block) in blocks.iter().enumerate() {
                assert_eq!(grid.cell_index_of(block), index as u64, "{fit:?}");
                assert_eq!(grid.block_at_cell_index(index as u64), Some(*block));
            }
            assert_eq!(grid.block_at_cell_index(blocks.len() as u64), None);
        }
    }

    proptest::proptest! {
        /// The scheduler builds each block it hands out by moving one block
        /// from cell to cell, in whatever order blocks become ready: each
        /// must come out as the block of its cell, for every fit rule.
        #[test]
        fn a_block_moved_from_cell_to_cell_is_the_block_of_that_cell(
            dims in 1usize..=MAX_DIMS,
            fit in 0usize..3,
            sizes in proptest::collection::vec((1i64..7, 1i64..4, 0i64..3, -2i64..3), MAX_DIMS),
            order in proptest::collection::vec(proptest::num::u64::ANY, 1..40),
        ) {
            // Per dimension: total write shape, write shape, context,
            // total offset.
            let sizes = &sizes[..dims];
            let per_dim = |f: fn(&(i64, i64, i64, i64)) -> i64| {
                Coordinate::new(&sizes.iter().map(f).collect::<Vec<_>>())
            };
            let spec = TaskSpec {
                fit: [Fit::Valid, Fit::Overhang, Fit::Shrink][fit],
                ..TaskSpec::new(
                    "t",
                    Roi::new(per_dim(|s| s.3), per_dim(|s| s.0 + 2 * s.2)),
                    Roi::new(Coordinate::zeros(dims), per_dim(|s| s.1 + 2 * s.2)),
                    Roi::new(per_dim(|s| s.2), per_dim(|s| s.1)),
                )
            };
            proptest::prop_assume!(geometry_problems(&spec).is_empty());
            let grid = BlockGrid::new(TaskIdx(0), &spec);
            let cells: u64 = grid.cells().iter().map(|n| n as u64).product();
            proptest::prop_assume!(cells > 0);
            let mut block = *grid.some_block();
            for index in order.iter().map(|i| i % cells) {
                let cell = grid.cell_at_index(index).unwrap();
                proptest::prop_assert_eq!(grid.index_of_cell(cell), index);
                grid.move_to_cell(cell, &mut block);
                proptest::prop_assert_eq!(Some(block), grid.block_in_cell(cell), "{:?}", spec);
                proptest::prop_assert_eq!(grid.cell_index_of(&block), index);
            }
            proptest::prop_assert_eq!(grid.cell_at_index(cells), None);
        }
    }

    #[test]
    fn geometry_problems_are_all_reported() {
        let spec = TaskSpec::new(
            "t",
            Roi::from_slices(&[0, 0], &[10, 0]),
            Roi::from_slices(&[0], &[4]),
            Roi::from_slices(&[0, 0], &[-1, 2]),
        );
        let fields: Vec<&str> = geometry_problems(&spec).iter().map(|p| p.field).collect();
        assert_eq!(fields, vec!["total_roi", "read_roi", "write_roi"]);
        let outside = TaskSpec::new(
            "t",
            Roi::from_slices(&[0], &[10]),
            Roi::from_slices(&[0], &[4]),
            Roi::from_slices(&[2], &[4]),
        );
        let problems = geometry_problems(&outside);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].message.contains("outside read_roi"),
            "{problems:?}"
        );
    }

    fn one_dim(total: i64, read: i64, write: (i64, i64), fit: Fit) -> TaskSpec {
        TaskSpec {
            fit,
            ..TaskSpec::new(
                "t",
                Roi::from_slices(&[0], &[total]),
                Roi::from_slices(&[0], &[read]),
                Roi::from_slices(&[write.0], &[write.1]),
            )
        }
    }

    #[test]
    fn a_task_without_blocks_names_its_regions() {
        let problems = geometry_problems(&one_dim(10, 12, (2, 8), Fit::Valid));
        assert_eq!(
            problems,
            [GeometryProblem {
                holds_no_block: true,
                ..GeometryProblem::new(
                    "total_roi",
                    "{offset [0], shape [10]} holds no block: read_roi {offset [0], shape [12]} \
                     and write_roi {offset [2], shape [8]} leave a total write region \
                     {offset [2], shape [6]}, no room for a whole write_roi of shape [8] \
                     (fit = \"valid\")"
                        .into()
                )
            }]
        );
        let overhang = geometry_problems(&one_dim(10, 14, (1, 2), Fit::Overhang));
        assert!(
            overhang[0]
                .message
                .ends_with("{offset [1], shape [-2]}, which is empty (fit = \"overhang\")"),
            "{overhang:?}"
        );
        // One voxel of total write region is enough for overhang, not valid.
        assert!(geometry_problems(&one_dim(11, 12, (1, 2), Fit::Shrink)).is_empty());
        assert_eq!(
            geometry_problems(&one_dim(11, 12, (1, 2), Fit::Valid)).len(),
            1
        );
    }

    #[test]
    fn huge_regions_are_refused_without_overflow() {
        let max = MAX_COORDINATE as i64;
        let beyond = TaskSpec::new(
            "t",
            Roi::from_slices(&[i64::MAX], &[i64::MAX]),
            Roi::from_slices(&[0], &[1]),
            Roi::from_slices(&[0], &[1]),
        );
        let problems = geometry_problems(&beyond);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0]
            .message
            .contains("beyond the supported ±1099511627776"));
        let block = Roi::from_slices(&[0; 8], &[1; 8]);
        let many = TaskSpec::new("t", Roi::from_slices(&[0; 8], &[max; 8]), block, block);
        let problems = geometry_problems(&many);
        assert!(
            problems[0].message.contains("more than 2^64 in all"),
            "{problems:?}"
        );
        let wide_context = one_dim(max, max / 2, (max / 4, 1), Fit::Valid);
        let problems = geometry_problems(&wide_context);
        assert_eq!(problems[0].field, "read_roi");
        assert!(
            problems[0].message.contains("levels per axis"),
            "{problems:?}"
        );
        let no_conflict = TaskSpec {
            read_write_conflict: false,
            ..wide_context
        };
        assert!(geometry_problems(&no_conflict).is_empty());
    }
}
