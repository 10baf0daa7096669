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
//! `Failed{"... left the queue ..."}`: for instance one element of a
//! pending array of several cancelled by its index (`scancel 24_3`), which
//! SLURM forgets at once. With accounting that is said only once the
//! element has stayed unknown for [`accounting_lag::ACCOUNTING_LAG`], as
//! slurmdbd learns of an end a moment after squeue stops listing the job.
//! States: COMPLETED → `Exited{code}`, CANCELLED →
//! `Cancelled`, every other end (FAILED, TIMEOUT, NODE_FAIL,
//! OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, and PREEMPTED, which only ends a
//! job when the partition cancels preempted jobs: requeued ones stay in
//! the queue) → `Failed{reason}` naming the state and exit code. PENDING
//! elements are not reported: they keep their slots. A failed `squeue`
//! reports nothing and makes later polls back off (doubling, up to
//! [`MAX_BACKOFF`](crate::MAX_BACKOFF)): a job is never declared dead because SLURM was busy.
//!
//! `cancel` makes ONE `scancel` call (whole arrays by their id when none of
//! their elements stay) and reports the workers as `Cancelled` at the next
//! poll, whatever SLURM does next (also a job that had ended unseen since
//! the last poll: asking SLURM first would cost a call per cancel). `sbatch` and `scancel` failures that
//! SLURM calls transient are retried after each of the retry delays.

mod accounting_lag;
pub(crate) mod commands;
pub(crate) mod element;
pub(crate) mod script;
pub(crate) mod squeue;
mod steps;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::arrays;
use crate::queue::{ClusterLauncher, Jobs, Queue, QueueJob, ScriptRenderer, TimedCommands};
use crate::retry::{self, CallError};
use crate::site_limits;
use crate::{JobEnd, JobScript, LaunchError, WorkerRequest};
use accounting_lag::UnknownEnds;
use commands::{Failure, Invocation, SlurmCommands};
use element::Element;
use squeue::Record;
use steps::StepProcesses;

pub use commands::COMMANDS as SLURM_COMMANDS;
pub use script::{job_script, BUILTIN_TEMPLATE as BUILTIN_WORKER_TEMPLATE, PLACEHOLDERS};

/// How long one SLURM command may take before it is killed; SLURM's
/// clients themselves give up on an unreachable controller after 10 to
/// 60 s.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

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
pub type SbatchLauncher = ClusterLauncher<Sbatch>;

/// SLURM's commands as a [`Queue`]; see the module doc.
pub struct Sbatch {
    slurm: SlurmCommands,
    command_timeout: Duration,
    /// Where finished jobs are looked up first; learnt from sacct's errors.
    accounting: Accounting,
    calls: SchedulerCalls,
    /// Workers started inside running jobs of several workers.
    steps: StepProcesses,
    /// `MaxArraySize` from `scontrol show config`, read at the first
    /// submission (and again after an array was refused for its size):
    /// `Some(None)` when scontrol did not say.
    max_array_size: Option<Option<usize>>,
    /// Workers that left the queue before slurmdbd knew how they ended.
    unknown_ends: UnknownEnds,
    /// Workers that left a job of several which has ended since, before
    /// slurmdbd knew how their own step ended.
    unknown_steps: UnknownEnds,
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

impl SbatchLauncher {
    /// A launcher using the SLURM commands found on PATH.
    pub fn new() -> Result<Self, LaunchError> {
        Self::with_path(std::env::var_os("PATH"))
    }

    /// A launcher using the SLURM commands found on `path` (a PATH value);
    /// the error names every missing command and the path searched.
    pub fn with_path(path: Option<OsString>) -> Result<Self, LaunchError> {
        Ok(Self::over(Sbatch {
            slurm: SlurmCommands::find(path)?,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            accounting: Accounting::Database,
            calls: SchedulerCalls::default(),
            steps: StepProcesses::default(),
            max_array_size: None,
            unknown_ends: UnknownEnds::default(),
            unknown_steps: UnknownEnds::default(),
        }))
    }

