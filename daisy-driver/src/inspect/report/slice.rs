//! The done markers as a picture: per task, one cell per block of a 2-D
//! slice through its block grid, coloured done / failed / orphaned /
//! remaining, the states `status` counts ([`BlockStates::state`]).
//!
//! A 2-D task is shown whole; of a 3-D (or higher) task the slice through
//! the middle of the leading dimensions, the last two as rows and columns;
//! a 1-D task is one row. Beyond [`MAX_CELLS`] blocks per side, a cell
//! stands for several blocks and shows the most urgent state among them,
//! and big pictures merge runs of equal cells in a row into one rectangle,
//! so the SVG stays small for any number of blocks.

use super::svg::{self, Chart, Rect, Svg};
use crate::inspect::task_status::TaskStatus;
use crate::run_dir::run_state::{BlockState, BlockStates};
use daisy_core::geometry::BlockGrid;
use daisy_core::{Block, Coordinate, DependencyGraph, TaskIdx};

/// Most cells per side; more blocks are downsampled.
pub const MAX_CELLS: i64 = 256;
/// The picture's longer side is about this many pixels.
const PICTURE_PX: f64 = 480.0;
const MIN_CELL_PX: f64 = 2.0;
const MAX_CELL_PX: f64 = 24.0;
/// Above this many cells, equal neighbours in a row are drawn as one.
const MERGE_ABOVE_CELLS: i64 = 4096;
pub const MARGIN: f64 = 10.0;
const HEADER_HEIGHT: f64 = 40.0;
pub const LEGEND_HEIGHT: f64 = 26.0;

pub fn state_colour(state: BlockState) -> &'static str {
    match state {
        BlockState::Done => svg::DONE,
        BlockState::Failed => svg::FAILED,
        BlockState::Orphaned => svg::ORPHANED,
        BlockState::Remaining => svg::REMAINING,
    }
}

/// Which blocks of a grid the picture shows, and how many per cell.
#[derive(Clone, Debug, PartialEq)]
pub struct SlicePlan {
    /// Blocks per dimension (grid indices `0..n`).
    pub blocks: Coordinate,
    /// The grid index of the slice, in the dimensions not shown.
    pub fixed: Coordinate,
    /// Blocks along the picture's rows and columns.
    pub rows: i64,
    pub cols: i64,
    /// Blocks per cell along rows and columns.
    pub row_step: i64,
    pub col_step: i64,
}

impl SlicePlan {
    pub fn new(blocks: Coordinate) -> Self {
        let dims = blocks.dims();
        let (rows, cols) = match dims {
            1 => (1, blocks[0]),
            _ => (blocks[dims - 2], blocks[dims - 1]),
        };
        Self {
            fixed: blocks.map(|n| n / 2),
            rows,
            cols,
            row_step: div_ceil(rows, MAX_CELLS),
            col_step: div_ceil(cols, MAX_CELLS),
            blocks,
        }
    }

    pub fn cell_rows(&self) -> i64 {
        div_ceil(self.rows, self.row_step)
    }

    pub fn cell_cols(&self) -> i64 {
        div_ceil(self.cols, self.col_step)
    }

    /// The grid index of the block at (`row`, `col`) of the slice.
    fn grid_index(&self, row: i64, col: i64) -> Coordinate {
        let dims = self.blocks.dims();
        let mut index = self.fixed;
        if dims >= 2 {
            index.set(dims - 2, row);
        }
        index.set(dims - 1, col);
        index
    }

    /// Block rows and columns of cell (`row`, `col`), half-open.
    fn cell_blocks(&self, row: i64, col: i64) -> ((i64, i64), (i64, i64)) {
        let rows = (
            row * self.row_step,
            ((row + 1) * self.row_step).min(self.rows),
        );
        let cols = (
            col * self.col_step,
            ((col + 1) * self.col_step).min(self.cols),
        );
        (rows, cols)
    }

    /// The highest level among the cell's blocks (the most urgent
    /// state, the longest run time), or `None` if no block there has one;
    /// with the block's id if it is alone.
    fn cell_level<L: Copy + Ord>(
        &self,
        grid: &BlockGrid,
        shading: &Shading<L>,
        row: i64,
        col: i64,
    ) -> Cell<L> {
        let ((r0, r1), (c0, c1)) = self.cell_blocks(row, col);
        let mut cell = Cell::default();
        for r in r0..r1 {
            for c in c0..c1 {
                let position = self.grid_index(r, c) * grid.write_shape;
                if let Some(block) = grid.block_at(position) {
                    cell.level = cell.level.max((shading.level)(&block));
                    cell.blocks += 1;
                    cell.block_id = block.id.spatial;
                }
            }
        }
        cell
    }
}

