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
//!
//! It also owns waiting for limits ([`crate::site_limits`]): at most
//! `max_jobs` of a task's jobs queued or running, arrays no larger than
//! the queue's `max_array_size`, and requests a site limit refused held
//! back and submitted again at later polls. An array a limit refused is
//! halved and tried again at once, down to one job, because a limit of 2
//! refuses an array of 6 whole; only a single job refused makes the
//! rest wait.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::arrays;
use crate::pacing::{Backoff, Paced, Pacing};
use crate::site_limits::{self, Held};
use crate::{JobEnd, JobId, JobScript, LaunchError, Launcher, WorkerRequest};

/// One kind of cluster scheduler, as the launcher needs it. Methods may
/// block for the scheduler's answer (they run on the driver's launcher
/// thread); each logs what went wrong in its own terms.
pub trait Queue: Send {
    /// One worker's job, as the scheduler knows it (an array element).
    type Job: QueueJob;

    /// The backend's name for logs and events ("sbatch").
    const NAME: &'static str;

    /// Whether `cancel` can end one worker of a job of several
    /// (`workers_per_job`) and leave the others running; if not, such a
    /// worker's job is left to end with its last worker.
    const CANCELS_ONE_WORKER_OF_A_JOB: bool = false;

    /// What it counts of its calls to the scheduler (tests and curious
    /// users see that N workers cost one submission).
    type Calls: Copy;

    /// Its calls so far.
    fn calls(&self) -> Self::Calls;

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
    /// jobs as it goes. `left` are the workers whose connection ended
    /// uncleanly (their job may run on, with other workers). `Err` (the
    /// scheduler's message) when it gave no usable answer: then nothing
    /// ends and the next polls back off.
    fn ended(
        &mut self,
        jobs: &mut Jobs<Self::Job>,
        left: &BTreeSet<u64>,
    ) -> Result<Vec<(u64, JobEnd)>, String>;

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

    /// The most elements one array may have (SLURM: `MaxArraySize`, as
    /// indices must be below it), or `None` when the queue sets none.
    fn max_array_size(&mut self, first: &WorkerRequest) -> Option<usize> {
        let _ = first;
        None
    }

    /// The scheduler refused an array for its size: what
    /// [`Queue::max_array_size`] said is to be asked again.
    fn array_size_refused(&mut self) {}
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

/// The job id reported for a held worker cancelled before it was ever
/// submitted.
pub const NOT_SUBMITTED: &str = "not submitted";

/// How often jobs are polled for [`QUICK_POLLS_AFTER_A_LOSS`] after a
/// worker left uncleanly: its job ends a moment after its process, and
/// its end (an exit status, `OUT_OF_MEMORY`, a node failure) tells the
/// driver how the worker's blocks failed.
pub const POLL_AFTER_A_LOSS: Duration = Duration::from_secs(1);

/// How long jobs are polled every [`POLL_AFTER_A_LOSS`] after a worker
/// left uncleanly; the driver waits as long for the job's end before its
/// blocks fail with what the connection said.
pub const QUICK_POLLS_AFTER_A_LOSS: Duration = Duration::from_secs(10);

/// Submitted workers not yet reported ended: worker id → job.
pub type Jobs<J> = BTreeMap<u64, J>;

/// Starts workers as job-array elements of a [`Queue`]; see the module doc.
pub struct ClusterLauncher<Q: Queue> {
    pub(crate) queue: Q,
    jobs: Jobs<Q::Job>,
    /// Tracked workers whose connection ended though their job may run
    /// on: their places in a job of several workers are free.
    left: BTreeSet<u64>,
    /// Until when jobs are polled every [`POLL_AFTER_A_LOSS`], as a
    /// worker left uncleanly and its job's end says how it died.
    quick_polls_until: Option<Instant>,
    /// Ends recorded by `cancel`, handed out by the next `poll_ended`.
    ended: Vec<(u64, JobId, JobEnd)>,
    pacing: Pacing,
    backoff: Backoff,
    /// The task of each tracked job's worker, to count `max_jobs`.
    task_of: BTreeMap<u64, String>,
    /// Requests a limit holds back, submitted again at later polls.
    held: Held,
    /// Outcomes of held requests tried again, for `poll_started`.
    started: Vec<(u64, Result<JobId, LaunchError>)>,
    /// The largest array to try: halved when a site limit refused one,
    /// doubled again after each accepted submission.
    array_window: usize,
    /// A site limit that refused a single job in the current attempt
    /// (limit, message): the attempt's other groups wait for it too,
    /// without asking the scheduler again (such limits are per user,
    /// account or QOS, not per array).
    refused_in_attempt: Option<(String, String)>,
}

/// What became of one request of a submission attempt.
enum Outcome {
    Submitted(JobId),
    /// Held back for this limit, in the scheduler's words.
    Waits {
        limit: String,
        message: String,
    },
    Failed(LaunchError),
}

impl<Q: Queue> ClusterLauncher<Q> {
    pub(crate) fn over(queue: Q) -> Self {
        Self {
            queue,
            jobs: Jobs::new(),
            left: BTreeSet::new(),
            quick_polls_until: None,
            ended: Vec::new(),
            pacing: Pacing::default(),
            backoff: Backoff::default(),
            task_of: BTreeMap::new(),
            held: Held::default(),
            started: Vec::new(),
            array_window: usize::MAX,
            refused_in_attempt: None,
        }
    }

