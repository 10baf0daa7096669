//! From the pipeline's `[launcher]` to a running `Launcher` backend, and
//! from a task's configuration to the request that starts one of its
//! workers (built here for both the run and `plan`, so that the job
//! scripts `plan` shows are the ones a run submits).

pub(crate) mod earlier_jobs;
pub(crate) mod fork_server;
pub(crate) mod per_kind;
pub(crate) mod thread;

use crate::pipeline::budget::Share;
use crate::pipeline::{LauncherConfig, LauncherKind, TaskConfig};
use crate::run::resource_env::{resource_env, Placement};
use crate::run_dir::RunDir;
use anyhow::Context as _;
use daisy_core::walltime::parse_slurm_time;
use launchers::{
    BsubLauncher, Launcher, LocalLauncher, Paced, SbatchLauncher, SlurmrestdLauncher, WorkerRequest,
};
use std::os::fd::RawFd;
use std::path::Path;
use std::time::Duration;

/// How often cluster backends ask the scheduler for job states.
#[derive(Debug, Clone, Copy)]
pub struct LaunchSettings {
    pub poll_interval: Duration,
    /// How long local workers get between SIGTERM and SIGKILL.
    pub stop_grace: Duration,
    /// The socket of a fork server for local Python workers, if one runs.
    pub fork_server: Option<RawFd>,
    /// Whether a run may start a fork server of its own ([`fork_server`]).
    pub fork_workers: bool,
}

/// The backend the pipeline asks for.
pub fn launcher(
    config: &LauncherConfig,
    settings: LaunchSettings,
) -> anyhow::Result<Box<dyn Launcher>> {
    Ok(match config.kind {
        LauncherKind::Local => Box::new(LocalLauncher::with_grace(settings.stop_grace)),
        LauncherKind::Sbatch => Box::new(
            SbatchLauncher::new()
                .context("the pipeline's launcher is sbatch")?
                .with_poll_interval(settings.poll_interval),
        ),
        LauncherKind::Bsub => Box::new(
            BsubLauncher::new()
                .context("the pipeline's launcher is bsub")?
                .with_poll_interval(settings.poll_interval),
        ),
        LauncherKind::Slurmrestd => Box::new(
            SlurmrestdLauncher::from_env()
                .context("the pipeline's launcher is slurmrestd")?
                .with_poll_interval(settings.poll_interval),
        ),
    })
}

/// Tells a launched worker its job's walltime (daisy-worker's
/// `--walltime`), so it stops taking blocks before the job is killed.
const WALLTIME_ENV: &str = "DAISY_WALLTIME";

/// The program (and its first arguments) that serves `task`: the task's
/// own `worker_program` if it has one, else `program` with `program_args`.
pub fn task_worker_program<'a>(
    task: &'a TaskConfig,
    program: &'a Path,
    program_args: &'a [String],
) -> (&'a Path, &'a [String]) {
    match task.worker_program.as_deref() {
        Some([own, own_args @ ..]) => (Path::new(own), own_args),
        _ => (program, program_args),
    }
}

/// The request that starts worker `worker_id` of `task`: the task's own
/// `worker_program` if it has one, else `program` with `program_args`,
/// then the worker's log directory; `env` holds what the worker must not
/// get on its command line (`DAISY_CONTEXT`, the token), to which the
/// task's walltime and what the worker is told of its budget `share` are
/// added ([`resource_env`]).
pub fn worker_request(
    task: &TaskConfig,
    worker_id: u64,
    share: &Share,
    run_dir: &RunDir,
    program: &Path,
    program_args: &[String],
    mut env: Vec<(String, String)>,
) -> WorkerRequest {
    let placement = match task.launcher.kind {
        LauncherKind::Local => Placement::Local { pin: task.pin },
        _ => Placement::Cluster,
    };
    let inherited = |name: &str| std::env::var_os(name).is_some();
    env.extend(resource_env(
        share,
        &task.requires,
        placement,
        &task.env,
        inherited,
    ));
    let log_dir = run_dir.task_logs(&task.spec.id);
    if let Some(walltime) = task
        .launcher
        .cluster
        .time
        .as_deref()
        .and_then(parse_slurm_time)
    {
        env.push((WALLTIME_ENV.to_string(), format!("{}s", walltime.as_secs())));
    }
    let (program, program_args) = task_worker_program(task, program, program_args);
    WorkerRequest {
        task_id: task.spec.id.clone(),
        worker_id,
        program: program.to_path_buf(),
        args: [
            program_args,
            &["--log-dir".to_string(), log_dir.display().to_string()],
        ]
        .concat(),
        env,
        working_dir: std::env::current_dir().unwrap_or_else(|_| ".".into()),
        log_dir,
        requires: task.requires.clone(),
        cluster: task.launcher.cluster.clone(),
    }
}
