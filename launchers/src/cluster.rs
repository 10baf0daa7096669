//! Options a cluster backend needs beyond a worker's resources: where the
//! job runs (partition, account, qos), for how long, and how its job
//! script is made.
//!
//! They are shared by the cluster backends (sbatch, bsub and
//! slurmrestd) and resolved by the driver, per task, from the
//! pipeline's `[launcher]` section and the task's overrides, so a launcher
//! receives one finished [`ClusterOptions`] in each
//! [`WorkerRequest`](crate::WorkerRequest). The local backend ignores them.
//!
//! Resources are not here: they come from the request's `requires`, which
//! the driver's budget also counts (see the sbatch module for how `cpu`,
//! `gpu` and `mem` become resource requests).

use std::path::PathBuf;

/// Scheduler options for a task's workers; every field is optional and an
/// unset one is simply not requested (the cluster's default applies).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterOptions {
    /// SLURM partition (`--partition`).
    pub partition: Option<String>,
    /// Account charged for the jobs (`--account`).
    pub account: Option<String>,
    /// Quality of service (`--qos`).
    pub qos: Option<String>,
    /// Walltime of one worker job, in SLURM's syntax: "HH:MM:SS" or
    /// "D-HH:MM:SS" (`--time`). Not checked here: the scheduler refuses a
    /// malformed value with its own message.
    pub time: Option<String>,
    /// A job-script template replacing the built-in
    /// `slurm-templates/worker.sbatch`; read at each submission, so edits
    /// apply to the next workers.
    pub template: Option<PathBuf>,
    /// Extra scheduler directives, one per line, without the `#SBATCH`
    /// prefix: "--constraint=a100", "--hold".
    pub directives: Vec<String>,
    /// Shell lines run in the job before the worker starts:
    /// "module load cuda", "source venv/bin/activate".
    pub setup: Vec<String>,
    /// At most this many workers of one job array run at once (SLURM's
    /// `--array=0-N%cap`); the others wait in the queue.
    pub max_array_parallel: Option<u32>,
}
