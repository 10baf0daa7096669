//! The allocation over time: which task gets how many workers, phase by
//! phase, as tasks drain. A deterministic simulation with the driver's own
//! rules, not a prediction of timing: tasks are served in file order, each
//! wants [`worker_demand`] workers and gets what the [`Budget`] has left,
//! and worker ids are handed out from 1 in that order, as `Slots` does.
//!
//! - Phase 1 is the run's first round of submissions: what is runnable is
//!   what the driver's first tick finds (the caller asks the real
//!   scheduler, blocks done in an earlier run skipped).
//! - A phase ends when the running task with the fewest rounds of blocks
//!   left (blocks left / workers) is done, every block taking the same
//!   time; the workers of a done task leave and its budget share goes to
//!   the tasks served next.
//! - A task whose upstream tasks are all done has its first level ready.
//!
//! Two simplifications, said in the user guide: a task waits until its
//! upstream tasks are done (a run starts its workers as soon as its first
//! blocks are ready), and keeps the workers it got (a run may add some as
//! later levels of a task become ready, up to `max_workers`).

use crate::pipeline::budget::Share;
use crate::pipeline::Pipeline;
use crate::run::budget::{worker_demand, Budget};
use daisy_core::{DependencyGraph, TaskIdx};
use serde::Serialize;
use std::collections::BTreeMap;

/// One phase: from the end of some task(s) to the end of the next.
#[derive(Debug, Serialize)]
pub struct Phase {
    /// The tasks whose end began this phase; none for the first.
    pub after: Vec<String>,
    /// Every task not done yet.
    pub tasks: Vec<PhaseTask>,
    /// What the running workers take from the budget.
    pub budget_used: BTreeMap<String, u64>,
}

/// A task during a phase.
#[derive(Debug, Serialize)]
pub struct PhaseTask {
    pub id: String,
    /// Blocks left to run when the phase begins.
    pub blocks_left: u64,
    #[serde(flatten)]
    pub state: TaskState,
}

#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum TaskState {
    /// `workers` run; `started` are those submitted as the phase begins.
    /// A task of several levels may get more as its later levels become
    /// ready: up to `more_later_up_to` once its widest level is (budget
    /// permitting); the simulation counts only `workers`.
    Running {
        workers: u32,
        started: Option<WorkerIds>,
        #[serde(skip_serializing_if = "Option::is_none")]
        more_later_up_to: Option<u32>,
    },
    /// Nothing of it is ready before these upstream tasks are done.
    WaitsForUpstream { upstream: Vec<String> },
    /// Ready, but tasks served before it hold the budget.
    WaitsForBudget,
    /// `max_workers = 0`: only workers started by hand serve it.
    ByHand,
}

/// The worker ids of one submission (one job array on a cluster).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WorkerIds {
    pub first: u64,
    pub last: u64,
}

/// One submission of the simulated run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub task: TaskIdx,
    /// 1-based, as shown.
    pub phase: usize,
    pub workers: WorkerIds,
    /// The budget ids each of these workers is given, in order.
    pub shares: Vec<Share>,
}

/// The phases of a run, and every submission made in them.
#[derive(Debug)]
pub struct Allocation {
    pub phases: Vec<Phase>,
    pub grants: Vec<Grant>,
}

/// Simulates a run of `pipeline` with `blocks_left` per task, of which
/// `runnable_at_start` are ready when it starts.
pub fn simulate(
    pipeline: &Pipeline,
    graph: &DependencyGraph,
    blocks_left: Vec<u64>,
    runnable_at_start: &[u64],
) -> Allocation {
    let mut run = Simulation {
        pipeline,
        graph,
        budget: Budget::new(pipeline.resources.clone()),
        next_worker: 1,
        held: vec![Vec::new(); blocks_left.len()],
        blocks_left,
        grants: Vec::new(),
    };
    let mut phases = Vec::new();
    let mut after = Vec::new();
    while !run.all_done() {
        let started = run.start_workers(phases.len() + 1, |task| match phases.is_empty() {
            true => runnable_at_start[task.index()],
            false => first_level_blocks(graph, task),
        });
        phases.push(run.phase(after, &started));
        after = run.finish_next();
        if after.is_empty() {
            break;
        }
    }
    Allocation {
        phases,
        grants: run.grants,
    }
}

/// Blocks of `task`'s first level: what is ready once its upstream tasks
/// are done.
fn first_level_blocks(graph: &DependencyGraph, task: TaskIdx) -> u64 {
    let task_graph = graph.task_graph(task);
    match task_graph.num_levels() {
        0 => 0,
        _ => task_graph.num_level_blocks(0),
    }
}

