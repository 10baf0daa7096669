//! The blockwise dependency graph, with daisy 2.0's semantics.
//!
//! Terms:
//! - **level**: a set of blocks of one task that can run at the same time
//!   because no block's read region overlaps another's write region.
//!   Without read/write conflicts a task has one level. With them, blocks
//!   are spaced `stride` apart and the levels are the offsets of that
//!   lattice; level L depends only on level L-1.
//! - **conflict offsets**: the grid steps from a block of level L to the
//!   blocks of level L-1 it has to wait for.
//! - **upstream/downstream**: the blocks a block waits for, and the blocks
//!   that wait for it, within its task (through conflict offsets) and
//!   across tasks (write region of the upstream task's block overlaps the
//!   read region of the downstream task's block).
//!
//! Nothing here stores blocks: they are computed from their position, so
//! enumeration is lazy and a graph over a billion blocks costs a few
//! hundred bytes. The scheduler keeps a few bits per block, and ready
//! blocks by their cell index.

use crate::block::{Block, TaskIdx};
use crate::coordinate::Coordinate;
use crate::divisor::Divisor;
use crate::geometry::{geometry_problems, BlockGrid, GridWalk};
use crate::roi::Roi;
use crate::task::{Fit, TaskSpec};
use std::fmt;

/// The levels of one task and how they depend on each other, in grid
/// cells (grid positions divided by the write shape), so that the hot
/// path (a block's level, its neighbours, their ids) needs no division
/// beyond finding the block's cell.
#[derive(Clone, Debug)]
pub struct TaskGraph {
    grid: BlockGrid,
    /// Spacing of the blocks within one level.
    stride: Coordinate,
    /// Spacing of the blocks within one level, in cells (`stride /
    /// write_shape`): also the number of level offsets per dimension.
    radix: Divisor,
    /// Per level, the cell of its first block.
    level_cells: Vec<Coordinate>,
    /// Per level, the steps to the blocks of the previous level it waits
    /// for, in the order of the ids they lead to (see [`in_id_order`]).
    waits_for: Vec<Vec<Coordinate>>,
    /// Per level, the steps to the blocks of the next level that wait for
    /// it, in id order.
    waited_by: Vec<Vec<Coordinate>>,
}

impl TaskGraph {
    /// The graph of a task whose geometry passed [`geometry_problems`].
    pub fn new(task: TaskIdx, spec: &TaskSpec) -> Self {
        let grid = BlockGrid::new(task, spec);
        let stride = level_stride(&grid, spec.read_write_conflict);
        let radix = stride / grid.write_shape;
        let level_cells = level_cells(radix);
        let waits_for: Vec<Vec<Coordinate>> = (0..level_cells.len())
            .map(|level| match level {
                0 => Vec::new(),
                _ if !spec.read_write_conflict => Vec::new(),
                _ => conflict_steps(level_cells[level - 1] - level_cells[level], radix),
            })
            .map(in_id_order)
            .collect();
        let waited_by = (0..level_cells.len())
            .map(|level| match waits_for.get(level + 1) {
                Some(up) => up.iter().map(|&s| -s).collect(),
                None => Vec::new(),
            })
            .map(in_id_order)
            .collect();
        Self {
            grid,
            stride,
            radix: Divisor::new(radix),
            level_cells,
            waits_for,
            waited_by,
        }
    }

    pub fn grid(&self) -> &BlockGrid {
        &self.grid
    }

    pub fn num_levels(&self) -> usize {
        self.level_cells.len()
    }

    pub fn stride(&self) -> Coordinate {
        self.stride
    }

    /// Number of blocks of `level`, computed without enumerating them.
    pub fn num_level_blocks(&self, level: usize) -> u64 {
        let first = self.level_cells[level];
        let spans = (self.grid.cells() - first).div_ceil(&self.radix.get());
        spans.iter().map(|n| n.max(0) as u64).product()
    }

    /// Number of blocks of the task.
    pub fn num_blocks(&self) -> u64 {
        (0..self.num_levels())
            .map(|l| self.num_level_blocks(l))
            .sum()
    }

    /// The blocks of `level`, lazily, last dimension fastest.
    pub fn level_blocks(&self, level: usize) -> LevelBlocks {
        LevelBlocks {
            grid: self.grid,
            walk: self.level_walk(level),
        }
    }