    /// One array per run of consecutive worker ids of one task; a worker
    /// id still tracked is refused on its own; requests a limit holds
    /// back are `Waiting` (and held).
    fn start_in_arrays(&mut self, requests: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        self.refused_in_attempt = None;
        let mut results = Vec::with_capacity(requests.len());
        let mut rest = requests;
        while let Some(first) = rest.first() {
            if self.is_tracked(first.worker_id) {
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
            let len = arrays::group_len(rest, |worker| self.is_tracked(worker));
            let outcomes = self.submit_or_hold(&rest[..len]);
            results.extend(outcomes.into_iter().map(|outcome| match outcome {
                Outcome::Submitted(job) => Ok(job),
                Outcome::Waits { limit, message } => Err(LaunchError::Waiting { limit, message }),
                Outcome::Failed(error) => Err(error),
            }));
            rest = &rest[len..];
        }
        let site_limit = |r: &Result<JobId, LaunchError>| matches!(r, Err(LaunchError::Waiting { limit, .. }) if limit != site_limits::MAX_JOBS);
        if results.iter().any(site_limit) {
            self.held.refused_at(Instant::now());
        }
        results
    }

    fn is_tracked(&self, worker: u64) -> bool {
        self.jobs.contains_key(&worker)
    }

    /// Submits `group` (consecutive worker ids of one task) in arrays as
    /// large as `max_jobs`, the queue's array size and the window allow;
    /// what a limit holds back is held. One outcome per request, in order.
    fn submit_or_hold(&mut self, group: &[WorkerRequest]) -> Vec<Outcome> {
        let mut outcomes = Vec::with_capacity(group.len());
        let mut rest = group;
        while !rest.is_empty() {
            let room = self.max_jobs_room(&rest[0]);
            if let Err(message) = room {
                self.hold_all(rest, site_limits::MAX_JOBS, &message, &mut outcomes);
                break;
            }
            if let Some((limit, message)) = self.refused_in_attempt.clone() {
                self.hold_all(rest, &limit, &message, &mut outcomes);
                break;
            }
            let max_array = self.queue.max_array_size(&rest[0]);
            // Arrays, rooms and windows count jobs, each of `per_job`
            // workers (the group is whole jobs, see `arrays::group_len`).
            let per_job = arrays::per_job(rest);
            let jobs = arrays::split_len(
                rest.len().div_ceil(per_job),
                room.ok().flatten(),
                max_array,
                self.array_window,
            );
            let len = (jobs * per_job).min(rest.len());
            match self.submit_array(&rest[..len]) {
                Ok(ids) => {
                    self.array_window = self.array_window.saturating_mul(2);
                    outcomes.extend(ids.into_iter().map(Outcome::Submitted));
                    rest = &rest[len..];
                }
                Err(LaunchError::Waiting { limit, message }) => {
                    if site_limits::is_array_size(&limit) {
                        self.queue.array_size_refused();
                    }
                    if jobs > 1 {
                        // Smaller arrays may fit under the limit now.
                        self.array_window = jobs / 2;
                        continue;
                    }
                    self.hold_all(rest, &limit, &message, &mut outcomes);
                    self.refused_in_attempt = Some((limit, message));
                    break;
                }
                Err(error) => {
                    let failed = arrays::failed_together::<JobId>(error, rest.len());
                    outcomes.extend(
                        failed
                            .into_iter()
                            .filter_map(|r| r.err())
                            .map(Outcome::Failed),
                    );
                    break;
                }
            }
        }
        outcomes
    }

    /// How many more jobs `request`'s task may have (`None`: no
    /// `max_jobs`), or why it may have none now.
    fn max_jobs_room(&self, request: &WorkerRequest) -> Result<Option<usize>, String> {
        let Some(max_jobs) = request.cluster.max_jobs else {
            return Ok(None);
        };
        let task = &request.task_id;
        // Workers of one job (`workers_per_job`) count once.
        let live = (self.task_of.iter())
            .filter(|(_, t)| *t == task)
            .filter_map(|(worker, _)| self.jobs.get(worker).map(QueueJob::job_id))
            .collect::<BTreeSet<JobId>>()
            .len();
        match (max_jobs as usize).checked_sub(live) {
            Some(room) if room > 0 => Ok(Some(room)),
            _ => Err(format!(
                "{live} jobs of task {task:?} are queued or running and its launcher's \
                 max_jobs = {max_jobs}; the next is submitted when one ends"
            )),
        }
    }

    fn hold_all(
        &mut self,
        requests: &[WorkerRequest],
        limit: &str,
        message: &str,
        outcomes: &mut Vec<Outcome>,
    ) {
        for request in requests {
            self.held.hold(request.clone(), limit.to_owned());
            outcomes.push(Outcome::Waits {
                limit: limit.to_owned(),
                message: message.to_owned(),
            });
        }
        // Debug only: held requests are held again at every poll; the
        // driver logs (and records) when a worker starts waiting.
        let task = &requests[0].task_id;
        tracing::debug!(launcher = Q::NAME, %task, workers = requests.len(), limit, message, "submission waits for a limit");
    }

    /// One array: its job ids, tracked from now, or the group's error.
    fn submit_array(&mut self, group: &[WorkerRequest]) -> Result<Vec<JobId>, LaunchError> {
        let first = &group[0];
        match self.submit(group) {
            Ok(jobs) => {
                let ids: Vec<JobId> = jobs.iter().map(QueueJob::job_id).collect();
                let (task, workers, job) = (&first.task_id, group.len(), &ids[0]);
                tracing::info!(launcher = Q::NAME, %task, first = first.worker_id, workers, %job, "submitted worker array");
                let workers = group.iter().map(|request| request.worker_id);
                for worker in workers.clone() {
                    self.task_of.insert(worker, first.task_id.clone());
                }
                self.jobs.extend(workers.zip(jobs));
                Ok(ids)
            }
            Err(error @ LaunchError::Waiting { .. }) => Err(error),
            Err(error) => {
                tracing::warn!(launcher = Q::NAME, task = %first.task_id, %error, "cannot submit workers");
                Err(error)
            }
        }
    }

    /// Tries the held requests again when due: those submitted, refused
    /// for good, or now waiting for another limit are reported through
    /// `poll_started`; those waiting for the same limit stay quiet.
    fn submit_held(&mut self, now: Instant) {
        if !self.held.due(now) {
            return;
        }
        self.refused_in_attempt = None;
        let held = self.held.take_all();
        let requests: Vec<WorkerRequest> = held.iter().map(|(r, _)| r.clone()).collect();
        let mut site_limit_refused = false;
        let mut start = 0;
        while start < requests.len() {
            let len = arrays::group_len(&requests[start..], |_| false);
            let outcomes = self.submit_or_hold(&requests[start..start + len]);
            for ((request, before), outcome) in held[start..start + len].iter().zip(outcomes) {
                let report = match outcome {
                    Outcome::Submitted(job) => Some(Ok(job)),
                    Outcome::Waits { limit, message } => {
                        site_limit_refused |= limit != site_limits::MAX_JOBS;
                        (limit != *before).then_some(Err(LaunchError::Waiting { limit, message }))
                    }
                    Outcome::Failed(error) => Some(Err(error)),
                };
                if let Some(report) = report {
                    self.started.push((request.worker_id, report));
                }
            }
            start += len;
        }
        match site_limit_refused {
            true => self.held.refused_at(now),
            false => self.held.site_limits_passed(),
        }
    }

    /// `Launcher::cancel`: one cancellation for all, each worker reported
    /// `Cancelled` at the next poll.
    fn cancel_workers(&mut self, worker_ids: &[u64]) {
        for worker in worker_ids {
            if self.held.release(*worker) {
                // Never submitted: nothing to cancel, and never will be.
                let never = JobId(NOT_SUBMITTED.to_owned());
                self.ended.push((*worker, never, JobEnd::Cancelled));
            }
        }
        let cancelled: Vec<(u64, Q::Job)> = worker_ids
            .iter()
            .filter_map(|worker| Some((*worker, self.jobs.remove(worker)?)))
            .collect();
        self.left.retain(|worker| self.jobs.contains_key(worker));
        if cancelled.is_empty() {
            return;
        }
        let staying: Vec<&Q::Job> = self.jobs.values().collect();
        // A job of several workers whose others stay is cancelled only by
        // a queue that can end one worker of it.
        let alone = |job: &&Q::Job| {
            Q::CANCELS_ONE_WORKER_OF_A_JOB
                || !staying.iter().any(|other| other.job_id() == job.job_id())
        };
        let jobs: Vec<Q::Job> = cancelled
            .iter()
            .map(|(_, job)| job)
            .filter(alone)
            .cloned()
            .collect();
        if !jobs.is_empty() {
            self.queue
                .cancel(&jobs, &staying, &self.pacing.retry_delays);
        }
        for (worker, job) in cancelled {
            self.task_of.remove(&worker);
            self.ended.push((worker, job.job_id(), JobEnd::Cancelled));
        }
    }

    fn cancel_every_job(&mut self) {
        let mut workers: Vec<u64> = self.jobs.keys().copied().collect();
        workers.extend(self.held.workers());
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
                self.task_of.remove(&worker);
                Some((worker, job.job_id(), end))
            })
            .collect();
        self.left.retain(|worker| self.jobs.contains_key(worker));
        ended
    }
}

