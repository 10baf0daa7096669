//! When this worker's job will be ended by its cluster scheduler, so the
//! worker can stop taking blocks in time (see [`crate::drain`]).
//!
//! First match wins: `--walltime` (or `DAISY_WALLTIME`, which the driver
//! sets from a task's `time` for the workers it submits), counted from the
//! worker's start; else what the job's scheduler says is left of it, which
//! also holds for a limit that a custom job template sets: in a SLURM job
//! `squeue -o %L`, in an LSF job `bjobs -o time_left` (the run limit, to
//! the minute); else unknown, and only signals drain the worker.

use daisy_core::walltime::{parse_lsf_time_left, parse_slurm_time};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn job_end(walltime: Option<Duration>) -> Option<Instant> {
    let now = Instant::now();
    let left = walltime.or_else(slurm_time_left).or_else(lsf_time_left)?;
    tracing::info!("the job ends in {}s", left.as_secs());
    Some(now + left)
}

/// What SLURM says is left of this job, if it runs in one.
fn slurm_time_left() -> Option<Duration> {
    let job = std::env::var("SLURM_JOB_ID").ok()?;
    // An array element by its array's id and its index: for the element
    // whose job id is also the array's, `--jobs <id>` lists every element
    // of the array, a line each.
    let element = std::env::var("SLURM_ARRAY_JOB_ID")
        .and_then(|array| Ok(format!("{array}_{}", std::env::var("SLURM_ARRAY_TASK_ID")?)));
    let job = element.unwrap_or(job);
    let args = ["--noheader", "--jobs", &job, "--format", "%L"];
    parse_slurm_time(&ask("squeue", &args, &job)?)
}

/// What LSF says is left of this job's run limit, if it runs in one.
fn lsf_time_left() -> Option<Duration> {
    let job = std::env::var("LSB_JOBID").ok()?;
    let job = match std::env::var("LSB_JOBINDEX").ok().filter(|i| i != "0") {
        Some(index) => format!("{job}[{index}]"),
        None => job,
    };
    let args = ["-noheader", "-o", "time_left", &job];
    parse_lsf_time_left(&ask("bjobs", &args, &job)?)
}

/// The output of `program args` about `job`; `None`, with a warning, if
/// it cannot say.
fn ask(program: &str, args: &[&str], job: &str) -> Option<String> {
    match Command::new(program).args(args).output() {
        Ok(output) if output.status.success() => {
            Some(String::from_utf8_lossy(&output.stdout).into_owned())
        }
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            tracing::warn!(
                "{program} cannot tell job {job}'s time left: {}",
                stderr.trim()
            );
            None
        }
        Err(e) => {
            tracing::warn!("cannot run {program} to learn job {job}'s time left: {e}");
            None
        }
    }
}
