//! The slurmrestd backend: the sbatch backend's job arrays, submitted and
//! watched through SLURM's REST API (OpenAPI v0.0.38, SLURM 22.05), for
//! sites where the driver cannot run sbatch (no SLURM client or munge key
//! where it runs) but can reach slurmrestd with a JWT.
//!
//! `start_many` renders the sbatch backend's job script for a group of
//! workers (consecutive ids of one task: `slurm-templates/worker.sbatch`
//! or the user's template), keeps it as `<log_dir>/worker-<first>-<last>.sbatch`
//! and submits it with ONE `POST /job/submit` as an array of N elements:
//! element `i` is worker `first + i` (daisy-worker adds
//! `SLURM_ARRAY_TASK_ID` itself) and its [`JobId`] is `<array job id>_<i>`.
//! slurmrestd does not read the script's `#SBATCH` lines, so they are
//! translated into job properties (module `job`); one it cannot express
//! is refused before submission.
//!
//! Nothing reaches a REST job from the driver's environment: the job gets
//! exactly [`FORWARDED_ENV`] (the driver's PATH, HOME... as they were when
//! the launcher was made, or what [`SlurmrestdLauncher::with_environment`]
//! says) plus the request's environment. So `DAISY_CONTEXT`, with the run
//! token, travels in the HTTP body to slurmctld, as sbatch's exported
//! environment does; the body is never logged.
//!
//! Job state is the safety net of DESIGN.md: `poll_ended` makes ONE
//! `GET /jobs` per poll for all of the run's jobs (slurmrestd 22.05 takes
//! one id per `GET /job/{id}`, and none of the listing filters by job).
//! PENDING and RUNNING keep their slots; COMPLETED → `Exited{code}`,
//! CANCELLED → `Cancelled`, FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY and
//! every other end → `Failed{reason}` (the sbatch backend's mapping,
//! shared). A job slurmctld no longer lists (it forgets finished jobs
//! `MinJobAge` after they end, or one was cancelled by someone else while
//! pending) ended in a way nobody can tell: `Failed`. Each end is reported
//! once. A failed listing reports nothing and makes later polls back off
//! (doubling, up to [`MAX_BACKOFF`](crate::MAX_BACKOFF)): a job is never
//! declared dead because SLURM was busy.
//!
//! `cancel` makes one `DELETE /job/{id}` per array (per element when other
//! elements of the array stay) and reports the workers as `Cancelled` at
//! the next poll. Submissions and cancellations that fail transiently
//! (connection refused, timeout, slurmctld unreachable) are retried after
//! each of the retry delays. Every request times out after
//! [`SLURMRESTD_REQUEST_TIMEOUT`].
//!
//! Quirks of slurmrestd 22.05.8 (recorded in `samples/`), which the code
//! relies on:
//! - A token slurmctld cannot verify is not an HTTP 401: submissions and
//!   cancellations fail with error 5005 "Zero Bytes were transmitted or
//!   received" (slurmctld hangs up), and a job listing with -1
//!   "Unspecified error", exactly as when slurmctld is down. So 5005 is
//!   taken as an auth failure, -1 as transient, and the token's own expiry
//!   (its `exp` claim) is checked before each request to say "expired"
//!   clearly. HTTP 401 comes only when a header is missing.
//! - An accepted submission may carry `errors` (a held job: 2042 "Job is
//!   in held state"): the job id decides.
//! - Error numbers come as `error_number`, `error_code` or `errno`.
//! - `exit_code` is a wait status (768 for `exit 3`, 9 for SIGKILL).
//! - A property slurmrestd cannot parse (a `--gres` the cluster does not
//!   define) is an opaque 9001 "Failure during parsing"; the reason is
//!   only in slurmrestd's log.
//! - `environment` must be a JSON object and must not be empty.
//! - Cancelling a pending element (`DELETE /job/24_1`) removes it from the
//!   listing at once. `DELETE` takes one id: a range (`24_[1-3]`) is a
//!   400, hence one request per element when part of an array is
//!   cancelled.
//! - `GET /job/{id}` takes one id too (`1,2` is a 400), hence the one
//!   listing of every job per poll.

