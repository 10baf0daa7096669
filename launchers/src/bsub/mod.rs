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
//! reported once. A bjobs that fails or says LSF is down reports nothing
//! and makes later polls back off (doubling, up to
//! [`MAX_BACKOFF`](crate::MAX_BACKOFF)): a job is never declared dead
//! because LSF was busy.
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
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::arrays;
use crate::queue::{ClusterLauncher, Jobs, Queue, ScriptRenderer, TimedCommands};
use crate::retry::{self, CallError};
use crate::site_limits;
use crate::{JobEnd, JobScript, LaunchError, WorkerRequest};
use bjobs::{Element, ElementState, StatesReport};
use commands::{Invocation, LsfCommands, Output};

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
pub type BsubLauncher = ClusterLauncher<Bsub>;

/// LSF's commands as a [`Queue`]; see the module doc.
pub struct Bsub {
    lsf: LsfCommands,
    command_timeout: Duration,
    calls: LsfCalls,
    /// `MAX_JOB_ARRAY_SIZE` from `bparams -a`, read at the first
    /// submission (and again after an array was refused for its size):
    /// `Some(None)` when bparams did not say.
    max_array_size: Option<Option<usize>>,
}

/// Why bsub will not submit, whatever the retries.
#[derive(Debug)]
enum Refusal {
    /// bsub could not be started at all.
    Spawn(io::Error),
    /// LSF refused the job; its message.
    Lsf(String),
    /// bsub succeeded without printing a job id; its stdout.
    NoJobId(String),
}

impl BsubLauncher {
    /// A launcher using the LSF commands found on PATH.
    pub fn new() -> Result<Self, LaunchError> {
        Self::with_path(std::env::var_os("PATH"))
    }

    /// A launcher using the LSF commands found on `path` (a PATH value);
    /// the error names every missing command and the path searched.
    pub fn with_path(path: Option<OsString>) -> Result<Self, LaunchError> {
        Ok(Self::over(Bsub {
            lsf: LsfCommands::find(path)?,
            command_timeout: crate::DEFAULT_COMMAND_TIMEOUT,
            calls: LsfCalls::default(),
            max_array_size: None,
        }))
    }
}

/// LSF's commands keep "still trying" forever while mbatchd is
/// unreachable, so the timeout is what ends them.
impl TimedCommands for Bsub {
    fn set_command_timeout(&mut self, timeout: Duration) {
        self.command_timeout = timeout;
    }
}

impl Queue for Bsub {
    type Job = Element;
    type Calls = LsfCalls;
    const NAME: &'static str = "bsub";
    const JOB_SCRIPT: ScriptRenderer = script::job_script;

    fn calls(&self) -> LsfCalls {
        self.calls
    }

    /// One `bsub < script`.
    fn submit(
        &mut self,
        group: &[WorkerRequest],
        script: JobScript,
        delays: &[Duration],
    ) -> Result<Vec<Element>, LaunchError> {
        let job = self.bsub(&group[0], &script.path, delays)?;
        let per_job = arrays::per_job(group);
        let element = |place: usize| Element {
            job,
            index: (place / per_job) as u32 + 1,
        };
        Ok((0..group.len()).map(element).collect())
    }

    /// `MAX_JOB_ARRAY_SIZE` from one `bparams -a`, read once, in the
    /// submission's environment (which names the cluster, `LSF_ENVDIR`).
    fn max_array_size(&mut self, first: &WorkerRequest) -> Option<usize> {
        if self.max_array_size.is_none() {
            let size = self.read_max_array_size(first);
            tracing::info!(?size, "LSF's MAX_JOB_ARRAY_SIZE");
            self.max_array_size = Some(size);
        }
        self.max_array_size.flatten()
    }

    fn array_size_refused(&mut self) {
        self.max_array_size = None;
    }

