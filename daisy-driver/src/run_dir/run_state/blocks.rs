//! Each block's state, from the done markers (read-only) for done blocks,
//! a run's events ([`RunEvents`]) for failures and abandoned tasks, and
//! the dependency graph for orphans; and what measured blocks cost.
//! `status` counts the states, `report` draws them, `run --retry-failed`
//! runs the failed and orphaned blocks.
//!
//! Per block, only failed and orphaned blocks are held, by id: a task may
//! have 10⁸ blocks, the markers answer for the rest.

use super::block_by_id::block_by_id;
use super::events::{Failure, RunEvents};
use crate::pipeline::Pipeline;
use crate::run_dir::done_marker::costs::{CostTable, StoredCost};
use crate::run_dir::done_marker::DoneMarker;
use crate::run_dir::RunDir;
use anyhow::Context as _;
use daisy_core::{Block, BlockId, DependencyGraph, TaskIdx};
use std::collections::{BTreeMap, HashSet};

/// What became of a block, as `status` counts it. Ordered by how much it
/// needs attention, so a picture cell standing for many blocks can show
/// the most urgent one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BlockState {
    Done,
    /// Not run yet, ready, running, or waiting for a retry.
    Remaining,
    Orphaned,
    Failed,
}

impl BlockState {
    pub fn label(self) -> &'static str {
        match self {
            BlockState::Done => "done",
            BlockState::Remaining => "remaining",
            BlockState::Orphaned => "orphaned",
            BlockState::Failed => "failed",
        }
    }
}

/// What `run --retry-failed` may run: the blocks that failed for good in
/// the last run and the blocks that wait for them, none of them done.
#[derive(Debug, Default)]
pub struct RetryBlocks {
    pub blocks: HashSet<BlockId>,
    pub failed: u64,
    pub orphaned: u64,
}

/// The state of every block of a pipeline's tasks (indexed like the
/// pipeline) in a run directory, after a run.
pub struct BlockStates {
    graph: DependencyGraph,
    markers: Vec<Option<DoneMarker>>,
    /// Per task, what its measured blocks cost (tasks tracking resources).
    costs: Vec<Option<CostTable>>,
    /// Per task, the blocks its `skip_mask` removes.
    masked: Vec<u64>,
    /// Blocks that failed for good in the run and are not done.
    failed: Vec<BTreeMap<u64, Failure>>,
    /// Blocks not done that wait for a failed block, or belong to a task
    /// the run abandoned.
    orphaned: Vec<HashSet<u64>>,
    abandoned: Vec<Option<String>>,
    warnings: Vec<String>,
}

impl BlockStates {
    /// Reads the done markers of `pipeline`'s tasks in `run_dir` and finds
    /// the failed and orphaned blocks of `run`.
    pub fn read(pipeline: &Pipeline, run_dir: &RunDir, run: &RunEvents) -> anyhow::Result<Self> {
        let graph = pipeline.graph();
        let markers = pipeline
            .tasks
            .iter()
            .map(|t| DoneMarker::open_existing(&run_dir.done_marker(&t.spec.id), &t.spec))
            .collect::<Result<Vec<_>, _>>()
            .context("reading the done markers")?;
        let tasks = graph.num_tasks();
        let masked = (pipeline.tasks.iter())
            .map(|t| t.skip_mask.as_ref().map_or(0, |mask| mask.masked()))
            .collect();
        let mut states = BlockStates {
            markers,
            costs: vec![None; tasks],
            masked,
            failed: (0..tasks).map(|_| BTreeMap::new()).collect(),
            orphaned: vec![HashSet::new(); tasks],
            abandoned: vec![None; tasks],
            warnings: Vec::new(),
            graph,
        };
        states.take_events(run);
        let failed_blocks = states.keep_failed_not_done();
        states.orphan_downstream(failed_blocks);
        states.orphan_abandoned_tasks();
        Ok(states)
    }

    /// Failures and abandoned tasks of `run`, by task index; tasks the
    /// pipeline lacks are warned about.
    fn take_events(&mut self, run: &RunEvents) {
        let mut unknown: Vec<&String> = (run.tasks.iter())
            .filter(|task| task.names_blocks && self.graph.task_index(&task.id).is_none())
            .map(|task| &task.id)
            .collect();
        unknown.sort();
        for task in unknown {
            self.warnings.push(format!(
                "events.jsonl names task {task:?}, which the pipeline does not have (was it renamed?)"
            ));
        }
        for task in &run.tasks {
            if let Some(index) = self.graph.task_index(&task.id) {
                self.failed[index.index()] = task.failures.clone();
                self.abandoned[index.index()] = task.abandoned.clone();
            }
        }
    }

    /// Keeps the failures that were for good and whose block is not done
    /// (its marker may have been set after the event, e.g. by a later run
    /// of daisy 2.0); returns their blocks. Each is looked up by its id,
    /// so this costs per failure, not per block of the task.
    fn keep_failed_not_done(&mut self) -> Vec<Block> {
        let mut blocks = Vec::new();
        for task in self.graph.task_indices() {
            self.failed[task.index()].retain(|_, f| f.for_good);
            let not_done: Vec<Block> = (self.failed[task.index()].keys())
                .filter_map(|&id| block_by_id(&self.graph, task, id))
                .filter(|block| !self.is_done(block))
                .collect();
            let kept: HashSet<u64> = not_done.iter().map(|b| b.id.spatial).collect();
            self.failed[task.index()].retain(|id, _| kept.contains(id));
            blocks.extend(not_done);
        }
        blocks
    }

