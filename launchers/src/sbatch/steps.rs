//! Jobs of several workers (`workers_per_job`), each worker its own job
//! step: what the sbatch backend does beyond submitting them.
//!
//! - A worker that died in a job that still runs leaves a place: the
//!   driver's next worker of that task is started there, as a new step,
//!   by running `srun --jobid=<job>` here (its process lives as long as
//!   the step, and its exit status is that worker's end). The job script
//!   keeps its job while any worker step is left, so such a step is not
//!   cut short when the job's first workers are done.
//! - Cancelling one worker of a job whose other workers stay cancels its
//!   step only, found by its name (`daisy-w<worker id>`) in one
//!   `squeue --steps` call.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::element::{Element, Steps};
use super::script::srun_options;
use super::squeue::{job_end, parse_exit, ExitCode};
use crate::queue::Jobs;
use crate::{JobEnd, LaunchError, WorkerRequest};

/// The `srun` processes of workers started inside running jobs, by
/// worker id, until their ends are reported.
#[derive(Default)]
pub(crate) struct StepProcesses {
    running: BTreeMap<u64, Child>,
}

impl StepProcesses {
    /// Starts `request`'s worker in `job` (a job of its task with room,
    /// see [`job_with_room`]), running as `raw`.
    pub(crate) fn start_in(
        &mut self,
        srun: &Path,
        request: &WorkerRequest,
        job: &Element,
        raw: &str,
    ) -> Result<Element, LaunchError> {
        let places = job.steps.as_ref().map_or(1, |steps| steps.places);
        self.spawn(srun, request, raw)?;
        Ok(Element {
            raw: Some(raw.to_owned()),
            steps: Some(Steps {
                task: request.task_id.clone(),
                worker: request.worker_id,
                places,
            }),
            ..job.clone()
        })
    }

    fn spawn(
        &mut self,
        srun: &Path,
        request: &WorkerRequest,
        job: &str,
    ) -> Result<(), LaunchError> {
        let id = request.worker_id.to_string();
        let log_dir = request.log_dir.display().to_string();
        let cpus = request.requires.get("cpu").copied().filter(|n| *n > 0);
        // srun's own complaints (no room after all, the job just ended)
        // go where the worker's would.
        let srun_log = request.log_dir.join(format!("worker-{id}.err"));
        let log_error = |source| LaunchError::Log {
            path: srun_log.clone(),
            source,
        };
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&srun_log)
            .map_err(log_error)?;
        let spawned = Command::new(srun)
            .arg(format!("--jobid={job}"))
            .args(srun_options(&id, &log_dir, cpus))
            .arg(&request.program)
            .args(&request.args)
            .envs(request.env.iter().map(|(k, v)| (k, v)))
            .env("DAISY_WORKER_ID", &id)
            .current_dir(&request.working_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            // Its own group: a Ctrl-C meant for the driver must not
            // reach srun, which would take it for the step's.
            .process_group(0)
            .spawn()
            .map_err(|source| LaunchError::Spawn {
                program: srun.to_path_buf(),
                working_dir: request.working_dir.clone(),
                source,
            })?;
        tracing::info!(task = %request.task_id, worker = request.worker_id, job, "worker started in a running job");
        self.running.insert(request.worker_id, spawned);
        Ok(())
    }

    /// The workers whose srun exited since the last call, and how.
    pub(crate) fn ended(&mut self) -> Vec<(u64, JobEnd)> {
        let mut ended = Vec::new();
        self.running
            .retain(|&worker, child| match child.try_wait() {
                Ok(None) => true,
                Ok(Some(status)) => {
                    ended.push((worker, crate::local::end_from_status(status)));
                    false
                }
                Err(error) => {
                    let reason = format!("cannot wait for its srun: {error}");
                    ended.push((worker, JobEnd::Failed { reason }));
                    false
                }
            });
        ended
    }

    /// Whether `worker` was started here, by srun, and still runs.
    pub(crate) fn started_here(&self, worker: u64) -> bool {
        self.running.contains_key(&worker)
    }

    /// Forgets workers whose ends were reported another way (their job
    /// ended), ending their srun if it still runs.
    pub(crate) fn forget(&mut self, workers: impl IntoIterator<Item = u64>) {
        for worker in workers {
            if let Some(mut child) = self.running.remove(&worker) {
                stop(&mut child);
            }
        }
    }
}

/// srun waits for its step; the job's end or a cancel has ended that
/// already, or ends it now (srun on SIGKILL leaves its step to SLURM,
/// which the cancel of the job or step has told to end).
fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for StepProcesses {
    fn drop(&mut self) {
        self.forget(self.running.keys().copied().collect::<Vec<_>>());
    }
}