    /// Takes `MaxArraySize` as given instead of asking scontrol, so the
    /// tests' scripted scontrol answers are not shifted by one.
    #[cfg(test)]
    pub(crate) fn with_max_array_size(mut self, size: Option<usize>) -> Self {
        self.queue.max_array_size = Some(size);
        self
    }
}

impl TimedCommands for Sbatch {
    fn set_command_timeout(&mut self, timeout: Duration) {
        self.command_timeout = timeout;
    }
}

impl Queue for Sbatch {
    type Job = Element;
    type Calls = SchedulerCalls;
    const NAME: &'static str = "sbatch";
    /// By its job step.
    const CANCELS_ONE_WORKER_OF_A_JOB: bool = true;
    const JOB_SCRIPT: ScriptRenderer = script::job_script;

    fn calls(&self) -> SchedulerCalls {
        self.calls
    }

    /// One sbatch call.
    fn submit(
        &mut self,
        group: &[WorkerRequest],
        script: JobScript,
        delays: &[Duration],
    ) -> Result<Vec<Element>, LaunchError> {
        let size = group.len() / arrays::per_job(group);
        let array = self.sbatch(&group[0], &script.path, size, delays)?;
        // The last element of an array to start keeps the array's id, so
        // the only element of an array of one is known by it from the start.
        let only = (size == 1).then_some(array.as_str());
        Ok(Element::of_group(&array, group, only))
    }

    /// Workers started inside running jobs end with their srun; workers
    /// that left a job that runs on end with their job step.
    fn ended(
        &mut self,
        jobs: &mut Jobs<Element>,
        left: &BTreeSet<u64>,
    ) -> Result<Vec<(u64, JobEnd)>, String> {
        let mut ended = self.steps.ended();
        let listing = self.squeue(&arrays(jobs.values()))?;
        let left_the_queue = left_queue(jobs, &listing);
        let mut gone = left_the_queue.clone();
        let steps_left = self.steps_left(jobs, left);
        let step_ends = self.step_ends(jobs, &steps_left);
        self.await_step_ends(&steps_left, &step_ends, &mut gone);
        if !gone.is_empty() {
            let resolved = self.resolve(jobs, gone);
            let resolved: Vec<(u64, JobEnd)> = (resolved.into_iter())
                .map(|(worker, end)| (worker, self.own_end(jobs, left, worker, end)))
                .collect();
            self.steps
                .forget(resolved.iter().map(|(worker, _)| *worker));
            ended.extend(resolved);
        }
        ended.extend(step_ends);
        self.cancel_orphaned(jobs, &ended, &left_the_queue);
        Ok(ended)
    }

    fn live(&mut self, jobs: &[Element]) -> Option<Vec<Element>> {
        let listing = self.squeue(&arrays(jobs.iter())).ok()?;
        Some(element::live(&listing, jobs))
    }

    /// One scancel call, retried while SLURM is unreachable (and one
    /// squeue call first for workers cancelled alone in jobs that stay).
    fn cancel(&mut self, jobs: &[Element], staying: &[&Element], delays: &[Duration]) {
        let (whole, alone) = steps::split_cancelled(jobs, staying);
        let mut ids = element::cancel_ids(&whole, staying);
        ids.extend(self.step_ids(&alone));
        let workers = jobs
            .iter()
            .filter_map(|job| Some(job.steps.as_ref()?.worker));
        self.steps.forget(workers.collect::<Vec<_>>());
        if ids.is_empty() {
            return;
        }
        let invocation = Invocation::new(&self.slurm.scancel, &ids);
        let timeout = self.command_timeout;
        let run = || commands::run(&invocation, timeout).map_err(Failure::classified);
        if let Err(failure) = retry::retrying(delays, &mut self.calls.cancels, "scancel", run) {
            tracing::error!(?ids, %failure, "scancel failed; these jobs may still run");
        }
    }

    fn start_beside(
        &mut self,
        request: &WorkerRequest,
        jobs: &Jobs<Element>,
        left: &BTreeSet<u64>,
    ) -> Option<Result<Element, LaunchError>> {
        if request.cluster.workers_per_job() < 2 {
            return None;
        }
        let srun = self.slurm.srun.clone()?;
        let job = steps::job_with_room(&request.task_id, jobs, left)?;
        let raw = match &job.raw {
            Some(raw) => raw.clone(),
            None => self.running_as(job)?,
        };
        Some(self.steps.start_in(&srun, request, job, &raw))
    }