    /// Calls `f` with each block of `level`, in the order of
    /// [`Self::level_blocks`], each built in place of the one before: no
    /// block is copied, where the iterator copies each into its caller
    /// (half the cost of a level walk).
    pub fn for_each_level_block(&self, level: usize, mut f: impl FnMut(&Block)) {
        let mut block = *self.grid.some_block();
        for cell in self.level_walk(level) {
            // The walk stays within the grid's cells, which the fit rule keeps.
            self.grid.move_to_cell(cell, &mut block);
            f(&block);
        }
    }

    /// The cells of the blocks of `level`, in the order of
    /// [`Self::level_blocks`].
    pub fn level_walk(&self, level: usize) -> GridWalk {
        GridWalk::with_step(self.level_cells[level], self.grid.cells(), self.radix.get())
    }

    /// Every block of the task, level by level.
    pub fn all_blocks(&self) -> impl Iterator<Item = Block> + '_ {
        (0..self.num_levels()).flat_map(|level| self.level_blocks(level))
    }

    /// The region the blocks of this task write, as far as other tasks
    /// see it (clipped to the total write region).
    pub fn written_region(&self) -> Roi {
        let ws = self.grid.write_shape;
        Roi::new(self.grid.total_write.offset(), self.grid.cells() * ws)
            .intersect(&self.grid.total_write)
    }

    /// True if the read region of every block of this task overlaps
    /// `region`. Read regions move monotonically with the grid position,
    /// so checking the first and the last position per dimension is enough.
    pub fn every_read_overlaps(&self, region: &Roi) -> bool {
        let total = self.grid.total_read;
        (0..total.dims()).all(|d| {
            let ws = self.grid.write_shape[d];
            let last = (self.grid.position_end[d] - 1).div_euclid(ws) * ws;
            let first_end = (total.begin()[d] + self.grid.read_shape[d]).min(total.end()[d]);
            total.begin()[d] + last < region.end()[d] && first_end > region.begin()[d]
        })
    }

    /// The level of a block of this task (`None` if it is not one).
    pub fn level_of(&self, block: &Block) -> Option<usize> {
        self.grid
            .cell_of(block)
            .map(|cell| self.level_of_cell(cell))
    }

    /// The level of the block in `cell`: its cell's residue modulo the
    /// radix, as a number in that mixed radix, counted from the last level.
    #[inline]
    fn level_of_cell(&self, cell: Coordinate) -> usize {
        let (_, residue) = self.radix.div_rem(cell);
        let radix = self.radix.get();
        let index = (0..residue.dims()).fold(0, |index, d| index * radix[d] + residue[d]);
        self.num_levels() - 1 - index as usize
    }

    /// The blocks of this task that `block` waits for (previous level), in
    /// id order unless ids wrap around.
    #[inline]
    pub fn upstream(&self, block: &Block, out: &mut Vec<Block>) {
        self.neighbours(block, &self.waits_for, out);
    }

    /// The blocks of this task that wait for `block` (next level), in id
    /// order unless ids wrap around.
    pub fn downstream(&self, block: &Block, out: &mut Vec<Block>) {
        self.neighbours(block, &self.waited_by, out);
    }

    /// The blocks `steps[level of block]` away from `block`.
    #[inline]
    fn neighbours(&self, block: &Block, steps: &[Vec<Coordinate>], out: &mut Vec<Block>) {
        if self.num_levels() == 1 {
            // One level (no conflicts, or no context): no neighbours, and
            // no need to find the block's level.
            return;
        }
        let Some(cell) = self.grid.cell_of(block) else {
            return;
        };
        let steps = &steps[self.level_of_cell(cell)];
        out.reserve(steps.len());
        // Coordinates hold MAX_DIMS slots; for the usual few dimensions,
        // computing and storing only the used ones saves a quarter of the
        // lookup (graph bench).
        match (self.grid.fit, cell.dims()) {
            (Fit::Shrink, _) => self.push_neighbours(cell, steps, out),
            (_, 1) => self.push_unclipped_neighbours::<1>(cell, steps, out),
            (_, 2) => self.push_unclipped_neighbours::<2>(cell, steps, out),
            (_, 3) => self.push_unclipped_neighbours::<3>(cell, steps, out),
            (_, 4) => self.push_unclipped_neighbours::<4>(cell, steps, out),
            _ => self.push_neighbours(cell, steps, out),
        }
    }

    /// Appends the blocks `steps` away from `cell` that the grid holds.
    fn push_neighbours(&self, cell: Coordinate, steps: &[Coordinate], out: &mut Vec<Block>) {
        for step in steps {
            let neighbour = cell + *step;
            if self.grid.holds_cell(neighbour) {
                self.grid.push_block_in_cell(neighbour, out);
            }
        }
    }

    /// [`Self::push_neighbours`] in a grid of `D` dimensions whose fit rule
    /// clips nothing.
    #[inline(always)]
    fn push_unclipped_neighbours<const D: usize>(
        &self,
        cell: Coordinate,
        steps: &[Coordinate],
        out: &mut Vec<Block>,
    ) {
        let end = self.grid.cells();
        let (cell, end): ([i64; D], [i64; D]) = (slots(&cell), slots(&end));
        for step in steps {
            let n: [i64; D] = std::array::from_fn(|d| cell[d] + step[d]);
            if (0..D).all(|d| 0 <= n[d] && n[d] < end[d]) {
                self.grid.push_unclipped_block_in_cell(n, out);
            }
        }
    }
}