/// The first job of `task` whose workers, not counting those that
/// `left`, are fewer than its places but not none (one whose raw id is
/// known first). A job every worker left is not reused: its node may
/// have died under them, and an srun into it would hang.
pub(crate) fn job_with_room<'a>(
    task: &str,
    jobs: &'a Jobs<Element>,
    left: &BTreeSet<u64>,
) -> Option<&'a Element> {
    let mut workers: BTreeMap<(&str, u32), (usize, &Element)> = BTreeMap::new();
    for (worker, job) in jobs {
        if job.steps.as_ref().is_none_or(|steps| steps.task != task) {
            continue;
        }
        let entry = workers.entry(job.key()).or_insert((0, job));
        entry.0 += usize::from(!left.contains(worker));
        if entry.1.raw.is_none() {
            entry.1 = job;
        }
    }
    let has_room = |(count, job): &(usize, &Element)| {
        job.steps
            .as_ref()
            .is_some_and(|steps| *count > 0 && *count < steps.places)
    };
    let mut with_room: Vec<&Element> = (workers.into_values())
        .filter(has_room)
        .map(|(_, job)| job)
        .collect();
    with_room.sort_by_key(|job| job.raw.is_none());
    with_room.into_iter().next()
}

/// The jobs to cancel whole or by element, and the workers of jobs that
/// stay (other workers of theirs stay) whose steps are cancelled alone.
pub(crate) fn split_cancelled<'a>(
    cancelled: &'a [Element],
    staying: &[&Element],
) -> (Vec<Element>, Vec<&'a Element>) {
    let (alone, whole): (Vec<&Element>, Vec<&Element>) = cancelled
        .iter()
        .partition(|job| job.steps.is_some() && staying.iter().any(|other| other.same_job(job)));
    (whole.into_iter().cloned().collect(), alone)
}

/// `squeue --steps` arguments listing the steps of `jobs` (raw ids) as
/// `<step id>|<name>`.
pub(crate) fn step_listing_args(jobs: &[String]) -> Vec<String> {
    vec![
        "--noheader".into(),
        "--steps".into(),
        format!("--jobs={}", jobs.join(",")),
        "--format=%i|%j".into(),
    ]
}

/// `sacct` arguments listing the steps of `jobs` (raw ids or array
/// elements) as `<raw step id>|<name>|<state>|<exit code>`:
/// `25.1|daisy-w3|CANCELLED|0:9`.
pub(crate) fn step_accounting_args(jobs: &[String]) -> Vec<String> {
    vec![
        "--noheader".into(),
        "--parsable2".into(),
        "--format=JobIDRaw,JobName,State,ExitCode".into(),
        format!("--jobs={}", jobs.join(",")),
    ]
}

/// How the steps of `workers` that have ended did, from a sacct listing
/// ([`step_accounting_args`]). A step that completed gives its exit code;
/// any other end is a failure naming the step, its state and exit code
/// (a worker killed by a signal shows as CANCELLED with that signal).
pub(crate) fn step_ends(listing: &str, workers: &BTreeSet<u64>) -> Vec<(u64, JobEnd)> {
    let mut ends = BTreeMap::new();
    for line in listing.lines() {
        let fields: Vec<&str> = line.trim().split('|').collect();
        let [step, name, state, exit] = fields[..] else {
            continue;
        };
        let Some(worker) = worker_of_step(name).filter(|w| workers.contains(w)) else {
            continue;
        };
        let state = state.split_whitespace().next().unwrap_or(state);
        let exit = parse_exit(exit);
        let end = match job_end(state, exit) {
            None => continue,
            Some(JobEnd::Exited { code }) => JobEnd::Exited { code },
            Some(_) => JobEnd::Failed {
                reason: step_failure(step, state, exit),
            },
        };
        ends.insert(worker, end);
    }
    ends.into_iter().collect()
}

/// The jobs of several workers that squeue still lists though every
/// worker tracked in them is in `ended`, one element each.
pub(crate) fn orphaned_jobs(
    jobs: &Jobs<Element>,
    ended: &BTreeSet<u64>,
    left_the_queue: &BTreeSet<u64>,
) -> Vec<Element> {
    let mut orphaned: BTreeMap<(&str, u32), &Element> = BTreeMap::new();
    for worker in ended.difference(left_the_queue) {
        if let Some(job) = jobs.get(worker).filter(|job| job.steps.is_some()) {
            orphaned.insert(job.key(), job);
        }
    }
    for (worker, job) in jobs {
        if !ended.contains(worker) {
            orphaned.remove(&job.key());
        }
    }
    orphaned.into_values().cloned().collect()
}

/// "SLURM job step 25.1 ended CANCELLED (exit code 0, signal 9)".
fn step_failure(step: &str, state: &str, exit: Option<ExitCode>) -> String {
    let how = match exit {
        Some(ExitCode { code, signal: 0 }) => format!(" (exit code {code})"),
        Some(ExitCode { code, signal }) => format!(" (exit code {code}, signal {signal})"),
        None => String::new(),
    };
    format!("SLURM job step {step} ended {state}{how}")
}

/// The worker a step named `daisy-w<id>` runs.
fn worker_of_step(name: &str) -> Option<u64> {
    name.strip_prefix("daisy-w")?.parse().ok()
}

