//! One run's events summed up while `events.jsonl` streams by
//! ([`RunFold`]): its start and end, per task what its blocks did and how
//! it ended, per worker its life ([`super::workers`]). Done blocks are
//! counted, never listed: the done markers say which ([`super::blocks`]).
//! Failed blocks are listed, being few.
//!
//! Times are seconds since the run's `run_started`, except
//! [`RunStart::time`].

use super::workers::{worker_of, WorkerLife};
use crate::run_dir::events::history::{HistoryEvent, RunFold, RunHistory};
use crate::run_dir::events::run_times::RunTimes;
use crate::run_dir::events::Event;
use crate::run_dir::RunDir;
use daisy_core::TaskCounters;
use serde::Serialize;
use std::collections::BTreeMap;

/// A run's `run_started` line.
#[derive(Clone, Debug, PartialEq)]
pub struct RunStart {
    /// Unix seconds.
    pub time: f64,
    pub pipeline: String,
    /// `distributed` or `serial`.
    pub mode: String,
    pub retry_failed: bool,
}

/// A run's `run_finished` line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunEnding {
    /// The run reached its end (failed and orphaned blocks included)
    /// rather than being interrupted, as `run_finished` records it.
    pub completed: bool,
    pub seconds: f64,
}

/// The last failure of a block in the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// Failed attempts in the run.
    pub attempts: u32,
    pub error: String,
    /// `None` in a `--serial` run.
    pub worker_id: Option<u64>,
    /// The last attempt failed for good (a block done later in the run
    /// failed only retried attempts).
    pub for_good: bool,
}

/// What one task's events say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskEvents {
    pub id: String,
    /// The final counters, if the task finished (`task_done`).
    pub counters: Option<TaskCounters>,
    /// When it finished.
    pub done_at: Option<f64>,
    pub abandoned: Option<String>,
    /// Blocks that succeeded in the run.
    pub blocks_done: u64,
    /// Attempts that failed for good (one per block).
    pub failed_for_good: u64,
    pub last_error: Option<String>,
    /// Each failed block's last failure, by block id.
    pub failures: BTreeMap<u64, Failure>,
    /// Run times of the done blocks of `blocks_done` records (those of
    /// single blocks are on their `block_done` lines).
    pub run_times: RunTimes,
    /// Its blocks are named (done, failed) or it was abandoned: a
    /// pipeline that lacks the task cannot place them.
    pub names_blocks: bool,
}

/// One run, as its events tell it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunEvents {
    /// `None` if the file has no `run_started`.
    pub start: Option<RunStart>,
    /// How it ended; `None` while it runs, or if its driver was killed.
    pub finished: Option<RunEnding>,
    /// Seconds from its start to its last event.
    pub span: f64,
    /// In the order given to [`RunEvents::new`], then of appearance.
    pub tasks: Vec<TaskEvents>,
    /// By task index and worker id.
    pub workers: BTreeMap<(usize, u64), WorkerLife>,
}

impl RunEvents {
    /// Tasks come in `task_order` (the pipeline's, when known), then in
    /// order of appearance.
    pub fn new(task_order: &[String]) -> Self {
        let mut run = RunEvents::default();
        for id in task_order {
            run.task_entry(id);
        }
        run
    }

    /// The last run of a run directory, and the lines it skipped; none
    /// (with a warning) if it has no events.jsonl, as a daisy 2.0 run
    /// directory holding only done markers.
    pub fn read_last(run_dir: &RunDir) -> anyhow::Result<(Self, Vec<String>)> {
        let path = run_dir.events();
        if !path.exists() {
            let warning = format!(
                "{} does not exist: no run recorded events here",
                path.display()
            );
            return Ok((Self::default(), vec![warning]));
        }
        let history = RunHistory::read(&path, Self::default)?;
        let warnings = history.warnings();
        Ok((history.last_run.unwrap_or_default(), warnings))
    }

    /// Unix seconds of its start; 0 if it has none.
    pub fn started(&self) -> f64 {
        self.start.as_ref().map_or(0.0, |start| start.time)
    }

    /// The run started and has not recorded its end.
    pub fn unfinished(&self) -> bool {
        self.start.is_some() && self.finished.is_none()
    }

    fn task_index(&self, id: &str) -> Option<usize> {
        self.tasks.iter().position(|t| t.id == id)
    }

    /// The index of task `id`, added if new.
    pub fn task_entry(&mut self, id: &str) -> usize {
        self.task_index(id).unwrap_or_else(|| {
            self.tasks.push(TaskEvents {
                id: id.to_string(),
                ..TaskEvents::default()
            });
            self.tasks.len() - 1
        })
    }