/// A queue whose scheduler commands run as processes, each killed when
/// it runs longer than a timeout.
pub trait TimedCommands {
    fn set_command_timeout(&mut self, timeout: Duration);
}

impl<Q: Queue> ClusterLauncher<Q> {
    /// The scheduler calls made so far.
    pub fn calls(&self) -> Q::Calls {
        self.queue.calls()
    }
}

impl<Q: Queue + TimedCommands> ClusterLauncher<Q> {
    /// Kills a scheduler command running longer than `timeout`.
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.queue.set_command_timeout(timeout);
        self
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

    /// The poll interval; sooner when held requests are due earlier, or
    /// for a while after a worker left uncleanly.
    fn poll_interval(&self) -> Duration {
        let now = Instant::now();
        let until_held = (self.held.next_attempt()).map(|at| at.saturating_duration_since(now));
        let after_a_loss = (self.quick_polls_until)
            .filter(|until| *until > now && !self.left.is_empty())
            .map(|_| POLL_AFTER_A_LOSS);
        [until_held, after_a_loss]
            .into_iter()
            .flatten()
            .fold(self.pacing.poll_interval, Duration::min)
    }

    /// Job states first (ended jobs make room under `max_jobs`), then the
    /// held requests that are due.
    fn poll_ended(&mut self) -> Vec<(u64, JobId, JobEnd)> {
        let mut ended = std::mem::take(&mut self.ended);
        if !self.jobs.is_empty() && !self.backoff.waiting() {
            match self.queue.ended(&mut self.jobs, &self.left) {
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
        }
        self.submit_held(Instant::now());
        ended
    }

    fn poll_started(&mut self) -> Vec<(u64, Result<JobId, LaunchError>)> {
        std::mem::take(&mut self.started)
    }

    fn cancel(&mut self, worker_ids: &[u64]) {
        self.cancel_workers(worker_ids);
    }

    fn cancel_all(&mut self) {
        self.cancel_every_job();
    }

    fn left(&mut self, worker_ids: &[u64]) {
        let tracked: Vec<u64> = (worker_ids.iter())
            .filter(|w| self.jobs.contains_key(w))
            .copied()
            .collect();
        if !tracked.is_empty() {
            self.quick_polls_until = Some(Instant::now() + QUICK_POLLS_AFTER_A_LOSS);
        }
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
