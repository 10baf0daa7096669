//! The one cluster launcher: [`ClusterLauncher`] over a small [`Queue`]
//! backend trait, like HyperQueue's `QueueHandler` (submit, batched
//! status, remove). sbatch, bsub and slurmrestd are each a `Queue`.
//!
//! The launcher owns what the three share: splitting requests into job
//! arrays (runs of consecutive worker ids of one task) and failing a whole
//! array at once, tracking each worker's job until its end is reported
//! exactly once, polling with backoff after a failed status call,
//! reporting cancelled workers at the next poll, cancelling earlier
//! runs' jobs that are still queued or running, pacing, and cancelling
//! every job on drop. A queue says only what differs: how it submits one
//! array, what one batched status call says, how it cancels a list of
//! jobs, and how its job ids read.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::arrays;
use crate::pacing::{Backoff, Paced, Pacing};
use crate::{JobEnd, JobId, JobScript, LaunchError, Launcher, WorkerRequest};

/// One kind of cluster scheduler, as the launcher needs it. Methods may
/// block for the scheduler's answer (they run on the driver's launcher
/// thread); each logs what went wrong in its own terms.
pub trait Queue: Send {
    /// One worker's job, as the scheduler knows it (an array element).
    type Job: QueueJob;

    /// The backend's name for logs and events ("sbatch").
    const NAME: &'static str;

    /// The job script of `group` (consecutive worker ids of one task) as
    /// one array, as `plan` shows it and the launcher keeps it.
    const JOB_SCRIPT: ScriptRenderer;

    /// Submits `group` as one array with its `script` (already written),
    /// retrying transient failures after each of `delays`; one job per
    /// worker, in order.
    fn submit(
        &mut self,
        group: &[WorkerRequest],
        script: JobScript,
        delays: &[Duration],
    ) -> Result<Vec<Self::Job>, LaunchError>;

    /// One batched status call about every tracked job (by worker id):
    /// the workers whose jobs ended, and how. It may learn more about the
    /// jobs as it goes. `Err` (the scheduler's message) when it gave no
    /// usable answer: then nothing ends and the next polls back off.
    fn ended(&mut self, jobs: &mut Jobs<Self::Job>) -> Result<Vec<(u64, JobEnd)>, String>;

    /// One status call: those of `jobs` still queued or running, or
    /// `None` when the scheduler gave no usable answer.
    fn live(&mut self, jobs: &[Self::Job]) -> Option<Vec<Self::Job>>;

    /// Cancels `jobs`, retrying transient failures after each of
    /// `delays`; jobs already gone are no failure. `staying` are jobs
    /// that must keep running, so an array may be cancelled whole only
    /// when none of its elements stays (nor a job only when none of its
    /// workers stays).
    fn cancel(&mut self, jobs: &[Self::Job], staying: &[&Self::Job], delays: &[Duration]);

    /// Starts `request`'s worker inside a running job of its task that
    /// has room (`workers_per_job`): one whose workers, not counting
    /// those that `left`, are fewer than it holds. `None` when the
    /// backend cannot, or no job has room.
    fn start_beside(
        &mut self,
        request: &WorkerRequest,
        jobs: &Jobs<Self::Job>,
        left: &BTreeSet<u64>,
    ) -> Option<Result<Self::Job, LaunchError>> {
        let _ = (request, jobs, left);
        None
    }
}

/// A job as a [`Queue`] tracks it, and its name both ways.
pub trait QueueJob: Clone + Send + Sized {
    /// How the job is reported and recorded ("24_3", "777[2]").
    fn job_id(&self) -> JobId;

    /// Reads a [`JobId`] as [`QueueJob::job_id`] writes it (an earlier
    /// run's), or `None` when it names no such job.
    fn from_job_id(id: &JobId) -> Option<Self>;
}

/// Renders the job script of a group of workers.
pub type ScriptRenderer = fn(&[WorkerRequest]) -> Result<JobScript, LaunchError>;

