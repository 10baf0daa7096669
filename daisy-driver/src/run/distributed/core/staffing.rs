//! How many workers each task gets: started through the launcher as its
//! blocks need them and the budget allows, failed starts counted, and a
//! task abandoned (with its downstream tasks) once no worker is left for
//! it and none will be started.

use super::{Command, Core, DoneBefore};
use crate::run::budget::worker_demand;
use crate::run::launching::thread::LauncherEvent;
use crate::run::slots::{Gone, SlotId};
use crate::run_dir::events::Event;
use daisy_core::TaskIdx;
use launchers::{JobId, LaunchError};
use std::borrow::Cow;

impl Core {
    /// Starts the workers each task wants, as one submission per task (one
    /// job array on a cluster); their slots hold their budget share from now.
    pub(super) fn start_workers(&mut self, done_before: DoneBefore) {
        for task in self.scheduler.graph().task_indices().collect::<Vec<_>>() {
            let wanted = self.workers_wanted(task, done_before);
            let slots: Vec<SlotId> = (0..wanted).map_while(|_| self.slots.launch(task)).collect();
            if !slots.is_empty() {
                self.commands.push(Command::StartWorkers { task, slots });
            }
        }
    }

    /// How many more workers a task wants: its [`worker_demand`] beyond its
    /// live workers (no more than blocks it may have in flight: those it
    /// may run, and one per shard it writes into), none once its restart
    /// budget is used up. Blocks done in an earlier run are skipped
    /// first, so a resumed run starts no worker for work that is done.
    fn workers_wanted(&mut self, task: TaskIdx, done_before: DoneBefore) -> u32 {
        if self.scheduler.is_abandoned(task) || self.why_no_workers(task).is_some() {
            return 0;
        }
        if !self.scheduler.has_runnable(task, &mut |b| done_before(b)) {
            return 0;
        }
        let c = self.scheduler.counters(task);
        let runnable = c.ready + c.processing;
        let limits = [
            self.scheduler.most_to_run(task),
            self.scheduler.most_at_once(task),
        ];
        let runnable = limits.into_iter().flatten().fold(runnable, u64::min);
        let max_workers = self.config(task).max_workers;
        let demand = worker_demand(runnable, max_workers);
        let live = self.slots.live(task);
        demand.saturating_sub(live + self.places_kept(task, live, demand))
    }

    /// How many places of workers that left by their own decision
    /// (`TaskNotes::retired`) stay empty: all of them while `live`
    /// workers of the task run, as daisy 1.x keeps a worker whose process
    /// exited with status 0; once none runs (daisy 1.x would wait
    /// forever), all but one, so the last worker is replaced.
    fn places_kept(&self, task: TaskIdx, live: u32, demand: u32) -> u32 {
        let retired = self.tasks[task.index()].retired;
        match live {
            0 => retired.min(demand.saturating_sub(1)),
            _ => retired,
        }
    }

    pub(super) fn on_launcher_event(&mut self, event: LauncherEvent, done_before: DoneBefore) {
        match event {
            LauncherEvent::Started(results) => {
                for (slot, result) in results {
                    self.on_started(slot, result, done_before);
                }
            }
            LauncherEvent::Ended(ended) => {
                for (slot, _job, end) in ended {
                    let end = end.to_string();
                    if !self.on_dead_workers_job_ended(slot, &end) {
                        self.on_job_ended(slot, &end);
                    }
                }
            }
        }
        self.serve_parked(done_before);
    }

