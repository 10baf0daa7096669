//! The bsub job script of a group of workers: the values of the
//! placeholders of `slurm-templates/worker.bsub`, rendered by the shared
//! [`template`](crate::template) rules. Pure, so every rule is tested
//! without LSF.
//!
//! Translations from the launcher-agnostic options: `partition` is the LSF
//! queue (`-q`), `account` the project (`-P`), the SLURM-style walltime
//! `time` becomes `-W [hours:]minutes` (rounded up to a minute); `qos` has
//! no LSF counterpart and is left out with a warning. Resources: `cpu` →
//! `-n`, `gpu` → `-gpu "num=N"`, `mem` (megabytes) → `-R "rusage[mem=N]"`.
//!
//! A job of several workers (`workers_per_job` N) asks for N × `cpu`
//! slots (`-n`; `mem` per slot, `gpu` per task), `ntasks_per_node` (or
//! `nodes`) becomes `-R "span[ptile=...]"`, and the job starts each
//! worker with `blaunch` on a host of `LSB_MCPU_HOSTS`, as many on each
//! as its slots hold.

use std::path::{Path, PathBuf};

use crate::arrays;
use crate::template::{self, JobScript, Values};
use crate::{LaunchError, WorkerRequest};

/// The built-in template (`slurm-templates/worker.bsub`), compiled in so
/// the driver needs no data files.
pub const BUILTIN_TEMPLATE: &str = include_str!("../../../slurm-templates/worker.bsub");

/// Every placeholder a bsub template may use; the built-in template's
/// header says what each one holds.
pub const PLACEHOLDERS: &[&str] = &[
    "job_array",
    "job_name",
    "task_id",
    "first_worker_id",
    "last_worker_id",
    "workers",
    "queue",
    "project",
    "walltime",
    "cpus",
    "gpus",
    "mem_mb",
    "workers_per_job",
    "ptile",
    "output",
    "error",
    "log_dir",
    "working_dir",
    "directives",
    "setup",
    "worker_command",
    "run_workers",
];

/// The bsub backend's scripts.
const KIND: template::Kind = template::Kind {
    builtin: BUILTIN_TEMPLATE,
    builtin_name: "<built-in worker.bsub>",
    extension: "bsub",
    starts_several: "with blaunch",
};

/// What the bsub backend submits for a group of workers of one task
/// (consecutive ids), and where it keeps it.
pub fn job_script(group: &[WorkerRequest]) -> Result<JobScript, LaunchError> {
    KIND.job_script(group, &values_for(group)?)
}

/// The placeholder values of a group of workers; refused only for a
/// walltime that cannot be read.
pub(crate) fn values_for(group: &[WorkerRequest]) -> Result<Values, LaunchError> {
    let (first, last) = (&group[0], &group[group.len() - 1]);
    let options = &first.cluster;
    if let Some(qos) = &options.qos {
        tracing::warn!(%qos, task = %first.task_id, "LSF has no qos; the launcher's qos is ignored");
    }
    let walltime = options.time.as_deref().map(walltime_option).transpose()?;
    let per_job = arrays::per_job(group) as u64;
    let resource = |key: &str| first.requires.get(key).copied().filter(|n| *n > 0);
    let cpus = resource("cpu");
    let slots_per_worker = cpus.unwrap_or(1);
    let (slots, gpus, mem_mb, ptile, run_workers) = match per_job {
        1 => {
            let run = format!("exec {}", template::worker_command(first));
            (
                cpus,
                resource("gpu").map(|n| n.to_string()),
                resource("mem"),
                None,
                run,
            )
        }
        n => (
            Some(n * slots_per_worker),
            resource("gpu").map(|n| format!("{n}/task")),
            resource("mem").map(|mem| mem.div_ceil(slots_per_worker)),
            ptile(options, n).map(|workers| workers * slots_per_worker),
            blaunch_block(first, n, slots_per_worker),
        ),
    };
    let quoted = |path: &Path| Some(template::directive_quote(&path.display().to_string()));
    let text = |n: Option<u64>| n.map(|n| n.to_string());
    Ok(Values::from([
        (
            "job_array",
            Some(job_array(first, group.len() / per_job as usize)),
        ),
        ("job_name", Some(template::job_name(&first.task_id))),
        ("task_id", Some(first.task_id.clone())),
        ("first_worker_id", Some(first.worker_id.to_string())),
        ("last_worker_id", Some(last.worker_id.to_string())),
        ("workers", Some(group.len().to_string())),
        ("queue", options.partition.clone()),
        ("project", options.account.clone()),
        ("walltime", walltime.flatten()),
        ("cpus", text(slots)),
        ("gpus", gpus),
        ("mem_mb", text(mem_mb)),
        ("workers_per_job", text(Some(per_job).filter(|n| *n > 1))),
        ("ptile", text(ptile)),
        ("output", quoted(&log_file(&first.log_dir, "out"))),
        ("error", quoted(&log_file(&first.log_dir, "err"))),
        (
            "log_dir",
            Some(template::shell_quote(&first.log_dir.display().to_string())),
        ),
        ("working_dir", quoted(&first.working_dir)),
        (
            "directives",
            template::directive_lines("#BSUB", &options.directives),
        ),
        ("setup", template::joined_lines(&options.setup)),
        ("worker_command", Some(template::worker_command(first))),
        ("run_workers", Some(run_workers)),
    ]))
}