/// Submitted workers not yet reported ended: worker id → job.
pub type Jobs<J> = BTreeMap<u64, J>;

/// Starts workers as job-array elements of a [`Queue`]; see the module doc.
pub struct ClusterLauncher<Q: Queue> {
    pub(crate) queue: Q,
    jobs: Jobs<Q::Job>,
    /// Tracked workers whose connection ended though their job may run
    /// on: their places in a job of several workers are free.
    left: BTreeSet<u64>,
    /// Ends recorded by `cancel`, handed out by the next `poll_ended`.
    ended: Vec<(u64, JobId, JobEnd)>,
    pacing: Pacing,
    backoff: Backoff,
}

impl<Q: Queue> ClusterLauncher<Q> {
    pub(crate) fn over(queue: Q) -> Self {
        Self {
            queue,
            jobs: Jobs::new(),
            left: BTreeSet::new(),
            ended: Vec::new(),
            pacing: Pacing::default(),
            backoff: Backoff::default(),
        }
    }

    /// One array per run of consecutive worker ids of one task; a worker
    /// id still tracked is refused on its own.
    fn start_in_arrays(&mut self, requests: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        let mut results = Vec::with_capacity(requests.len());
        let mut rest = requests;
        while let Some(first) = rest.first() {
            if self.jobs.contains_key(&first.worker_id) {
                results.push(Err(LaunchError::WorkerIdInUse {
                    task_id: first.task_id.clone(),
                    worker_id: first.worker_id,
                }));
                rest = &rest[1..];
                continue;
            }
            if let Some(result) = self.queue.start_beside(first, &self.jobs, &self.left) {
                results.push(result.map(|job| {
                    let id = job.job_id();
                    self.jobs.insert(first.worker_id, job);
                    id
                }));
                rest = &rest[1..];
                continue;
            }
            let len = arrays::group_len(rest, |worker| self.jobs.contains_key(&worker));
            results.extend(self.submit_array(&rest[..len]));
            rest = &rest[len..];
        }
        results
    }

    /// One result per request of a group: its job id, or the group's error.
    fn submit_array(&mut self, group: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        let first = &group[0];
        match self.submit(group) {
            Ok(jobs) => {
                let ids: Vec<JobId> = jobs.iter().map(QueueJob::job_id).collect();
                let (task, workers, job) = (&first.task_id, group.len(), &ids[0]);
                tracing::info!(launcher = Q::NAME, %task, first = first.worker_id, workers, %job, "submitted worker array");
                let workers = group.iter().map(|request| request.worker_id);
                self.jobs.extend(workers.zip(jobs));
                ids.into_iter().map(Ok).collect()
            }
            Err(error) => {
                tracing::warn!(launcher = Q::NAME, task = %first.task_id, %error, "cannot submit workers");
                arrays::failed_together(error, group.len())
            }
        }
    }

    /// `Launcher::cancel`: one cancellation for all, each worker reported
    /// `Cancelled` at the next poll.
    fn cancel_workers(&mut self, worker_ids: &[u64]) {
        let cancelled: Vec<(u64, Q::Job)> = worker_ids
            .iter()
            .filter_map(|worker| Some((*worker, self.jobs.remove(worker)?)))
            .collect();
        self.left.retain(|worker| self.jobs.contains_key(worker));
        if cancelled.is_empty() {
            return;
        }
        let jobs: Vec<Q::Job> = cancelled.iter().map(|(_, job)| job.clone()).collect();
        let staying: Vec<&Q::Job> = self.jobs.values().collect();
        self.queue
            .cancel(&jobs, &staying, &self.pacing.retry_delays);
        for (worker, job) in cancelled {
            self.ended.push((worker, job.job_id(), JobEnd::Cancelled));
        }
    }

    fn cancel_every_job(&mut self) {
        let workers: Vec<u64> = self.jobs.keys().copied().collect();
        self.cancel_workers(&workers);
    }