    fn on_started(
        &mut self,
        slot: SlotId,
        result: Result<JobId, LaunchError>,
        done_before: DoneBefore,
    ) {
        let Some((task, share)) = self.slots.get(slot).map(|s| (s.task, s.share.clone())) else {
            return;
        };
        let task_id = self.task_id(task).to_string();
        let error = match result {
            Ok(job) => {
                self.slots.submitted(slot, job.0.clone());
                return self.record(Event::WorkerSubmitted {
                    task: task_id.into(),
                    worker_id: slot.0,
                    job: job.0.into(),
                    resources: Cow::Owned(share),
                });
            }
            Err(LaunchError::Waiting { limit, message }) => {
                // Not a failure: the slot stays pending (it counts
                // against max_workers like a queued job) until the
                // launcher submits it.
                tracing::info!(task = task_id, worker_id = slot.0, %limit, "submission waits: {message}");
                return self.record(Event::WorkerSubmitWaiting {
                    task: task_id.into(),
                    worker_id: slot.0,
                    limit: limit.into(),
                    message: message.into(),
                });
            }
            Err(error) => error,
        };
        let permanent = matches!(
            error,
            LaunchError::Submit {
                permanent: true,
                ..
            }
        );
        let message = format!("{:#}", anyhow::Error::new(error));
        tracing::warn!(task = task_id, "cannot start a worker: {message}");
        self.end_slot(slot, Gone::FailedStart(message.clone()));
        self.record(Event::WorkerStartFailed {
            task: task_id.into(),
            worker_id: slot.0,
            error: message.clone().into(),
        });
        if permanent {
            self.abandon(task, &message, done_before);
        }
    }

    /// A job that ended without its worker ever connecting is a failed
    /// start; other ends are the connection's business.
    fn on_job_ended(&mut self, slot: SlotId, end: &str) {
        let Some(task) = self.slots.job_ended(slot, end.to_string()).map(|s| s.task) else {
            return;
        };
        let task = self.task_id(task).to_string();
        let error = format!("the worker's job ended before it connected: {end}");
        tracing::warn!(task, worker_id = slot.0, "{error}");
        self.record(Event::WorkerStartFailed {
            task: task.into(),
            worker_id: slot.0,
            error: error.into(),
        });
    }

    /// Abandons tasks that no worker is left for and none will be started
    /// for: their restarts are used up, or a worker could not run their code.
    pub(super) fn abandon_hopeless_tasks(&mut self, done_before: DoneBefore) {
        let hopeless: Vec<(TaskIdx, String)> = (self.scheduler.graph().task_indices())
            .filter(|&t| {
                !self.scheduler.is_abandoned(t)
                    && !self.scheduler.counters(t).is_done()
                    && self.slots.live(t) == 0
            })
            .filter_map(|t| Some((t, self.why_no_workers(t)?)))
            .collect();
        for (task, why) in hopeless {
            self.abandon(task, &why, done_before);
        }
    }

    /// A task that is done or abandoned wants no more workers: its jobs
    /// still queued (or waiting for a site limit) are cancelled, so that
    /// none starts for nothing, nor holds a place under the site's job
    /// limit that another task's jobs wait for.
    pub(super) fn withdraw_queued_workers(&mut self, task: TaskIdx) {
        let queued = self.slots.queued(task);
        if queued.is_empty() {
            return;
        }
        let why = match self.scheduler.is_abandoned(task) {
            true => "its task was abandoned before it connected; its job is cancelled",
            false => "its task was done before it connected; its job is cancelled",
        };
        for &slot in &queued {
            self.slots.end(slot, Gone::Clean);
            self.record(Event::WorkerGone {
                task: self.task_id(task).to_string().into(),
                worker_id: slot.0,
                clean: true,
                why: why.into(),
            });
        }
        self.commands.push(Command::CancelJobs(queued));
    }

    /// Why no more workers are started for `task`, if none are.
    fn why_no_workers(&self, task: TaskIdx) -> Option<String> {
        if let Some(reason) = &self.tasks[task.index()].unservable {
            return Some(format!("a worker could not serve it: {reason}"));
        }
        let exits = self.slots.unclean_exits(task);
        if exits <= self.config(task).max_worker_restarts {
            return None;
        }
        Some(match self.slots.last_unclean_exit(task) {
            Some(last) => format!("{exits} unclean worker exits, the last: {last}"),
            None => format!("{exits} unclean worker exits"),
        })
    }

    /// Gives up on a task and its downstream tasks, saying why.
    fn abandon(&mut self, task: TaskIdx, why: &str, done_before: DoneBefore) {
        for abandoned in self.scheduler.abandon(task) {
            self.withdraw_queued_workers(abandoned);
            let id = self.task_id(abandoned).to_string();
            tracing::error!(task = id, "abandoned: {why}");
            self.tasks[abandoned.index()].abandoned = Some(why.to_string());
            self.record(Event::TaskAbandoned {
                task: id.into(),
                unclean_exits: self.slots.unclean_exits(abandoned),
                why: why.to_string().into(),
            });
        }
        self.serve_parked(done_before);
    }
}
