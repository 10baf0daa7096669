//! When this worker's job will be ended by its cluster scheduler, so the
//! worker can stop taking blocks in time (see [`crate::drain`]).
//!
//! First match wins: `--walltime` (or `DAISY_WALLTIME`, which the driver
//! sets from a task's `time` for the workers it submits), counted from the
//! worker's start; else, in a SLURM job, the time SLURM says is left
//! (`squeue -o %L`, which also holds for a `--time` that a custom job
//! template sets); else unknown, and only signals drain the worker.

use daisy_core::walltime::parse_slurm_time;
use std::process::Command;
use std::time::{Duration, Instant};

pub fn job_end(walltime: Option<Duration>) -> Option<Instant> {
    let now = Instant::now();
    let left = walltime.or_else(|| {
        let job = std::env::var("SLURM_JOB_ID").ok()?;
        slurm_time_left(&job)
    })?;
    tracing::info!("the job ends in {}s", left.as_secs());
    Some(now + left)
}

/// What SLURM says is left of job `job`; `None` if squeue cannot say.
fn slurm_time_left(job: &str) -> Option<Duration> {
    let output = Command::new("squeue")
        .args(["--noheader", "--jobs", job, "--format", "%L"])
        .output();
    match output {
        Ok(output) if output.status.success() => {
            let text = String::from_utf8_lossy(&output.stdout);
            parse_slurm_time(&text)
        }
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            tracing::warn!(
                "squeue cannot tell job {job}'s time left: {}",
                stderr.trim()
            );
            None
        }
        Err(e) => {
            tracing::warn!("cannot run squeue to learn job {job}'s time left: {e}");
            None
        }
    }
}
