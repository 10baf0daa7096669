//! The sbatch job script of a group of workers: the values of the
//! placeholders of `slurm-templates/worker.sbatch`, rendered by the shared
//! [`template`](crate::template) rules (`{{name}}`; a line whose
//! placeholder has no value is left out; unknown names are refused with
//! the template's file and line). Pure, so every rule is tested without
//! SLURM.

use std::path::{Path, PathBuf};

use crate::template::{self, JobScript, Values};
use crate::{LaunchError, WorkerRequest};

/// The built-in template (`slurm-templates/worker.sbatch`), compiled in so
/// the driver needs no data files.
pub const BUILTIN_TEMPLATE: &str = include_str!("../../../slurm-templates/worker.sbatch");

/// How the built-in template is named in errors.
const BUILTIN_NAME: &str = "<built-in worker.sbatch>";

/// Every placeholder a template may use; see the built-in template's
/// header for what each one holds.
pub const PLACEHOLDERS: &[&str] = &[
    "job_name",
    "task_id",
    "first_worker_id",
    "last_worker_id",
    "workers",
    "partition",
    "account",
    "qos",
    "time",
    "cpus",
    "gpus",
    "mem_mb",
    "output",
    "error",
    "log_dir",
    "directives",
    "setup",
    "worker_command",
];

/// What the sbatch backend submits for a group of workers of one task
/// (consecutive ids), and where it keeps it.
pub fn job_script(group: &[WorkerRequest]) -> Result<JobScript, LaunchError> {
    let (first, last) = (&group[0], &group[group.len() - 1]);
    Ok(JobScript {
        path: script_path(&first.log_dir, first.worker_id, last.worker_id),
        text: script_for(group)?,
    })
}

/// The script for a group of workers of one task (consecutive ids, the
/// first one's options and command), from its template.
pub fn script_for(group: &[WorkerRequest]) -> Result<String, LaunchError> {
    let custom = group[0].cluster.template.as_deref();
    template::render_template(custom, BUILTIN_TEMPLATE, BUILTIN_NAME, &values_for(group))
}

/// The placeholder values of a group of workers.
pub fn values_for(group: &[WorkerRequest]) -> Values {
    let (first, last) = (&group[0], &group[group.len() - 1]);
    let options = &first.cluster;
    let resource = |key: &str| first.requires.get(key).filter(|n| **n > 0);
    let log_file = |extension: &str| {
        let path = first.log_dir.join(format!("worker-%A_%a.{extension}"));
        Some(template::directive_quote(&path.display().to_string()))
    };
    Values::from([
        ("job_name", Some(template::job_name(&first.task_id))),
        ("task_id", Some(first.task_id.clone())),
        ("first_worker_id", Some(first.worker_id.to_string())),
        ("last_worker_id", Some(last.worker_id.to_string())),
        ("workers", Some(group.len().to_string())),
        ("partition", options.partition.clone()),
        ("account", options.account.clone()),
        ("qos", options.qos.clone()),
        ("time", options.time.clone()),
        ("cpus", resource("cpu").map(u64::to_string)),
        ("gpus", resource("gpu").map(u64::to_string)),
        ("mem_mb", resource("mem").map(u64::to_string)),
        ("output", log_file("out")),
        ("error", log_file("err")),
        (
            "log_dir",
            Some(template::shell_quote(&first.log_dir.display().to_string())),
        ),
        (
            "directives",
            template::directive_lines("#SBATCH", &options.directives),
        ),
        ("setup", template::joined_lines(&options.setup)),
        ("worker_command", Some(template::worker_command(first))),
    ])
}

/// Where the script of workers `first..=last` is kept before submission:
/// `<log_dir>/worker-<first>-<last>.sbatch`.
pub fn script_path(log_dir: &Path, first: u64, last: u64) -> PathBuf {
    log_dir.join(format!("worker-{first}-{last}.sbatch"))
}

#[cfg(test)]
mod tests;
