//! daisy-core's dependency graph, for `daisy_rs.dependency_graph`.
//!
//! A [`Graph`] is a `daisy_core::DependencyGraph` and nothing more, so
//! `BlockwiseDependencyGraph` (a graph of one task) and
//! `Scheduler.dependency_graph` give the blocks, ids and levels the driver
//! schedules: there is no second enumeration to drift from it.
//!
//! Blocks cross the boundary as **wire tuples** `(task, spatial_id, read,
//! write)`: `task` is the task's position in the graph and each ROI is
//! `((offset…), (shape…))`, what `daisy_rs.Block._from_wire` takes. The
//! task ids users wrote stay on the Python side, which may keep any
//! object there; the core only needs positions.

use daisy_core::block::BlockId;
use daisy_core::coordinate::{MAX_COORDINATE, MAX_DIMS};
use daisy_core::geometry::geometry_problems;
use daisy_core::graph::LevelBlocks;
use daisy_core::{Block, Coordinate, DependencyGraph, Fit, Roi, TaskIdx, TaskSpec};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::Arc;

/// A ROI as Python hands it over: `(offset, shape)`.
type RoiArg = (Vec<i64>, Vec<i64>);

/// A block as Python hands it over: a wire tuple.
type BlockArg = (u32, u64, RoiArg, RoiArg);

/// One task as Python hands it over: `(id, total_roi, read_roi,
/// write_roi, fit, read_write_conflict, max_retries, upstream positions)`.
type TaskArg = (String, RoiArg, RoiArg, RoiArg, String, bool, u32, Vec<u32>);

/// A block and the blocks it waits for, as wire tuples.
type Dependency<'py> = (Bound<'py, PyTuple>, Vec<Bound<'py, PyTuple>>);

/// The blocks of a pipeline and who waits for whom.
#[pyclass(frozen, module = "daisy_rs._native")]
pub struct Graph {
    /// Shared with the schedulers built over it, which must see the very
    /// blocks this graph hands out.
    pub(crate) inner: Arc<DependencyGraph>,
}

#[pymethods]
impl Graph {
    /// The graph of `tasks`; a `ValueError` names the first task whose
    /// regions, fit or upstream positions the core refuses.
    #[new]
    fn new(tasks: Vec<TaskArg>) -> PyResult<Self> {
        let specs = tasks.into_iter().map(task_spec).collect::<PyResult<_>>()?;
        let graph =
            DependencyGraph::new(specs).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Self {
            inner: Arc::new(graph),
        })
    }

    /// Positions of the tasks that `task` reads from.
    fn upstream_tasks(&self, task: u32) -> PyResult<Vec<u32>> {
        let task = self.task(task)?;
        Ok(self.inner.task(task).upstream.iter().map(|t| t.0).collect())
    }

    fn num_blocks(&self, task: u32) -> PyResult<u64> {
        Ok(self.inner.task_graph(self.task(task)?).num_blocks())
    }

    fn num_levels(&self, task: u32) -> PyResult<usize> {
        Ok(self.inner.task_graph(self.task(task)?).num_levels())
    }

    fn num_level_blocks(&self, task: u32, level: usize) -> PyResult<u64> {
        let graph = self.inner.task_graph(self.task(task)?);
        self.level(task, level)?;
        Ok(graph.num_level_blocks(level))
    }

    /// The blocks of one level, lazily, in the order the scheduler hands
    /// out roots.
    fn level_blocks(&self, task: u32, level: usize) -> PyResult<LevelIter> {
        let graph = self.inner.task_graph(self.task(task)?);
        self.level(task, level)?;
        Ok(LevelIter {
            blocks: graph.level_blocks(level),
        })
    }

    /// The level of a block of its task, or `None` off the task's grid.
    fn level_of(&self, block: BlockArg) -> PyResult<Option<usize>> {
        let block = self.block(block)?;
        Ok(self.inner.task_graph(block.id.task).level_of(&block))
    }

    /// The blocks `block` waits for, in its task and upstream tasks.
    fn upstream<'py>(
        &self,
        py: Python<'py>,
        block: BlockArg,
    ) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let block = self.block_on_grid(block)?;
        wire_blocks(py, &self.inner.upstream(&block))
    }

    /// The blocks that wait for `block`, in its task and downstream tasks.
    fn downstream<'py>(
        &self,
        py: Python<'py>,
        block: BlockArg,
    ) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let block = self.block_on_grid(block)?;
        wire_blocks(py, &self.inner.downstream(&block))
    }

    /// The blocks of `task` whose write region (clipped to the task's
    /// total write region) overlaps `region`: what a downstream task
    /// reading `region` waits for.
    fn blocks_writing<'py>(
        &self,
        py: Python<'py>,
        task: u32,
        region: RoiArg,
    ) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let (task, region) = self.region(task, region)?;
        wire_blocks(
            py,
            &self.inner.task_graph(task).grid().blocks_writing(&region),
        )
    }

    /// The blocks of `task` whose read region overlaps `region`: what
    /// waits for an upstream block writing `region`.
    fn blocks_reading<'py>(
        &self,
        py: Python<'py>,
        task: u32,
        region: RoiArg,
    ) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let (task, region) = self.region(task, region)?;
        wire_blocks(
            py,
            &self.inner.task_graph(task).grid().blocks_reading(&region),
        )
    }

    /// Every block of `task`, level by level, each with the blocks it
    /// waits for.
    fn dependencies<'py>(&self, py: Python<'py>, task: u32) -> PyResult<Vec<Dependency<'py>>> {
        let task = self.task(task)?;
        let mut upstream = Vec::new();
        let graph = self.inner.task_graph(task);
        let mut pairs = Vec::with_capacity(usize::try_from(graph.num_blocks()).unwrap_or(0));
        for block in graph.all_blocks() {
            self.inner.upstream_into(&block, &mut upstream);
            pairs.push((wire_block(py, &block)?, wire_blocks(py, &upstream)?));
        }
        Ok(pairs)
    }
}

