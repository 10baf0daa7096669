//! How daisy starts and cancels workers: the [`Launcher`] trait and its
//! backends: local processes, SLURM's sbatch, LSF's bsub, and SLURM's REST
//! API (slurmrestd). (How the crates fit together: docs/architecture.md.)
//!
//! A launcher is deliberately small, like HyperQueue's `QueueHandler`:
//! start one worker, one batched check of which jobs ended, cancel. The
//! three cluster backends are one `ClusterLauncher` each over a
//! `Queue` (module `queue`), which says only how that scheduler
//! submits, reports and cancels; retrying is module `retry`'s. It
//! never decides how many workers a task gets (the driver's resource
//! budget and `max_workers` do), and what it reports about its jobs is a
//! safety net: a worker is alive while its connection to the driver is,
//! whatever the launcher believes (see DESIGN.md, "Worker accounting by
//! connection").
//!
//! Terms: a *worker* is one `daisy-worker` process serving one task, known
//! to the driver by its slot id (`worker_id`); a *job* is what a backend
//! made of it (a local process group, a SLURM job), known by [`JobId`].
//!
//! Secrets (the run token) travel only in [`WorkerRequest::env`], never in
//! its arguments, because any user on a node can read command lines.

mod arrays;
mod bsub;
mod cluster;
mod local;
mod pacing;
mod queue;
mod retry;
mod sbatch;
mod site_limits;
mod slurmrestd;
mod template;
mod worker_program;

pub use arrays::first_array;
pub use bsub::{
    job_script as bsub_job_script, BsubLauncher, LsfCalls, BSUB_PLACEHOLDERS,
    BUILTIN_BSUB_TEMPLATE, LSF_COMMANDS,
};
pub use cluster::{non_empty, ClusterOptions};
pub use local::{command_line as local_command_line, ForkServer, LocalLauncher, DEFAULT_GRACE};
pub use pacing::{Paced, Pacing, DEFAULT_POLL_INTERVAL, DEFAULT_RETRY_DELAYS, MAX_BACKOFF};
pub use queue::{POLL_AFTER_A_LOSS, QUICK_POLLS_AFTER_A_LOSS};
pub use sbatch::{
    job_script as sbatch_job_script, sbatch_test_only, SbatchLauncher, SchedulerCalls, TestOnly,
    BUILTIN_WORKER_TEMPLATE, DEFAULT_COMMAND_TIMEOUT, PLACEHOLDERS, SLURM_COMMANDS,
};
pub use site_limits::{MAX_JOBS, SITE_LIMIT_FIRST_PAUSE};
pub use slurmrestd::{
    job_script as slurmrestd_job_script, SlurmrestdCalls, SlurmrestdConfigError,
    SlurmrestdLauncher, DEFAULT_SLURMRESTD_URL, FORWARDED_ENV, SLURMRESTD_REQUEST_TIMEOUT,
};
pub use template::{shell_quote, JobScript};
pub use worker_program::{find_worker_program, DAISY_WORKER_BIN, WORKER_PROGRAM_NAME};

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::PathBuf;

/// What the driver asks a launcher to start: one worker of one task.
#[derive(Clone)]
pub struct WorkerRequest {
    /// The task this worker serves (workers are bound to one task).
    pub task_id: String,
    /// The driver's slot id; unique per run, it names the log files.
    pub worker_id: u64,
    /// The `daisy-worker` binary, best absolute (see [`find_worker_program`]).
    pub program: PathBuf,
    /// Its arguments. Never secrets: command lines are world-readable.
    pub args: Vec<String>,
    /// Extra environment, added to the inherited one; `DAISY_CONTEXT`
    /// (which holds the run token) goes here.
    pub env: Vec<(String, String)>,
    /// Where the worker runs (the driver's cwd, so relative paths in the
    /// pipeline mean the same to both).
    pub working_dir: PathBuf,
    /// `<run-dir>/logs/<task>`; stdout and stderr go to
    /// `worker-<worker_id>.out` and `.err` there.
    pub log_dir: PathBuf,
    /// Resources of one worker, for cluster backends' resource requests;
    /// the local backend ignores them (the driver's budget already gated
    /// the start).
    pub requires: BTreeMap<String, u64>,
    /// Scheduler options (partition, walltime, job template...) for
    /// cluster backends, resolved by the driver from the pipeline's
    /// launcher section and the task's overrides; the local backend
    /// ignores them.
    pub cluster: ClusterOptions,
}

/// Shows environment names but not values, so logging a request never
/// leaks the run token held in `DAISY_CONTEXT`.
impl fmt::Debug for WorkerRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env_names: Vec<&str> = self.env.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("WorkerRequest")
            .field("task_id", &self.task_id)
            .field("worker_id", &self.worker_id)
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env (values hidden)", &env_names)
            .field("working_dir", &self.working_dir)
            .field("log_dir", &self.log_dir)
            .field("requires", &self.requires)
            .field("cluster", &self.cluster)
            .finish()
    }
}

