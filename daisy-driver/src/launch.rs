//! From the pipeline's `[launcher]` to a running `Launcher` backend, and
//! from a task's launcher options to what a job script needs.

use crate::pipeline::{LauncherConfig, LauncherKind};
use anyhow::Context as _;
use launchers::{
    BsubLauncher, ClusterOptions, Launcher, LocalLauncher, SbatchLauncher, SlurmrestdLauncher,
};
use std::time::Duration;

/// How often cluster backends ask the scheduler for job states.
#[derive(Debug, Clone, Copy)]
pub struct LaunchSettings {
    pub poll_interval: Duration,
    /// How long local workers get between SIGTERM and SIGKILL.
    pub stop_grace: Duration,
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

/// A task's launcher options as the job script needs them.
pub fn cluster_options(config: &LauncherConfig) -> ClusterOptions {
    ClusterOptions {
        partition: config.partition.clone(),
        account: config.account.clone(),
        qos: config.qos.clone(),
        time: config.time.clone(),
        template: config.template.clone(),
        directives: config.directives.clone(),
        setup: config.setup.clone(),
        max_array_parallel: config.max_array_parallel,
    }
}