mod api;
mod client;
mod job;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::arrays::{self, ArrayBackend};
use crate::pacing::{Paced, Pacing};
use crate::sbatch::squeue::{self, Record};
use crate::sbatch::{script, Backoff};
use crate::template::JobScript;
use crate::{JobEnd, JobId, LaunchError, Launcher, WorkerRequest};
use api::{errno, JobProperties, JobSubmission};
use client::{Failure, RestClient};

/// Where slurmrestd is looked for when `SLURMRESTD_URL` is not set.
pub const DEFAULT_SLURMRESTD_URL: &str = "http://127.0.0.1:6820";

/// How long one request may take: slurmrestd itself gives up on an
/// unreachable slurmctld after about 9 s.
pub const SLURMRESTD_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The driver's variables a REST job gets by default (when set), since it
/// inherits nothing: enough for the job script's setup lines and the
/// worker's logging. Never SLURM_JWT.
pub const FORWARDED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TZ",
    "RUST_LOG",
    "RUST_BACKTRACE",
];

/// How many slurmrestd requests of each kind the launcher made, retries
/// included: N workers cost one submission, a poll one listing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlurmrestdCalls {
    /// `POST /job/submit` requests.
    pub submissions: u64,
    /// `GET /jobs` requests: one per poll.
    pub polls: u64,
    /// `DELETE /job/{id}` requests.
    pub cancels: u64,
}

/// Why a slurmrestd launcher could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SlurmrestdConfigError {
    /// No token: slurmrestd's JWT authentication needs one.
    #[error(
        "SLURM_JWT is not set: the slurmrestd launcher authenticates with a JWT; \
         get one with `scontrol token lifespan=<seconds>` (it prints SLURM_JWT=...) \
         and export it: `export $(scontrol token lifespan=86400)`"
    )]
    MissingToken,
    /// No user name in `USER` nor in the token.
    #[error("cannot tell the SLURM user name: USER is not set and the token names none")]
    MissingUser,
    /// The URL is not one the launcher can use.
    #[error("slurmrestd URL {url:?}: {problem}")]
    BadUrl { url: String, problem: String },
    /// The user name or token cannot be an HTTP header value.
    #[error("{0}")]
    BadHeader(String),
    /// reqwest could not build its client.
    #[error("cannot set up the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// Starts workers as SLURM job-array elements through slurmrestd; see the
/// module doc.
pub struct SlurmrestdLauncher {
    client: RestClient,
    /// Submitted workers not yet reported ended, by worker id.
    jobs: BTreeMap<u64, Element>,
    /// Ends recorded by `cancel`, handed out by the next `poll_ended`.
    ended: Vec<(u64, JobId, JobEnd)>,
    /// Every job's environment, before the request's own.
    base_env: Vec<(String, String)>,
    pacing: Pacing,
    backoff: Backoff,
    calls: SlurmrestdCalls,
}

/// One worker's job: element `index` of array job `array`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Element {
    array: String,
    index: u32,
}

impl Element {
    fn job_id(&self) -> JobId {
        JobId(format!("{}_{}", self.array, self.index))
    }
}

impl SlurmrestdLauncher {
    /// A launcher for slurmrestd at `base_url` (`http://host:port` or
    /// `unix:/path/to/socket`), acting as `user` with JWT `token`. Jobs
    /// get the driver's [`FORWARDED_ENV`] as they are now.
    pub fn new(base_url: &str, user: &str, token: &str) -> Result<Self, SlurmrestdConfigError> {
        Ok(Self {
            client: RestClient::new(base_url, user, token, SLURMRESTD_REQUEST_TIMEOUT)?,
            jobs: BTreeMap::new(),
            ended: Vec::new(),
            base_env: forwarded_env(|name| std::env::var(name).ok()),
            pacing: Pacing::default(),
            backoff: Backoff::default(),
            calls: SlurmrestdCalls::default(),
        })
    }