/// The first `D` components of `c`.
#[inline(always)]
fn slots<const D: usize>(c: &Coordinate) -> [i64; D] {
    std::array::from_fn(|d| c[d])
}

/// Spacing of blocks within one level: far enough apart that no block
/// reads what another writes, capped so that no level is empty.
pub(crate) fn level_stride(grid: &BlockGrid, read_write_conflict: bool) -> Coordinate {
    let ws = grid.write_shape;
    if !read_write_conflict {
        return ws;
    }
    let min_stride = grid.context_begin.max(&grid.context_end) + ws;
    let stride = min_stride.div_ceil(&ws) * ws;
    let total = grid.total_write.shape();
    let cap = match grid.fit {
        Fit::Valid => total - total % ws,
        Fit::Overhang | Fit::Shrink => total + (-total) % ws,
    };
    // A total region smaller than one block makes the cap 0 or negative;
    // daisy 2.0 divides by zero there. One block of spacing gives the
    // right answer: no blocks at all.
    stride.min(&cap).max(&ws)
}

/// The first cell of each level: every cell below the radix, last
/// dimension fastest, then reversed (daisy's order).
fn level_cells(radix: Coordinate) -> Vec<Coordinate> {
    let mut cells: Vec<Coordinate> =
        GridWalk::new(Coordinate::zeros(radix.dims()), radix).collect();
    cells.reverse();
    cells
}

/// The steps from a block of one level to the blocks of the previous
/// level (`to_previous` cells away on the lattice) that overlap it: per
/// dimension that step and its neighbour one radix towards zero.
fn conflict_steps(to_previous: Coordinate, radix: Coordinate) -> Vec<Coordinate> {
    let choices: Vec<Vec<i64>> = (0..to_previous.dims())
        .map(|d| {
            let op = to_previous[d];
            match op.cmp(&0) {
                std::cmp::Ordering::Less => vec![op, op + radix[d]],
                std::cmp::Ordering::Equal => vec![0],
                std::cmp::Ordering::Greater => vec![op - radix[d], op],
            }
        })
        .collect();
    let counts: Vec<i64> = choices.iter().map(|c| c.len() as i64).collect();
    GridWalk::new(Coordinate::zeros(counts.len()), Coordinate::new(&counts))
        .map(|pick| {
            let values: Vec<i64> = (0..pick.dims())
                .map(|d| choices[d][pick[d] as usize])
                .collect();
            Coordinate::new(&values)
        })
        .collect()
}

/// `steps` sorted so that, from any cell, the cells they lead to come in
/// the order of their ids. A Cantor id orders cells by the sum of all
/// their indices, then of all but the last, and so on; adding one cell to
/// all steps shifts those sums alike, so the order does not depend on the
/// cell (as long as ids do not wrap around u64). The graph then hands out
/// blocks already sorted, and sorting them moves nothing.
fn in_id_order(mut steps: Vec<Coordinate>) -> Vec<Coordinate> {
    steps.sort_by_key(|step| {
        let mut sums: Vec<i64> = step
            .iter()
            .scan(0, |sum, x| {
                *sum += x;
                Some(*sum)
            })
            .collect();
        sums.reverse();
        sums
    });
    steps
}