impl Graph {
    /// `task` as a position in this graph, or an `IndexError`.
    fn task(&self, task: u32) -> PyResult<TaskIdx> {
        task_index(&self.inner, task)
    }

    fn level(&self, task: u32, level: usize) -> PyResult<()> {
        let levels = self.inner.task_graph(TaskIdx(task)).num_levels();
        match level < levels {
            true => Ok(()),
            false => Err(PyIndexError::new_err(format!(
                "level {level} of a task with {levels} levels"
            ))),
        }
    }

    /// A region in `task`'s dimensions.
    fn region(&self, task: u32, region: RoiArg) -> PyResult<(TaskIdx, Roi)> {
        let task = self.task(task)?;
        let region = roi("sub_roi", region)?;
        self.same_dims(task, "sub_roi", &region)?;
        Ok((task, region))
    }

    /// The block a wire tuple describes; its ROIs are taken as given
    /// (a block may lie beyond the grid, as in daisy).
    fn block(&self, (task, spatial, read, write): BlockArg) -> PyResult<Block> {
        let task = self.task(task)?;
        let (read_roi, write_roi) = (roi("read_roi", read)?, roi("write_roi", write)?);
        self.same_dims(task, "read_roi", &read_roi)?;
        self.same_dims(task, "write_roi", &write_roi)?;
        let id = BlockId { task, spatial };
        Ok(Block {
            id,
            read_roi,
            write_roi,
        })
    }

    /// [`Self::block`], refused where its read region does not sit on the
    /// task's block grid (daisy 2.0 panics there): it has no level.
    fn block_on_grid(&self, wire: BlockArg) -> PyResult<Block> {
        let block = self.block(wire)?;
        let grid = self.inner.task_graph(block.id.task).grid();
        match grid.cell_of(&block) {
            Some(_) => Ok(block),
            None => Err(PyValueError::new_err(format!(
                "task {:?}: a block reading {} is not on the task's block grid (read regions begin \
                 at {} plus multiples of {})",
                self.inner.task(block.id.task).id,
                block.read_roi,
                grid.total_read.offset(),
                grid.write_shape
            ))),
        }
    }