    /// A launcher configured by the environment: `SLURMRESTD_URL`
    /// (default [`DEFAULT_SLURMRESTD_URL`]), `SLURM_JWT` (required, as
    /// `scontrol token` prints it) and `USER` (else the token's user).
    pub fn from_env() -> Result<Self, SlurmrestdConfigError> {
        let (url, user, token) = settings(|name| std::env::var(name).ok())?;
        Self::new(&url, &user, &token)
    }

    /// Every job's environment before the request's own, replacing
    /// [`FORWARDED_ENV`] (for a driver whose PATH means nothing on the
    /// compute nodes). Never put SLURM_JWT here.
    pub fn with_environment(mut self, env: Vec<(String, String)>) -> Self {
        self.base_env = env;
        self
    }

    /// The slurmrestd requests made so far.
    pub fn calls(&self) -> SlurmrestdCalls {
        self.calls
    }

    /// One result per request of a group: its job id, or the group's error.
    fn submit_array(&mut self, group: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        match self.submit_group(group) {
            Ok(array) => (0..group.len())
                .map(|index| Ok(JobId(format!("{array}_{index}"))))
                .collect(),
            Err(error) => {
                tracing::warn!(task = %group[0].task_id, %error, "cannot submit workers");
                let mut results: Vec<_> = (1..group.len())
                    .map(|_| Err(arrays::copy_error(&error)))
                    .collect();
                results.insert(0, Err(error));
                results
            }
        }
    }

    /// Submits one group of workers as one array and records its elements.
    fn submit_group(&mut self, group: &[WorkerRequest]) -> Result<String, LaunchError> {
        let first = &group[0];
        let script = script::job_script(group)?;
        script.write()?;
        let job = job_properties(group, &script, &self.base_env)?;
        let submission = JobSubmission {
            script: script.text,
            job,
        };
        let array = self.submit(&submission)?.to_string();
        for (index, request) in group.iter().enumerate() {
            let element = Element {
                array: array.clone(),
                index: index as u32,
            };
            self.jobs.insert(request.worker_id, element);
        }
        let (task, workers) = (&first.task_id, group.len());
        tracing::info!(%task, first = first.worker_id, workers, job = %array, "submitted worker array to slurmrestd");
        Ok(array)
    }

    /// Submits, retrying transient failures; the array job id.
    fn submit(&mut self, submission: &JobSubmission) -> Result<u64, LaunchError> {
        let client = &self.client;
        let counter = &mut self.calls.submissions;
        let (job, remarks) = retrying(&self.pacing.retry_delays, counter, "submission", || {
            client.submit(submission)
        })
        .map_err(submit_error)?;
        if !remarks.is_empty() {
            tracing::info!(job, %remarks, "slurmrestd accepted the job with remarks");
        }
        Ok(job)
    }

    /// The job listing, or `None` when it failed (then later polls back
    /// off); why it failed is logged.
    fn query_jobs(&mut self) -> Option<Vec<Record>> {
        self.calls.polls += 1;
        match self.client.jobs() {
            Ok(jobs) => Some(api::records(&jobs)),
            Err(failure) => {
                self.backoff.failed(self.pacing.poll_interval);
                log_poll_failure(&failure, self.backoff.failures);
                None
            }
        }
    }

    /// Removes and reports the workers whose jobs ended, by the listing.
    fn take_ended(&mut self, records: &[Record]) -> Vec<(u64, JobId, JobEnd)> {
        let mut listed = BTreeMap::new();
        for record in records {
            for index in &record.indices {
                listed.insert((record.job.as_str(), *index), record);
            }
        }
        let mut ends = Vec::new();
        for (worker, element) in &self.jobs {
            let end = match listed.get(&(element.array.as_str(), element.index)) {
                Some(record) => squeue::job_end(&record.state, record.exit),
                None => Some(unknown_end(element)),
            };
            if let Some(end) = end {
                ends.push((*worker, element.job_id(), end));
            }
        }
        for (worker, _, _) in &ends {
            self.jobs.remove(worker);
        }
        ends
    }