    /// One bjobs call about every tracked array.
    fn ended(
        &mut self,
        jobs: &mut Jobs<Element>,
        _left: &BTreeSet<u64>,
    ) -> Result<Vec<(u64, JobEnd)>, String> {
        let report = self.bjobs(jobs.values())?;
        let states = report
            .elements
            .iter()
            .map(|(element, state)| (element, state));
        let states: BTreeMap<&Element, &ElementState> = states.collect();
        let end = |element| end_of(element, &states, &report);
        let ends = jobs
            .iter()
            .filter_map(|(worker, element)| Some((*worker, end(element)?)));
        Ok(ends.collect())
    }

    fn live(&mut self, jobs: &[Element]) -> Option<Vec<Element>> {
        let report = self.bjobs(jobs.iter()).ok()?;
        let live = |element: &&Element| {
            let listed = report
                .elements
                .iter()
                .find(|(listed, _)| listed == *element);
            listed.is_some_and(|(_, state)| !matches!(state, ElementState::Ended(_)))
        };
        Some(jobs.iter().filter(live).copied().collect())
    }

    /// One bkill call for every element, retried while LSF is
    /// unreachable; jobs that already finished are no failure. LSF's
    /// index lists make arrays cheap to name, so `staying` does not matter.
    fn cancel(&mut self, jobs: &[Element], _staying: &[&Element], delays: &[Duration]) {
        let call = Invocation {
            args: bjobs::job_arguments(&jobs.iter().copied().collect()),
            ..Invocation::default()
        };
        let (program, timeout) = (&self.lsf.bkill, self.command_timeout);
        let attempt = || match commands::run(program, &call, timeout) {
            Ok(output) => bkill_reply(output),
            Err(error) => Err(CallError::Permanent(format!(
                "cannot run {}: {error}",
                program.display()
            ))),
        };
        if let Err(failure) = retry::retrying(delays, &mut self.calls.cancels, "bkill", attempt) {
            let ids = &call.args;
            tracing::error!(?ids, %failure, "bkill failed; these jobs may still run");
        }
    }
}

impl Bsub {
    /// Runs `bsub < script` with the request's environment and working
    /// directory, retried while LSF is unreachable; returns the job id.
    fn bsub(
        &mut self,
        first: &WorkerRequest,
        script: &Path,
        delays: &[Duration],
    ) -> Result<u64, LaunchError> {
        // bsub retries a pending-job threshold by itself, forever, unless
        // LSB_NTRIES says otherwise: one try, so the launcher waits
        // instead of blocking its thread (a user's own setting stays).
        // It also makes bsub give up at once on an mbatchd that does not
        // answer; that failure is transient, retried after the delays.
        let mut env = first.env.clone();
        if std::env::var_os("LSB_NTRIES").is_none() && !env.iter().any(|(n, _)| n == "LSB_NTRIES") {
            env.push(("LSB_NTRIES".into(), "1".into()));
        }
        let call = Invocation {
            stdin: Some(script),
            env: &env,
            working_dir: Some(&first.working_dir),
            ..Invocation::default()
        };
        let (program, timeout) = (&self.lsf.bsub, self.command_timeout);
        let attempt = || match commands::run(program, &call, timeout) {
            Ok(output) => bsub_reply(output),
            Err(source) => Err(CallError::Permanent(Refusal::Spawn(source))),
        };
        retry::retrying(delays, &mut self.calls.submissions, "bsub", attempt)
            .map_err(|failure| submit_error(failure, program, first))
    }

