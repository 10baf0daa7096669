//! What the report draws, rebuilt from a run's events: the run as
//! [`RunEvents`] sums it up (per task what happened to it, per worker its
//! life), and one row per worker with its blocks as bars.
//!
//! Times are seconds since the run started (its first event). A block's
//! bar ends when the driver recorded its result and spans the run time
//! the worker measured (`seconds`); for events without it (older logs)
//! the bar starts where the worker's previous block ended, or when the
//! worker connected, which is what the worker was doing in between. A
//! `blocks_done` record (big runs sum up a worker's done blocks per
//! second) is one bar of many blocks, from the earliest start to the last
//! end, and its run times go to the task's
//! [`run_times`](crate::run_dir::run_state::TaskEvents::run_times).
//! Nothing here needs the run to have finished: a crashed or running run
//! simply has rows without an end.

use crate::run_dir::events::history::{HistoryEvent, RunFold};
use crate::run_dir::events::Event;
use crate::run_dir::run_state::{RunEvents, WorkerLife};
use std::collections::BTreeMap;

/// How one attempt at a block ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Done,
    /// Failed, to be tried again.
    Retried,
    FailedForGood,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Retried => "failed, retried",
            Outcome::FailedForGood => "failed for good",
        }
    }
}

/// One attempt at a block on one worker, or (`count` > 1) the done
/// blocks of a `blocks_done` record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockBar {
    pub start: f64,
    pub end: f64,
    /// When the first of its blocks ended (`end` for one block).
    pub first: f64,
    pub count: u64,
    pub outcome: Outcome,
    /// The block, if the bar is one block's.
    pub block_id: Option<u64>,
}

impl BlockBar {
    pub fn seconds(&self) -> f64 {
        self.end - self.start
    }
}

/// One worker's row: its life (submitted, connected, gone) and its
/// blocks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerRow {
    /// Index into [`RunEvents::tasks`].
    pub task: usize,
    /// `None` for blocks the driver ran itself (`run --serial`).
    pub worker_id: Option<u64>,
    /// Empty for the driver, and for a worker whose events name only
    /// its blocks.
    pub life: WorkerLife,
    pub bars: Vec<BlockBar>,
}

/// A run as the report sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunModel {
    pub run: RunEvents,
    /// Ordered by task, then worker id.
    pub workers: Vec<WorkerRow>,
    /// Runs before the last one in the same run directory (resumes).
    pub earlier_runs: usize,
}

impl RunModel {
    pub fn pipeline(&self) -> &str {
        self.run.start.as_ref().map_or("", |start| &start.pipeline)
    }

    fn rows_of(&self, task: usize) -> impl Iterator<Item = &WorkerRow> {
        self.workers.iter().filter(move |row| row.task == task)
    }

    /// The workers of task `task` (the driver is none).
    pub fn workers_of(&self, task: usize) -> u32 {
        self.rows_of(task)
            .filter(|row| row.worker_id.is_some())
            .count() as u32
    }

    /// Unclean worker exits of task `task` (lost workers, failed starts).
    pub fn restarts_of(&self, task: usize) -> u32 {
        let unclean = |row: &&WorkerRow| row.life.gone().is_some_and(|(_, clean)| !clean);
        self.rows_of(task).filter(unclean).count() as u32
    }
}

/// Builds the model of one run while `events.jsonl` streams by: the run's
/// events summed up, and each worker's bars beside them.
#[derive(Clone, Debug)]
pub struct Builder {
    run: RunEvents,
    bars: BTreeMap<(usize, Option<u64>), Vec<BlockBar>>,
}

impl RunFold for Builder {
    fn on_event(&mut self, event: &HistoryEvent) {
        self.run.on_event(event);
        let started = self.run.started();
        let time = event.time - started;
        match &event.kind {
            Event::BlocksDone {
                task,
                worker_id,
                count,
                first,
                start,
                ..
            } => {
                let (first, start) = (first - started, start.map(|s| s - started));
                self.on_blocks_done(task, *worker_id, (start, first, time), *count);
            }
            Event::BlockDone {
                task,
                block_id,
                worker_id,
                seconds,
            } => self.on_block(task, *worker_id, time, *seconds, Outcome::Done, *block_id),
            Event::BlockFailed {
                task,
                block_id,
                worker_id,
                for_good,
                seconds,
                ..
            } => {
                let outcome = if *for_good {
                    Outcome::FailedForGood
                } else {
                    Outcome::Retried
                };
                self.on_block(task, *worker_id, time, *seconds, outcome, *block_id);
            }
            _ => {}
        }
    }
}

