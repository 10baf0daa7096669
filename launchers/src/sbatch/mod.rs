//! The sbatch backend: workers are elements of SLURM job arrays.
//!
//! `start_many` renders one job script for a group of workers (consecutive
//! ids of one task) and submits it with ONE `sbatch --parsable
//! --export=ALL --array=0-(N-1)[%cap]` call; element `i` is worker
//! `first + i` (daisy-worker adds `SLURM_ARRAY_TASK_ID` to the id in its
//! context itself) and its [`JobId`] is `<array job id>_<i>`. A single
//! `start` is an array of one, so every job id has that shape, and so no
//! worker inherits a `SLURM_ARRAY_TASK_ID` from a driver that itself runs
//! as an array element (sbatch sets it anew for every array element only).
//!
//! The run token never appears in the script, the job name or a command
//! line: the first request's environment (with `DAISY_CONTEXT`) is given
//! to the `sbatch` process, and `--export=ALL` (also overriding a user's
//! `SBATCH_EXPORT`) hands it to every element. The script is written to
//! `<log_dir>/worker-<first>-<last>.sbatch` before submission.
//!
//! Resources come from the request's `requires`: `cpu` → `--cpus-per-task`,
//! `gpu` → `--gres=gpu:N` (understood with and without `select/cons_tres`),
//! `mem` (megabytes) → `--mem=<N>M`. Other keys are budget-only: the
//! driver counts them, SLURM never sees them. Partition, account, qos,
//! walltime, extra directives and setup lines come from
//! [`ClusterOptions`](crate::ClusterOptions).
//!
//! Job state is the safety net of DESIGN.md: `poll_ended` makes ONE
//! `squeue` call for all of the run's arrays. Elements it no longer lists
//! have left the queue; how they ended is asked once per poll, of `sacct`
//! (with accounting; without it, `sacct -c` reads the jobcomp file, which
//! knows only raw job ids, those of elements we saw running) and then of
//! `scontrol show job` (which remembers finished jobs for `MinJobAge`,
//! 300 s by default). What no source knows is reported as
//! `Failed{"... left the queue ..."}`: for instance, without accounting,
//! one element of a pending array of several cancelled by its index
//! (`scancel 24_3`), which SLURM forgets at once. States: COMPLETED → `Exited{code}`, CANCELLED →
//! `Cancelled`, every other end (FAILED, TIMEOUT, NODE_FAIL,
//! OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, and PREEMPTED, which only ends a
//! job when the partition cancels preempted jobs: requeued ones stay in
//! the queue) → `Failed{reason}` naming the state and exit code. PENDING
//! elements are not reported: they keep their slots. A failed `squeue`
//! reports nothing and makes later polls back off (doubling, up to
//! [`MAX_BACKOFF`]): a job is never declared dead because SLURM was busy.
//!
//! `cancel` makes ONE `scancel` call (whole arrays by their id when none of
//! their elements stay) and reports the workers as `Cancelled` at the next
//! poll, whatever SLURM does next (also a job that had ended unseen since
//! the last poll: asking SLURM first would cost a call per cancel). `sbatch` and `scancel` failures that
//! SLURM calls transient are retried after each of the retry delays.

pub(crate) mod commands;
pub(crate) mod script;
pub(crate) mod squeue;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::arrays::{self, ArrayBackend};
use crate::pacing::{Paced, Pacing};
use crate::{JobEnd, JobId, LaunchError, Launcher, WorkerRequest};
use commands::{Failure, Invocation, SlurmCommands};
use squeue::Record;

pub use commands::COMMANDS as SLURM_COMMANDS;
pub use script::{job_script, BUILTIN_TEMPLATE as BUILTIN_WORKER_TEMPLATE, PLACEHOLDERS};

/// How often the driver should poll SLURM: often enough to notice a
/// failed start within a minute, rarely enough not to load slurmctld.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(30);

