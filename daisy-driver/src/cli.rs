//! The `daisy-driver` command line: clap types and one `command_*`
//! function per subcommand. The binary only parses and dispatches here.

use crate::driver::RunOptions;
use crate::pipeline::Pipeline;
use crate::plan::plan;
use crate::run_dir::RunDir;
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Runs blockwise pipelines over huge n-dimensional volumes.
///
/// A pipeline file (TOML or JSON) lists tasks over regions of interest;
/// the driver splits each into blocks, respects the dependencies between
/// overlapping blocks and between tasks, and records finished blocks so
/// that running the same pipeline again resumes where it stopped.
#[derive(Debug, Parser)]
#[command(name = "daisy-driver", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what a run would do, without doing it: blocks, levels, blocks
    /// already done, workers per task under the budget. Exits non-zero with
    /// every problem listed if the pipeline file is invalid.
    Plan(PlanOpts),
    /// Run a pipeline: serve blocks over TCP to workers started through the
    /// launcher (and to workers started by hand). Finished blocks are
    /// recorded in the run directory, so a re-run only runs what is left.
    /// Ctrl-C or SIGTERM stop the run within a second.
    Run(RunOpts),
}

/// Where the pipeline file and the run directory are.
#[derive(Debug, Args)]
pub struct PipelineOpts {
    /// The pipeline file (TOML, or JSON if it ends in .json).
    pub pipeline: PathBuf,
    /// Where done markers, events and logs live
    /// [default: ./daisy_run/<pipeline name>].
    #[arg(long, env = "DAISY_RUN_DIR")]
    pub run_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PlanOpts {
    #[command(flatten)]
    pub pipeline: PipelineOpts,
    /// Print the plan as JSON (for scripts).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunOpts {
    #[command(flatten)]
    pub pipeline: PipelineOpts,
    /// Run blocks one at a time inside the driver, without workers
    /// (debugging, small jobs).
    #[arg(long)]
    pub serial: bool,
    /// Address to listen on; the default takes every interface and a free
    /// port, and advertises every address to workers.
    #[arg(long, env = "DAISY_LISTEN", default_value = "0.0.0.0:0")]
    pub listen: SocketAddr,
    /// How often driver and workers send heartbeats.
    #[arg(long, env = "DAISY_HEARTBEAT_INTERVAL", default_value = "8s", value_parser = humantime::parse_duration)]
    pub heartbeat_interval: Duration,
    /// Missed heartbeats after which a peer counts as gone.
    #[arg(long, env = "DAISY_HEARTBEAT_MISSES", default_value_t = 2)]
    pub heartbeat_misses: u32,
    /// The daisy-worker binary for launched workers [default: beside
    /// daisy-driver, else on PATH].
    #[arg(long, env = "DAISY_WORKER_BIN")]
    pub worker_bin: Option<PathBuf>,
    /// How often a status line is printed when stdout is not a terminal.
    #[arg(long, env = "DAISY_STATUS_EVERY", default_value = "10s", value_parser = humantime::parse_duration)]
    pub status_every: Duration,
}

/// How long launched workers get between SIGTERM and SIGKILL when the run
/// ends, so that Ctrl-C stops everything within about a second.
const STOP_GRACE: Duration = Duration::from_millis(500);

/// Runs the parsed command line and picks the exit code.
pub fn main(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plan(opts) => command_plan(opts),
        Command::Run(opts) => command_run(opts),
    }
}

fn load(opts: &PipelineOpts) -> anyhow::Result<(Pipeline, RunDir)> {
    let pipeline = Pipeline::load(&opts.pipeline)?;
    let run_dir = RunDir::new(opts.run_dir.as_deref(), &pipeline.name);
    Ok((pipeline, run_dir))
}

fn command_plan(opts: PlanOpts) -> anyhow::Result<ExitCode> {
    let (pipeline, run_dir) = load(&opts.pipeline)?;
    let plan = plan(&pipeline, &run_dir);
    if opts.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&plan).context("encoding the plan")?
        );
    } else {
        print!("{}", plan.render());
    }
    Ok(if plan.is_runnable() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn command_run(opts: RunOpts) -> anyhow::Result<ExitCode> {
    let (pipeline, run_dir) = load(&opts.pipeline)?;
    let summary = if opts.serial {
        crate::serial_run::run(&pipeline, &run_dir)?
    } else {
        let options = run_options(&opts)?;
        let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
        let launcher = Box::new(launchers::LocalLauncher::with_grace(STOP_GRACE));
        runtime.block_on(crate::driver::run(
            Arc::new(pipeline),
            &run_dir,
            options,
            launcher,
            stop_signal(),
        ))?
    };
    print!("{}", summary.render());
    Ok(summary.exit_code())
}

fn run_options(opts: &RunOpts) -> anyhow::Result<RunOptions> {
    let worker_program = match &opts.worker_bin {
        Some(path) => path.clone(),
        None => launchers::find_worker_program()?,
    };
    Ok(RunOptions {
        listen: opts.listen,
        heartbeat_interval: opts.heartbeat_interval,
        heartbeat_misses: opts.heartbeat_misses.max(1),
        worker_program,
        status_every: opts.status_every,
    })
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => return std::future::pending().await,
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("daisy-driver: stopping (a re-run resumes)");
}