    fn task(&mut self, id: &str) -> &mut TaskEvents {
        let index = self.task_entry(id);
        &mut self.tasks[index]
    }

    fn on_blocks_done(&mut self, task: &str, count: u64, run_times: Option<&RunTimes>) {
        let task = self.task(task);
        task.names_blocks = true;
        task.blocks_done += count;
        if let Some(run_times) = run_times {
            task.run_times.merge(run_times);
        }
    }

    fn on_block_failed(
        &mut self,
        task: &str,
        block_id: u64,
        worker_id: Option<u64>,
        error: &str,
        for_good: bool,
    ) {
        let task = self.task(task);
        task.names_blocks = true;
        task.last_error = Some(error.to_string());
        if for_good {
            task.failed_for_good += 1;
        }
        let failure = task.failures.entry(block_id).or_insert(Failure {
            attempts: 0,
            error: String::new(),
            worker_id: None,
            for_good: false,
        });
        failure.attempts += 1;
        failure.error = error.to_string();
        failure.worker_id = worker_id;
        failure.for_good = for_good;
    }

    fn on_task_done(&mut self, task: &str, counters: TaskCounters, time: f64) {
        let task = self.task(task);
        (task.counters, task.done_at) = (Some(counters), Some(time));
    }

    fn on_task_abandoned(&mut self, task: &str, why: &str) {
        let task = self.task(task);
        task.names_blocks = true;
        task.abandoned = Some(why.to_string());
    }

    fn on_worker_event(&mut self, kind: &Event, time: f64) {
        if let Some((task, worker_id)) = worker_of(kind) {
            let task = self.task_entry(task);
            let life = self.workers.entry((task, worker_id)).or_default();
            life.on_event(kind, time);
        }
    }
}

impl RunFold for RunEvents {
    fn on_event(&mut self, event: &HistoryEvent) {
        if let Event::RunStarted {
            pipeline,
            mode,
            retry_failed,
        } = &event.kind
        {
            self.start = Some(RunStart {
                time: event.time,
                pipeline: pipeline.to_string(),
                mode: mode.to_string(),
                retry_failed: *retry_failed,
            });
        }
        let time = event.time - self.started();
        self.span = self.span.max(time);
        match &event.kind {
            Event::RunFinished { completed, seconds } => {
                self.finished = Some(RunEnding {
                    completed: *completed,
                    seconds: *seconds,
                })
            }
            Event::BlockDone { task, .. } => self.on_blocks_done(task, 1, None),
            Event::BlocksDone {
                task,
                count,
                run_times,
                ..
            } => self.on_blocks_done(task, *count, run_times.as_ref()),
            Event::BlockFailed {
                task,
                block_id,
                worker_id,
                error,
                for_good,
                ..
            } => self.on_block_failed(task, *block_id, *worker_id, error, *for_good),
            Event::TaskDone { task, counters } => self.on_task_done(task, *counters, time),
            Event::TaskAbandoned { task, why, .. } => self.on_task_abandoned(task, why),
            kind => self.on_worker_event(kind, time),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn read(lines: &[&str]) -> RunEvents {
        let text = lines.join("\n");
        let history = RunHistory::from_reader(Path::new("e"), text.as_bytes(), RunEvents::default);
        history.unwrap().last_run.unwrap()
    }

    fn failed(block_id: u64, for_good: bool) -> String {
        format!(
            r#"{{"time": 2, "event": "block_failed", "task": "t", "block_id": {block_id}, "error": "e", "for_good": {for_good}}}"#
        )
    }

    #[test]
    fn blocks_failed_for_good_are_found_with_done_lines_or_summed_up_records() {
        let started = r#"{"time": 1, "event": "run_started", "pipeline": "p", "mode": "serial"}"#;
        let done_line = r#"{"time": 3, "event": "block_done", "task": "t", "block_id": 1}"#;
        let done_record =
            r#"{"time": 3, "event": "blocks_done", "task": "t", "count": 1, "first": 3}"#;
        let (retried, again, for_good) = (failed(1, false), failed(2, false), failed(2, true));
        for done in [done_line, done_record] {
            let events = read(&[started, &retried, done, &again, &for_good]);
            let failed = &events.tasks[0].failures;
            let for_good: Vec<u64> = (failed.iter())
                .filter(|(_, f)| f.for_good)
                .map(|(id, _)| *id)
                .collect();
            assert_eq!(for_good, [2], "{done}");
            assert_eq!(failed[&2].attempts, 2);
            let named: Vec<&str> = (events.tasks.iter())
                .filter(|t| t.names_blocks)
                .map(|t| t.id.as_str())
                .collect();
            assert_eq!(named, ["t"]);
        }
    }
}