/// The step ids (`27.3`) of `workers` in a `squeue --steps` listing.
pub(crate) fn step_ids(listing: &str, workers: &BTreeSet<u64>) -> Vec<String> {
    listing
        .lines()
        .filter_map(|line| line.trim().split_once('|'))
        .filter(|(_, name)| worker_of_step(name).is_some_and(|worker| workers.contains(&worker)))
        .map(|(step, _)| step.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker_of(array: &str, index: u32, worker: u64, raw: Option<&str>) -> Element {
        Element {
            raw: raw.map(str::to_owned),
            steps: Some(Steps {
                task: "t".into(),
                worker,
                places: 2,
            }),
            ..Element::new(array, index)
        }
    }

    #[test]
    fn a_running_job_has_room_when_a_worker_left_it() {
        let jobs: Jobs<Element> = [
            (0, worker_of("24", 0, 0, Some("25"))),
            (1, worker_of("24", 0, 1, Some("25"))),
            (2, worker_of("24", 1, 2, None)),
            (3, worker_of("24", 1, 3, None)),
        ]
        .into();
        assert!(job_with_room("t", &jobs, &BTreeSet::new()).is_none());
        let room = job_with_room("t", &jobs, &[1].into()).unwrap();
        assert_eq!((room.index, room.raw.as_deref()), (0, Some("25")));
        assert!(job_with_room("other", &jobs, &[1].into()).is_none());
        let not_seen_running = job_with_room("t", &jobs, &[1, 2].into()).unwrap();
        assert_eq!(not_seen_running.index, 0, "one seen running comes first");
        let deserted = job_with_room("t", &jobs, &[0, 1, 2].into()).unwrap();
        assert_eq!(deserted.index, 1, "a job every worker left is not reused");
        assert!(job_with_room("t", &jobs, &[0, 1, 2, 3].into()).is_none());
    }

    #[test]
    fn a_worker_whose_job_stays_is_cancelled_by_its_step() {
        let (a, b, c) = (
            worker_of("24", 0, 0, Some("25")),
            worker_of("24", 0, 1, Some("25")),
            worker_of("24", 1, 2, Some("26")),
        );
        let cancelled = [a.clone(), c.clone()];
        let (whole, alone) = split_cancelled(&cancelled, &[&b]);
        assert_eq!(whole, [c]);
        assert_eq!(alone, [&a]);
    }

    #[test]
    fn a_step_ends_with_its_exit_code_or_fails_naming_its_state() {
        let listing = "25|daisy-t|RUNNING|0:0\n25.batch|batch|RUNNING|0:0\n\
                       25.0|daisy-w0|COMPLETED|3:0\n25.1|daisy-w1|OUT_OF_MEMORY|0:125\n\
                       25.2|daisy-w2|CANCELLED by 0|0:9\n25.3|daisy-w3|RUNNING|0:0\n\
                       25.4|daisy-w4|FAILED|1:0\n";
        let ends = step_ends(listing, &[0, 1, 2, 3].into());
        let failed = |reason: &str| JobEnd::Failed {
            reason: reason.into(),
        };
        assert_eq!(
            ends,
            [
                (0, JobEnd::Exited { code: 3 }),
                (
                    1,
                    failed("SLURM job step 25.1 ended OUT_OF_MEMORY (exit code 0, signal 125)")
                ),
                (
                    2,
                    failed("SLURM job step 25.2 ended CANCELLED (exit code 0, signal 9)")
                ),
            ],
            "a running step and one not asked about are left out"
        );
        assert!(step_ends("garbage\n|||\n", &[0].into()).is_empty());
    }

    #[test]
    fn a_listed_job_whose_every_worker_ended_is_orphaned() {
        let jobs: Jobs<Element> = [
            (0, worker_of("24", 0, 0, Some("25"))),
            (1, worker_of("24", 0, 1, Some("25"))),
            (2, worker_of("24", 1, 2, Some("26"))),
            (3, worker_of("24", 1, 3, Some("26"))),
            (4, worker_of("24", 2, 4, Some("27"))),
            (5, worker_of("24", 2, 5, Some("27"))),
            (6, Element::new("30", 0)),
        ]
        .into();
        let orphaned = orphaned_jobs(&jobs, &[0, 2, 3, 4, 5, 6].into(), &[4, 5].into());
        let keys: Vec<(&str, u32)> = orphaned.iter().map(Element::key).collect();
        assert_eq!(
            keys,
            [("24", 1)],
            "24_0 keeps worker 1; 24_2 left the queue; 30_0 is a job of one"
        );
    }

    #[test]
    fn steps_are_found_by_their_workers_names() {
        let listing = "25.0|daisy-w0\n25.1|daisy-w1\n25.batch|batch\n26.0|daisy-w10\n";
        assert_eq!(step_ids(listing, &[1, 10].into()), ["25.1", "26.0"]);
    }
}
