//! How long a run takes to get its SLURM workers connected: from
//! `daisy-driver run` to the last of W workers' `worker_connected`,
//! with one job per worker (the baseline, measured in the same run)
//! against jobs of P workers, each a job step (`workers_per_job`).
//!
//! Needs a SLURM with room for W one-cpu workers at once (the test
//! cluster of `ci/slurm/start-local-slurm.sh`, with
//! `DAISY_SLURM_NODES=3` for 32), and a daisy-worker of the same source
//! (`cargo build --release -p daisy-worker` first, or `DAISY_WORKER_BIN`). Each sample runs in a fresh directory under
//! /tmp; the driver is stopped (Ctrl-C, cancelling its jobs) once every
//! worker connected. docs/benchmarks.md records the figures.
//!
//! ```text
//! cargo bench -p daisy-driver --bench cluster_start [-- --workers 32 --per-job 8 --samples 3]
//! ```

use clap::Parser as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The driver binary Cargo built for this bench (bench profile).
const DRIVER: &str = env!("CARGO_BIN_EXE_daisy-driver");
/// How long all workers may take to connect before a sample fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, clap::Parser)]
struct Settings {
    /// Workers the task runs at once.
    #[arg(long, default_value_t = 32)]
    workers: u32,
    /// Workers per job in the compared configuration.
    #[arg(long, default_value_t = 8)]
    per_job: u32,
    /// Samples of each configuration (alternating); medians are printed.
    #[arg(long, default_value_t = 3)]
    samples: usize,
    /// Cargo passes `--bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> Result<(), String> {
    let settings = Settings::parse();
    let worker = worker_program()?;
    let (mut alone, mut stepped) = (Vec::new(), Vec::new());
    for sample in 0..settings.samples {
        alone.push(time_to_connect(&settings, 1, &worker, sample)?);
        stepped.push(time_to_connect(
            &settings,
            settings.per_job,
            &worker,
            sample,
        )?);
    }
    let (alone, stepped) = (median(&mut alone), median(&mut stepped));
    let (workers, per_job) = (settings.workers, settings.per_job);
    println!(
        "run to {workers} workers connected, medians of {}:",
        settings.samples
    );
    println!("  {workers} jobs of 1 worker:  {alone:6.2} s");
    println!(
        "  {} jobs of {per_job} workers: {stepped:6.2} s  ({:.2}x the baseline's time)",
        workers.div_ceil(per_job),
        stepped / alone
    );
    Ok(())
}

/// Seconds from starting the driver to `workers` connected workers, with
/// `per_job` workers per job.
fn time_to_connect(
    settings: &Settings,
    per_job: u32,
    worker: &Path,
    sample: usize,
) -> Result<f64, String> {
    let dir = tempfile::Builder::new()
        .prefix("daisy-cluster-start-")
        .tempdir_in("/tmp")
        .map_err(|e| e.to_string())?;
    let name = format!("start-{per_job}-{sample}");
    let pipeline = dir.path().join("p.toml");
    std::fs::write(&pipeline, pipeline_text(&name, settings.workers, per_job))
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut driver = Stopped(
        Command::new(DRIVER)
            .arg("run")
            .arg(&pipeline)
            .args(["--status-every", "1h"])
            .env("DAISY_WORKER_BIN", worker)
            .env("DAISY_POLL_INTERVAL", "1s")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(dir.path().join("driver.err")).map_err(|e| e.to_string())?,
            )
            .spawn()
            .map_err(|e| format!("cannot start {DRIVER}: {e}"))?,
    );
    let events = dir
        .path()
        .join("daisy_run")
        .join(&name)
        .join("events.jsonl");
    while connected(&events) < settings.workers {
        if let Ok(Some(status)) = driver.0.try_wait() {
            let said = std::fs::read_to_string(dir.path().join("driver.err")).unwrap_or_default();
            return Err(format!(
                "the driver exited before every worker connected ({status}):\n{said}"
            ));
        }
        if started.elapsed() > CONNECT_TIMEOUT {
            return Err(format!(
                "{} of {} workers connected within {CONNECT_TIMEOUT:?} ({per_job} per job); \
                 does the cluster have room for them?",
                connected(&events),
                settings.workers
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(started.elapsed().as_secs_f64())
}

/// One task whose blocks keep every worker busy long after it connected.
fn pipeline_text(name: &str, workers: u32, per_job: u32) -> String {
    format!(
        r#"name = "{name}"
[resources]
cpu = {workers}
[launcher]
kind = "sbatch"
time = "00:10:00"
workers_per_job = {per_job}
[[task]]
id = "{name}"
total_roi = {{ offset = [0], shape = [{blocks}] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = false
max_workers = {workers}
requires = {{ cpu = 1 }}
block_command = ["sleep", "60"]
"#,
        blocks = workers * 2
    )
}

fn connected(events: &Path) -> u32 {
    let text = std::fs::read_to_string(events).unwrap_or_default();
    text.lines()
        .filter(|line| line.contains(r#""event":"worker_connected""#))
        .count() as u32
}

/// The daisy-worker to start: `DAISY_WORKER_BIN`, else the one beside
/// the driver (built by `cargo build --release -p daisy-worker`).
fn worker_program() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("DAISY_WORKER_BIN") {
        return Ok(PathBuf::from(path));
    }
    let worker = PathBuf::from(DRIVER).with_file_name("daisy-worker");
    match worker.exists() {
        true => Ok(worker),
        false => Err(format!(
            "no {}: run `cargo build --release -p daisy-worker` or set DAISY_WORKER_BIN",
            worker.display()
        )),
    }
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// A driver stopped as a user would, with Ctrl-C (it cancels its jobs),
/// and waited for.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let _ = self.0.wait();
    }
}