impl Builder {
    /// Tasks come in `task_order` (the pipeline's, when known), then in
    /// order of appearance.
    pub fn new(task_order: &[String]) -> Self {
        Builder {
            run: RunEvents::new(task_order),
            bars: BTreeMap::new(),
        }
    }

    /// The run's events summed up so far.
    pub fn run(&self) -> &RunEvents {
        &self.run
    }

    /// The bars of `worker_id` of `task` so far, and when it connected:
    /// where a bar without measured seconds starts.
    fn bars(&mut self, task: &str, worker_id: Option<u64>) -> (&mut Vec<BlockBar>, Option<f64>) {
        let task = self.run.task_entry(task);
        let life = worker_id.and_then(|id| self.run.workers.get(&(task, id)));
        let connected = life.and_then(|life| life.connected);
        (self.bars.entry((task, worker_id)).or_default(), connected)
    }

    fn on_block(
        &mut self,
        task: &str,
        worker_id: Option<u64>,
        end: f64,
        seconds: Option<f64>,
        outcome: Outcome,
        block_id: u64,
    ) {
        let (bars, connected) = self.bars(task, worker_id);
        let start = match seconds.filter(|s| s.is_finite() && *s >= 0.0) {
            Some(seconds) => end - seconds,
            None => bars.last().map(|b| b.end).or(connected).unwrap_or(end),
        };
        bars.push(BlockBar {
            start: start.min(end),
            end,
            first: end,
            count: 1,
            outcome,
            block_id: Some(block_id),
        });
    }

    /// A `blocks_done` record's bar: from its earliest measured start, else
    /// from where the worker was before (as [`Self::on_block`]), to its
    /// last end.
    fn on_blocks_done(
        &mut self,
        task: &str,
        worker_id: Option<u64>,
        (start, first, end): (Option<f64>, f64, f64),
        count: u64,
    ) {
        let (bars, connected) = self.bars(task, worker_id);
        let start =
            start.unwrap_or_else(|| (bars.last().map(|b| b.end)).or(connected).unwrap_or(first));
        let first = first.min(end);
        bars.push(BlockBar {
            start: start.min(first),
            end,
            first,
            count,
            outcome: Outcome::Done,
            block_id: None,
        });
    }

