//! What the report draws, rebuilt from a run's events: one row per worker
//! with its queue wait and its blocks, and per task what happened to it.
//!
//! Times are seconds since the run started (its first event). A block's
//! bar ends when the driver recorded its result and spans the run time
//! the worker measured (`seconds`); for events without it (older logs)
//! the bar starts where the worker's previous block ended, or when the
//! worker connected, which is what the worker was doing in between. A
//! `blocks_done` record (big runs sum up a worker's done blocks per
//! second) is one bar of many blocks, from the earliest start to the last
//! end, and its run times go to the task's [`TaskActivity::run_times`].
//! Nothing here needs the run to have finished: a crashed or running run
//! simply has rows without an end.

use crate::run_dir::events::history::{HistoryEvent, RunFold};
use crate::run_dir::events::run_times::RunTimes;
use crate::run_dir::events::Event;
use daisy_core::TaskCounters;
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

/// One worker's life: submitted (queued), connected, blocks, gone.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerRow {
    /// Index into [`RunModel::tasks`].
    pub task: usize,
    /// `None` for blocks the driver ran itself (`run --serial`).
    pub worker_id: Option<u64>,
    pub job: Option<String>,
    pub host: Option<String>,
    pub submitted: Option<f64>,
    pub connected: Option<f64>,
    /// When it went, and whether cleanly.
    pub gone: Option<(f64, bool)>,
    /// When it started to drain (a signal, its walltime), and why.
    pub drained: Option<(f64, String)>,
    /// Blocks it handed back unrun while draining.
    pub returned: u64,
    pub bars: Vec<BlockBar>,
}

/// What happened to one task in the run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskActivity {
    pub id: String,
    /// The final counters, if the task finished (`task_done`).
    pub counters: Option<TaskCounters>,
    /// Blocks that succeeded in this run.
    pub blocks_done: u64,
    /// Attempts that failed for good (one per block).
    pub failed_for_good: u64,
    pub workers: u32,
    /// Unclean worker exits (lost workers, failed starts).
    pub restarts: u32,
    pub done_at: Option<f64>,
    pub abandoned: Option<String>,
    pub last_error: Option<String>,
    /// Run times of the done blocks of `blocks_done` records (those of
    /// single blocks are their bars').
    pub run_times: RunTimes,
}

/// A run as the report sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunModel {
    pub pipeline: String,
    /// Unix seconds of the first event.
    pub started: f64,
    /// Seconds from the first event to the last.
    pub span: f64,
    /// `run_finished`'s `completed`; `None` if the run is still going or
    /// crashed.
    pub finished: Option<bool>,
    pub tasks: Vec<TaskActivity>,
    /// Ordered by task, then worker id.
    pub workers: Vec<WorkerRow>,
    /// Runs before the last one in the same run directory (resumes).
    pub earlier_runs: usize,
}

impl RunModel {
    pub fn task_index(&self, id: &str) -> Option<usize> {
        self.tasks.iter().position(|t| t.id == id)
    }
}

/// Builds the model of one run while `events.jsonl` streams by.
pub struct Builder {
    model: RunModel,
    rows: BTreeMap<(usize, Option<u64>), WorkerRow>,
}

impl RunFold for Builder {
    fn on_event(&mut self, event: &HistoryEvent) {
        if let Event::RunStarted { pipeline, .. } = &event.kind {
            self.model.started = event.time;
            self.model.pipeline = pipeline.to_string();
        }
        self.on_any_event(event);
    }
}

impl Builder {
    /// Tasks come in `task_order` (the pipeline's, when known), then in
    /// order of appearance.
    pub fn new(task_order: &[String]) -> Self {
        let mut builder = Builder {
            model: RunModel::default(),
            rows: BTreeMap::new(),
        };
        for id in task_order {
            builder.task(id);
        }
        builder
    }

    fn task(&mut self, id: &str) -> usize {
        self.model.task_index(id).unwrap_or_else(|| {
            self.model.tasks.push(TaskActivity {
                id: id.to_string(),
                ..TaskActivity::default()
            });
            self.model.tasks.len() - 1
        })
    }

    fn row(&mut self, task: &str, worker_id: Option<u64>) -> &mut WorkerRow {
        let task = self.task(task);
        self.rows
            .entry((task, worker_id))
            .or_insert_with(|| WorkerRow {
                task,
                worker_id,
                ..WorkerRow::default()
            })
    }

