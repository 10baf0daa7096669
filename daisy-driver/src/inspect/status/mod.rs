//! `daisy-driver status RUN_DIR`: where a run stands, from its run
//! directory alone, and live from its driver when one is running.
//!
//! The terms (done, failed, orphaned, remaining, the last run) are those
//! of [`crate::run_dir::run_state`], whose model this shows.
//!
//! - [`offline`]: the numbers from done markers and events.
//! - [`live`]: a snapshot from the running driver (found through
//!   `context.json`).
//! - [`render`]: the text output; `--json` prints [`RunStatus`].
//! - [`watch`]: `--watch`, the status again and again while the run goes.

mod live;
mod offline;
mod render;
mod watch;

pub use crate::inspect::task_status::{FailedBlock, TaskStatus};
pub use crate::run_dir::run_state::{RunEnding, WorkerEnd};
pub use watch::watch;

use crate::pipeline::Pipeline;
use crate::run::embedding::python_for_workers;
use crate::run_dir::run_state::RunEvents;
use crate::run_dir::RunDir;
use anyhow::Context as _;
use daisy_core::printable::printable;
use daisy_core::protocol::messages::TaskSnapshot;
use daisy_core::TaskCounters;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Everything `status` reports (`status --json` prints this).
#[derive(Debug, Serialize)]
pub struct RunStatus {
    pub run_dir: PathBuf,
    pub pipeline: String,
    pub pipeline_file: PathBuf,
    pub state: RunState,
    /// A driver answered: `live` holds what it said.
    pub running: bool,
    pub tasks: Vec<TaskStatus>,
    pub last_run: Option<LastRun>,
    pub live: Option<LiveStatus>,
    /// Problems that did not stop `status` (damaged lines of
    /// events.jsonl, a driver that did not answer).
    pub warnings: Vec<String>,
}

/// The run's state as the exit code tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Every block is done (exit 0).
    Finished,
    /// Some blocks failed for good or are orphaned (exit 1).
    Failed,
    /// Blocks remain and none failed: running, stopped or left (exit 3).
    Incomplete,
}

impl RunState {
    pub fn exit_code(self) -> u8 {
        match self {
            RunState::Finished => crate::exit::SUCCESS,
            RunState::Failed => crate::exit::FAILED,
            RunState::Incomplete => crate::exit::INCOMPLETE,
        }
    }
}

/// The last run as events.jsonl tells it.
#[derive(Debug, Serialize)]
pub struct LastRun {
    /// Unix seconds.
    pub started: f64,
    /// `distributed` or `serial`.
    pub mode: String,
    pub retry_failed: bool,
    /// How it ended; `None` while it runs, or if its driver was killed.
    pub finished: Option<RunEnding>,
    pub workers: Vec<WorkerStatus>,
    /// The counters of each task the run saw to its end, as its
    /// `task_done` line records them: what this run did (`skipped`
    /// counts blocks done before it and blocks a check function found
    /// done), where the task's numbers above are the run directory's.
    pub tasks_ended: BTreeMap<String, TaskCounters>,
}

/// One worker of the last run.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerStatus {
    pub task: String,
    pub worker_id: u64,
    /// The job it was submitted as (launched workers).
    pub job: Option<String>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub by_hand: bool,
    pub end: WorkerEnd,
    /// Why it ended (lost, failed start), as recorded.
    pub why: Option<String>,
    /// The limit its submission waits for while it is queued without a
    /// job (a site limit such as `QOSMaxSubmitJobPerUserLimit`, or
    /// `max_jobs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

impl WorkerStatus {
    /// What its submission waits for, in words: `the task's max_jobs` or
    /// `a site limit (QOSMaxSubmitJobPerUserLimit)`.
    pub fn waits_for(&self) -> Option<String> {
        self.waiting_for.as_deref().map(|limit| match limit {
            launchers::MAX_JOBS => "the task's max_jobs".to_string(),
            site => format!("a site limit ({site})"),
        })
    }
}