/// Lazy iterator over the blocks of one level.
#[derive(Clone, Debug)]
pub struct LevelBlocks {
    grid: BlockGrid,
    walk: GridWalk,
}

impl Iterator for LevelBlocks {
    type Item = Block;

    #[inline]
    fn next(&mut self) -> Option<Block> {
        // The walk stays within the grid's cells, which the fit rule keeps.
        let cell = self.walk.next()?;
        Some(self.grid.block_in_held_cell(cell))
    }
}

/// Why a set of task specs cannot form a graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("task {task:?}: {field} {message}")]
    Geometry {
        task: String,
        field: &'static str,
        message: String,
    },
    #[error("task {task:?}: upstream task #{index} does not exist")]
    UnknownUpstream { task: String, index: u32 },
    #[error("task {task:?}: upstream task {upstream:?} has {upstream_dims} dimensions, this task has {dims}")]
    UpstreamDimensions {
        task: String,
        upstream: String,
        upstream_dims: usize,
        dims: usize,
    },
    #[error("the upstream relation has a cycle through task {task:?}")]
    Cycle { task: String },
}

/// The graph of a whole pipeline: one [`TaskGraph`] per task plus the
/// dependencies between tasks.
#[derive(Clone, Debug)]
pub struct DependencyGraph {
    tasks: Vec<TaskSpec>,
    graphs: Vec<TaskGraph>,
    downstream_tasks: Vec<Vec<TaskIdx>>,
}

impl DependencyGraph {
    /// Builds the graph; refuses geometry problems, dangling upstream
    /// indices and cycles (the driver validates pipeline files with
    /// friendlier messages before it gets here).
    pub fn new(tasks: Vec<TaskSpec>) -> Result<Self, GraphError> {
        check_tasks(&tasks)?;
        let graphs = tasks
            .iter()
            .enumerate()
            .map(|(i, spec)| TaskGraph::new(TaskIdx(i as u32), spec))
            .collect();
        let mut downstream_tasks = vec![Vec::new(); tasks.len()];
        for (i, spec) in tasks.iter().enumerate() {
            for up in &spec.upstream {
                downstream_tasks[up.index()].push(TaskIdx(i as u32));
            }
        }
        Ok(Self {
            tasks,
            graphs,
            downstream_tasks,
        })
    }

    pub fn num_tasks(&self) -> usize {
        self.tasks.len()
    }

    pub fn task_indices(&self) -> impl Iterator<Item = TaskIdx> {
        (0..self.tasks.len() as u32).map(TaskIdx)
    }

    pub fn task(&self, task: TaskIdx) -> &TaskSpec {
        &self.tasks[task.index()]
    }

    pub fn task_graph(&self, task: TaskIdx) -> &TaskGraph {
        &self.graphs[task.index()]
    }

    /// The position of the task with the id users wrote.
    pub fn task_index(&self, id: &str) -> Option<TaskIdx> {
        self.tasks
            .iter()
            .position(|t| t.id == id)
            .map(|i| TaskIdx(i as u32))
    }

    pub fn is_root(&self, task: TaskIdx) -> bool {
        self.task(task).upstream.is_empty()
    }

    pub fn downstream_tasks(&self, task: TaskIdx) -> &[TaskIdx] {
        &self.downstream_tasks[task.index()]
    }

    /// False if no block waits for any block of `task` (one level, no
    /// downstream tasks): a done block then unlocks nothing, found without
    /// looking at the block.
    pub fn has_downstream(&self, task: TaskIdx) -> bool {
        self.task_graph(task).num_levels() > 1 || !self.downstream_tasks(task).is_empty()
    }

    /// Every block `block` waits for, in its task and in upstream tasks,
    /// ordered by spatial id.
    pub fn upstream(&self, block: &Block) -> Vec<Block> {
        let mut out = Vec::new();
        self.upstream_into(block, &mut out);
        out
    }

    /// [`Self::upstream`] into `out`, replacing what it held: callers that
    /// look up many blocks reuse one buffer, as a block's upstream blocks
    /// (up to 8 of 304 bytes in 3-D) are too many for the allocator's
    /// thread cache.
    pub fn upstream_into(&self, block: &Block, out: &mut Vec<Block>) {
        out.clear();
        self.task_graph(block.id.task).upstream(block, out);
        for up in &self.task(block.id.task).upstream {
            out.extend(
                self.graphs[up.index()]
                    .grid()
                    .blocks_writing(&block.read_roi),
            );
        }
        out.sort_by_key(|b| (b.id.spatial, b.id.task));
    }

