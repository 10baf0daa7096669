//! A worker's life in one run, from its events: submitted (queued),
//! connected, drained, gone. The worker events are folded here only;
//! `status` lists the lives, the report's timeline draws them.
//!
//! Times are seconds since the run's `run_started`.

use crate::run_dir::events::Event;
use serde::Serialize;

/// How a worker ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerEnd {
    /// Left after being told to stop, or drained.
    Clean,
    /// Crashed, killed, went silent, or its connection broke.
    Lost,
    /// Never connected: its job ended first or submitting it failed.
    FailedStart,
    /// No end recorded and the driver is running: submitted, and not
    /// connected yet (a job waiting in the cluster's queue).
    Queued,
    /// No end recorded and the driver is running: connected and at work.
    Running,
    /// No end recorded and the driver is running: connected, and
    /// finishing what it holds before it leaves (a signal, its walltime).
    Draining,
    /// No end recorded and no driver running: the driver stopped first
    /// (killed, or it cancelled the job at its end).
    Unrecorded,
}

impl WorkerEnd {
    /// In words, as `status` and the dashboard show it.
    pub fn describe(self) -> &'static str {
        match self {
            WorkerEnd::Clean => "clean",
            WorkerEnd::Lost => "lost",
            WorkerEnd::FailedStart => "failed to start",
            WorkerEnd::Queued => "queued",
            WorkerEnd::Running => "running",
            WorkerEnd::Draining => "draining",
            WorkerEnd::Unrecorded => "no end recorded",
        }
    }
}

/// A recorded end of a worker: `worker_gone` or `worker_start_failed`.
#[derive(Clone, Debug, PartialEq)]
pub struct Ending {
    pub time: f64,
    /// [`WorkerEnd::Clean`], [`WorkerEnd::Lost`] or
    /// [`WorkerEnd::FailedStart`].
    pub how: WorkerEnd,
    pub why: String,
}

/// One worker of a run, as its events tell it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerLife {
    /// The job it was submitted as (launched workers).
    pub job: Option<String>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub by_hand: bool,
    pub submitted: Option<f64>,
    /// Its first connection: a requeued job connects again as the same
    /// worker, and its life began at the first.
    pub connected: Option<f64>,
    /// Its last recorded end.
    pub ended: Option<Ending>,
    /// It connected again after `ended` (a requeued job): at work anew,
    /// though the timeline still draws that end.
    pub back: bool,
    /// When it started to drain (a signal, its walltime), and why.
    pub drained: Option<(f64, String)>,
    /// Blocks it handed back unrun while draining.
    pub returned: u64,
    /// The limit its submission waits for (`worker_submit_waiting`),
    /// until it is submitted or ends.
    pub waiting_for: Option<String>,
}

/// The task and worker id a worker event is about; `None` for any other
/// event.
pub(super) fn worker_of<'e>(kind: &'e Event) -> Option<(&'e str, u64)> {
    match kind {
        Event::WorkerSubmitted {
            task, worker_id, ..
        }
        | Event::WorkerConnected {
            task, worker_id, ..
        }
        | Event::WorkerStartFailed {
            task, worker_id, ..
        }
        | Event::WorkerSubmitWaiting {
            task, worker_id, ..
        }
        | Event::WorkerGone {
            task, worker_id, ..
        }
        | Event::WorkerDraining {
            task, worker_id, ..
        }
        | Event::BlocksReturned {
            task, worker_id, ..
        } => Some((task, *worker_id)),
        _ => None,
    }
}

impl WorkerLife {
    /// Takes in one of its events (see [`worker_of`]) at `time`.
    pub(super) fn on_event(&mut self, kind: &Event, time: f64) {
        match kind {
            Event::WorkerSubmitted { job, .. } => {
                self.submitted = Some(time);
                self.job = Some(job.to_string());
                self.waiting_for = None;
            }
            Event::WorkerSubmitWaiting { limit, .. } => {
                self.waiting_for = Some(limit.to_string());
            }
            Event::WorkerConnected {
                host,
                pid,
                by_hand,
                job,
                ..
            } => {
                self.connected.get_or_insert(time);
                if let Some(job) = job {
                    self.job = Some(job_with_step(self.job.take(), job));
                }
                (self.host, self.pid) = (Some(host.to_string()), Some(*pid));
                self.by_hand = *by_hand;
                self.back = self.ended.is_some();
            }
            Event::WorkerStartFailed { error, .. } => self.end(time, WorkerEnd::FailedStart, error),
            Event::WorkerGone { clean, why, .. } => {
                let how = if *clean {
                    WorkerEnd::Clean
                } else {
                    WorkerEnd::Lost
                };
                self.end(time, how, why);
            }
            Event::WorkerDraining { why, .. } => {
                self.drained.get_or_insert((time, why.to_string()));
            }
            Event::BlocksReturned { block_ids, .. } => self.returned += block_ids.len() as u64,
            _ => {}
        }
    }