    /// The model, with `earlier_runs` runs before this one in its file.
    pub fn finish(self, earlier_runs: usize) -> RunModel {
        let mut rows: BTreeMap<_, _> = (self.run.workers.iter())
            .map(|(&(task, id), life)| {
                let row = WorkerRow {
                    task,
                    worker_id: Some(id),
                    life: life.clone(),
                    bars: Vec::new(),
                };
                ((task, Some(id)), row)
            })
            .collect();
        for ((task, worker_id), mut bars) in self.bars {
            // Results are recorded in the order they arrive; bars are drawn
            // by start.
            bars.sort_by(|a, b| a.start.total_cmp(&b.start));
            let row = rows.entry((task, worker_id)).or_insert_with(|| WorkerRow {
                task,
                worker_id,
                ..WorkerRow::default()
            });
            row.bars = bars;
        }
        RunModel {
            run: self.run,
            workers: rows.into_values().collect(),
            earlier_runs,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::run_dir::events::history::RunHistory;
    use std::path::Path;

    /// A run of task "a": worker 1 queued 2 s, ran three blocks (one
    /// failed for good), left cleanly; worker 2 was lost. An earlier run
    /// comes first.
    pub const SAMPLE_EVENTS: &str = r#"{"time": 50, "event": "run_started", "pipeline": "p", "mode": "distributed"}
{"time": 100, "event": "run_started", "pipeline": "p", "mode": "distributed"}
{"time": 100.5, "event": "worker_submitted", "task": "a", "worker_id": 1, "job": "local:11"}
{"time": 102.5, "event": "worker_connected", "task": "a", "worker_id": 1, "host": "n1", "pid": 11, "by_hand": false}
{"time": 104.5, "event": "block_done", "task": "a", "block_id": 0, "worker_id": 1, "seconds": 2.0}
{"time": 106, "event": "block_done", "task": "a", "block_id": 1, "worker_id": 1}
{"time": 107, "event": "block_failed", "task": "a", "block_id": 2, "worker_id": 1, "error": "exit status 1", "for_good": true, "seconds": 1.0}
{"time": 107.5, "event": "worker_connected", "task": "a", "worker_id": 2, "host": "n2", "pid": 12, "by_hand": false}
{"time": 108, "event": "worker_gone", "task": "a", "worker_id": 2, "clean": false, "why": "lost"}
{"time": 108.5, "event": "worker_draining", "task": "a", "worker_id": 1, "why": "received SIGTERM"}
{"time": 108.6, "event": "blocks_returned", "task": "a", "worker_id": 1, "block_ids": [4, 5], "why": "received SIGTERM"}
{"time": 109, "event": "worker_gone", "task": "a", "worker_id": 1, "clean": true, "why": "told to stop"}
"#;

    /// The model of the last run of `events`.
    pub fn model_of(events: &str, task_order: &[String]) -> RunModel {
        let history = RunHistory::from_reader(Path::new("events.jsonl"), events.as_bytes(), || {
            Builder::new(task_order)
        })
        .unwrap();
        history.last_run.unwrap().finish(history.runs - 1)
    }

    pub fn sample_model() -> RunModel {
        model_of(SAMPLE_EVENTS, &[])
    }

    #[test]
    fn rows_have_queue_wait_bars_and_ends() {
        let model = model_of(SAMPLE_EVENTS, &["z".to_string()]);
        assert_eq!(model.pipeline(), "p");
        assert_eq!((model.run.span, model.earlier_runs), (9.0, 1));
        assert_eq!(
            model.run.finished, None,
            "no run_finished: crashed or running"
        );
        assert_eq!(
            model.run.tasks.len(),
            2,
            "the pipeline's task first, then a"
        );
        let a = &model.run.tasks[1];
        let (workers, restarts) = (model.workers_of(1), model.restarts_of(1));
        assert_eq!((workers, restarts, a.blocks_done), (2, 1, 2));
        assert_eq!(a.failed_for_good, 1);
        let first = &model.workers[0].life;
        assert_eq!((first.submitted, first.connected), (Some(0.5), Some(2.5)));
        assert_eq!(first.gone(), Some((9.0, true)));
        assert_eq!(first.drained, Some((8.5, "received SIGTERM".to_string())));
        assert_eq!(first.returned, 2);
        let spans: Vec<(f64, f64, Outcome)> = model.workers[0]
            .bars
            .iter()
            .map(|b| (b.start, b.end, b.outcome))
            .collect();
        assert_eq!(
            spans,
            vec![
                (2.5, 4.5, Outcome::Done),
                (4.5, 6.0, Outcome::Done),
                (6.0, 7.0, Outcome::FailedForGood)
            ],
            "measured seconds, else from the previous block's end"
        );
        assert_eq!(model.workers[1].life.gone(), Some((8.0, false)));
    }

    /// A run that summed up its done blocks: worker 1 of task "a" did 4
    /// blocks of 0.5 s, then 2 whose run times it did not measure.
    pub const SUMMED_UP_EVENTS: &str = r#"{"time": 100, "event": "run_started", "pipeline": "p", "mode": "distributed"}
{"time": 100.5, "event": "worker_connected", "task": "a", "worker_id": 1, "host": "n1", "pid": 11, "by_hand": false}
{"time": 102, "event": "blocks_done", "task": "a", "worker_id": 1, "count": 4, "first": 101, "start": 100.5, "run_times": {"buckets": [[-16, 4]], "longest": 0.5}}
{"time": 103, "event": "blocks_done", "task": "a", "worker_id": 1, "count": 2, "first": 102.5}
{"time": 104, "event": "worker_gone", "task": "a", "worker_id": 1, "clean": true, "why": "told to stop"}
"#;

    #[test]
    fn a_record_of_done_blocks_is_one_bar_of_many() {
        let model = model_of(SUMMED_UP_EVENTS, &[]);
        assert_eq!(model.run.tasks[0].blocks_done, 6);
        assert_eq!(model.run.tasks[0].run_times.longest, 0.5);
        let bars: Vec<(f64, f64, f64, u64, Option<u64>)> = (model.workers[0].bars.iter())
            .map(|b| (b.start, b.end, b.first, b.count, b.block_id))
            .collect();
        assert_eq!(
            bars,
            [(0.5, 2.0, 1.0, 4, None), (2.0, 3.0, 2.5, 2, None)],
            "measured starts, else from the previous bar's end"
        );
    }
}