    /// `MaxArraySize` from one `scontrol show config`, read once.
    fn max_array_size(&mut self, _first: &WorkerRequest) -> Option<usize> {
        if self.max_array_size.is_none() {
            let size = read_max_array_size(&self.slurm.scontrol, self.command_timeout);
            tracing::info!(?size, "SLURM's MaxArraySize");
            self.max_array_size = Some(size);
        }
        self.max_array_size.flatten()
    }

    fn array_size_refused(&mut self) {
        self.max_array_size = None;
    }
}

/// What `sbatch --test-only` said of a job script: SLURM's own words,
/// and whether it would accept the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestOnly {
    pub accepted: bool,
    /// SLURM's words ("sbatch: Job 12 to start at ... in partition debug",
    /// "sbatch: error: invalid partition specified: nosuch"), or why
    /// sbatch could not be asked.
    pub says: String,
}

/// Asks `sbatch --test-only` about `script` (a job script file) submitted
/// as an array of `workers` elements (cut to `MaxArraySize`, as a run
/// splits it) with `cap` running at once, from `working_dir`: the
/// submission a run makes, without submitting. sbatch is looked up on
/// `path` (a PATH value).
pub fn sbatch_test_only(
    path: Option<OsString>,
    script: &Path,
    workers: usize,
    cap: Option<u32>,
    working_dir: &Path,
) -> TestOnly {
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let Ok(sbatch) = which::which_in("sbatch", path.as_ref(), &cwd) else {
        let says = "sbatch is not on PATH; nothing was checked".to_owned();
        return TestOnly {
            accepted: false,
            says,
        };
    };
    let max_array = which::which_in("scontrol", path.as_ref(), &cwd)
        .ok()
        .and_then(|scontrol| read_max_array_size(&scontrol, DEFAULT_COMMAND_TIMEOUT));
    let size = arrays_split_len(workers, max_array);
    let mut args = sbatch_args(size, cap, script);
    args[0] = "--test-only".into();
    let invocation = Invocation {
        cwd: Some(working_dir),
        ..Invocation::new(&sbatch, args)
    };
    match commands::run_keeping_stderr(&invocation, DEFAULT_COMMAND_TIMEOUT) {
        // sbatch --test-only answers on stderr, also when it accepts.
        Ok((_, stderr)) => TestOnly {
            accepted: true,
            says: stderr.trim().to_owned(),
        },
        Err(failure) => TestOnly {
            accepted: false,
            says: failure.message(),
        },
    }
}

fn arrays_split_len(workers: usize, max_array: Option<usize>) -> usize {
    crate::arrays::split_len(workers, None, max_array, usize::MAX)
}

/// `MaxArraySize` as `scontrol show config` says it, or `None` when it
/// cannot be asked (the launcher then lets sbatch refuse too large an
/// array, which is a limit too, and halves it).
pub(crate) fn read_max_array_size(scontrol: &Path, timeout: Duration) -> Option<usize> {
    let invocation = Invocation::new(scontrol, ["show", "config"]);
    match commands::run(&invocation, timeout) {
        Ok(stdout) => parse_max_array_size(&stdout),
        Err(failure) => {
            tracing::warn!(%failure, "scontrol show config failed; MaxArraySize unknown");
            None
        }
    }
}

/// The `MaxArraySize = N` line of `scontrol show config`.
pub(crate) fn parse_max_array_size(config: &str) -> Option<usize> {
    site_limits::configured_number(config, site_limits::MAX_ARRAY_SIZE)
}

impl Sbatch {
    /// The raw id of a job not yet seen running by a poll, if one squeue
    /// call shows it running now (a worker in it just connected and left).
    fn running_as(&mut self, job: &Element) -> Option<String> {
        let listing = self.squeue(std::slice::from_ref(&job.array)).ok()?;
        let listed = element::listed(&listing);
        let record = listed.get(&job.key())?;
        (record.state == "RUNNING").then(|| record.raw.clone())
    }

