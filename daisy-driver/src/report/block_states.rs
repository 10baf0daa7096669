//! The state of every block of a run, as far as the run directory tells:
//!
//! - **done**: its task's done marker says so (this run or an earlier one);
//! - **failed**: failed for good in the last run;
//! - **orphaned**: not done, and downstream (transitively, across tasks)
//!   of a failed block, or of a task that was abandoned;
//! - **pending**: everything else (not run yet, running, or waiting for a
//!   retry).
//!
//! Failures come from the events, done bits from the markers, and the
//! dependencies from daisy-core's [`DependencyGraph`], so the answer is the
//! scheduler's own and needs no running driver.

use super::model::RunModel;
use crate::done_marker::{DoneMarker, DoneMarkerError};
use crate::pipeline::Pipeline;
use crate::run_dir::RunDir;
use daisy_core::{Block, BlockId, DependencyGraph, TaskIdx};
use std::collections::{BTreeSet, HashSet};

/// What became of a block. Ordered by how much it needs attention, so a
/// cell standing for many blocks shows the most urgent one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BlockState {
    Done,
    Pending,
    Orphaned,
    Failed,
}

impl BlockState {
    pub const ALL: [BlockState; 4] = [
        BlockState::Done,
        BlockState::Failed,
        BlockState::Orphaned,
        BlockState::Pending,
    ];

    pub fn label(self) -> &'static str {
        match self {
            BlockState::Done => "done",
            BlockState::Pending => "pending",
            BlockState::Orphaned => "orphaned",
            BlockState::Failed => "failed",
        }
    }
}

/// Blocks of one task per state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateCounts {
    pub done: u64,
    pub failed: u64,
    pub orphaned: u64,
    pub pending: u64,
}

impl StateCounts {
    pub fn of(&self, state: BlockState) -> u64 {
        match state {
            BlockState::Done => self.done,
            BlockState::Failed => self.failed,
            BlockState::Orphaned => self.orphaned,
            BlockState::Pending => self.pending,
        }
    }
}

/// The state of every block of a pipeline's run.
pub struct BlockStates {
    graph: DependencyGraph,
    /// Per task, in pipeline order; `None` if no marker was written yet.
    markers: Vec<Option<DoneMarker>>,
    /// Spatial ids of the blocks failed for good, per task.
    failed: Vec<BTreeSet<u64>>,
    /// Blocks downstream of failed ones (abandoned tasks aside).
    orphaned: HashSet<BlockId>,
    abandoned: Vec<bool>,
}

impl BlockStates {
    /// Reads the done markers of `pipeline`'s tasks in `run_dir` and
    /// combines them with the failures and abandonments in `model`.
    pub fn load(
        pipeline: &Pipeline,
        run_dir: &RunDir,
        model: &RunModel,
    ) -> Result<Self, DoneMarkerError> {
        let markers = pipeline
            .tasks
            .iter()
            .map(|t| DoneMarker::open_existing(&run_dir.done_marker(&t.spec.id), &t.spec))
            .collect::<Result<Vec<_>, _>>()?;
        let activity = |id: &str| model.task_index(id).map(|i| &model.tasks[i]);
        let failed = pipeline
            .tasks
            .iter()
            .map(|t| activity(&t.spec.id).map_or_else(BTreeSet::new, |a| a.failed_for_good.clone()))
            .collect();
        let abandoned = pipeline
            .tasks
            .iter()
            .map(|t| activity(&t.spec.id).is_some_and(|a| a.abandoned.is_some()))
            .collect();
        Ok(Self::new(pipeline.graph(), markers, failed, abandoned))
    }

    fn new(
        graph: DependencyGraph,
        markers: Vec<Option<DoneMarker>>,
        failed: Vec<BTreeSet<u64>>,
        abandoned: Vec<bool>,
    ) -> Self {
        let mut states = Self {
            graph,
            markers,
            failed,
            orphaned: HashSet::new(),
            abandoned,
        };
        states.orphaned = states.downstream_of_failures();
        states
    }

    pub fn graph(&self) -> &DependencyGraph {
        &self.graph
    }

    fn is_done(&self, block: &Block) -> bool {
        self.markers[block.id.task.index()]
            .as_ref()
            .is_some_and(|m| m.is_done(block))
    }

    fn is_failed(&self, block: &Block) -> bool {
        self.failed[block.id.task.index()].contains(&block.id.spatial)
    }

    /// Every block not done that a failed block blocks, transitively.
    fn downstream_of_failures(&self) -> HashSet<BlockId> {
        let mut queue: Vec<Block> = self
            .graph
            .task_indices()
            .filter(|t| !self.failed[t.index()].is_empty())
            .flat_map(|t| self.graph.task_graph(t).all_blocks())
            .filter(|b| self.is_failed(b))
            .collect();
        let mut orphaned = HashSet::new();
        while let Some(block) = queue.pop() {
            for down in self.graph.downstream(&block) {
                if !self.is_done(&down) && !self.is_failed(&down) && orphaned.insert(down.id) {
                    queue.push(down);
                }
            }
        }
        orphaned
    }

