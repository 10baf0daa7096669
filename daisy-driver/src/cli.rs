//! The `daisy-driver` command line: clap types and one `command_*`
//! function per subcommand. The binary only parses and dispatches here.

use crate::pipeline::Pipeline;
use crate::plan::plan;
use crate::run_dir::RunDir;
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// Run a pipeline. Blocks run one at a time on this machine, each with
    /// the task's command; finished blocks are recorded in the run
    /// directory, so a re-run only runs what is left.
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
}

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
    let summary = crate::serial_run::run(&pipeline, &run_dir)?;
    print!("{}", summary.render());
    Ok(if summary.all_completed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
