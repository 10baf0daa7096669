//! A driver starting on a run directory cancels the cluster jobs that the
//! run before it submitted and left queued or running (a driver killed
//! with SIGKILL cancels nothing). Left alone, they would start later,
//! fail to join the new run (it has a new token) and each waste an
//! allocation until their connect timeout.
//!
//! Only the last run's jobs are looked at: every run does this when it
//! starts, so earlier runs' jobs were dealt with by the run after them.
//! Each is cancelled with the launcher its task had in the pipeline that
//! run recorded (`pipeline.json`, read before this run replaces it),
//! since a job id means something only to the scheduler it came from.

use crate::pipeline::{LauncherConfig, LauncherKind, Pipeline};
use crate::run::embedding::python_for_workers;
use crate::run::launching::LaunchSettings;
use crate::run_dir::events::history::{HistoryEvent, RunFold, RunHistory};
use crate::run_dir::events::{Event, EventLog};
use crate::run_dir::RunDir;
use launchers::JobId;

/// Cancels the last run's jobs still queued or running, says so on
/// stderr and in the events; returns their ids. Call with the run
/// directory locked, before the pipeline record is replaced.
pub fn cancel(run_dir: &RunDir, settings: LaunchSettings) -> anyhow::Result<Vec<JobId>> {
    let jobs = last_run_jobs(run_dir);
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let pipeline = match run_dir.load_recorded_pipeline(&python_for_workers()) {
        Ok(pipeline) => pipeline,
        Err(error) => {
            tracing::warn!("not cancelling the last run's jobs: {error:#}");
            return Ok(Vec::new());
        }
    };
    let mut cancelled = Vec::new();
    for (config, jobs) in by_launcher(&pipeline, jobs) {
        let mut launcher = crate::run::launching::launcher(config, settings)?;
        let these = launcher.cancel_earlier_jobs(&jobs);
        if !these.is_empty() {
            report(run_dir, launcher.name(), &these)?;
        }
        cancelled.extend(these);
    }
    Ok(cancelled)
}

/// The jobs of each cluster launcher kind, with the launcher settings of
/// the first task that used it; local workers are never cancelled (their
/// pids may have been reused since).
fn by_launcher(
    pipeline: &Pipeline,
    jobs: Vec<(String, JobId)>,
) -> Vec<(&LauncherConfig, Vec<JobId>)> {
    let mut groups: Vec<(&LauncherConfig, Vec<JobId>)> = Vec::new();
    for (task, job) in jobs {
        let config = pipeline
            .task(&task)
            .map_or(&pipeline.launcher, |t| &t.launcher);
        if config.kind == LauncherKind::Local {
            continue;
        }
        match groups.iter_mut().find(|(c, _)| c.kind == config.kind) {
            Some((_, jobs)) => jobs.push(job),
            None => groups.push((config, vec![job])),
        }
    }
    groups
}

/// The jobs one run submitted, with their tasks.
#[derive(Default)]
struct Submitted(Vec<(String, JobId)>);

impl RunFold for Submitted {
    fn on_event(&mut self, event: &HistoryEvent) {
        if let Event::WorkerSubmitted { task, job, .. } = &event.kind {
            self.0.push((task.to_string(), JobId(job.to_string())));
        }
    }
}

/// The jobs the last run in `run_dir` submitted, with their tasks (none
/// without events).
fn last_run_jobs(run_dir: &RunDir) -> Vec<(String, JobId)> {
    let Ok(history) = RunHistory::read(&run_dir.events(), Submitted::default) else {
        return Vec::new();
    };
    history.last_run.unwrap_or_default().0
}

fn report(run_dir: &RunDir, launcher: &str, cancelled: &[JobId]) -> anyhow::Result<()> {
    let jobs: Vec<String> = cancelled.iter().map(|job| job.0.clone()).collect();
    eprintln!(
        "daisy-driver: cancelled {} {launcher} jobs the last run left queued or running: {}",
        jobs.len(),
        jobs.join(" ")
    );
    let mut events = EventLog::open(&run_dir.events())?;
    events.record(&Event::EarlierJobsCancelled {
        launcher: launcher.into(),
        jobs: jobs.as_slice().into(),
    })?;
    Ok(())
}