    /// The workers in `left` whose job of several workers runs on, and
    /// whose step's end sacct can tell (with accounting; the jobcomp file
    /// has no steps). Those this launcher started by srun are not among
    /// them: their srun's exit says how they ended.
    fn steps_left(&self, jobs: &Jobs<Element>, left: &BTreeSet<u64>) -> BTreeSet<u64> {
        if self.accounting != Accounting::Database {
            return BTreeSet::new();
        }
        let in_job_of_several =
            |worker: &&u64| jobs.get(worker).is_some_and(|job| job.steps.is_some());
        (left.iter())
            .filter(in_job_of_several)
            .filter(|worker| !self.steps.started_here(**worker))
            .copied()
            .collect()
    }

    /// Cancels the jobs that run on though every worker tracked in them
    /// ended now (by their steps or sruns): nothing would cancel them
    /// later, and a job on a dead node that SLURM requeues would wait in
    /// the queue for ever.
    fn cancel_orphaned(
        &mut self,
        jobs: &Jobs<Element>,
        ended: &[(u64, JobEnd)],
        left_the_queue: &BTreeSet<u64>,
    ) {
        let ended: BTreeSet<u64> = ended.iter().map(|(worker, _)| *worker).collect();
        let orphaned = steps::orphaned_jobs(jobs, &ended, left_the_queue);
        if orphaned.is_empty() {
            return;
        }
        let ids: Vec<String> = orphaned.iter().map(|job| job.job_id().0).collect();
        tracing::info!(?ids, "cancelling jobs whose every worker ended");
        let staying: Vec<&Element> = (jobs.iter())
            .filter(|(worker, _)| !ended.contains(worker))
            .map(|(_, job)| job)
            .collect();
        self.cancel(&orphaned, &staying, &[]);
    }

    /// `worker`'s end, given its job's: a worker that left a job of
    /// several before it ended, whose step's end is not known (no
    /// accounting, or slurmdbd did not say in time), did not end as the
    /// job did: that would say "exited with code 0" of a worker killed.
    fn own_end(
        &self,
        jobs: &Jobs<Element>,
        left: &BTreeSet<u64>,
        worker: u64,
        end: JobEnd,
    ) -> JobEnd {
        let job = &jobs[&worker];
        let step_unknown =
            left.contains(&worker) && job.steps.is_some() && !self.steps.started_here(worker);
        if !step_unknown {
            return end;
        }
        let reason = format!(
            "its job step ended before its job {}, which {end}; SLURM kept no record of how the step ended",
            job.job_id()
        );
        JobEnd::Failed { reason }
    }

    /// The end of a job of several workers is not the end of a worker
    /// that left it earlier: such a worker, `gone` with its job, waits
    /// for its step's end (slurmdbd may lag) rather than take the job's,
    /// for as long as [`accounting_lag::ACCOUNTING_LAG`]. Those whose
    /// step's end is known leave `gone`.
    fn await_step_ends(
        &mut self,
        steps_left: &BTreeSet<u64>,
        step_ends: &[(u64, JobEnd)],
        gone: &mut BTreeSet<u64>,
    ) {
        let known: BTreeSet<u64> = step_ends.iter().map(|(worker, _)| *worker).collect();
        gone.retain(|worker| !known.contains(worker));
        let awaited: BTreeSet<u64> = gone.intersection(steps_left).copied().collect();
        self.unknown_steps
            .retain(|worker| awaited.contains(&worker));
        let now = Instant::now();
        for worker in awaited {
            if !self.unknown_steps.given_up(worker, now) {
                gone.remove(&worker);
            }
        }
    }

    /// How the steps of `workers` ended, from one sacct call about their
    /// jobs (by raw id, or as `<array>_<index>` when no poll saw them
    /// running); a step sacct does not show as ended yet is asked about
    /// at the next poll.
    fn step_ends(&mut self, jobs: &Jobs<Element>, workers: &BTreeSet<u64>) -> Vec<(u64, JobEnd)> {
        let ids: BTreeSet<String> = (workers.iter())
            .filter_map(|worker| jobs.get(worker))
            .map(|job| job.raw.clone().unwrap_or_else(|| job.job_id().0))
            .collect();
        if ids.is_empty() {
            return Vec::new();
        }
        self.calls.sacct += 1;
        let ids: Vec<String> = ids.into_iter().collect();
        let invocation = Invocation::new(&self.slurm.sacct, steps::step_accounting_args(&ids));
        match commands::run(&invocation, self.command_timeout) {
            Ok(listing) => steps::step_ends(&listing, workers),
            Err(failure) => {
                let message = failure.message();
                tracing::warn!(%message, "cannot ask sacct how job steps ended; asked again later");
                Vec::new()
            }
        }
    }