fn div_ceil(a: i64, b: i64) -> i64 {
    (a + b - 1) / b.max(1)
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Cell<L> {
    level: Option<L>,
    blocks: u64,
    /// The id of the (last) block in the cell.
    block_id: u64,
}

impl<L> Default for Cell<L> {
    fn default() -> Self {
        Self {
            level: None,
            blocks: 0,
            block_id: 0,
        }
    }
}

/// Equal cells side by side in one row of the picture.
struct CellRun<L> {
    row: i64,
    cols: (i64, i64),
    cell: Cell<L>,
}

/// What a picture shows of each block: a level (ordered: where a cell
/// stands for several blocks it shows the highest), and each level's
/// colour and name.
pub struct Shading<'a, L> {
    pub level: &'a dyn Fn(&Block) -> Option<L>,
    pub colour: &'a dyn Fn(L) -> &'static str,
    pub label: &'a dyn Fn(L) -> String,
    /// What a cell of several blocks shows: "the most urgent state".
    pub cell_shows: &'a str,
    /// What else the picture shows, said under its title.
    pub also: Option<&'a str>,
}

/// The slice picture of task `task`, whose numbers are `status`. A task
/// of more than two dimensions is drawn as one slice, with every block
/// that failed or is orphaned in any slice shown where it projects onto
/// it (the worst state along the leading dimensions wins), so each is
/// found on the page.
pub fn render(states: &BlockStates, status: &TaskStatus, task: TaskIdx) -> Chart {
    let grid = states.graph().task_graph(task).grid();
    let dims = grid.write_shape.dims();
    let projected = projected_failures(states, task, dims);
    let shading = Shading {
        level: &|block| {
            let state = states.state(block);
            if projected.is_empty() {
                return Some(state);
            }
            let place = grid.cell_of(block).map(|index| picture_place(&index, dims));
            let raised = place.and_then(|place| projected.get(&place).copied());
            Some(raised.map_or(state, |worst| worst.max(state)))
        },
        colour: &|state| state_colour(state),
        label: &|state| state.label().to_string(),
        cell_shows: "the most urgent state",
        also: (dims > 2).then_some("failed and orphaned blocks of every slice are drawn on it"),
    };
    let title = states.graph().task(task).id.clone();
    let mut chart = draw(states.graph(), task, &title, &shading);
    let y = chart.height() - 8.0;
    draw_legend(&mut chart, status, y);
    chart.finish()
}

/// The picture of `task`'s blocks as `shading` shows them, its legend
/// (at the bottom, [`LEGEND_HEIGHT`]) left to the caller.
pub fn draw<L: Copy + Ord>(
    graph: &DependencyGraph,
    task: TaskIdx,
    title: &str,
    shading: &Shading<L>,
) -> Svg {
    let grid = graph.task_graph(task).grid();
    let plan = SlicePlan::new(grid.total_write.shape().div_ceil(&grid.write_shape));
    let (cell_rows, cell_cols) = (plan.cell_rows(), plan.cell_cols());
    let cell_px = (PICTURE_PX / cell_rows.max(cell_cols) as f64)
        .floor()
        .clamp(MIN_CELL_PX, MAX_CELL_PX);
    let width = (2.0 * MARGIN + cell_cols as f64 * cell_px).max(380.0);
    let height = HEADER_HEIGHT + cell_rows as f64 * cell_px + LEGEND_HEIGHT;
    let mut chart = Svg::new(width, height);
    chart.text(
        MARGIN,
        14.0,
        "start",
        &format!("{title}: {}", describe(&plan)),
    );
    let mut note = downsampling_note(&plan, shading.cell_shows);
    if let Some(also) = shading.also {
        note = format!("{note}; {also}");
    }
    chart.text(MARGIN, 30.0, "start", &note);
    chart.group("done-slice");
    let merge = cell_rows * cell_cols > MERGE_ABOVE_CELLS;
    for row in 0..cell_rows {
        for run in row_runs(&plan, grid, shading, row, merge) {
            let Some(level) = run.cell.level else {
                continue;
            };
            let rect = Rect {
                x: MARGIN + run.cols.0 as f64 * cell_px,
                y: HEADER_HEIGHT + row as f64 * cell_px,
                width: (run.cols.1 - run.cols.0) as f64 * cell_px,
                height: cell_px,
            };
            let title = run_title(&plan, &run, &(shading.label)(level));
            chart.rect(rect, (shading.colour)(level), Some(&title));
        }
    }
    chart.end_group();
    chart
}