    /// Every block that waits for `block`, ordered by spatial id.
    pub fn downstream(&self, block: &Block) -> Vec<Block> {
        let mut out = Vec::new();
        if !self.has_downstream(block.id.task) {
            return out;
        }
        self.task_graph(block.id.task).downstream(block, &mut out);
        let total_write = self.task_graph(block.id.task).grid().total_write;
        let written = block.write_roi.intersect(&total_write);
        for down in self.downstream_tasks(block.id.task) {
            out.extend(self.graphs[down.index()].grid().blocks_reading(&written));
        }
        out.sort_by_key(|b| (b.id.spatial, b.id.task));
        out
    }

    /// Blocks of a task with upstream tasks that wait for no block at all,
    /// because their read region misses everything the upstream tasks
    /// write. daisy 2.0 seeds only root tasks, so such blocks never run and
    /// the run never ends; the scheduler seeds them instead. The usual
    /// pipeline (overlapping regions) is recognised without enumerating.
    pub fn blocks_without_upstream(&self, task: TaskIdx) -> Vec<Block> {
        let reads_everywhere = self.task(task).upstream.iter().any(|up| {
            let written = self.task_graph(*up).written_region();
            self.task_graph(task).every_read_overlaps(&written)
        });
        if self.is_root(task) || reads_everywhere {
            return Vec::new();
        }
        self.task_graph(task)
            .all_blocks()
            .filter(|b| self.upstream(b).is_empty())
            .collect()
    }

    /// The blocks of `task` whose write region overlaps `region`: what to
    /// look at, reset or re-run for a sub-volume.
    pub fn blocks_in(&self, task: TaskIdx, region: &Roi) -> Vec<Block> {
        self.task_graph(task).grid().blocks_writing(region)
    }
}

fn check_tasks(tasks: &[TaskSpec]) -> Result<(), GraphError> {
    for spec in tasks {
        if let Some(problem) = geometry_problems(spec).into_iter().next() {
            return Err(GraphError::Geometry {
                task: spec.id.clone(),
                field: problem.field,
                message: problem.message,
            });
        }
        for up in &spec.upstream {
            let Some(upstream) = tasks.get(up.index()) else {
                return Err(GraphError::UnknownUpstream {
                    task: spec.id.clone(),
                    index: up.0,
                });
            };
            if upstream.total_roi.dims() != spec.total_roi.dims() {
                return Err(GraphError::UpstreamDimensions {
                    task: spec.id.clone(),
                    upstream: upstream.id.clone(),
                    upstream_dims: upstream.total_roi.dims(),
                    dims: spec.total_roi.dims(),
                });
            }
        }
    }
    match find_cycle(tasks.len(), |i| {
        tasks[i].upstream.iter().map(|u| u.index()).collect()
    }) {
        Some(i) => Err(GraphError::Cycle {
            task: tasks[i].id.clone(),
        }),
        None => Ok(()),
    }
}

/// A node on a cycle of the directed graph with `n` nodes and edges
/// `edges(i)`, if there is one (iterative DFS, so deep chains don't
/// overflow the stack).
pub fn find_cycle(n: usize, edges: impl Fn(usize) -> Vec<usize>) -> Option<usize> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut marks = vec![Mark::New; n];
    for start in 0..n {
        if marks[start] != Mark::New {
            continue;
        }
        let mut stack = vec![(start, edges(start), 0usize)];
        marks[start] = Mark::Open;
        while let Some((node, next, cursor)) = stack.last_mut() {
            let Some(&target) = next.get(*cursor) else {
                marks[*node] = Mark::Done;
                stack.pop();
                continue;
            };
            *cursor += 1;
            match marks.get(target) {
                Some(Mark::Open) => return Some(target),
                Some(Mark::New) => {
                    marks[target] = Mark::Open;
                    stack.push((target, edges(target), 0));
                }
                _ => {}
            }
        }
    }
    None
}

impl fmt::Display for TaskGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} levels of stride {}, {} blocks",
            self.num_levels(),
            self.stride,
            self.num_blocks()
        )
    }
}
