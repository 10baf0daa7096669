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
//! the next poll. `cancel_earlier_jobs` lists the jobs once and makes one
//! `DELETE` per element of an earlier run still queued or running. Submissions and cancellations that fail transiently
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

use std::collections::BTreeSet;
use std::time::Duration;

use crate::queue::{ClusterLauncher, Jobs, Queue, QueueJob, ScriptRenderer};
use crate::retry::{self, CallError};
use crate::sbatch::element::{self, Element};
use crate::sbatch::{script, squeue};
use crate::site_limits;
use crate::template::JobScript;
use crate::{JobEnd, LaunchError, WorkerRequest};
use api::{errno, JobProperties, JobSubmission};
use client::{Failure, Refusal, RestClient};

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
    // The switch that makes `import daisy` give daisy_rs: Python workers
    // run user code written for daisy, in every job of the run.
    "DAISY_RS_AS_DAISY",
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
pub type SlurmrestdLauncher = ClusterLauncher<Slurmrestd>;

/// slurmrestd as a [`Queue`]; see the module doc.
pub struct Slurmrestd {
    client: RestClient,
    /// Every job's environment, before the request's own.
    base_env: Vec<(String, String)>,
    calls: SlurmrestdCalls,
    /// `MaxArraySize`, read once from `scontrol show config` when scontrol
    /// is on PATH (v0.0.38 has no endpoint that shows slurm.conf);
    /// `Some(None)` when it could not be read.
    max_array_size: Option<Option<usize>>,
}

impl SlurmrestdLauncher {
    /// A launcher for slurmrestd at `base_url` (`http://host:port` or
    /// `unix:/path/to/socket`), acting as `user` with JWT `token`. Jobs
    /// get the driver's [`FORWARDED_ENV`] as they are now.
    pub fn new(base_url: &str, user: &str, token: &str) -> Result<Self, SlurmrestdConfigError> {
        Ok(Self::over(Slurmrestd {
            client: RestClient::new(base_url, user, token, SLURMRESTD_REQUEST_TIMEOUT)?,
            base_env: forwarded_env(|name| std::env::var(name).ok()),
            calls: SlurmrestdCalls::default(),
            max_array_size: None,
        }))
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
        self.queue.base_env = env;
        self
    }
}

impl Queue for Slurmrestd {
    type Job = Element;
    type Calls = SlurmrestdCalls;
    const NAME: &'static str = "slurmrestd";

    fn calls(&self) -> SlurmrestdCalls {
        self.calls
    }

    /// The sbatch backend's script, kept for the record: slurmrestd does
    /// not read its `#SBATCH` lines, they become job properties.
    const JOB_SCRIPT: ScriptRenderer = script::job_script;

    /// The script's directives as job properties, then one
    /// `POST /job/submit`.
    fn submit(
        &mut self,
        group: &[WorkerRequest],
        script: JobScript,
        delays: &[Duration],
    ) -> Result<Vec<Element>, LaunchError> {
        let job = job_properties(group, &script, &self.base_env)?;
        let submission = JobSubmission {
            script: script.text,
            job,
        };
        let array = self.submit_job(&submission, delays)?.to_string();
        Ok(Element::of_group(&array, group, None))
    }

    /// One `GET /jobs`; a tracked job it does not list ended unseen.
    fn ended(
        &mut self,
        jobs: &mut Jobs<Element>,
        _left: &BTreeSet<u64>,
    ) -> Result<Vec<(u64, JobEnd)>, String> {
        let records = self.list_jobs()?;
        let listed = element::listed(&records);
        let end = |element: &Element| match listed.get(&(element.array.as_str(), element.index)) {
            Some(record) => squeue::job_end(&record.state, record.exit),
            None => Some(unknown_end(element)),
        };
        let ends = jobs
            .iter()
            .filter_map(|(worker, element)| Some((*worker, end(element)?)));
        Ok(ends.collect())
    }

    fn live(&mut self, jobs: &[Element]) -> Option<Vec<Element>> {
        let records = self.list_jobs().ok()?;
        Some(element::live(&records, jobs))
    }

    /// One `DELETE` per array, or per element of an array some of whose
    /// elements stay.
    fn cancel(&mut self, jobs: &[Element], staying: &[&Element], delays: &[Duration]) {
        for id in element::cancel_ids(jobs, staying) {
            self.delete(&id, delays);
        }
    }

    /// From scontrol, if it is on PATH; else unknown, and an array too
    /// large is refused, held as a limit and halved.
    fn max_array_size(&mut self, _first: &WorkerRequest) -> Option<usize> {
        *self.max_array_size.get_or_insert_with(|| {
            let scontrol = which::which("scontrol").ok()?;
            crate::sbatch::read_max_array_size(&scontrol, crate::DEFAULT_COMMAND_TIMEOUT)
        })
    }

    fn array_size_refused(&mut self) {
        self.max_array_size = None;
    }
}

impl Slurmrestd {
    /// Submits, retrying transient failures; the array job id.
    fn submit_job(
        &mut self,
        submission: &JobSubmission,
        delays: &[Duration],
    ) -> Result<u64, LaunchError> {
        let client = &self.client;
        let counter = &mut self.calls.submissions;
        let (job, remarks) = retry::retrying(delays, counter, "slurmrestd submission", || {
            client.submit(submission)
        })
        .map_err(submit_error)?;
        if !remarks.is_empty() {
            tracing::info!(job, %remarks, "slurmrestd accepted the job with remarks");
        }
        Ok(job)
    }

    /// Every job slurmctld lists, as records, or why there is no listing
    /// (a refused token is also logged as an error: it will not pass).
    fn list_jobs(&mut self) -> Result<Vec<squeue::Record>, String> {
        self.calls.polls += 1;
        match self.client.jobs() {
            Ok(jobs) => Ok(api::records(&jobs)),
            Err(failure @ CallError::Permanent(Refusal::Auth(_))) => {
                tracing::error!(%failure, "slurmrestd refused the token; no job states until it is renewed");
                Err(failure.message())
            }
            Err(failure) => Err(format!("slurmrestd could not list jobs: {failure}")),
        }
    }

    /// Cancels job `id`, retrying transient failures; a job slurmctld no
    /// longer knows is already gone.
    fn delete(&mut self, id: &str, delays: &[Duration]) {
        let client = &self.client;
        let counter = &mut self.calls.cancels;
        match retry::retrying(delays, counter, "slurmrestd cancellation", || {
            client.cancel(id)
        }) {
            Ok(()) => {}
            Err(CallError::Permanent(Refusal::Refused { errors, .. }))
                if api::has_errno(&errors, errno::INVALID_JOB_ID) =>
            {
                tracing::debug!(
                    job = id,
                    "slurmctld no longer knows the job; nothing to cancel"
                );
            }
            Err(failure) => {
                tracing::error!(job = id, %failure, "slurmrestd could not cancel the job; it may still run");
            }
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
        CallError::Permanent(Refusal::Unexpected(output)) => LaunchError::UnexpectedOutput {
            command: "slurmrestd POST /job/submit",
            output,
        },
        CallError::Permanent(Refusal::Refused { message, .. })
            if site_limits::slurm_limit(&message).is_some() =>
        {
            let limit = site_limits::slurm_limit(&message).expect("matched above");
            LaunchError::Waiting {
                limit,
                message: format!("slurmrestd: {message}"),
            }
        }
        failure => LaunchError::Submit {
            permanent: matches!(failure, CallError::Permanent(_)),
            stderr: format!("slurmrestd: {failure}"),
        },
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

#[cfg(test)]
mod tests;