/// The cells of one picture row, equal neighbours merged if `merge`.
fn row_runs<L: Copy + Ord>(
    plan: &SlicePlan,
    grid: &BlockGrid,
    shading: &Shading<L>,
    row: i64,
    merge: bool,
) -> Vec<CellRun<L>> {
    let mut runs: Vec<CellRun<L>> = Vec::new();
    for col in 0..plan.cell_cols() {
        let cell = plan.cell_level(grid, shading, row, col);
        match runs.last_mut() {
            Some(last) if merge && last.cell.level == cell.level => {
                last.cols.1 = col + 1;
                last.cell.blocks += cell.blocks;
            }
            _ => runs.push(CellRun {
                row,
                cols: (col, col + 1),
                cell,
            }),
        }
    }
    runs
}

fn run_title<L>(plan: &SlicePlan, run: &CellRun<L>, label: &str) -> String {
    let (rows, _) = plan.cell_blocks(run.row, run.cols.0);
    let (_, (c0, _)) = plan.cell_blocks(run.row, run.cols.0);
    let (_, (_, c1)) = plan.cell_blocks(run.row, run.cols.1 - 1);
    if run.cell.blocks == 1 {
        let index = plan.grid_index(rows.0, c0);
        return format!("block {}: {label} (grid index {index})", run.cell.block_id);
    }
    format!(
        "{} blocks in rows {}–{}, columns {}–{}: {}",
        run.cell.blocks,
        rows.0,
        rows.1 - 1,
        c0,
        c1 - 1,
        if run.cell.blocks > 1 && plan.row_step * plan.col_step > 1 {
            format!("at least one {label}")
        } else {
            label.to_string()
        }
    )
}

/// Where a block's grid index falls in the picture: its last two
/// dimensions (its last, for a 1-D task).
fn picture_place(index: &Coordinate, dims: usize) -> (i64, i64) {
    match dims {
        1 => (0, index[0]),
        _ => (index[dims - 2], index[dims - 1]),
    }
}

/// The worst of the failed and orphaned blocks of `task` at each place
/// of the picture, for a task drawn as one slice of many.
fn projected_failures(
    states: &BlockStates,
    task: TaskIdx,
    dims: usize,
) -> std::collections::HashMap<(i64, i64), BlockState> {
    let mut worst = std::collections::HashMap::new();
    if dims <= 2 {
        return worst;
    }
    let grid = states.graph().task_graph(task).grid();
    for block in states.failed_and_orphaned(task) {
        let Some(index) = grid.cell_of(&block) else {
            continue;
        };
        let state = states.state(&block);
        let place = worst.entry(picture_place(&index, dims)).or_insert(state);
        *place = (*place).max(state);
    }
    worst
}

/// "6 × 6 blocks" or "10 × 20 × 20 blocks, slice at index 5 of dimension 0".
fn describe(plan: &SlicePlan) -> String {
    let shape: Vec<String> = plan.blocks.iter().map(|n| n.to_string()).collect();
    let mut text = format!("{} blocks", shape.join(" × "));
    let dims = plan.blocks.dims();
    if dims > 2 {
        let fixed: Vec<String> = (0..dims - 2)
            .map(|d| format!("index {} of dimension {d}", plan.fixed[d]))
            .collect();
        text.push_str(&format!(", the slice at {}", fixed.join(", ")));
    }
    text
}

fn downsampling_note(plan: &SlicePlan, cell_shows: &str) -> String {
    if plan.row_step * plan.col_step == 1 {
        "one cell per block".to_string()
    } else {
        format!(
            "one cell per {} × {} blocks, showing {cell_shows}",
            plan.row_step, plan.col_step
        )
    }
}