    /// Cancels job `id`, retrying transient failures; a job slurmctld no
    /// longer knows is already gone.
    fn delete(&mut self, id: &str) {
        let client = &self.client;
        let counter = &mut self.calls.cancels;
        match retrying(&self.pacing.retry_delays, counter, "cancellation", || {
            client.cancel(id)
        }) {
            Ok(()) => {}
            Err(Failure::Refused { errors, .. })
                if api::has_errno(&errors, errno::INVALID_JOB_ID) =>
            {
                tracing::debug!(
                    job = id,
                    "slurmctld no longer knows the job; nothing to cancel"
                );
            }
            Err(failure) => {
                let message = failure.message();
                tracing::error!(job = id, %message, "slurmrestd could not cancel the job; it may still run");
            }
        }
    }
}

impl Paced for SlurmrestdLauncher {
    fn pacing_mut(&mut self) -> &mut Pacing {
        &mut self.pacing
    }
}

impl ArrayBackend for SlurmrestdLauncher {
    fn tracks(&self, worker_id: u64) -> bool {
        self.jobs.contains_key(&worker_id)
    }

    fn start_group(&mut self, group: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        self.submit_array(group)
    }
}

impl Launcher for SlurmrestdLauncher {
    fn name(&self) -> &'static str {
        "slurmrestd"
    }

    fn start(&mut self, request: &WorkerRequest) -> Result<JobId, LaunchError> {
        arrays::start_one(self, request)
    }

    fn start_many(&mut self, requests: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        arrays::start_in_arrays(self, requests)
    }

    fn poll_interval(&self) -> Duration {
        self.pacing.poll_interval
    }

    fn poll_ended(&mut self) -> Vec<(u64, JobId, JobEnd)> {
        let mut ended = std::mem::take(&mut self.ended);
        if self.jobs.is_empty() || self.backoff.waiting() {
            return ended;
        }
        if let Some(records) = self.query_jobs() {
            self.backoff = Backoff::default();
            ended.extend(self.take_ended(&records));
        }
        ended
    }

    fn cancel(&mut self, worker_ids: &[u64]) {
        let cancelled: Vec<(u64, Element)> = worker_ids
            .iter()
            .filter_map(|worker| Some((*worker, self.jobs.remove(worker)?)))
            .collect();
        let remaining: BTreeSet<&str> = self.jobs.values().map(|e| e.array.as_str()).collect();
        let ids = cancel_ids(cancelled.iter().map(|(_, element)| element), &remaining);
        for id in ids {
            self.delete(&id);
        }
        for (worker, element) in cancelled {
            self.ended
                .push((worker, element.job_id(), JobEnd::Cancelled));
        }
    }

    fn cancel_all(&mut self) {
        let workers: Vec<u64> = self.jobs.keys().copied().collect();
        self.cancel(&workers);
    }
}

/// Dropping the launcher cancels its jobs (unless told not to), so a
/// driver that returns or unwinds leaves no worker queued.
impl Drop for SlurmrestdLauncher {
    fn drop(&mut self) {
        if self.pacing.cancel_on_drop {
            self.cancel_all();
        }
    }
}