    /// One bjobs call about the arrays of `elements`, or why it gave no
    /// usable answer (LSF down, the command killed or missing).
    fn bjobs<'a>(
        &mut self,
        elements: impl Iterator<Item = &'a Element>,
    ) -> Result<StatesReport, String> {
        let jobs: BTreeSet<u64> = elements.map(|element| element.job).collect();
        let mut args: Vec<String> = ["-a", "-noheader", "-o", bjobs::BJOBS_FORMAT]
            .map(String::from)
            .into();
        args.extend(jobs.iter().map(u64::to_string));
        self.calls.status += 1;
        let call = Invocation {
            args,
            ..Invocation::default()
        };
        match commands::run(&self.lsf.bjobs, &call, self.command_timeout) {
            Ok(output) => usable_report(&output),
            Err(error) => Err(format!("cannot run bjobs: {error}")),
        }
    }

    /// `MAX_JOB_ARRAY_SIZE` as `bparams -a` says it, or `None` without
    /// bparams or an answer.
    fn read_max_array_size(&self, first: &WorkerRequest) -> Option<usize> {
        let bparams = self.lsf.bparams.as_ref()?;
        let call = Invocation {
            args: vec!["-a".into()],
            env: &first.env,
            ..Invocation::default()
        };
        match commands::run(bparams, &call, self.command_timeout) {
            Ok(output) if output.succeeded() => {
                site_limits::configured_number(&output.stdout, site_limits::LSF_MAX_ARRAY_SIZE)
            }
            Ok(output) => {
                let message = output.message();
                tracing::warn!(%message, "bparams -a failed; MAX_JOB_ARRAY_SIZE unknown");
                None
            }
            Err(error) => {
                tracing::warn!(%error, "cannot run bparams; MAX_JOB_ARRAY_SIZE unknown");
                None
            }
        }
    }
}

/// A bsub run's outcome: the job id, or why there is none.
fn bsub_reply(output: Output) -> Result<u64, CallError<Refusal>> {
    if output.succeeded() {
        let submitted = replies::parse_submitted(&output.stdout);
        let no_job_id = || CallError::Permanent(Refusal::NoJobId(output.stdout.clone()));
        return submitted.map(|s| s.job).ok_or_else(no_job_id);
    }
    match output.is_transient() {
        true => Err(CallError::Transient(output.message())),
        false => Err(CallError::Permanent(Refusal::Lsf(output.message()))),
    }
}

/// The error for a failed bsub: LSF's message, and whether retrying later
/// could help.
fn submit_error(failure: CallError<Refusal>, bsub: &Path, first: &WorkerRequest) -> LaunchError {
    match failure {
        CallError::Permanent(Refusal::Spawn(source)) => LaunchError::Spawn {
            program: PathBuf::from(bsub),
            working_dir: first.working_dir.clone(),
            source,
        },
        CallError::Permanent(Refusal::NoJobId(output)) => LaunchError::UnexpectedOutput {
            command: "bsub",
            output,
        },
        CallError::Permanent(Refusal::Lsf(stderr)) => match site_limits::lsf_limit(&stderr) {
            Some(limit) => LaunchError::Waiting {
                limit,
                message: stderr,
            },
            None => LaunchError::Submit {
                stderr,
                permanent: true,
            },
        },
        CallError::Transient(stderr) => LaunchError::Submit {
            stderr,
            permanent: false,
        },
    }
}

/// A bkill run's outcome; "already finished" and "no matching job" lines
/// (exit status 255) mean there was nothing left to kill.
fn bkill_reply(output: Output) -> Result<(), CallError<String>> {
    if output.is_transient() {
        return Err(CallError::Transient(output.message()));
    }
    let problems = replies::bkill_problems(&output.stderr);
    let said_why = !output.stderr.trim().is_empty();
    match (problems.is_empty(), output.succeeded() || said_why) {
        (true, true) => Ok(()),
        (true, false) => Err(CallError::Permanent(output.message())),
        (false, _) => Err(CallError::Permanent(problems.join("; "))),
    }
}

/// The report, unless bjobs failed without telling anything about the
/// jobs (then no job may be declared ended on its word).
fn usable_report(output: &Output) -> Result<StatesReport, String> {
    let report = bjobs::parse_states(&output.stdout, &output.stderr);
    let told = !report.elements.is_empty() || !report.not_found.is_empty();
    if output.is_transient() || !(output.succeeded() || told) {
        return Err(format!("bjobs failed: {}", output.message()));
    }
    if !report.unreadable.is_empty() {
        tracing::warn!(lines = ?report.unreadable, "bjobs printed lines that are not job states");
    }
    Ok(report)
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
