//! The bsub backend: workers are elements of LSF job arrays.
//!
//! `start_many` renders one job script for a group of workers (consecutive
//! ids of one task, see `slurm-templates/worker.bsub`) and submits it the
//! way LSF users do, ONE `bsub < script` call whose `#BSUB -J
//! "daisy-<task>[1-N]%cap"` makes it an array of N elements. LSF numbers
//! elements from 1: element `i` (`LSB_JOBINDEX`) is worker `first + i - 1`
//! (daisy-worker adds the index to the id in its context itself) and its
//! [`JobId`] is `<job id>[i]`, LSF's own name for it. A single `start` is
//! an array of one, so every job id has that shape.
//!
//! The run token never appears in the script, the job name or a command
//! line: the first request's environment (with `DAISY_CONTEXT`) is given
//! to the `bsub` process, and LSF hands the submission environment to the
//! job (its default). The script is written to
//! `<log_dir>/worker-<first>-<last>.bsub` and that file is bsub's stdin.
//! Job output goes to `<log_dir>/worker-<job id>_<index>.out` and `.err`.
//!
//! Job state is the safety net of DESIGN.md: `poll_ended` makes ONE
//! `bjobs -a -noheader -o "jobid jobindex stat exit_code" <job ids>` call
//! for all of the run's arrays (see the `bjobs` module for why each part).
//! PEND and PSUSP (held) elements keep their slots; RUN, USUSP and SSUSP
//! are running; DONE → `Exited{0}`, EXIT → `Exited{exit code}` (or
//! `Failed` when LSF recorded none), ZOMBI and UNKWN → `Failed`; a job
//! LSF says "is not found" (finished longer ago than its CLEAN_PERIOD)
//! ended in a way nobody can tell any more: `Failed`. Each end is
//! reported once. A bjobs that fails or says LSF is down reports nothing:
//! a job is never declared dead because LSF was busy.
//!
//! `cancel` makes ONE `bkill` call with every element (`12345[1-3,7]`) and
//! reports the workers as `Cancelled` at the next poll. bsub and bkill
//! failures LSF calls transient ("LSF is down", "batch system daemon not
//! responding ... still trying") are retried after each of the retry
//! delays; refusals ("No such queue") are `LaunchError::Submit` with
//! `permanent` and LSF's message.

mod bjobs;
mod commands;
mod replies;
mod script;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::time::Duration;

use crate::arrays::{self, ArrayBackend};
use crate::pacing::{Paced, Pacing};
use crate::{JobEnd, JobId, LaunchError, Launcher, WorkerRequest};
use bjobs::{Element, ElementState, StatesReport};
use commands::{Attempt, Invocation, LsfCommands, Output};

pub use commands::COMMANDS as LSF_COMMANDS;
pub use script::{
    job_script, BUILTIN_TEMPLATE as BUILTIN_BSUB_TEMPLATE, PLACEHOLDERS as BSUB_PLACEHOLDERS,
};

/// How many LSF calls of each kind the launcher made, retries included,
/// so tests (and curious users) can see that N workers cost one
/// submission and a poll one status call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LsfCalls {
    /// `bsub` runs.
    pub submissions: u64,
    /// `bjobs` runs: one per poll with jobs to ask about.
    pub status: u64,
    /// `bkill` runs.
    pub cancels: u64,
}

/// Starts workers as LSF job-array elements; see the module doc.
pub struct BsubLauncher {
    lsf: LsfCommands,
    /// Submitted workers not yet reported ended, by worker id.
    jobs: BTreeMap<u64, Element>,
    /// Ends recorded by `cancel`, handed out by the next `poll_ended`.
    ended: Vec<(u64, JobId, JobEnd)>,
    pacing: Pacing,
    command_timeout: Duration,
    calls: LsfCalls,
}

impl BsubLauncher {
    /// A launcher using the LSF commands found on PATH.
    pub fn new() -> Result<Self, LaunchError> {
        Self::with_path(std::env::var_os("PATH"))
    }

    /// A launcher using the LSF commands found on `path` (a PATH value);
    /// the error names every missing command and the path searched.
    pub fn with_path(path: Option<OsString>) -> Result<Self, LaunchError> {
        Ok(Self {
            lsf: LsfCommands::find(path)?,
            jobs: BTreeMap::new(),
            ended: Vec::new(),
            pacing: Pacing::default(),
            command_timeout: crate::DEFAULT_COMMAND_TIMEOUT,
            calls: LsfCalls::default(),
        })
    }

    /// Kills an LSF command running longer than `timeout` (LSF's commands
    /// keep "still trying" forever while mbatchd is unreachable).
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// The LSF calls made so far.
    pub fn calls(&self) -> LsfCalls {
        self.calls
    }