/// Pauses between attempts of a transiently failing `sbatch` or `scancel`.
pub const DEFAULT_RETRY_DELAYS: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// How long one SLURM command may take before it is killed; SLURM's
/// clients themselves give up on an unreachable controller after 10 to
/// 60 s.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The longest pause between status polls after repeated failures.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How many calls of each kind the launcher made, retries included, so
/// tests (and curious users) can see that N workers cost one submission
/// and a poll one status call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerCalls {
    /// `sbatch` runs.
    pub submissions: u64,
    /// `squeue` runs: one per poll.
    pub squeue: u64,
    /// `sacct` runs: only for polls where jobs left the queue.
    pub sacct: u64,
    /// `scontrol show job` runs: only when sacct could not tell.
    pub scontrol: u64,
    /// `scancel` runs.
    pub cancels: u64,
}

impl SchedulerCalls {
    /// Every status query: squeue, sacct and scontrol.
    pub fn status(&self) -> u64 {
        self.squeue + self.sacct + self.scontrol
    }
}

/// Starts workers as SLURM job-array elements; see the module doc.
pub struct SbatchLauncher {
    slurm: SlurmCommands,
    /// Submitted workers not yet reported ended, by worker id.
    jobs: BTreeMap<u64, Element>,
    /// Ends recorded by `cancel`, handed out by the next `poll_ended`.
    ended: Vec<(u64, JobId, JobEnd)>,
    pacing: Pacing,
    command_timeout: Duration,
    /// Where finished jobs are looked up first; learnt from sacct's errors.
    accounting: Accounting,
    backoff: Backoff,
    calls: SchedulerCalls,
}

/// One worker's job: element `index` of array job `array`.
#[derive(Clone, Debug)]
struct Element {
    array: String,
    index: u32,
    /// The element's own job id, once squeue showed it running: the only
    /// id the jobcomp file (`sacct -c`) knows it by.
    raw: Option<String>,
}

impl Element {
    fn job_id(&self) -> JobId {
        JobId(format!("{}_{}", self.array, self.index))
    }
}

/// What `sacct` can tell on this cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Accounting {
    /// slurmdbd: `sacct` knows arrays and their elements.
    Database,
    /// "accounting storage is disabled": `sacct -c` reads the jobcomp file.
    JobComp,
    /// Neither works; only scontrol is asked.
    Unavailable,
}

/// Spacing of status polls after failures (also used by the slurmrestd
/// backend).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Backoff {
    pub(crate) failures: u32,
    resume_at: Option<Instant>,
}

impl SbatchLauncher {
    /// A launcher using the SLURM commands found on PATH.
    pub fn new() -> Result<Self, LaunchError> {
        Self::with_path(std::env::var_os("PATH"))
    }