    pub fn state(&self, block: &Block) -> BlockState {
        if self.is_done(block) {
            BlockState::Done
        } else if self.is_failed(block) {
            BlockState::Failed
        } else if self.abandoned[block.id.task.index()] || self.orphaned.contains(&block.id) {
            BlockState::Orphaned
        } else {
            BlockState::Pending
        }
    }

    /// How many blocks of `task` are in each state.
    pub fn counts(&self, task: TaskIdx) -> StateCounts {
        let total = self.graph.task_graph(task).num_blocks();
        let done = self.markers[task.index()]
            .as_ref()
            .map_or(0, DoneMarker::count_done);
        let failed = self.failed[task.index()].len() as u64;
        let orphaned = if self.abandoned[task.index()] {
            total.saturating_sub(done + failed)
        } else {
            self.orphaned.iter().filter(|id| id.task == task).count() as u64
        };
        StateCounts {
            done,
            failed,
            orphaned,
            pending: total.saturating_sub(done + failed + orphaned),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use daisy_core::{Roi, TaskSpec};

    /// Task "paint": 4 × 4 blocks of 10; task "smooth" reads 5 voxels of
    /// context around each of its 10-blocks (so up to 9 paint blocks).
    pub fn two_tasks() -> DependencyGraph {
        let mut paint = TaskSpec::new(
            "paint",
            Roi::from_slices(&[0, 0], &[40, 40]),
            Roi::from_slices(&[0, 0], &[10, 10]),
            Roi::from_slices(&[0, 0], &[10, 10]),
        );
        paint.read_write_conflict = false;
        let mut smooth = TaskSpec::new(
            "smooth",
            Roi::from_slices(&[-5, -5], &[50, 50]),
            Roi::from_slices(&[0, 0], &[20, 20]),
            Roi::from_slices(&[5, 5], &[10, 10]),
        );
        smooth.read_write_conflict = false;
        smooth.upstream = vec![TaskIdx(0)];
        DependencyGraph::new(vec![paint, smooth]).unwrap()
    }

    pub fn block_at(graph: &DependencyGraph, task: u32, j: [i64; 2]) -> Block {
        let grid = graph.task_graph(TaskIdx(task)).grid();
        grid.block_at(daisy_core::Coordinate::from(j) * grid.write_shape)
            .unwrap()
    }

    /// States without done markers, with `failed` blocks per task.
    pub fn with_failures(graph: DependencyGraph, failed: Vec<BTreeSet<u64>>) -> BlockStates {
        let tasks = failed.len();
        let markers = (0..tasks).map(|_| None).collect();
        BlockStates::new(graph, markers, failed, vec![false; tasks])
    }

    /// paint block (0, 0) failed for good; no markers.
    pub fn one_failure() -> BlockStates {
        let graph = two_tasks();
        let failed = block_at(&graph, 0, [0, 0]).id.spatial;
        with_failures(graph, vec![BTreeSet::from([failed]), BTreeSet::new()])
    }

    #[test]
    fn blocks_downstream_of_a_failure_are_orphaned() {
        let states = one_failure();
        let graph = states.graph().clone();
        assert_eq!(
            states.state(&block_at(&graph, 0, [0, 0])),
            BlockState::Failed
        );
        assert_eq!(
            states.state(&block_at(&graph, 0, [0, 1])),
            BlockState::Pending
        );
        // smooth (0, 0) and (0, 1) and (1, 1) read paint (0, 0); (2, 2) not.
        assert_eq!(
            states.state(&block_at(&graph, 1, [0, 0])),
            BlockState::Orphaned
        );
        assert_eq!(
            states.state(&block_at(&graph, 1, [1, 1])),
            BlockState::Orphaned
        );
        assert_eq!(
            states.state(&block_at(&graph, 1, [2, 2])),
            BlockState::Pending
        );
        let paint = states.counts(TaskIdx(0));
        assert_eq!((paint.failed, paint.orphaned, paint.pending), (1, 0, 15));
        let smooth = states.counts(TaskIdx(1));
        assert_eq!((smooth.orphaned, smooth.pending), (4, 12));
    }

    #[test]
    fn an_abandoned_task_has_every_block_left_orphaned() {
        let states = BlockStates::new(
            two_tasks(),
            vec![None, None],
            vec![BTreeSet::new(), BTreeSet::new()],
            vec![false, true],
        );
        let graph = states.graph().clone();
        assert_eq!(
            states.state(&block_at(&graph, 1, [3, 3])),
            BlockState::Orphaned
        );
        assert_eq!(states.counts(TaskIdx(1)).orphaned, 16);
    }
}
