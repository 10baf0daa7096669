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
//!
//! The driver reads them straight from a pipeline file's launcher tables
//! (serde, with the field names below), so what each option may hold is
//! said once, here: the `deserialize_with` functions refuse what no
//! scheduler could take, each with the end of the message the user sees
//! (`launcher.partition = "" must not be empty`).

use serde::de::{Deserialize, Deserializer, Error as _};
use std::path::PathBuf;

/// Scheduler options for a task's workers; every field is optional and an
/// unset one is simply not requested (the cluster's default applies).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct ClusterOptions {
    /// SLURM partition (`--partition`).
    #[serde(deserialize_with = "non_empty")]
    pub partition: Option<String>,
    /// Account charged for the jobs (`--account`).
    #[serde(deserialize_with = "non_empty")]
    pub account: Option<String>,
    /// Quality of service (`--qos`).
    #[serde(deserialize_with = "non_empty")]
    pub qos: Option<String>,
    /// Walltime of one worker job, in SLURM's syntax: "HH:MM:SS" or
    /// "D-HH:MM:SS" (`--time`; the LSF backend translates it). Only its
    /// form is checked: the scheduler refuses a limit it does not allow
    /// with its own message.
    #[serde(deserialize_with = "walltime")]
    pub time: Option<String>,
    /// A job-script template replacing the built-in
    /// `slurm-templates/worker.sbatch`; read at each submission, so edits
    /// apply to the next workers.
    #[serde(deserialize_with = "non_empty")]
    pub template: Option<PathBuf>,
    /// Extra scheduler directives, one per line, without the `#SBATCH`
    /// prefix: "--constraint=a100", "--hold".
    pub directives: Vec<String>,
    /// Shell lines run in the job before the worker starts:
    /// "module load cuda", "source venv/bin/activate".
    pub setup: Vec<String>,
    /// At most this many workers of one job array run at once (SLURM's
    /// `--array=0-N%cap`); the others wait in the queue.
    #[serde(deserialize_with = "at_least_one")]
    pub max_array_parallel: Option<u32>,
    /// How many workers one job runs, each as its own job step (`srun`;
    /// LSF: `blaunch`), for sites that cap the jobs a user may have or
    /// hand out whole nodes. Unset or 1: one worker per job.
    #[serde(deserialize_with = "at_least_one")]
    pub workers_per_job: Option<u32>,
    /// Nodes of one such job (`--nodes`); SLURM spreads its workers over
    /// them.
    #[serde(deserialize_with = "at_least_one")]
    pub nodes: Option<u32>,
    /// Workers of one such job on each of its nodes (`--ntasks-per-node`).
    #[serde(deserialize_with = "at_least_one")]
    pub ntasks_per_node: Option<u32>,
    /// At most this many of the task's jobs queued or running at once
    /// (an array element is one job, as in SLURM's accounting); the
    /// launcher holds the rest back until one ends (see `site_limits`).
    #[serde(deserialize_with = "at_least_one")]
    pub max_jobs: Option<u32>,
}

impl ClusterOptions {
    /// Workers in one job: `workers_per_job`, 1 when unset.
    pub fn workers_per_job(&self) -> u32 {
        self.workers_per_job.unwrap_or(1)
    }
}

/// A string option that names something (a partition, a path): empty, it
/// is a mistake rather than "unset", which is leaving the option out.
/// Public because the driver's own path options follow the same rule.
pub fn non_empty<'de, D: Deserializer<'de>, T: From<String>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.is_empty() {
        return Err(D::Error::custom("must not be empty"));
    }
    Ok(Some(T::from(text)))
}

fn walltime<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(deserializer)?;
    if !is_walltime(&text) {
        return Err(D::Error::custom(
            "is not a walltime like \"04:00:00\" or \"1-12:00:00\"",
        ));
    }
    Ok(Some(text))
}

/// Whether `text` is a SLURM walltime: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`
/// or `D-H:M:S`.
fn is_walltime(text: &str) -> bool {
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    let clock = match text.split_once('-') {
        Some((days, clock)) if digits(days) => clock,
        Some(_) => "",
        None => text,
    };
    let parts: Vec<&str> = clock.split(':').collect();
    parts.len() <= 3 && parts.iter().all(|part| digits(part))
}

/// A job array of no running workers would never end.
fn at_least_one<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    match u32::deserialize(deserializer)? {
        0 => Err(D::Error::custom("must be at least 1")),
        n => Ok(Some(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walltimes_take_slurms_forms() {
        for good in ["30", "30:00", "04:00:00", "1-12", "1-12:00", "1-12:00:00"] {
            assert!(is_walltime(good), "{good}");
        }
        for bad in ["", "4h", "1:2:3:4", "-1", "a-1", "1-", "04::00"] {
            assert!(!is_walltime(bad), "{bad}");
        }
    }

    #[test]
    fn options_read_from_a_table_refuse_what_no_scheduler_takes() {
        let read = |json: &str| serde_json::from_str::<ClusterOptions>(json);
        let options = read(r#"{"partition": "gpu", "time": "04:00:00", "setup": ["a"]}"#).unwrap();
        let expected = ClusterOptions {
            partition: Some("gpu".into()),
            time: Some("04:00:00".into()),
            setup: vec!["a".into()],
            ..ClusterOptions::default()
        };
        assert_eq!(options, expected);
        for (json, why) in [
            (r#"{"partition": ""}"#, "must not be empty"),
            (r#"{"time": "4h"}"#, "is not a walltime like"),
            (r#"{"max_array_parallel": 0}"#, "must be at least 1"),
            (r#"{"max_jobs": 0}"#, "must be at least 1"),
        ] {
            let error = read(json).unwrap_err().to_string();
            assert!(error.starts_with(why), "{json}: {error}");
        }
    }
}
