//! What a run would submit, without submitting: the job script of each
//! task's first submission (cluster launchers) or its workers' command
//! lines (local launcher). Both come from the launchers' own rendering
//! functions, fed the request the driver builds
//! ([`launching::worker_request`]), so a run started from the same working
//! directory, with the same run directory and worker program, submits
//! these scripts byte for byte. The run token is not in them: it reaches
//! workers in their environment (`DAISY_CONTEXT`).

use super::allocation::Grant;
use crate::pipeline::{LauncherKind, Pipeline};
use crate::run::launching;
use crate::run_dir::RunDir;
use launchers::{first_array, JobScript, LaunchError, WorkerRequest};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The program launched workers run, and the arguments before their own
/// (`daisy-driver worker` when no daisy-worker is found).
#[derive(Clone, Copy, Debug)]
pub struct WorkerProgram<'a> {
    pub path: &'a Path,
    pub args: &'a [String],
}

/// The first submission of one task.
#[derive(Debug, Serialize)]
pub struct Submission {
    pub task: String,
    /// The launcher that makes it: the task's.
    pub launcher: LauncherKind,
    /// The phase of the allocation it is made in (1 = at start).
    pub phase: usize,
    pub first_worker: u64,
    pub last_worker: u64,
    /// Where a run keeps the job script, beside the task's logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script_path: Option<PathBuf>,
    /// The job script, as submitted (cluster launchers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// At most this many of its array's workers run at once
    /// (`max_array_parallel`), as the submission asks.
    #[serde(skip)]
    pub max_array_parallel: Option<u32>,
    /// One command line per worker (local launcher); each runs in the
    /// driver's working directory with `DAISY_CONTEXT` added.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
}

/// The first submission of every task that gets one; a script that cannot
/// be rendered (a bad template, an unreadable walltime) is a problem.
pub fn first_submissions(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    worker: WorkerProgram,
    grants: &[Grant],
    problems: &mut Vec<String>,
) -> Vec<Submission> {
    let mut seen = BTreeSet::new();
    let first_grants = grants.iter().filter(|grant| seen.insert(grant.task));
    first_grants
        .filter_map(|grant| {
            let requests = requests(pipeline, run_dir, worker, grant);
            let kind = pipeline.tasks[grant.task.index()].launcher.kind;
            submission(kind, grant, &requests)
                .map_err(|error| problems.push(format!("task {:?}: {error}", requests[0].task_id)))
                .ok()
        })
        .collect()
}

/// The requests the driver would send for `grant`'s workers.
fn requests(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    worker: WorkerProgram,
    grant: &Grant,
) -> Vec<WorkerRequest> {
    let task = &pipeline.tasks[grant.task.index()];
    (grant.workers.first..=grant.workers.last)
        .zip(&grant.shares)
        .map(|(id, share)| {
            let (path, args) = (worker.path, worker.args);
            launching::worker_request(task, id, share, run_dir, path, args, Vec::new())
        })
        .collect()
}

fn submission(
    kind: LauncherKind,
    grant: &Grant,
    requests: &[WorkerRequest],
) -> Result<Submission, LaunchError> {
    let mut submission = Submission {
        task: requests[0].task_id.clone(),
        launcher: kind,
        phase: grant.phase,
        first_worker: grant.workers.first,
        last_worker: grant.workers.last,
        script_path: None,
        script: None,
        max_array_parallel: requests[0].cluster.max_array_parallel,
        commands: Vec::new(),
    };
    let script = match kind {
        LauncherKind::Local => {
            submission.commands = requests.iter().map(launchers::local_command_line).collect();
            return Ok(submission);
        }
        LauncherKind::Sbatch => launchers::sbatch_job_script(first_array(requests))?,
        LauncherKind::Bsub => launchers::bsub_job_script(first_array(requests))?,
        LauncherKind::Slurmrestd => launchers::slurmrestd_job_script(first_array(requests))?,
    };
    let JobScript { path, text } = script;
    submission.script_path = Some(path);
    submission.script = Some(text);
    Ok(submission)
}