    /// A launcher using the SLURM commands found on `path` (a PATH value);
    /// the error names every missing command and the path searched.
    pub fn with_path(path: Option<OsString>) -> Result<Self, LaunchError> {
        Ok(Self {
            slurm: SlurmCommands::find(path)?,
            jobs: BTreeMap::new(),
            ended: Vec::new(),
            pacing: Pacing::default(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            accounting: Accounting::Database,
            backoff: Backoff::default(),
            calls: SchedulerCalls::default(),
        })
    }

    /// Kills a SLURM command running longer than `timeout`.
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// The SLURM calls made so far.
    pub fn calls(&self) -> SchedulerCalls {
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
                let copies = (1..group.len())
                    .map(|_| arrays::copy_error(&error))
                    .collect::<Vec<_>>();
                std::iter::once(Err(error))
                    .chain(copies.into_iter().map(Err))
                    .collect()
            }
        }
    }

    /// Submits one group of workers as one array and records its elements.
    fn submit_group(&mut self, group: &[WorkerRequest]) -> Result<String, LaunchError> {
        let first = &group[0];
        let script = script::job_script(group)?;
        script.write()?;
        let array = self.sbatch(first, &script.path, group.len())?;
        // The last element of an array to start keeps the array's id, so
        // the only element of an array of one is known by it from the start.
        let only = (group.len() == 1).then(|| array.clone());
        for (index, request) in group.iter().enumerate() {
            let element = Element {
                array: array.clone(),
                index: index as u32,
                raw: only.clone(),
            };
            self.jobs.insert(request.worker_id, element);
        }
        let (task, workers) = (&first.task_id, group.len());
        tracing::info!(%task, first = first.worker_id, workers, job = %array, "submitted worker array");
        Ok(array)
    }

    /// Runs sbatch for `size` elements of `script`, with the request's
    /// environment and working directory; returns the array job id.
    fn sbatch(
        &mut self,
        first: &WorkerRequest,
        script: &Path,
        size: usize,
    ) -> Result<String, LaunchError> {
        let args = sbatch_args(size, first.cluster.max_array_parallel, script);
        let invocation = Invocation {
            env: &first.env,
            cwd: Some(&first.working_dir),
            ..Invocation::new(&self.slurm.sbatch, args)
        };
        let (timeout, delays) = (self.command_timeout, &self.pacing.retry_delays);
        let stdout =
            commands::run_retrying(&invocation, timeout, delays, &mut self.calls.submissions)
                .map_err(|failure| submit_error(failure, &self.slurm.sbatch, first))?;
        squeue::parse_sbatch(&stdout).ok_or(LaunchError::UnexpectedOutput {
            command: "sbatch --parsable",
            output: stdout,
        })
    }

    /// The squeue listing of every tracked array, or `None` when squeue
    /// failed (then later polls back off).
    fn query_queue(&mut self) -> Option<Vec<Record>> {
        let arrays = self.arrays(self.jobs.keys());
        let args = squeue_args(&arrays);
        self.calls.squeue += 1;
        match commands::run(
            &Invocation::new(&self.slurm.squeue, args),
            self.command_timeout,
        ) {
            Ok(stdout) => Some(squeue::parse_squeue(&stdout)),
            Err(failure) if invalid_job_id(&failure) => Some(Vec::new()),
            Err(failure) => {
                self.backoff.failed(self.pacing.poll_interval);
                let (message, failures) = (failure.message(), self.backoff.failures);
                tracing::warn!(%message, failures, "squeue failed; no job is declared ended, backing off");
                None
            }
        }
    }

    /// Learns raw ids from the listing and returns the workers it no
    /// longer lists (or lists in a final state): those that left the queue.
    fn left_queue(&mut self, listing: &[Record]) -> BTreeSet<u64> {
        let mut listed = BTreeMap::new();
        for record in listing {
            for index in &record.indices {
                listed.insert((record.job.as_str(), *index), record);
            }
        }
        let mut gone = BTreeSet::new();
        for (worker, element) in &mut self.jobs {
            match listed.get(&(element.array.as_str(), element.index)) {
                Some(record) if squeue::job_end(&record.state, None).is_none() => {
                    if record.state != "PENDING" {
                        element.raw = Some(record.raw.clone());
                    }
                }
                _ => {
                    gone.insert(*worker);
                }
            }
        }
        gone
    }

    /// How the workers that left the queue ended: sacct first, then
    /// scontrol, then "unknown". Workers scontrol still shows active, or
    /// that it could not be asked about, stay for the next poll.
    fn resolve(&mut self, mut gone: BTreeSet<u64>) -> Vec<(u64, JobId, JobEnd)> {
        let mut ends = BTreeMap::new();
        let records = self.ask_sacct(&gone);
        self.match_ends(&records, &mut gone, &mut ends);
        if !gone.is_empty() {
            let Some(records) = self.ask_scontrol(&gone) else {
                return self.take_ended(ends);
            };
            let active = self.match_ends(&records, &mut gone, &mut ends);
            gone.retain(|worker| !active.contains(worker));
        }
        for worker in gone {
            let element = &self.jobs[&worker];
            let reason = format!(
                "job {} left the queue; neither sacct nor scontrol know how it ended",
                element.job_id()
            );
            ends.insert(worker, JobEnd::Failed { reason });
        }
        self.take_ended(ends)
    }

    /// Moves the ends found in `records` for workers in `gone` into `ends`;
    /// returns the workers the records show still active.
    fn match_ends(
        &self,
        records: &[Record],
        gone: &mut BTreeSet<u64>,
        ends: &mut BTreeMap<u64, JobEnd>,
    ) -> BTreeSet<u64> {
        let mut active = BTreeSet::new();
        for record in records {
            for worker in self.workers_of(record, gone) {
                match squeue::job_end(&record.state, record.exit) {
                    Some(end) => {
                        ends.insert(worker, end);
                    }
                    None => {
                        active.insert(worker);
                    }
                }
            }
        }
        gone.retain(|worker| !ends.contains_key(worker));
        active
    }

    /// The workers among `candidates` a record is about: by array index,
    /// or (jobcomp lines) by raw job id.
    fn workers_of(&self, record: &Record, candidates: &BTreeSet<u64>) -> Vec<u64> {
        let matches = |element: &Element| match record.indices.is_empty() {
            true => element.raw.as_deref() == Some(record.raw.as_str()),
            false => element.array == record.job && record.indices.contains(&element.index),
        };
        candidates
            .iter()
            .filter(|worker| matches(&self.jobs[*worker]))
            .copied()
            .collect()
    }

    /// Removes the ended workers and returns their reports.
    fn take_ended(&mut self, ends: BTreeMap<u64, JobEnd>) -> Vec<(u64, JobId, JobEnd)> {
        ends.into_iter()
            .filter_map(|(worker, end)| {
                let element = self.jobs.remove(&worker)?;
                Some((worker, element.job_id(), end))
            })
            .collect()
    }

    /// One sacct call about `workers` (two the first time, when it learns
    /// that accounting is disabled); no records when it cannot tell.
    fn ask_sacct(&mut self, workers: &BTreeSet<u64>) -> Vec<Record> {
        loop {
            let Some(args) = self.sacct_args(workers) else {
                return Vec::new();
            };
            self.calls.sacct += 1;
            let invocation = Invocation::new(&self.slurm.sacct, args);
            match commands::run(&invocation, self.command_timeout) {
                Ok(stdout) => return squeue::parse_sacct(&stdout),
                Err(failure) if !self.sacct_fallback(&failure) => return Vec::new(),
                Err(_) => {}
            }
        }
    }

    /// sacct's arguments for the current accounting mode, or `None` when
    /// it cannot know about `workers`.
    fn sacct_args(&self, workers: &BTreeSet<u64>) -> Option<Vec<String>> {
        let ids = match self.accounting {
            Accounting::Database => self.arrays(workers.iter()),
            Accounting::JobComp => self.raw_ids(workers),
            Accounting::Unavailable => return None,
        };
        (!ids.is_empty()).then(|| sacct_args(self.accounting == Accounting::JobComp, &ids))
    }

    /// After a sacct failure: moves to the next accounting mode and says
    /// whether to ask again now.
    fn sacct_fallback(&mut self, failure: &Failure) -> bool {
        let message = failure.message();
        match self.accounting {
            Accounting::Database if message.contains("accounting storage is disabled") => {
                tracing::info!("SLURM accounting is disabled; reading finished jobs with sacct -c");
                self.accounting = Accounting::JobComp;
                true
            }
            Accounting::JobComp if !failure.is_transient() => {
                tracing::info!(%message, "sacct -c does not work here; asking scontrol only");
                self.accounting = Accounting::Unavailable;
                false
            }
            _ => {
                tracing::warn!(%message, "sacct failed; asking scontrol");
                false
            }
        }
    }

    /// One `scontrol -o show job` call: for one array, that array; for
    /// several, every job (scontrol takes one id at a time). `None` when
    /// it failed for another reason than not knowing the job.
    fn ask_scontrol(&mut self, workers: &BTreeSet<u64>) -> Option<Vec<Record>> {
        let arrays = self.arrays(workers.iter());
        let mut args = vec!["-o", "show", "job"];
        if let [array] = arrays.as_slice() {
            args.push(array);
        }
        self.calls.scontrol += 1;
        let invocation = Invocation::new(&self.slurm.scontrol, args);
        match commands::run(&invocation, self.command_timeout) {
            Ok(stdout) => Some(squeue::parse_scontrol(&stdout)),
            Err(failure) if invalid_job_id(&failure) => Some(Vec::new()),
            Err(failure) => {
                let message = failure.message();
                tracing::warn!(%message, "scontrol failed; asking again at the next poll");
                None
            }
        }
    }

    /// The distinct array job ids of `workers`, sorted.
    fn arrays<'a>(&self, workers: impl Iterator<Item = &'a u64>) -> Vec<String> {
        let arrays: BTreeSet<&str> = workers
            .filter_map(|worker| self.jobs.get(worker))
            .map(|element| element.array.as_str())
            .collect();
        arrays.into_iter().map(str::to_owned).collect()
    }

    /// The raw job ids known for `workers`.
    fn raw_ids(&self, workers: &BTreeSet<u64>) -> Vec<String> {
        workers
            .iter()
            .filter_map(|worker| self.jobs.get(worker)?.raw.clone())
            .collect()
    }

    /// One scancel call for `ids`, retried while SLURM is unreachable.
    fn scancel(&mut self, ids: &[String]) {
        let invocation = Invocation::new(&self.slurm.scancel, ids);
        let (timeout, delays) = (self.command_timeout, &self.pacing.retry_delays);
        if let Err(failure) =
            commands::run_retrying(&invocation, timeout, delays, &mut self.calls.cancels)
        {
            let message = failure.message();
            tracing::error!(?ids, %message, "scancel failed; these jobs may still run");
        }
    }
}