    /// Every block downstream of a failed block, transitively, that is not
    /// done. Done blocks are passed through: what waits for them may also
    /// wait for the failed block.
    fn orphan_downstream(&mut self, failed: Vec<Block>) {
        let mut seen: HashSet<BlockId> = failed.iter().map(|b| b.id).collect();
        let mut to_visit: Vec<Block> = failed
            .iter()
            .flat_map(|b| self.graph.downstream(b))
            .collect();
        while let Some(block) = to_visit.pop() {
            if !seen.insert(block.id) {
                continue;
            }
            if !self.is_done(&block) {
                self.orphaned[block.id.task.index()].insert(block.id.spatial);
            }
            to_visit.extend(self.graph.downstream(&block));
        }
    }

    /// A task the run abandoned had its remaining blocks orphaned.
    fn orphan_abandoned_tasks(&mut self) {
        for task in self.graph.task_indices() {
            if self.abandoned[task.index()].is_none() {
                continue;
            }
            let rest: Vec<u64> = self
                .graph
                .task_graph(task)
                .all_blocks()
                .filter(|b| !self.is_done(b))
                .map(|b| b.id.spatial)
                .filter(|id| !self.failed[task.index()].contains_key(id))
                .collect();
            self.orphaned[task.index()].extend(rest);
        }
    }

    fn is_done(&self, block: &Block) -> bool {
        self.markers[block.id.task.index()]
            .as_ref()
            .is_some_and(|m| m.is_done(block))
    }

    pub fn graph(&self) -> &DependencyGraph {
        &self.graph
    }

    /// What became of `block`.
    pub fn state(&self, block: &Block) -> BlockState {
        let task = block.id.task.index();
        if self.is_done(block) {
            BlockState::Done
        } else if self.failed[task].contains_key(&block.id.spatial) {
            BlockState::Failed
        } else if self.orphaned[task].contains(&block.id.spatial) {
            BlockState::Orphaned
        } else {
            BlockState::Remaining
        }
    }

    /// The blocks of `task` that failed for good or are orphaned, and
    /// which: few, where the task's blocks may be 10⁸.
    pub fn failed_and_orphaned(&self, task: TaskIdx) -> Vec<Block> {
        let ids = (self.failed[task.index()].keys()).chain(&self.orphaned[task.index()]);
        ids.filter_map(|&id| block_by_id(&self.graph, task, id))
            .filter(|block| !self.is_done(block))
            .collect()
    }

    /// The blocks `run --retry-failed` runs: failed and orphaned.
    pub fn to_retry(&self) -> RetryBlocks {
        let mut retry = RetryBlocks::default();
        for task in self.graph.task_indices() {
            let ids = |spatial: &u64| BlockId {
                task,
                spatial: *spatial,
            };
            let failed = &self.failed[task.index()];
            let orphaned = &self.orphaned[task.index()];
            retry.failed += failed.len() as u64;
            retry.orphaned += orphaned.len() as u64;
            retry.blocks.extend(failed.keys().map(ids));
            retry.blocks.extend(orphaned.iter().map(ids));
        }
        retry
    }

    pub fn done_count(&self, task: TaskIdx) -> u64 {
        self.markers[task.index()]
            .as_ref()
            .map_or(0, DoneMarker::count_done)
    }

    /// The failed blocks of `task` and their last failures, by block id.
    pub fn failed(&self, task: TaskIdx) -> &BTreeMap<u64, Failure> {
        &self.failed[task.index()]
    }

    pub fn orphaned_count(&self, task: TaskIdx) -> u64 {
        self.orphaned[task.index()].len() as u64
    }

    /// The blocks of `task` its `skip_mask` removes.
    pub fn masked_count(&self, task: TaskIdx) -> u64 {
        self.masked[task.index()]
    }

    /// Why the run abandoned `task`, if it did.
    pub fn abandoned(&self, task: TaskIdx) -> Option<&str> {
        self.abandoned[task.index()].as_deref()
    }

    /// Reads what blocks cost, for `status` and `report` (`run
    /// --retry-failed` has no use for it). A task whose cost arrays cannot
    /// be read is a warning: the figures are for diagnosis, the counts
    /// stand without them.
    pub fn read_costs(&mut self) {
        for (task, marker) in self.markers.iter().enumerate() {
            let Some(marker) = marker else { continue };
            match marker.read_costs() {
                Ok(table) => self.costs[task] = table,
                Err(error) => {
                    let id = &self.graph.task(TaskIdx(task as u32)).id;
                    let error = anyhow::Error::new(error);
                    (self.warnings).push(format!(
                        "task {id:?}: cannot read what blocks cost: {error:#}"
                    ));
                }
            }
        }
    }

    /// The measured blocks of `task`, by block id, and what each cost
    /// (none before [`Self::read_costs`]).
    pub fn measured_blocks(&self, task: TaskIdx) -> Vec<(u64, StoredCost)> {
        let marker = self.markers[task.index()].as_ref();
        match (marker, &self.costs[task.index()]) {
            (Some(marker), Some(table)) => table.measured_blocks(marker),
            _ => Vec::new(),
        }
    }

    /// What `block` cost, if it was measured.
    pub fn block_cost(&self, block: &Block) -> Option<StoredCost> {
        let task = block.id.task.index();
        let cell = self.markers[task].as_ref()?.cell_of(block)?;
        self.costs[task].as_ref()?.get(cell)
    }

    /// Things that did not add up (tasks the pipeline lacks, cost arrays
    /// that cannot be read).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}