    fn end(&mut self, time: f64, how: WorkerEnd, why: &str) {
        let why = why.to_string();
        self.waiting_for = None;
        self.ended = Some(Ending { time, how, why });
        self.back = false;
    }

    /// How it stands at the last event, and why: a worker connected after
    /// its last end, or with none recorded, is
    /// [`WorkerEnd::Unrecorded`].
    pub fn end_state(&self) -> (WorkerEnd, Option<&str>) {
        match &self.ended {
            Some(ending) if !self.back => (ending.how, Some(&ending.why)),
            _ => (WorkerEnd::Unrecorded, None),
        }
    }

    /// When it last ended, and whether cleanly (a failed start is not).
    pub fn gone(&self) -> Option<(f64, bool)> {
        let ending = self.ended.as_ref()?;
        Some((ending.time, ending.how == WorkerEnd::Clean))
    }

    /// Whether its submission, connection or end was recorded, rather
    /// than only a drain (the rest of its lines damaged).
    pub fn recorded(&self) -> bool {
        self.submitted.is_some()
            || self.connected.is_some()
            || self.ended.is_some()
            || self.waiting_for.is_some()
    }
}

/// The job a worker is listed by: the one it was submitted as, with the
/// step it says it runs as (`24_3.1`: step 1 of array element 24_3), or
/// else the job it names.
fn job_with_step(submitted: Option<String>, connected: &str) -> String {
    let step = connected.split_once('.').map(|(_, step)| step);
    match (submitted, step) {
        (Some(submitted), Some(step)) => {
            let job = submitted.split('.').next().unwrap_or_default();
            format!("{job}.{step}")
        }
        (Some(submitted), None) => submitted,
        (None, _) => connected.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_worker_in_a_job_step_is_listed_by_its_array_element_and_step() {
        use super::job_with_step;
        assert_eq!(job_with_step(Some("24_3".into()), "27.1"), "24_3.1");
        assert_eq!(job_with_step(Some("24_3.1".into()), "27.2"), "24_3.2");
        assert_eq!(job_with_step(Some("24_3".into()), "27"), "24_3");
        assert_eq!(job_with_step(None, "27.1"), "27.1");
    }

    use super::*;
    use crate::run_dir::events::history::RunHistory;
    use std::path::Path;

    /// Worker 1's events of `lines` in order, at their times.
    fn life(lines: &[&str]) -> WorkerLife {
        let text = lines.join("\n");
        let history = RunHistory::parse(Path::new("e"), &text);
        let mut life = WorkerLife::default();
        for event in history.last_run() {
            if worker_of(&event.kind).is_some() {
                life.on_event(&event.kind, event.time);
            }
        }
        life
    }

    #[test]
    fn a_requeued_worker_is_at_work_anew_and_its_first_life_still_ends() {
        let started =
            r#"{"time": 0, "event": "run_started", "pipeline": "p", "mode": "distributed"}"#;
        let connected = |time: u32| {
            format!(
                r#"{{"time": {time}, "event": "worker_connected", "task": "t", "worker_id": 1, "host": "n", "pid": 7, "by_hand": false}}"#
            )
        };
        let lost = r#"{"time": 2, "event": "worker_gone", "task": "t", "worker_id": 1, "clean": false, "why": "preempted"}"#;
        let requeued = life(&[started, &connected(1), lost, &connected(3)]);
        assert_eq!(requeued.end_state(), (WorkerEnd::Unrecorded, None));
        assert_eq!(
            (requeued.connected, requeued.gone()),
            (Some(1.0), Some((2.0, false)))
        );
        let ended = life(&[started, &connected(1), lost]);
        assert_eq!(ended.end_state(), (WorkerEnd::Lost, Some("preempted")));
    }
}