impl Paced for SbatchLauncher {
    fn pacing_mut(&mut self) -> &mut Pacing {
        &mut self.pacing
    }
}

impl ArrayBackend for SbatchLauncher {
    fn tracks(&self, worker_id: u64) -> bool {
        self.jobs.contains_key(&worker_id)
    }

    fn start_group(&mut self, group: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        self.submit_array(group)
    }
}

impl Launcher for SbatchLauncher {
    fn name(&self) -> &'static str {
        "sbatch"
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
        let Some(listing) = self.query_queue() else {
            return ended;
        };
        self.backoff = Backoff::default();
        let gone = self.left_queue(&listing);
        if !gone.is_empty() {
            ended.extend(self.resolve(gone));
        }
        ended
    }

    fn cancel(&mut self, worker_ids: &[u64]) {
        let cancelled: Vec<(u64, Element)> = worker_ids
            .iter()
            .filter_map(|worker| Some((*worker, self.jobs.remove(worker)?)))
            .collect();
        if cancelled.is_empty() {
            return;
        }
        let remaining: BTreeSet<&str> = self.jobs.values().map(|e| e.array.as_str()).collect();
        let ids = scancel_ids(cancelled.iter().map(|(_, element)| element), &remaining);
        self.scancel(&ids);
        for (worker, element) in cancelled {
            self.ended
                .push((worker, element.job_id(), JobEnd::Cancelled));
        }
    }

    fn cancel_all(&mut self) {
        let workers: Vec<u64> = self.jobs.keys().copied().collect();
        self.cancel(&workers);
    }

    fn cancel_earlier_jobs(&mut self, jobs: &[JobId]) -> Vec<JobId> {
        let wanted: BTreeSet<&str> = jobs.iter().map(|job| job.0.as_str()).collect();
        let arrays: BTreeSet<String> = wanted
            .iter()
            .filter_map(|id| Some(squeue::parse_job_id(id)?.0))
            .collect();
        if arrays.is_empty() {
            return Vec::new();
        }
        let arrays: Vec<String> = arrays.into_iter().collect();
        let invocation = Invocation::new(&self.slurm.squeue, squeue_args(&arrays));
        self.calls.squeue += 1;
        let listing = match commands::run(&invocation, self.command_timeout) {
            Ok(stdout) => squeue::parse_squeue(&stdout),
            Err(failure) if invalid_job_id(&failure) => Vec::new(),
            Err(failure) => {
                let message = failure.message();
                tracing::warn!(%message, "squeue failed; the earlier run's jobs are left as they are");
                return Vec::new();
            }
        };
        let live: Vec<String> = live_elements(&listing)
            .filter(|id| wanted.contains(id.as_str()))
            .collect();
        if !live.is_empty() {
            self.scancel(&live);
        }
        live.into_iter().map(JobId).collect()
    }
}