/// Workers on each host of a job of `per_job`: `ntasks_per_node`, or
/// spread evenly over `nodes`.
fn ptile(options: &crate::ClusterOptions, per_job: u64) -> Option<u64> {
    let per_node = options.ntasks_per_node.map(u64::from);
    per_node.or_else(|| {
        options
            .nodes
            .map(|nodes| per_job.div_ceil(u64::from(nodes)))
    })
}

/// How a job of `per_job` workers starts them: one `blaunch` each on the
/// job's hosts (`LSB_MCPU_HOSTS`: "hostA 8 hostB 8"), as many on a host
/// as its slots hold `slots_per_worker`, with ids counted on from the
/// array element's first; then it waits for them all.
fn blaunch_block(first: &WorkerRequest, per_job: u64, slots_per_worker: u64) -> String {
    let dir = template::shell_quote(&first.log_dir.display().to_string());
    let command = template::worker_command(first);
    [
        format!("# {per_job} workers in this job, each started by blaunch on a host of the job."),
        format!(
            "first=$(( {} + (${{LSB_JOBINDEX:-1}} - 1) * {per_job} ))",
            first.worker_id
        ),
        "place=0".into(),
        "set -- $LSB_MCPU_HOSTS".into(),
        format!("while [ $# -ge 2 ] && [ $place -lt {per_job} ]; do"),
        format!("  host=$1 workers=$(( $2 / {slots_per_worker} )); shift 2"),
        format!("  while [ $workers -gt 0 ] && [ $place -lt {per_job} ]; do"),
        "    id=$(( first + place )); place=$(( place + 1 )); workers=$(( workers - 1 ))".into(),
        format!(
            "    DAISY_WORKER_ID=$id blaunch -z \"$host\" {command} \\\n      >> {dir}/worker-$id.out 2>> {dir}/worker-$id.err &"
        ),
        "  done".into(),
        "done".into(),
        "wait".into(),
    ]
    .join("\n")
}

/// `daisy-<task>[1-N]`, or `daisy-<task>[1-N]%cap` with a cap: LSF's
/// array syntax (indices from 1, `%` the running-element limit).
fn job_array(first: &WorkerRequest, workers: usize) -> String {
    let name = template::job_name(&first.task_id);
    match first.cluster.max_array_parallel {
        Some(cap) => format!("{name}[1-{workers}]%{cap}"),
        None => format!("{name}[1-{workers}]"),
    }
}

/// `<log_dir>/worker-%J_%I.<extension>`: LSF puts the job id for `%J` and
/// the array index for `%I`.
fn log_file(log_dir: &Path, extension: &str) -> PathBuf {
    log_dir.join(format!("worker-%J_%I.{extension}"))
}

/// The `-W` value for a SLURM-style walltime, `None` for SLURM's "0" (no
/// limit); an unreadable one is refused naming the option and value.
fn walltime_option(time: &str) -> Result<Option<String>, LaunchError> {
    let minutes = walltime_minutes(time).ok_or_else(|| LaunchError::Submit {
        stderr: format!(
            "launcher option time = {time:?} is not a walltime like \"04:00:00\" \
             or \"1-12:00:00\", so it cannot become bsub -W"
        ),
        permanent: true,
    })?;
    Ok((minutes > 0).then(|| format!("{}:{:02}", minutes / 60, minutes % 60)))
}

/// Minutes (rounded up) in a SLURM walltime: `M`, `M:S`, `H:M:S`, `D-H`,
/// `D-H:M` or `D-H:M:S`.
pub(crate) fn walltime_minutes(time: &str) -> Option<u64> {
    let number = |part: &str| match part.bytes().all(|b| b.is_ascii_digit()) {
        true => part.parse::<u64>().ok(),
        false => None,
    };
    let (days, clock) = match time.split_once('-') {
        Some((days, clock)) => (number(days)?, clock),
        None => (0, time),
    };
    let parts: Vec<u64> = clock.split(':').map(number).collect::<Option<_>>()?;
    let with_days = time.contains('-');
    let seconds = match (with_days, parts.as_slice()) {
        (false, [m]) => m * 60,
        (false, [m, s]) => m * 60 + s,
        (_, [h, m, s]) => (h * 60 + m) * 60 + s,
        (true, [h]) => h * 3600,
        (true, [h, m]) => (h * 60 + m) * 60,
        _ => return None,
    };
    Some((days * 86_400 + seconds).div_ceil(60))
}

#[cfg(test)]
mod tests;