/// A launcher's handle on something it started: for the local backend the
/// pid (also the process group id), for sbatch the SLURM job id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub String);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a job ended, as the launcher saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobEnd {
    /// The worker exited by itself with this code.
    Exited { code: i32 },
    /// The worker was ended by a signal nobody here sent, e.g. "SIGKILL"
    /// from the OOM killer.
    Signalled { signal: String },
    /// The driver cancelled it ([`Launcher::cancel`] or
    /// [`Launcher::cancel_all`]).
    Cancelled,
    /// The launcher lost track of it or the scheduler says it failed
    /// (SLURM FAILED, NODE_FAIL); `reason` says what was seen.
    Failed { reason: String },
}

/// For events and log lines: "exited with code 1", "killed by SIGKILL".
impl fmt::Display for JobEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobEnd::Exited { code } => write!(f, "exited with code {code}"),
            JobEnd::Signalled { signal } => write!(f, "killed by {signal}"),
            JobEnd::Cancelled => f.write_str("cancelled"),
            JobEnd::Failed { reason } => write!(f, "failed: {reason}"),
        }
    }
}

/// Starts and cancels workers' jobs on one kind of machine or scheduler.
///
/// Launchers only start and cancel; they never decide how many workers a
/// task gets: the driver does, from `max_workers` and the resource budget.
/// Job state is a safety net, not the source of truth for liveness: a
/// worker is alive while its connection to the driver is alive and
/// heartbeating. [`Launcher::poll_ended`] exists so that a job that ends
/// without ever connecting (it crashed at start, the scheduler failed it)
/// still frees its slot and counts against the restart budget.
///
/// Every method is synchronous and `cancel` may sleep up to its grace
/// period, so async callers run them on a blocking thread.
pub trait Launcher: Send {
    /// The backend's name for logs and events: "local", later "sbatch".
    fn name(&self) -> &'static str;

    /// Starts a worker and returns at once (fire and forget: the driver
    /// learns that the worker lives from its connection, not from here).
    fn start(&mut self, request: &WorkerRequest) -> Result<JobId, LaunchError>;

    /// Starts several workers of one task, with consecutive worker ids,
    /// returning one result per request in order. Cluster backends submit
    /// them as one job array (one scheduler call for N workers); the
    /// default starts them one by one.
    fn start_many(&mut self, requests: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        requests.iter().map(|r| self.start(r)).collect()
    }

    /// Outcomes of submissions that waited ([`LaunchError::Waiting`]) and
    /// were tried again since the last call: a job id once submitted, a
    /// new `Waiting` when the limit waited for changed, another error when
    /// the scheduler now refuses for good. Each worker's outcome once; the
    /// default has none, for backends that never wait.
    fn poll_started(&mut self) -> Vec<(u64, Result<JobId, LaunchError>)> {
        Vec::new()
    }

    /// How often `poll_ended` is worth calling: a local check is cheap, a
    /// cluster scheduler should be asked every few tens of seconds.
    fn poll_interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(100)
    }

    /// Jobs that have ended since the last call, each reported exactly
    /// once with its worker id, cancelled ones included (as
    /// [`JobEnd::Cancelled`]), so the driver sees every end once. One
    /// batched check for all jobs (one squeue call, not one per job);
    /// cluster backends may block for that call.
    fn poll_ended(&mut self) -> Vec<(u64, JobId, JobEnd)>;

    /// Ends the given workers' jobs, children included; ids not running
    /// (unknown, or already reported ended) are ignored. Blocks at most about the backend's grace
    /// period in total, however many workers are given.
    fn cancel(&mut self, worker_ids: &[u64]);

    /// Ends every job still running (driver exit), with `cancel`'s
    /// guarantees.
    fn cancel_all(&mut self);

    /// The given workers' connections ended though their jobs may still
    /// run (they died, or hang): a backend running several workers per
    /// job may start another worker in such a place. Nothing is ended.
    fn left(&mut self, worker_ids: &[u64]) {
        let _ = worker_ids;
    }

    /// Cancels jobs that an earlier driver of the run submitted (their
    /// [`JobId`]s as it recorded them; this launcher does not track
    /// them) and that are still queued or running; returns those. Jobs
    /// already gone are skipped. The default cancels nothing: a local
    /// worker's pid may have been reused by another process since.
    fn cancel_earlier_jobs(&mut self, jobs: &[JobId]) -> Vec<JobId> {
        let _ = jobs;
        Vec::new()
    }
}