/// `<array>_<index>` of every element a listing shows queued or running.
fn live_elements(listing: &[Record]) -> impl Iterator<Item = String> + '_ {
    listing
        .iter()
        .filter(|record| squeue::job_end(&record.state, None).is_none())
        .flat_map(|record| {
            record
                .indices
                .iter()
                .map(move |index| format!("{}_{index}", record.job))
        })
}

/// Dropping the launcher cancels its jobs (unless told not to), so a
/// driver that returns or unwinds leaves no worker queued.
impl Drop for SbatchLauncher {
    fn drop(&mut self) {
        if self.pacing.cancel_on_drop {
            self.cancel_all();
        }
    }
}

impl Backoff {
    pub(crate) fn waiting(&self) -> bool {
        self.resume_at.is_some_and(|at| Instant::now() < at)
    }

    /// After the n-th failure in a row, waits `interval * 2^(n-1)` (capped
    /// at [`MAX_BACKOFF`]) before the next attempt.
    pub(crate) fn failed(&mut self, interval: Duration) {
        self.failures += 1;
        let factor = 1u32 << (self.failures - 1).min(16);
        let pause = interval.saturating_mul(factor).min(MAX_BACKOFF);
        self.resume_at = Some(Instant::now() + pause);
    }
}

/// `--parsable --export=ALL --array=0-<size-1>[%cap] <script>`.
fn sbatch_args(size: usize, cap: Option<u32>, script: &Path) -> Vec<OsString> {
    let mut array = format!("--array=0-{}", size.saturating_sub(1));
    if let Some(cap) = cap {
        array.push_str(&format!("%{cap}"));
    }
    let args = ["--parsable", "--export=ALL", array.as_str()];
    let mut args: Vec<OsString> = args.iter().map(OsString::from).collect();
    args.push(script.into());
    args
}