    fn on_any_event(&mut self, event: &HistoryEvent) {
        let time = event.time - self.model.started;
        self.model.span = self.model.span.max(time);
        match &event.kind {
            Event::BlocksDone {
                task,
                worker_id,
                count,
                first,
                start,
                run_times,
            } => {
                let task_index = self.task(task);
                let activity = &mut self.model.tasks[task_index];
                activity.blocks_done += count;
                if let Some(run_times) = run_times {
                    activity.run_times.merge(run_times);
                }
                let started = self.model.started;
                let (first, start) = (first - started, start.map(|s| s - started));
                self.on_blocks_done(task, *worker_id, (start, first, time), *count);
            }
            Event::BlockDone {
                task,
                block_id,
                worker_id,
                seconds,
            } => {
                let task_index = self.task(task);
                self.model.tasks[task_index].blocks_done += 1;
                self.on_block(task, *worker_id, time, *seconds, Outcome::Done, *block_id);
            }
            Event::BlockFailed {
                task,
                block_id,
                worker_id,
                error,
                for_good,
                seconds,
            } => {
                let task_index = self.task(task);
                let activity = &mut self.model.tasks[task_index];
                activity.last_error = Some(error.to_string());
                let outcome = if *for_good {
                    activity.failed_for_good += 1;
                    Outcome::FailedForGood
                } else {
                    Outcome::Retried
                };
                self.on_block(task, *worker_id, time, *seconds, outcome, *block_id);
            }
            kind => self.on_task_or_worker(kind, time),
        }
    }

    fn on_task_or_worker(&mut self, kind: &Event, time: f64) {
        match kind {
            Event::TaskDone { task, counters } => {
                let task = self.task(task);
                self.model.tasks[task].counters = Some(*counters);
                self.model.tasks[task].done_at = Some(time);
            }
            Event::TaskAbandoned { task, why, .. } => {
                let task = self.task(task);
                self.model.tasks[task].abandoned = Some(why.to_string());
            }
            Event::WorkerSubmitted {
                task,
                worker_id,
                job,
            } => {
                let row = self.row(task, Some(*worker_id));
                row.submitted = Some(time);
                row.job = Some(job.to_string());
            }
            Event::WorkerStartFailed {
                task, worker_id, ..
            } => {
                self.row(task, Some(*worker_id)).gone = Some((time, false));
            }
            Event::WorkerConnected {
                task,
                worker_id,
                host,
                ..
            } => {
                let row = self.row(task, Some(*worker_id));
                // A requeued job connects again as the same worker; its
                // row began at the first connection.
                row.connected.get_or_insert(time);
                row.host = Some(host.to_string());
            }
            Event::WorkerGone {
                task,
                worker_id,
                clean,
                ..
            } => self.row(task, Some(*worker_id)).gone = Some((time, *clean)),
            Event::WorkerDraining {
                task,
                worker_id,
                why,
            } => {
                self.row(task, Some(*worker_id))
                    .drained
                    .get_or_insert((time, why.to_string()));
            }
            Event::BlocksReturned {
                task,
                worker_id,
                block_ids,
                ..
            } => self.row(task, Some(*worker_id)).returned += block_ids.len() as u64,
            Event::RunFinished { completed, .. } => self.model.finished = Some(*completed),
            _ => {}
        }
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
        let row = self.row(task, worker_id);
        let start = match seconds.filter(|s| s.is_finite() && *s >= 0.0) {
            Some(seconds) => end - seconds,
            None => row
                .bars
                .last()
                .map(|b| b.end)
                .or(row.connected)
                .unwrap_or(end),
        };
        row.bars.push(BlockBar {
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
        let row = self.row(task, worker_id);
        let start = start.unwrap_or_else(|| {
            (row.bars.last().map(|b| b.end))
                .or(row.connected)
                .unwrap_or(first)
        });
        let first = first.min(end);
        row.bars.push(BlockBar {
            start: start.min(first),
            end,
            first,
            count,
            outcome: Outcome::Done,
            block_id: None,
        });
    }

    /// The model, with `earlier_runs` runs before this one in its file.
    pub fn finish(mut self, earlier_runs: usize) -> RunModel {
        self.model.earlier_runs = earlier_runs;
        for row in self.rows.values_mut() {
            let task = &mut self.model.tasks[row.task];
            if row.worker_id.is_some() {
                task.workers += 1;
            }
            if row.gone.is_some_and(|(_, clean)| !clean) {
                task.restarts += 1;
            }
            // Results are recorded in the order they arrive; bars are drawn
            // by start.
            row.bars.sort_by(|a, b| a.start.total_cmp(&b.start));
        }
        self.model.workers = self.rows.into_values().collect();
        self.model
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
        assert_eq!(model.pipeline, "p");
        assert_eq!((model.span, model.earlier_runs), (9.0, 1));
        assert_eq!(model.finished, None, "no run_finished: crashed or running");
        assert_eq!(model.tasks.len(), 2, "the pipeline's task first, then a");
        let a = &model.tasks[1];
        assert_eq!((a.workers, a.restarts, a.blocks_done), (2, 1, 2));
        assert_eq!(a.failed_for_good, 1);
        let first = &model.workers[0];
        assert_eq!((first.submitted, first.connected), (Some(0.5), Some(2.5)));
        assert_eq!(first.gone, Some((9.0, true)));
        assert_eq!(first.drained, Some((8.5, "received SIGTERM".to_string())));
        assert_eq!(first.returned, 2);
        let spans: Vec<(f64, f64, Outcome)> = first
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
        assert_eq!(model.workers[1].gone, Some((8.0, false)));
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
        assert_eq!(model.tasks[0].blocks_done, 6);
        assert_eq!(model.tasks[0].run_times.longest, 0.5);
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