    /// Writes the group's job script, then submits it.
    fn submit(&mut self, group: &[WorkerRequest]) -> Result<Vec<Q::Job>, LaunchError> {
        let script = (Q::JOB_SCRIPT)(group)?;
        script.write()?;
        self.queue.submit(group, script, &self.pacing.retry_delays)
    }

    /// Removes the ended workers and returns their reports.
    fn take_ended(&mut self, ends: Vec<(u64, JobEnd)>) -> Vec<(u64, JobId, JobEnd)> {
        let ended = ends
            .into_iter()
            .filter_map(|(worker, end)| {
                let job = self.jobs.remove(&worker)?;
                Some((worker, job.job_id(), end))
            })
            .collect();
        self.left.retain(|worker| self.jobs.contains_key(worker));
        ended
    }
}

impl<Q: Queue> Paced for ClusterLauncher<Q> {
    fn pacing_mut(&mut self) -> &mut Pacing {
        &mut self.pacing
    }
}

impl<Q: Queue> Launcher for ClusterLauncher<Q> {
    fn name(&self) -> &'static str {
        Q::NAME
    }

    fn start(&mut self, request: &WorkerRequest) -> Result<JobId, LaunchError> {
        let mut results = self.start_in_arrays(std::slice::from_ref(request));
        results.pop().expect("one result per request")
    }

    fn start_many(&mut self, requests: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        self.start_in_arrays(requests)
    }

    fn poll_interval(&self) -> Duration {
        self.pacing.poll_interval
    }

    fn poll_ended(&mut self) -> Vec<(u64, JobId, JobEnd)> {
        let mut ended = std::mem::take(&mut self.ended);
        if self.jobs.is_empty() || self.backoff.waiting() {
            return ended;
        }
        match self.queue.ended(&mut self.jobs) {
            Ok(ends) => {
                self.backoff = Backoff::default();
                ended.extend(self.take_ended(ends));
            }
            Err(message) => {
                self.backoff.failed(self.pacing.poll_interval);
                let failures = self.backoff.failures;
                tracing::warn!(launcher = Q::NAME, %message, failures, "no job states; no job is declared ended, backing off");
            }
        }
        ended
    }

    fn cancel(&mut self, worker_ids: &[u64]) {
        self.cancel_workers(worker_ids);
    }

    fn cancel_all(&mut self) {
        self.cancel_every_job();
    }

    fn left(&mut self, worker_ids: &[u64]) {
        let tracked = worker_ids.iter().filter(|w| self.jobs.contains_key(w));
        self.left.extend(tracked);
    }

    /// One status call about the earlier jobs, then one cancellation of
    /// those still queued or running. Nothing is known of their arrays'
    /// other elements, so each is cancelled by itself, never a whole array.
    fn cancel_earlier_jobs(&mut self, jobs: &[JobId]) -> Vec<JobId> {
        let wanted: Vec<Q::Job> = jobs.iter().filter_map(QueueJob::from_job_id).collect();
        if wanted.is_empty() {
            return Vec::new();
        }
        let Some(live) = self.queue.live(&wanted) else {
            tracing::warn!(
                launcher = Q::NAME,
                "no job states; the earlier run's jobs are left as they are"
            );
            return Vec::new();
        };
        if !live.is_empty() {
            let staying: Vec<&Q::Job> = live.iter().collect();
            self.queue
                .cancel(&live, &staying, &self.pacing.retry_delays);
        }
        live.iter().map(QueueJob::job_id).collect()
    }
}

/// Dropping the launcher cancels its jobs (unless told not to), so a
/// driver that returns or unwinds leaves no worker queued.
impl<Q: Queue> Drop for ClusterLauncher<Q> {
    fn drop(&mut self) {
        if self.pacing.cancel_on_drop {
            self.cancel_every_job();
        }
    }
}