/// One line per array element (`--array`), `%i|%A|%T`: `24_3|27|RUNNING`.
fn squeue_args(arrays: &[String]) -> Vec<String> {
    vec![
        "--noheader".into(),
        "--array".into(),
        format!("--jobs={}", arrays.join(",")),
        "--format=%i|%A|%T".into(),
    ]
}

/// `sacct [-c] -X --noheader --parsable2 --format=... --jobs=<ids>`; -X
/// leaves out job steps.
fn sacct_args(jobcomp: bool, ids: &[String]) -> Vec<String> {
    let mut args: Vec<String> = ["-X", "--noheader", "--parsable2"].map(String::from).into();
    if jobcomp {
        args.insert(0, "-c".into());
    }
    args.push("--format=JobID,JobIDRaw,State,ExitCode".into());
    args.push(format!("--jobs={}", ids.join(",")));
    args
}

/// scancel's ids: an array by its id when none of its elements stay
/// tracked, else its cancelled elements one by one (`24_3`).
fn scancel_ids<'a>(
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

/// squeue's and scontrol's answer when none of the ids is known anymore
/// (every job older than MinJobAge): nothing is listed, not an error.
fn invalid_job_id(failure: &Failure) -> bool {
    matches!(failure, Failure::Exited { stderr, .. } if stderr.contains("Invalid job id specified"))
}

/// The error for a failed sbatch: SLURM's message, and whether retrying
/// later could help.
fn submit_error(failure: Failure, sbatch: &Path, request: &WorkerRequest) -> LaunchError {
    match failure {
        Failure::Spawn(source) => LaunchError::Spawn {
            program: sbatch.to_path_buf(),
            working_dir: request.working_dir.clone(),
            source,
        },
        failure => LaunchError::Submit {
            permanent: !failure.is_transient(),
            stderr: failure.message(),
        },
    }
}

#[cfg(test)]
mod tests;