/// `(url, user, token)` from the variables `lookup` finds.
fn settings(
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<(String, String, String), SlurmrestdConfigError> {
    let set = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
    let token = set("SLURM_JWT").ok_or(SlurmrestdConfigError::MissingToken)?;
    let url = set("SLURMRESTD_URL").unwrap_or_else(|| DEFAULT_SLURMRESTD_URL.to_owned());
    let token_user = api::token_claims(&token).and_then(|claims| claims.sun);
    let user = match (set("USER"), token_user) {
        (Some(user), Some(named)) if user != named => {
            tracing::warn!(%user, token_user = %named, "USER differs from the user SLURM_JWT was made for; sending USER");
            user
        }
        (Some(user), _) | (None, Some(user)) => user,
        (None, None) => return Err(SlurmrestdConfigError::MissingUser),
    };
    Ok((url, user, token))
}

/// The [`FORWARDED_ENV`] variables `lookup` finds.
fn forwarded_env(lookup: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    FORWARDED_ENV
        .iter()
        .filter_map(|name| Some((name.to_string(), lookup(name)?)))
        .collect()
}

/// Runs `call` until it succeeds, fails for good, or the delays ran out;
/// each attempt counts in `counter`.
fn retrying<T>(
    delays: &[Duration],
    counter: &mut u64,
    what: &str,
    mut call: impl FnMut() -> Result<T, Failure>,
) -> Result<T, Failure> {
    let mut delays = delays.iter();
    loop {
        *counter += 1;
        match (call(), delays.next()) {
            (Err(Failure::Transient(message)), Some(delay)) => {
                tracing::warn!(what, %message, ?delay, "transient slurmrestd failure; retrying");
                std::thread::sleep(*delay);
            }
            (result, _) => return result,
        }
    }
}

/// What the slurmrestd backend submits for a group of workers of one task:
/// the sbatch backend's script, kept under the same name. A directive
/// slurmrestd cannot express is refused, as a submission would refuse it.
pub fn job_script(group: &[WorkerRequest]) -> Result<JobScript, LaunchError> {
    let script = script::job_script(group)?;
    job_properties(group, &script, &[])?;
    Ok(script)
}

/// The REST job properties of a group (its script's directives
/// translated), refused naming the script's file when one cannot be.
fn job_properties(
    group: &[WorkerRequest],
    script: &JobScript,
    base_env: &[(String, String)],
) -> Result<JobProperties, LaunchError> {
    job::job_for(group, &script.text, base_env).map_err(|problem| LaunchError::Submit {
        stderr: format!("{}: {problem}", script.path.display()),
        permanent: true,
    })
}

/// The launch error for a failed submission.
fn submit_error(failure: Failure) -> LaunchError {
    match failure {
        Failure::Unexpected(output) => LaunchError::UnexpectedOutput {
            command: "slurmrestd POST /job/submit",
            output,
        },
        failure => LaunchError::Submit {
            permanent: !matches!(failure, Failure::Transient(_)),
            stderr: format!("slurmrestd: {}", failure.message()),
        },
    }
}

/// Logs why a job listing failed.
fn log_poll_failure(failure: &Failure, failures: u32) {
    let message = failure.message();
    match failure {
        Failure::Auth(_) => {
            tracing::error!(%message, failures, "slurmrestd refused the token; no job states until it is renewed")
        }
        _ => {
            tracing::warn!(%message, failures, "slurmrestd could not list jobs; no job is declared ended, backing off")
        }
    }
}

/// How a job slurmctld no longer lists ended: nobody can tell.
fn unknown_end(element: &Element) -> JobEnd {
    let reason = format!(
        "job {} is unknown to slurmctld: it forgets jobs MinJobAge after they end, \
         so how it ended cannot be told",
        element.job_id()
    );
    JobEnd::Failed { reason }
}

/// What to DELETE: an array by its id when none of its elements stay
/// tracked, else its cancelled elements one by one (`24_3`).
fn cancel_ids<'a>(
    cancelled: impl Iterator<Item = &'a Element>,
    remaining: &BTreeSet<&str>,
) -> Vec<String> {
    let ids: BTreeSet<String> = cancelled
        .map(|element| match remaining.contains(element.array.as_str()) {
            true => element.job_id().0,
            false => element.array.clone(),
        })
        .collect();
    ids.into_iter().collect()
}

#[cfg(test)]
mod tests;