    fn same_dims(&self, task: TaskIdx, field: &str, roi: &Roi) -> PyResult<()> {
        let dims = self.inner.task(task).total_roi.dims();
        match roi.dims() == dims {
            true => Ok(()),
            false => Err(PyValueError::new_err(format!(
                "{field} {roi} has {} dimensions, task {:?} has {dims}",
                roi.dims(),
                self.inner.task(task).id
            ))),
        }
    }
}

/// The blocks of one level, as wire tuples.
#[pyclass(module = "daisy_rs._native")]
pub struct LevelIter {
    blocks: LevelBlocks,
}

#[pymethods]
impl LevelIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.blocks.next().map(|b| wire_block(py, &b)).transpose()
    }
}

/// `task` as a position in `graph`, or an `IndexError`.
pub(crate) fn task_index(graph: &DependencyGraph, task: u32) -> PyResult<TaskIdx> {
    match (task as usize) < graph.num_tasks() {
        true => Ok(TaskIdx(task)),
        false => Err(PyIndexError::new_err(format!(
            "task #{task} is not in a graph of {} tasks",
            graph.num_tasks()
        ))),
    }
}

fn task_spec(task: TaskArg) -> PyResult<TaskSpec> {
    let (id, total, read, write, fit, conflict, max_retries, upstream) = task;
    let fit = match fit.as_str() {
        "valid" => Fit::Valid,
        "overhang" => Fit::Overhang,
        "shrink" => Fit::Shrink,
        _ => {
            return Err(PyValueError::new_err(format!(
                "task {id:?}: fit = {fit:?} is not one of valid, overhang, shrink"
            )))
        }
    };
    let mut spec = TaskSpec::new(
        &id,
        roi("total_roi", total)?,
        roi("read_roi", read)?,
        roi("write_roi", write)?,
    );
    spec.fit = fit;
    spec.read_write_conflict = conflict;
    spec.max_retries = max_retries;
    spec.upstream = upstream.into_iter().map(TaskIdx).collect();
    Ok(spec)
}

/// A core ROI, refused (rather than panicking in the core's arithmetic)
/// unless it has 1 to `MAX_DIMS` dimensions and coordinates the core
/// supports.
fn roi(field: &str, (offset, shape): RoiArg) -> PyResult<Roi> {
    let dims_ok = offset.len() == shape.len() && (1..=MAX_DIMS).contains(&offset.len());
    let in_range = offset
        .iter()
        .chain(&shape)
        .all(|v| v.unsigned_abs() <= MAX_COORDINATE);
    if !dims_ok || !in_range {
        return Err(PyValueError::new_err(format!(
            "{field} with offset {offset:?} and shape {shape:?}: expected 1 to {MAX_DIMS} \
             dimensions and coordinates within ±{MAX_COORDINATE}"
        )));
    }
    Ok(Roi::new(Coordinate::new(&offset), Coordinate::new(&shape)))
}

/// `((offset…), (shape…))`.
fn wire_roi<'py>(py: Python<'py>, roi: &Roi) -> PyResult<Bound<'py, PyTuple>> {
    let [offset, shape] = roi.as_slices();
    PyTuple::new(py, [PyTuple::new(py, offset)?, PyTuple::new(py, shape)?])
}

pub(crate) fn wire_block<'py>(py: Python<'py>, block: &Block) -> PyResult<Bound<'py, PyTuple>> {
    let read = wire_roi(py, &block.read_roi)?;
    let write = wire_roi(py, &block.write_roi)?;
    (block.id.task.0, block.id.spatial, read, write).into_pyobject(py)
}

fn wire_blocks<'py>(py: Python<'py>, blocks: &[Block]) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    blocks.iter().map(|b| wire_block(py, b)).collect()
}

/// Why a task's regions hold no block (daisy runs such a task with none),
/// or `None` when they hold some or are wrong in another way (the
/// driver's checks say how).
#[pyfunction]
pub fn no_block_reason(task: TaskArg) -> PyResult<Option<String>> {
    let problems = geometry_problems(&task_spec(task)?);
    Ok(match problems.as_slice() {
        [only] if only.holds_no_block => Some(only.message.clone()),
        _ => None,
    })
}