/// Blocks of `task`'s largest level: the most that can be ready at once.
fn widest_level_blocks(graph: &DependencyGraph, task: TaskIdx) -> u64 {
    let task_graph = graph.task_graph(task);
    let levels = 0..task_graph.num_levels();
    levels
        .map(|level| task_graph.num_level_blocks(level))
        .max()
        .unwrap_or(0)
}

struct Simulation<'a> {
    pipeline: &'a Pipeline,
    graph: &'a DependencyGraph,
    budget: Budget,
    next_worker: u64,
    blocks_left: Vec<u64>,
    /// Per task, the budget shares of its running workers.
    held: Vec<Vec<Share>>,
    grants: Vec<Grant>,
}

impl Simulation<'_> {
    /// How many workers `task` runs now.
    fn workers(&self, task: TaskIdx) -> u32 {
        self.held[task.index()].len() as u32
    }

    fn tasks(&self) -> impl Iterator<Item = TaskIdx> + '_ {
        self.graph.task_indices()
    }

    fn is_done(&self, task: TaskIdx) -> bool {
        self.blocks_left[task.index()] == 0
    }

    fn all_done(&self) -> bool {
        self.tasks().all(|task| self.is_done(task))
    }

    fn upstream_left(&self, task: TaskIdx) -> Vec<TaskIdx> {
        let spec = &self.pipeline.tasks[task.index()].spec;
        let left = spec.upstream.iter().filter(|&&up| !self.is_done(up));
        left.copied().collect()
    }

    /// The driver's `start_workers` for every task not done, in file order,
    /// with `runnable` blocks each (none while upstream tasks are left,
    /// after the first phase); returns the workers started per task.
    fn start_workers(
        &mut self,
        phase: usize,
        runnable: impl Fn(TaskIdx) -> u64,
    ) -> Vec<Option<WorkerIds>> {
        let mut started = vec![None; self.held.len()];
        for task in self.tasks().collect::<Vec<_>>() {
            if self.is_done(task) || (phase > 1 && !self.upstream_left(task).is_empty()) {
                continue;
            }
            let config = &self.pipeline.tasks[task.index()];
            let ready = runnable(task).min(self.blocks_left[task.index()]);
            let wanted =
                worker_demand(ready, config.max_workers).saturating_sub(self.workers(task));
            let shares = self.budget.allocate_up_to(&config.requires, wanted);
            let granted = shares.len() as u32;
            if granted == 0 {
                continue;
            }
            let workers = WorkerIds {
                first: self.next_worker,
                last: self.next_worker + u64::from(granted) - 1,
            };
            self.next_worker += u64::from(granted);
            self.held[task.index()].extend(shares.iter().cloned());
            self.grants.push(Grant {
                task,
                phase,
                workers,
                shares,
            });
            started[task.index()] = Some(workers);
        }
        started
    }

    fn phase(&self, after: Vec<String>, started: &[Option<WorkerIds>]) -> Phase {
        let tasks = self
            .tasks()
            .filter(|&task| !self.is_done(task))
            .map(|task| PhaseTask {
                id: self.id(task).to_string(),
                blocks_left: self.blocks_left[task.index()],
                state: self.state(task, started[task.index()]),
            })
            .collect();
        let used = self
            .budget
            .used()
            .into_iter()
            .filter(|&(_, amount)| amount > 0);
        Phase {
            after,
            tasks,
            budget_used: used.collect(),
        }
    }

    fn state(&self, task: TaskIdx, started: Option<WorkerIds>) -> TaskState {
        let workers = self.workers(task);
        let upstream = self.upstream_left(task);
        if workers > 0 {
            TaskState::Running {
                workers,
                started,
                more_later_up_to: self.more_workers_later(task),
            }
        } else if self.pipeline.tasks[task.index()].max_workers == 0 {
            TaskState::ByHand
        } else if !upstream.is_empty() {
            let upstream = upstream.iter().map(|&up| self.id(up).to_string());
            TaskState::WaitsForUpstream {
                upstream: upstream.collect(),
            }
        } else {
            TaskState::WaitsForBudget
        }
    }

    /// The demand of `task` once its widest level is ready, if a later
    /// level is wider than its first.
    fn more_workers_later(&self, task: TaskIdx) -> Option<u32> {
        let (left, max_workers) = (
            self.blocks_left[task.index()],
            self.pipeline.tasks[task.index()].max_workers,
        );
        let first = worker_demand(first_level_blocks(self.graph, task).min(left), max_workers);
        let widest = worker_demand(widest_level_blocks(self.graph, task).min(left), max_workers);
        (widest > first).then_some(widest)
    }

    fn id(&self, task: TaskIdx) -> &str {
        &self.pipeline.tasks[task.index()].spec.id
    }

    /// Ends the phase: the running tasks with the fewest rounds left finish
    /// (or, with none running, the tasks served by hand), the others run
    /// as many rounds. Returns the tasks that finished.
    fn finish_next(&mut self) -> Vec<String> {
        let can_finish: Vec<TaskIdx> = self
            .tasks()
            .filter(|&task| !self.is_done(task) && self.upstream_left(task).is_empty())
            .collect();
        let rounds_left = |task: TaskIdx| {
            let workers = u64::from(self.workers(task));
            (workers > 0).then(|| self.blocks_left[task.index()].div_ceil(workers))
        };
        let Some(rounds) = can_finish.iter().filter_map(|&t| rounds_left(t)).min() else {
            return self.finish_by_hand(&can_finish);
        };
        let mut finished = Vec::new();
        for task in can_finish {
            let workers = self.workers(task);
            let left = &mut self.blocks_left[task.index()];
            *left = left.saturating_sub(rounds * u64::from(workers));
            if *left == 0 {
                self.end_workers(task);
                finished.push(self.id(task).to_string());
            }
        }
        finished
    }

    /// With nothing launched running, the tasks served by hand are assumed
    /// to be done next (by whoever starts their workers).
    fn finish_by_hand(&mut self, can_finish: &[TaskIdx]) -> Vec<String> {
        let by_hand = can_finish
            .iter()
            .filter(|&&task| self.pipeline.tasks[task.index()].max_workers == 0);
        let mut finished = Vec::new();
        for &task in by_hand {
            self.blocks_left[task.index()] = 0;
            finished.push(self.id(task).to_string());
        }
        finished
    }

    /// A done task's workers leave; their budget share returns.
    fn end_workers(&mut self, task: TaskIdx) {
        for share in std::mem::take(&mut self.held[task.index()]) {
            self.budget.release(&share);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::task;
    use std::path::Path;

    fn simulated(toml: &str, blocks_left: Vec<u64>, runnable: &[u64]) -> Vec<Phase> {
        let toml = format!("name = \"p\"\n{toml}");
        let pipeline = Pipeline::from_str(
            &toml,
            Path::new("test.toml"),
            crate::pipeline::python_worker::PYTHON_ON_PATH,
        )
        .unwrap();
        simulate(&pipeline, &pipeline.graph(), blocks_left, runnable).phases
    }

    fn states(phase: &Phase) -> Vec<(&str, &TaskState)> {
        phase
            .tasks
            .iter()
            .map(|t| (t.id.as_str(), &t.state))
            .collect()
    }

    fn running(workers: u32, first: u64, last: u64) -> TaskState {
        TaskState::Running {
            workers,
            started: Some(WorkerIds { first, last }),
            more_later_up_to: None,
        }
    }

    #[test]
    fn a_task_waits_for_the_budget_until_the_one_served_first_is_done() {
        let toml = [
            "[resources]\ncpu = 2\n".to_string(),
            task("big", "requires = { cpu = 2 }\nmax_workers = 1"),
            task("small", "requires = { cpu = 1 }\nmax_workers = 4"),
        ]
        .concat();
        let phases = simulated(&toml, vec![10, 10], &[10, 10]);
        assert_eq!(phases.len(), 2);
        let phase_1 = [
            ("big", &running(1, 1, 1)),
            ("small", &TaskState::WaitsForBudget),
        ];
        assert_eq!(states(&phases[0]), phase_1);
        assert_eq!(phases[1].after, ["big"]);
        assert_eq!(states(&phases[1]), [("small", &running(2, 2, 3))]);
    }

    #[test]
    fn tasks_served_by_hand_come_before_their_downstream_tasks() {
        let toml = [
            task("manual", "max_workers = 0"),
            task("after", "upstream = [\"manual\"]\nmax_workers = 2"),
        ]
        .concat();
        let phases = simulated(&toml, vec![10, 10], &[10, 0]);
        let waits = TaskState::WaitsForUpstream {
            upstream: vec!["manual".into()],
        };
        let phase_1 = [("manual", &TaskState::ByHand), ("after", &waits)];
        assert_eq!(states(&phases[0]), phase_1);
        assert_eq!(states(&phases[1]), [("after", &running(2, 1, 2))]);
    }

    #[test]
    fn tasks_done_in_an_earlier_run_are_left_out_and_free_their_downstream() {
        let toml = [
            task("done", "max_workers = 2"),
            task("next", "upstream = [\"done\"]\nmax_workers = 2"),
        ]
        .concat();
        let phases = simulated(&toml, vec![0, 10], &[0, 10]);
        assert_eq!(phases.len(), 1);
        assert_eq!(states(&phases[0]), [("next", &running(2, 1, 2))]);
    }
}