    /// One result per request of a group: its job id, or the group's error.
    fn submit_array(&mut self, group: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        match self.submit_group(group) {
            Ok(job) => (1..=group.len() as u32)
                .map(|index| Ok(JobId(Element { job, index }.to_string())))
                .collect(),
            Err(error) => {
                tracing::warn!(task = %group[0].task_id, %error, "cannot submit workers");
                let copies: Vec<_> = (1..group.len())
                    .map(|_| Err(arrays::copy_error(&error)))
                    .collect();
                std::iter::once(Err(error)).chain(copies).collect()
            }
        }
    }

    /// Submits one group of workers as one array and records its elements.
    fn submit_group(&mut self, group: &[WorkerRequest]) -> Result<u64, LaunchError> {
        let first = &group[0];
        let script = script::job_script(group)?;
        script.write()?;
        let job = self.bsub(first, &script.path)?;
        for (request, index) in group.iter().zip(1..) {
            self.jobs.insert(request.worker_id, Element { job, index });
        }
        let (task, workers) = (&first.task_id, group.len());
        tracing::info!(%task, first = first.worker_id, workers, job, "submitted worker array");
        Ok(job)
    }

    /// Runs `bsub < script` with the request's environment and working
    /// directory, retried while LSF is unreachable; returns the job id.
    fn bsub(&mut self, first: &WorkerRequest, script: &Path) -> Result<u64, LaunchError> {
        let call = Invocation {
            stdin: Some(script),
            env: &first.env,
            working_dir: Some(&first.working_dir),
            ..Invocation::default()
        };
        let (program, timeout) = (&self.lsf.bsub, self.command_timeout);
        let (calls, mut spawn_error) = (&mut self.calls.submissions, None);
        let result = commands::with_retries(&self.pacing.retry_delays, || {
            *calls += 1;
            commands::run(program, &call, timeout)
                .map_or_else(|e| spawn_failed(e, &mut spawn_error), bsub_attempt)
        });
        if let Some(source) = spawn_error {
            return Err(LaunchError::Spawn {
                program: program.clone(),
                working_dir: first.working_dir.clone(),
                source,
            });
        }
        match result {
            Ok(Ok(job)) => Ok(job),
            Ok(Err(output)) => Err(LaunchError::UnexpectedOutput {
                command: "bsub",
                output,
            }),
            Err(failure) => Err(LaunchError::Submit {
                stderr: failure.message,
                permanent: failure.permanent,
            }),
        }
    }

    /// One bjobs call about every tracked array, or `None` when it gave no
    /// usable answer (LSF down, the command killed or missing).
    fn query_states(&mut self) -> Option<StatesReport> {
        let jobs: BTreeSet<u64> = self.jobs.values().map(|element| element.job).collect();
        self.bjobs(&jobs)
    }

    /// One bjobs call about `jobs`, as [`Self::query_states`].
    fn bjobs(&mut self, jobs: &BTreeSet<u64>) -> Option<StatesReport> {
        let mut args: Vec<String> = ["-a", "-noheader", "-o", bjobs::BJOBS_FORMAT]
            .map(String::from)
            .into();
        args.extend(jobs.iter().map(u64::to_string));
        self.calls.status += 1;
        let call = Invocation {
            args,
            ..Invocation::default()
        };
        let output = match commands::run(&self.lsf.bjobs, &call, self.command_timeout) {
            Ok(output) => output,
            Err(error) => {
                tracing::warn!(%error, "cannot run bjobs; no job is declared ended this time");
                return None;
            }
        };
        usable_report(&output)
    }

    /// Removes the workers whose elements the report shows ended (or LSF
    /// forgot) and returns their reports.
    fn take_ended(&mut self, report: &StatesReport) -> Vec<(u64, JobId, JobEnd)> {
        let states: BTreeMap<&Element, &ElementState> = report
            .elements
            .iter()
            .map(|(element, state)| (element, state))
            .collect();
        let ends: Vec<(u64, JobEnd)> = self
            .jobs
            .iter()
            .filter_map(|(worker, element)| Some((*worker, end_of(element, &states, report)?)))
            .collect();
        ends.into_iter()
            .filter_map(|(worker, end)| {
                let element = self.jobs.remove(&worker)?;
                Some((worker, JobId(element.to_string()), end))
            })
            .collect()
    }

    /// One bkill call for `elements`, retried while LSF is unreachable;
    /// jobs that already finished are no failure.
    fn bkill(&mut self, elements: &BTreeSet<Element>) {
        let call = Invocation {
            args: bjobs::job_arguments(elements),
            ..Invocation::default()
        };
        let (program, timeout, calls) = (
            &self.lsf.bkill,
            self.command_timeout,
            &mut self.calls.cancels,
        );
        let result = commands::with_retries(&self.pacing.retry_delays, || {
            *calls += 1;
            match commands::run(program, &call, timeout) {
                Ok(output) => bkill_attempt(output),
                Err(error) => {
                    Attempt::Permanent(format!("cannot run {}: {error}", program.display()))
                }
            }
        });
        if let Err(failure) = result {
            let (ids, message) = (&call.args, failure.message);
            tracing::error!(?ids, %message, "bkill failed; these jobs may still run");
        }
    }
}