/// Why a launcher could not start a worker, or find the program to start.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The OS refused to start the program (missing, not executable, or
    /// the working directory does not exist). Retrying will not help
    /// until the installation or the pipeline is fixed.
    #[error("cannot start {} in {}: {source}", program.display(), working_dir.display())]
    Spawn {
        program: PathBuf,
        working_dir: PathBuf,
        source: io::Error,
    },
    /// A log directory or file could not be created (permissions, full
    /// disk); the worker was not started.
    #[error("cannot open worker log {}: {source}", path.display())]
    Log { path: PathBuf, source: io::Error },
    /// The driver asked for a worker id that is still running here: a
    /// driver bug, refused so that the running process is not lost track of.
    #[error("task {task_id:?}: worker {worker_id} is already running")]
    WorkerIdInUse { task_id: String, worker_id: u64 },
    /// `DAISY_WORKER_BIN` names no file; the other places are not tried,
    /// so a typo never silently runs a different binary.
    #[error("DAISY_WORKER_BIN = {}: {source}", path.display())]
    WorkerBinMissing { path: PathBuf, source: io::Error },
    /// The scheduler refused the submission, or kept failing with errors
    /// it calls transient until the retries ran out; `stderr` holds its
    /// message. `permanent` says retrying cannot help until the pipeline
    /// or the site changes (invalid partition, account or resources),
    /// so the driver should stop submitting for the task.
    #[error("job submission {}: {stderr}", if *permanent { "refused" } else { "failed (transient, retries exhausted)" })]
    Submit { stderr: String, permanent: bool },
    /// The submission waits: a site limit refused it (SLURM's
    /// `QOSMaxSubmitJobPerUserLimit`, an array beyond `MaxArraySize`,
    /// LSF's pending-job threshold), or the task's `max_jobs` jobs are
    /// queued or running. Not a failure: the launcher keeps the request
    /// and submits it again later (with backoff for a site limit, when a
    /// job ends for `max_jobs`), reporting the outcome through
    /// [`Launcher::poll_started`]; the driver keeps the worker's slot.
    /// `limit` names the limit, `message` is the scheduler's words.
    #[error("submission waits for a limit ({limit}): {message}")]
    Waiting { limit: String, message: String },
    /// Scheduler commands a backend needs are not on PATH.
    #[error(
        "cannot find {} on PATH ({}); install the scheduler's client commands or fix PATH",
        missing.join(", "),
        path.as_deref().unwrap_or("PATH is not set")
    )]
    ExecutablesMissing {
        missing: Vec<String>,
        path: Option<String>,
    },
    /// A job script could not be written to the log directory.
    #[error("cannot write job script {}: {source}", path.display())]
    Script { path: PathBuf, source: io::Error },
    /// A user's job-script template could not be read.
    #[error("cannot read job template {}: {source}", path.display())]
    TemplateRead { path: PathBuf, source: io::Error },
    /// A job-script template is malformed; nothing was submitted.
    #[error("job template {}, line {line}: {problem}", template.display())]
    Template {
        template: PathBuf,
        line: usize,
        problem: TemplateProblem,
    },
    /// A job-script template lacks a placeholder the options need.
    #[error("job template {}: it has no {{{{{name}}}}}, which is needed because {because}", template.display())]
    TemplateLacks {
        template: PathBuf,
        name: &'static str,
        because: String,
    },
    /// A scheduler command succeeded but printed something unexpected.
    #[error("{command} printed {output:?}, not a job id")]
    UnexpectedOutput {
        command: &'static str,
        output: String,
    },
    /// No `daisy-worker` in any of the places looked at.
    #[error(
        "no {WORKER_PROGRAM_NAME} program found: {DAISY_WORKER_BIN} is not set, {}, \
         and none is on PATH; build it (cargo build -p daisy-worker) or set {DAISY_WORKER_BIN}",
        worker_program::describe_beside_exe(.beside_exe)
    )]
    WorkerNotFound { beside_exe: Option<PathBuf> },
}

/// What is wrong in a job-script template.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateProblem {
    /// A `{{` with no `}}` after it on the same line.
    #[error("\"{{{{\" without a closing \"}}}}\"")]
    Unclosed,
    /// A name the template's backend does not fill; `known` lists the
    /// names it does (used by the shared renderer in `template.rs`).
    #[error("unknown placeholder {{{{{name}}}}} (known: {})", known.join(", "))]
    UnknownName {
        name: String,
        known: Vec<&'static str>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_debug_hides_environment_values() {
        let request = WorkerRequest {
            task_id: "predict".into(),
            worker_id: 3,
            program: "/bin/daisy-worker".into(),
            args: vec!["--verbose".into()],
            env: vec![("DAISY_CONTEXT".into(), "token-s3cr3t".into())],
            working_dir: "/work".into(),
            log_dir: "/work/logs/predict".into(),
            requires: BTreeMap::new(),
            cluster: ClusterOptions::default(),
        };
        let shown = format!("{request:?}");
        assert!(shown.contains("DAISY_CONTEXT"), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }

    #[test]
    fn job_end_reads_as_a_phrase() {
        assert_eq!(JobEnd::Exited { code: 1 }.to_string(), "exited with code 1");
        let killed = JobEnd::Signalled {
            signal: "SIGKILL".into(),
        };
        assert_eq!(killed.to_string(), "killed by SIGKILL");
    }
}