/// What the running driver said.
#[derive(Debug, Serialize)]
pub struct LiveStatus {
    /// Seconds since the run started.
    pub seconds: f64,
    /// Blocks completed per second recently, all tasks together.
    pub blocks_per_s: f64,
    /// Seconds until every task is through at that pace.
    pub eta_s: Option<f64>,
    /// The driver's snapshot of each task (docs/protocol.md, `snapshot`).
    pub tasks: Vec<TaskSnapshot>,
}

/// Where `status` gets the pipeline: `--pipeline FILE`, else the copy the
/// last run recorded in the run directory.
pub fn load_pipeline(run_dir: &RunDir, file: Option<&Path>) -> anyhow::Result<Pipeline> {
    match file {
        Some(file) => Ok(Pipeline::load(file, &python_for_workers())?),
        None => run_dir
            .load_recorded_pipeline(&python_for_workers())
            .context(
                "runs before pipeline.json existed need the pipeline file: pass --pipeline FILE",
            ),
    }
}

/// The status of the run in `run_dir`, live if its driver answers.
pub fn status(run_dir: &RunDir, pipeline_file: Option<&Path>) -> anyhow::Result<RunStatus> {
    if !run_dir.path().is_dir() {
        anyhow::bail!("run directory {} does not exist", run_dir.path().display());
    }
    let pipeline = load_pipeline(run_dir, pipeline_file)?;
    let (events, mut warnings) = RunEvents::read_last(run_dir)?;
    let analysis = offline::analyse(&pipeline, run_dir, &events)?;
    warnings.extend(analysis.warnings);
    Ok(status_from(
        run_dir,
        &pipeline,
        &events,
        analysis.tasks,
        warnings,
    ))
}

/// The status of the run in `run_dir` whose last run's events are
/// `events` and whose tasks, from the done markers, are `tasks` (the
/// dashboard reads them once for its report and its status), with the
/// `warnings` of reading them.
pub fn status_from(
    run_dir: &RunDir,
    pipeline: &Pipeline,
    events: &RunEvents,
    tasks: Vec<TaskStatus>,
    mut warnings: Vec<String>,
) -> RunStatus {
    let live = live_status(run_dir, events, &mut warnings);
    let last_run = LastRun::of(events, live.is_some());
    RunStatus {
        run_dir: run_dir.path().to_path_buf(),
        pipeline: pipeline.name.clone(),
        pipeline_file: pipeline.path.clone(),
        state: state_of(&tasks),
        running: live.is_some(),
        tasks,
        last_run,
        live,
        warnings,
    }
}

/// The running driver's view, if the last run has not finished and its
/// driver answers; a driver that does not answer is a warning.
fn live_status(
    run_dir: &RunDir,
    last_run: &RunEvents,
    warnings: &mut Vec<String>,
) -> Option<LiveStatus> {
    if !last_run.unfinished() {
        return None;
    }
    match live::snapshot(&run_dir.context_file()) {
        Ok(snapshot) => Some(LiveStatus::from(snapshot)),
        Err(error) => {
            warnings.push(format!(
                "the last run did not finish and its driver does not answer \
                 (killed or crashed?): {error:#}"
            ));
            None
        }
    }
}

fn state_of(tasks: &[TaskStatus]) -> RunState {
    if tasks.iter().any(|t| t.failed + t.orphaned > 0) {
        RunState::Failed
    } else if tasks.iter().all(|t| t.remaining == 0) {
        RunState::Finished
    } else {
        RunState::Incomplete
    }
}

impl From<daisy_core::protocol::messages::RunSnapshot> for LiveStatus {
    fn from(snapshot: daisy_core::protocol::messages::RunSnapshot) -> Self {
        let blocks_per_s: f64 = snapshot.tasks.iter().map(|t| t.blocks_per_s).sum();
        let unresolved: u64 = snapshot.tasks.iter().map(|t| t.counters.unresolved()).sum();
        Self {
            seconds: snapshot.seconds,
            blocks_per_s,
            eta_s: (blocks_per_s > 0.0).then(|| unresolved as f64 / blocks_per_s),
            tasks: snapshot.tasks,
        }
    }
}

impl RunStatus {
    /// The human-readable status, control characters escaped: it quotes
    /// block errors (a user process's stderr) and what workers sent, from
    /// runs of any version.
    pub fn render(&self) -> String {
        printable(&render::render(self)).into_owned()
    }
}