    /// The step ids of workers cancelled alone, by one squeue call about
    /// their jobs; none when it fails (their jobs end with the run).
    fn step_ids(&mut self, alone: &[&Element]) -> Vec<String> {
        let jobs: BTreeSet<String> = alone.iter().filter_map(|job| job.raw.clone()).collect();
        if jobs.is_empty() {
            return Vec::new();
        }
        let workers = alone
            .iter()
            .filter_map(|job| Some(job.steps.as_ref()?.worker));
        let args = steps::step_listing_args(&jobs.into_iter().collect::<Vec<_>>());
        self.calls.squeue += 1;
        let invocation = Invocation::new(&self.slurm.squeue, args);
        match commands::run(&invocation, self.command_timeout) {
            Ok(listing) => steps::step_ids(&listing, &workers.collect()),
            Err(failure) => {
                let message = failure.message();
                tracing::warn!(%message, "cannot list job steps; the workers' steps are left");
                Vec::new()
            }
        }
    }

    /// Runs sbatch for `size` elements of `script`, with the request's
    /// environment and working directory; returns the array job id.
    fn sbatch(
        &mut self,
        first: &WorkerRequest,
        script: &Path,
        size: usize,
        delays: &[Duration],
    ) -> Result<String, LaunchError> {
        let args = sbatch_args(size, first.cluster.max_array_parallel, script);
        let invocation = Invocation {
            env: &first.env,
            cwd: Some(&first.working_dir),
            ..Invocation::new(&self.slurm.sbatch, args)
        };
        let timeout = self.command_timeout;
        let run = || commands::run(&invocation, timeout).map_err(Failure::classified);
        let stdout = retry::retrying(delays, &mut self.calls.submissions, "sbatch", run)
            .map_err(|failure| submit_error(failure, &self.slurm.sbatch, first))?;
        squeue::parse_sbatch(&stdout).ok_or(LaunchError::UnexpectedOutput {
            command: "sbatch --parsable",
            output: stdout,
        })
    }

    /// The squeue listing of `arrays`, or squeue's message when it failed.
    fn squeue(&mut self, arrays: &[String]) -> Result<Vec<Record>, String> {
        self.calls.squeue += 1;
        let invocation = Invocation::new(&self.slurm.squeue, squeue_args(arrays));
        match commands::run(&invocation, self.command_timeout) {
            Ok(stdout) => Ok(squeue::parse_squeue(&stdout)),
            Err(failure) if invalid_job_id(&failure) => Ok(Vec::new()),
            Err(failure) => Err(format!("squeue failed: {}", failure.message())),
        }
    }

    /// How the workers that left the queue ended: sacct first, then
    /// scontrol, then "unknown". Workers scontrol still shows active, that
    /// it could not be asked about, or that slurmdbd may not know yet,
    /// stay for the next poll.
    fn resolve(&mut self, jobs: &Jobs<Element>, mut gone: BTreeSet<u64>) -> Vec<(u64, JobEnd)> {
        self.unknown_ends.retain(|worker| gone.contains(&worker));
        let mut ends = BTreeMap::new();
        let records = self.ask_sacct(jobs, &gone);
        match_ends(jobs, &records, &mut gone, &mut ends);
        if !gone.is_empty() {
            let Some(records) = self.ask_scontrol(jobs, &gone) else {
                return ends.into_iter().collect();
            };
            let active = match_ends(jobs, &records, &mut gone, &mut ends);
            gone.retain(|worker| !active.contains(worker));
        }
        let now = Instant::now();
        let lagging = self.accounting == Accounting::Database;
        for worker in gone {
            if lagging && !self.unknown_ends.given_up(worker, now) {
                continue;
            }
            let reason = format!(
                "job {} left the queue; neither sacct nor scontrol know how it ended",
                jobs[&worker].job_id()
            );
            ends.insert(worker, JobEnd::Failed { reason });
        }
        ends.into_iter().collect()
    }