impl Paced for BsubLauncher {
    fn pacing_mut(&mut self) -> &mut Pacing {
        &mut self.pacing
    }
}

impl ArrayBackend for BsubLauncher {
    fn tracks(&self, worker_id: u64) -> bool {
        self.jobs.contains_key(&worker_id)
    }

    fn start_group(&mut self, group: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        self.submit_array(group)
    }
}

impl Launcher for BsubLauncher {
    fn name(&self) -> &'static str {
        "bsub"
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
        if self.jobs.is_empty() {
            return ended;
        }
        if let Some(report) = self.query_states() {
            ended.extend(self.take_ended(&report));
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
        self.bkill(&cancelled.iter().map(|(_, element)| *element).collect());
        for (worker, element) in cancelled {
            self.ended
                .push((worker, JobId(element.to_string()), JobEnd::Cancelled));
        }
    }

    fn cancel_all(&mut self) {
        let workers: Vec<u64> = self.jobs.keys().copied().collect();
        self.cancel(&workers);
    }

    fn cancel_earlier_jobs(&mut self, jobs: &[JobId]) -> Vec<JobId> {
        let wanted: BTreeSet<Element> = jobs.iter().filter_map(|j| Element::parse(&j.0)).collect();
        let arrays: BTreeSet<u64> = wanted.iter().map(|element| element.job).collect();
        if arrays.is_empty() {
            return Vec::new();
        }
        let Some(report) = self.bjobs(&arrays) else {
            return Vec::new();
        };
        let live: BTreeSet<Element> = report
            .elements
            .iter()
            .filter(|(element, state)| {
                wanted.contains(element) && !matches!(state, ElementState::Ended(_))
            })
            .map(|(element, _)| *element)
            .collect();
        if !live.is_empty() {
            self.bkill(&live);
        }
        live.iter()
            .map(|element| JobId(element.to_string()))
            .collect()
    }
}

/// Dropping the launcher kills its jobs (unless told not to), so a driver
/// that returns or unwinds leaves no worker queued.
impl Drop for BsubLauncher {
    fn drop(&mut self) {
        if self.pacing.cancel_on_drop {
            self.cancel_all();
        }
    }
}

/// A bsub run's outcome: the job id, bsub's stdout when it succeeded
/// without the submission line, or LSF's message.
fn bsub_attempt(output: Output) -> Attempt<Result<u64, String>> {
    if output.succeeded() {
        let submitted = replies::parse_submitted(&output.stdout);
        return Attempt::Done(submitted.map(|s| s.job).ok_or(output.stdout));
    }
    match output.is_transient() {
        true => Attempt::Transient(output.message()),
        false => Attempt::Permanent(output.message()),
    }
}

/// bsub could not even be started: kept for a `Spawn` error, not retried.
fn spawn_failed<T>(error: io::Error, slot: &mut Option<io::Error>) -> Attempt<T> {
    let message = error.to_string();
    *slot = Some(error);
    Attempt::Permanent(message)
}

/// A bkill run's outcome; "already finished" and "no matching job" lines
/// (exit status 255) mean there was nothing left to kill.
fn bkill_attempt(output: Output) -> Attempt<()> {
    if output.is_transient() {
        return Attempt::Transient(output.message());
    }
    let problems = replies::bkill_problems(&output.stderr);
    let said_why = !output.stderr.trim().is_empty();
    match (problems.is_empty(), output.succeeded() || said_why) {
        (true, true) => Attempt::Done(()),
        (true, false) => Attempt::Permanent(output.message()),
        (false, _) => Attempt::Permanent(problems.join("; ")),
    }
}

/// The report, unless bjobs failed without telling anything about the
/// jobs (then no job may be declared ended on its word).
fn usable_report(output: &Output) -> Option<StatesReport> {
    let report = bjobs::parse_states(&output.stdout, &output.stderr);
    let told = !report.elements.is_empty() || !report.not_found.is_empty();
    if output.is_transient() || !(output.succeeded() || told) {
        let message = output.message();
        tracing::warn!(%message, "bjobs failed; no job is declared ended this time");
        return None;
    }
    if !report.unreadable.is_empty() {
        tracing::warn!(lines = ?report.unreadable, "bjobs printed lines that are not job states");
    }
    Some(report)
}

/// How `element` ended, if the report says it did: its final state, or
/// LSF not knowing it (or its whole array) any more.
fn end_of(
    element: &Element,
    states: &BTreeMap<&Element, &ElementState>,
    report: &StatesReport,
) -> Option<JobEnd> {
    match states.get(element) {
        Some(ElementState::Ended(end)) => Some(end.clone()),
        Some(_) => None,
        None => {
            let array = Element {
                job: element.job,
                index: 0,
            };
            let forgotten = report.not_found.contains(element) || report.not_found.contains(&array);
            forgotten.then(|| JobEnd::Failed {
                reason: format!(
                    "LSF no longer knows job {element} (it ended longer ago than LSF keeps \
                     finished jobs); how it ended is unknown"
                ),
            })
        }
    }
}

#[cfg(test)]
mod tests;