fn draw_legend(chart: &mut Svg, status: &TaskStatus, y: f64) {
    let mut x = MARGIN;
    let counts = [
        (BlockState::Done, status.done),
        (BlockState::Failed, status.failed),
        (BlockState::Orphaned, status.orphaned),
        (BlockState::Remaining, status.remaining),
    ];
    for (state, count) in counts {
        let swatch = Rect {
            x,
            y: y - 9.0,
            width: 10.0,
            height: 10.0,
        };
        chart.rect(swatch, state_colour(state), None);
        let label = format!("{} {count}", state.label());
        chart.text(x + 14.0, y, "start", &label);
        x += 28.0 + 6.5 * label.len() as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Pipeline;
    use crate::run_dir::events::history::RunHistory;
    use crate::run_dir::run_state::RunEvents;
    use crate::run_dir::RunDir;
    use std::path::Path;

    /// `paint`: 4 × 4 blocks of 10; `smooth` reads 5 voxels of context
    /// around each of its 4 × 4 blocks (so up to 9 paint blocks).
    const TWO_TASKS: &str = r#"
        name = "p"
        [[task]]
        id = "paint"
        total_roi = { offset = [0, 0], shape = [40, 40] }
        read_roi = { offset = [0, 0], shape = [10, 10] }
        write_roi = { offset = [0, 0], shape = [10, 10] }
        read_write_conflict = false
        block_command = ["true"]
        [[task]]
        id = "smooth"
        upstream = ["paint"]
        total_roi = { offset = [-5, -5], shape = [50, 50] }
        read_roi = { offset = [0, 0], shape = [20, 20] }
        write_roi = { offset = [5, 5], shape = [10, 10] }
        read_write_conflict = false
        block_command = ["true"]
    "#;

    /// The pictures of `pipeline`'s tasks in a run directory without done
    /// markers where `task`'s block `block_id` failed for good.
    fn pictures(pipeline: &str, task: &str, block_id: u64) -> Vec<String> {
        let pipeline = Pipeline::from_str(
            pipeline,
            Path::new("p.toml"),
            crate::pipeline::python_worker::PYTHON_ON_PATH,
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let run_dir = RunDir::at(dir.path());
        let events = format!(
            "{{\"time\": 1, \"event\": \"run_started\", \"pipeline\": \"p\", \"mode\": \"distributed\"}}\n\
             {{\"time\": 2, \"event\": \"block_failed\", \"task\": \"{task}\", \"block_id\": {block_id}, \
             \"error\": \"e\", \"for_good\": true}}\n"
        );
        let history = RunHistory::from_reader(
            Path::new("events.jsonl"),
            events.as_bytes(),
            RunEvents::default,
        )
        .unwrap();
        let last_run = history.last_run.unwrap();
        let states = BlockStates::read(&pipeline, &run_dir, &last_run).unwrap();
        states
            .graph()
            .task_indices()
            .map(|task| render(&states, &TaskStatus::of(&states, &run_dir, task), task).svg)
            .collect()
    }

    #[test]
    fn big_grids_are_downsampled_to_at_most_256_cells_a_side() {
        let plan = SlicePlan::new(Coordinate::from([100, 1000, 300]));
        assert_eq!((plan.rows, plan.cols), (1000, 300));
        assert_eq!((plan.row_step, plan.col_step), (4, 2));
        assert_eq!((plan.cell_rows(), plan.cell_cols()), (250, 150));
        assert_eq!(plan.grid_index(7, 9), Coordinate::from([50, 7, 9]));
        let line = SlicePlan::new(Coordinate::from([10]));
        assert_eq!((line.rows, line.cols), (1, 10));
        assert_eq!(line.grid_index(0, 3), Coordinate::from([3]));
    }

    #[test]
    fn every_block_is_a_cell_coloured_by_its_state() {
        let pictures = pictures(TWO_TASKS, "paint", 0);
        let paint = &pictures[0];
        assert_eq!(
            paint.matches(svg::FAILED).count(),
            2,
            "one cell and the legend"
        );
        assert_eq!(paint.matches("<title>").count(), 16);
        assert!(
            paint.contains("<title>block 0: failed (grid index [0, 0])</title>"),
            "{paint}"
        );
        assert!(paint.contains("paint: 4 × 4 blocks"));
        assert!(paint.contains("remaining 15"));
        // smooth (0, 0), (0, 1), (1, 0) and (1, 1) read paint (0, 0).
        let smooth = &pictures[1];
        assert!(smooth.contains("orphaned 4"), "{smooth}");
        assert_eq!(smooth.matches(svg::ORPHANED).count(), 5);
        assert!(smooth.contains("<title>block 4: orphaned (grid index [1, 1])</title>"));
    }

    #[test]
    fn a_two_million_block_grid_stays_small() {
        let huge = r#"
            name = "p"
            [[task]]
            id = "huge"
            total_roi = { offset = [0, 0, 0], shape = [128, 128, 128] }
            read_roi = { offset = [0, 0, 0], shape = [1, 1, 1] }
            write_roi = { offset = [0, 0, 0], shape = [1, 1, 1] }
            read_write_conflict = false
            block_command = ["true"]
        "#;
        let picture = &pictures(huge, "huge", 5)[0];
        // Block 5 lies outside the middle slice, and is drawn where it
        // projects: one run of remaining blocks per row but for its row,
        // split in three around it, and the legend's four swatches.
        assert_eq!(picture.matches("<rect").count(), 128 + 2 + 4);
        assert!(picture.contains(": failed"), "the failure is on the page");
        assert!(picture.contains("remaining 2097151"));
        assert!(picture.contains("the slice at index 64 of dimension 0"));
    }
}