    /// One sacct call about `workers` (two the first time, when it learns
    /// that accounting is disabled); no records when it cannot tell.
    fn ask_sacct(&mut self, jobs: &Jobs<Element>, workers: &BTreeSet<u64>) -> Vec<Record> {
        loop {
            let Some(args) = self.sacct_args(jobs, workers) else {
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
    fn sacct_args(&self, jobs: &Jobs<Element>, workers: &BTreeSet<u64>) -> Option<Vec<String>> {
        let elements = workers.iter().filter_map(|worker| jobs.get(worker));
        let ids = match self.accounting {
            Accounting::Database => arrays(elements),
            Accounting::JobComp => elements.filter_map(|e| e.raw.clone()).collect(),
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
    fn ask_scontrol(
        &mut self,
        jobs: &Jobs<Element>,
        workers: &BTreeSet<u64>,
    ) -> Option<Vec<Record>> {
        let arrays = arrays(workers.iter().filter_map(|worker| jobs.get(worker)));
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
}

/// Learns raw ids from the listing and returns the workers it no longer
/// lists (or lists in a final state): those that left the queue.
fn left_queue(jobs: &mut Jobs<Element>, listing: &[Record]) -> BTreeSet<u64> {
    let listed = element::listed(listing);
    let mut gone = BTreeSet::new();
    for (worker, element) in jobs.iter_mut() {
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

/// Moves the ends found in `records` for workers in `gone` into `ends`;
/// returns the workers the records show still active.
fn match_ends(
    jobs: &Jobs<Element>,
    records: &[Record],
    gone: &mut BTreeSet<u64>,
    ends: &mut BTreeMap<u64, JobEnd>,
) -> BTreeSet<u64> {
    let mut active = BTreeSet::new();
    for record in records {
        for worker in workers_of(jobs, record, gone) {
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

/// The workers among `candidates` a record is about: by array index, or
/// (jobcomp lines) by raw job id.
fn workers_of(jobs: &Jobs<Element>, record: &Record, candidates: &BTreeSet<u64>) -> Vec<u64> {
    let matches = |element: &Element| match record.indices.is_empty() {
        true => element.raw.as_deref() == Some(record.raw.as_str()),
        false => element.array == record.job && record.indices.contains(&element.index),
    };
    candidates
        .iter()
        .filter(|worker| matches(&jobs[*worker]))
        .copied()
        .collect()
}

/// The distinct array job ids of `elements`, sorted.
fn arrays<'a>(elements: impl Iterator<Item = &'a Element>) -> Vec<String> {
    let arrays: BTreeSet<&str> = elements.map(|element| element.array.as_str()).collect();
    arrays.into_iter().map(str::to_owned).collect()
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

/// squeue's and scontrol's answer when none of the ids is known anymore
/// (every job older than MinJobAge): nothing is listed, not an error.
fn invalid_job_id(failure: &Failure) -> bool {
    matches!(failure, Failure::Exited { stderr, .. } if stderr.contains("Invalid job id specified"))
}

/// The error for a failed sbatch: SLURM's message, and whether retrying
/// later could help.
fn submit_error(
    failure: CallError<Failure>,
    sbatch: &Path,
    request: &WorkerRequest,
) -> LaunchError {
    match failure {
        CallError::Permanent(Failure::Spawn(source)) => LaunchError::Spawn {
            program: sbatch.to_path_buf(),
            working_dir: request.working_dir.clone(),
            source,
        },
        CallError::Permanent(failure) if site_limits::slurm_limit(&failure.message()).is_some() => {
            let message = failure.message();
            let limit = site_limits::slurm_limit(&message).expect("matched above");
            LaunchError::Waiting { limit, message }
        }
        failure => LaunchError::Submit {
            permanent: matches!(failure, CallError::Permanent(_)),
            stderr: failure.to_string(),
        },
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod config_tests {
    #[test]
    fn max_array_size_is_read_from_scontrol_show_config() {
        // Lines of SLURM 22.05's `scontrol show config`.
        let config = "Configuration data as of 2026-12-05T17:20:01\n\
                      MailProg                = /bin/mail\n\
                      MaxArraySize            = 8\n\
                      MaxJobCount             = 10000\n";
        assert_eq!(super::parse_max_array_size(config), Some(8));
        assert_eq!(super::parse_max_array_size("MaxJobCount = 10000"), None);
    }
}
