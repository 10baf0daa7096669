//! The `daisy-driver` command line: clap types and one `command_*`
//! function per subcommand. The binary only parses and dispatches here.

use crate::inspect::dashboard::Dashboard;
use crate::inspect::plan::plan;
use crate::inspect::plan::scripts::WorkerProgram;
use crate::inspect::report::{self, ReportFormat};
use crate::pipeline::Pipeline;
use crate::run::distributed::RunOptions;
use crate::run::embedding::python_for_workers;
use crate::run::launching::per_kind::TaskLaunchers;
use crate::run::launching::LaunchSettings;
use crate::run::output::summary::ReRun;
use crate::run_dir::RunDir;
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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
    /// already done, the workers each task gets phase by phase as tasks
    /// drain, the job scripts a run would submit (with --scripts), and every
    /// problem that would stop a run; exits non-zero if there is one.
    Plan(PlanOpts),
    /// Run a pipeline: serve blocks over TCP to workers started through the
    /// launcher (and to workers started by hand). Finished blocks are
    /// recorded in the run directory, so a re-run only runs what is left.
    /// Ctrl-C or SIGTERM stop the run within a second.
    Run(RunOpts),
    /// Where a run stands, from its run directory alone: per task blocks
    /// done, failed, orphaned and remaining, the failed blocks with their
    /// last error and log file, the workers of the last run and how each
    /// ended. If the run's driver is running (found through
    /// context.json), also its live view: workers, blocks in flight,
    /// blocks/s, ETA. Exit status: 0 finished, 1 failed, 3 incomplete,
    /// 2 error.
    Status(StatusOpts),
    /// Start tasks over: delete the done markers of TASK and of every
    /// task downstream of it. Lists them and asks first (--yes to skip
    /// the question, required when stdin is not a terminal).
    Reset(ResetOpts),
    /// Draw a run: a self-contained HTML page (or one SVG or PNG picture)
    /// with a timeline of the workers, blocks per second per task, block
    /// run times, the execution summary, and a picture of each task's done
    /// markers. Works from the run directory alone, for finished, crashed
    /// and still running runs.
    Report(ReportOpts),
    /// Run a worker: the same program as `daisy-worker` (see
    /// `daisy-driver worker --help`), built into the driver so that one
    /// binary is enough on a cluster.
    #[command(disable_help_flag = true)]
    Worker {
        /// The arguments of daisy-worker.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
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
    /// Print the plan as JSON (for scripts); it holds the job scripts too.
    #[arg(long)]
    pub json: bool,
    /// Also print the job script (or, for the local launcher, the command
    /// lines) of each task's first submission, byte for byte what a run
    /// started from the same directory submits.
    #[arg(long)]
    pub scripts: bool,
    /// Ask the scheduler whether it would take each task's first
    /// submission, without submitting (`sbatch --test-only`; slurmrestd
    /// through sbatch when it is on PATH; LSF has no such test), and show
    /// its own words; a refusal is a problem (exit 2).
    #[arg(long)]
    pub check: bool,
    /// The daisy-worker binary launched workers would run, as for `run`
    /// [default: beside daisy-driver, else on PATH].
    #[arg(long, env = "DAISY_WORKER_BIN")]
    pub worker_bin: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunOpts {
    #[command(flatten)]
    pub pipeline: PipelineOpts,
    /// Run blocks one at a time inside the driver, without workers
    /// (debugging, small jobs).
    #[arg(long)]
    pub serial: bool,
    /// Address to listen on (0.0.0.0:0: every interface, a free port,
    /// every address advertised to workers). Default: loopback only
    /// (127.0.0.1, a free port) when every worker is started on this
    /// machine by the local launcher; every interface when a task has a
    /// cluster launcher or takes workers started by hand (max_workers = 0).
    #[arg(long, env = "DAISY_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// The listener and token a program that starts the driver in its own
    /// process reserved before the run; never from the command line.
    #[arg(skip)]
    pub reserved: crate::run::context::Reserved,
    /// Serve a live, read-only web page of the run: tasks, workers, blocks
    /// per second, failed blocks and the report's views. ADDR is HOST:PORT,
    /// HOST or PORT (--dashboard=0.0.0.0:8790); without it 127.0.0.1 and
    /// port 8790 (a free one if taken). The URL, with its token, is
    /// printed and written to RUN_DIR/dashboard.url; from a laptop: ssh -L
    /// 8790:127.0.0.1:8790 NODE, then open it.
    #[arg(
        long,
        value_name = "ADDR",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "127.0.0.1",
        conflicts_with = "serial"
    )]
    pub dashboard: Option<crate::inspect::dashboard::DashboardAddr>,
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
    /// How often the cluster scheduler is asked for the states of the
    /// run's jobs (one squeue/bjobs call for all of them).
    #[arg(long, env = "DAISY_POLL_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,
    /// Leave the run's cluster jobs queued or running when the driver
    /// exits, instead of cancelling them.
    #[arg(long)]
    pub leave_jobs: bool,
    /// Run only the blocks that failed for good in the last run and the
    /// blocks waiting for them (orphans); done blocks are skipped and any
    /// other block is left for a later run without this flag.
    #[arg(long, conflicts_with = "reset")]
    pub retry_failed: bool,
    /// Start every task over without asking: no block is skipped because
    /// an earlier run in this run directory finished it (its done markers
    /// are deleted first). A run of a daisy program without done tracking
    /// (Python's run_blockwise) is such a run.
    #[arg(long, conflicts_with_all = ["reset", "retry_failed"])]
    pub fresh: bool,
    /// Done tracking is off (`run_blockwise` without tracking, as daisy
    /// 2.0): the run starts over as with --fresh, and a stop says that a
    /// re-run starts over too, and how to turn tracking on.
    #[arg(long, hide = true, conflicts_with_all = ["reset", "retry_failed"])]
    pub untracked: bool,
    /// Start TASK over before running: delete its done markers and those
    /// of its downstream tasks (asks first, see --yes). Repeatable.
    #[arg(long, value_name = "TASK")]
    pub reset: Vec<String>,
    /// Let --reset delete done markers without asking.
    #[arg(long)]
    pub yes: bool,
    /// Print no progress: neither bars on a terminal nor status lines in a
    /// file.
    #[arg(long)]
    pub no_progress: bool,
    /// Print no summary at the end (`daisy-driver status` shows it later).
    #[arg(long)]
    pub no_summary: bool,
    /// Print nothing on stdout: no progress, no summary, no start-up lines.
    /// Errors and warnings still go to stderr; the exit status and
    /// `daisy-driver status` tell the outcome.
    #[arg(short, long)]
    pub quiet: bool,
    /// A fork server's socket, an open file descriptor of this process:
    /// Python workers are forked by it (`run_blockwise` passes one; see
    /// launchers' `ForkServer`).
    #[arg(long, value_name = "FD", hide = true)]
    pub fork_server: Option<std::os::fd::RawFd>,
    /// Start no fork server of the driver's own: Python workers start as
    /// fresh interpreters unless --fork-server gives one (`run_blockwise`
    /// decides for its workers itself).
    #[arg(long, hide = true)]
    pub no_fork_server: bool,
}

impl RunOpts {
    /// Whether the run deletes every done marker first.
    fn starts_over(&self) -> bool {
        self.fresh || self.untracked
    }

    /// What running this command again does with the blocks it finishes.
    fn re_run(&self) -> ReRun {
        match (self.untracked, self.fresh) {
            (true, _) => ReRun::StartsOver,
            (false, true) => ReRun::ResumesWithoutFresh,
            (false, false) => ReRun::Resumes,
        }
    }

    /// How often a progress line is printed, or None for no progress.
    fn progress_every(&self) -> Option<Duration> {
        (!self.no_progress && !self.quiet).then_some(self.status_every)
    }
}

#[derive(Debug, Args)]
pub struct StatusOpts {
    /// The run directory (e.g. daisy_run/<pipeline name>).
    pub run_dir: PathBuf,
    /// Print the status as JSON (for scripts; see docs/inspection.md).
    #[arg(long)]
    pub json: bool,
    /// The pipeline file, for run directories of runs that did not record
    /// it (pipeline.json) [default: the recorded one].
    #[arg(long)]
    pub pipeline: Option<PathBuf>,
    /// Show the status again every `--every` while the run's driver runs,
    /// and end with the final state (on a terminal each snapshot replaces
    /// the last; with --json, one JSON object per line).
    #[arg(long)]
    pub watch: bool,
    /// How often --watch shows the status (at least 100ms).
    #[arg(long, default_value = "2s", value_name = "DURATION", value_parser = watch_interval, requires = "watch")]
    pub every: Duration,
}

#[derive(Debug, Args)]
pub struct ResetOpts {
    #[command(flatten)]
    pub pipeline: PipelineOpts,
    /// The tasks to start over (their downstream tasks are reset too).
    #[arg(required = true, value_name = "TASK")]
    pub tasks: Vec<String>,
    /// Delete without asking.
    #[arg(long)]
    pub yes: bool,
}

/// `daisy-driver report`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  daisy-driver report daisy_run/demo            # writes daisy_run/demo/report.html
  daisy-driver report daisy_run/demo --format png -o run.png

The page needs no network: open it in any browser, or mail it. Hover over a
bar, line or cell for details (block id, run time, counts). The worker
timeline has one row per worker: its job's wait in the queue (light blue),
a line while it was connected, its blocks coloured by outcome (green done,
orange failed and retried, red failed for good; a red tick: worker lost).
Blocks too short to see are merged, showing the worst outcome among them.
The done-marker pictures show one cell per block (of the middle slice for
3-D tasks): done, failed, orphaned (will not run because something it
depends on failed) or remaining (not run yet, or running), as `status`
counts them. One run of the run directory is drawn, by default the last
that ran a block (see --run), and the page says which; the done-marker
pictures include the blocks of every run.")]
pub struct ReportOpts {
    /// The run directory (the one `run` used, e.g. daisy_run/<name>).
    pub run_dir: PathBuf,
    /// What to write.
    #[arg(long, value_enum, default_value = "html")]
    pub format: ReportFormat,
    /// Where to write [default: <run-dir>/report.<format>].
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Which run to draw, counting from 1 in the order of events.jsonl
    /// [default: the last that ran a block (the last run if none did),
    /// since a re-run that found every block done has nothing to draw].
    #[arg(long, value_name = "N")]
    pub run: Option<usize>,
}

/// How long launched workers get between SIGTERM and SIGKILL when the run
/// ends, so that Ctrl-C stops everything within about a second.
const STOP_GRACE: Duration = Duration::from_millis(500);

/// Heartbeats more often than this would only load the network.
const MIN_HEARTBEAT: Duration = Duration::from_millis(100);

/// What stops a distributed run as Ctrl-C does: for the CLI, Ctrl-C or
/// SIGTERM; a program that embeds the driver on a thread of its own (the
/// Python package) passes its own, and so installs no signal handler.
pub type StopSignal = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Runs the parsed command line and picks the exit code.
pub fn main(cli: Cli) -> anyhow::Result<u8> {
    main_stopped_by(cli, Box::pin(stop_signal()))
}

/// [`main`], with a distributed run stopped by `stop`.
pub fn main_stopped_by(cli: Cli, stop: StopSignal) -> anyhow::Result<u8> {
    match cli.command {
        Command::Plan(opts) => command_plan(opts),
        Command::Run(opts) => command_run(opts, stop),
        Command::Status(opts) => command_status(opts),
        Command::Reset(opts) => command_reset(opts),
        Command::Report(opts) => command_report(opts),
        Command::Worker { args } => Ok(command_worker(args)),
    }
}

fn load(opts: &PipelineOpts) -> anyhow::Result<(Pipeline, RunDir)> {
    let pipeline = Pipeline::load(&opts.pipeline, &python_for_workers())?;
    let run_dir = RunDir::new(opts.run_dir.as_deref(), &pipeline.name);
    Ok((pipeline, run_dir))
}

fn command_plan(opts: PlanOpts) -> anyhow::Result<u8> {
    let (pipeline, run_dir) = load(&opts.pipeline)?;
    let (program, program_args) = worker_program(opts.worker_bin.as_deref())?;
    let worker = WorkerProgram {
        path: &program,
        args: &program_args,
    };
    let mut plan = plan(&pipeline, &run_dir, worker);
    if opts.check {
        plan.check_submissions();
    }
    if opts.json {
        crate::run::output::stdout::print_line(format_args!(
            "{}",
            serde_json::to_string_pretty(&plan).context("encoding the plan")?
        ));
    } else {
        crate::run::output::stdout::print(format_args!("{}", plan.render(opts.scripts)));
    }
    // Every problem the plan lists makes `run` refuse to start, which is
    // exit status 2: the two agree (issue 38).
    Ok(if plan.is_runnable() { 0 } else { 2 })
}

/// Everything that can refuse the run (the pipeline, programs that do
/// not start, done markers of another layout, --reset's answer, the port,
/// the launcher, the lock) is checked before the run directory is written
/// to, so a run that does not start leaves it as it was.
fn command_run(mut opts: RunOpts, stop: StopSignal) -> anyhow::Result<u8> {
    crate::run::output::stdout::set_quiet(opts.quiet);
    let (pipeline, run_dir) = load(&opts.pipeline)?;
    let (worker, _) = worker_program(opts.worker_bin.as_deref())?;
    refuse_programs_that_cannot_start(&pipeline, (!opts.serial).then_some(&*worker))?;
    let reset_tasks = match opts.starts_over() {
        true => pipeline.tasks.iter().map(|t| t.spec.id.clone()).collect(),
        false => opts.reset.clone(),
    };
    let resets = crate::run_dir::reset::markers_to_delete(&pipeline, &run_dir, &reset_tasks)?;
    crate::run_dir::start_checks::check_markers(&pipeline, &run_dir, &resets)?;
    if !opts.reset.is_empty() {
        crate::run_dir::reset::confirm(&resets, opts.yes)?;
    }
    // The failures to retry are those of the run before this one.
    let only_blocks = match opts.retry_failed {
        true => Some(crate::run::retry::only_failed(&pipeline, &run_dir)?),
        false => None,
    };
    let server = match opts.serial {
        true => None,
        false => Some(BlockServer::prepare(
            &mut opts,
            &pipeline,
            only_blocks.clone(),
        )?),
    };
    let _lock = crate::run_dir::lock::RunLock::acquire(&run_dir, "run")?;
    crate::run::launching::earlier_jobs::cancel(&run_dir, launch_settings(&opts))?;
    crate::run_dir::reset::delete(&resets)?;
    if !opts.starts_over() {
        crate::run_dir::reset::announce_deleted(&resets);
    }
    run_dir.record_pipeline(&opts.pipeline.pipeline)?;
    let summary = match server {
        None => {
            let progress_every = opts.progress_every();
            crate::run::serial::run(&pipeline, &run_dir, only_blocks.as_ref(), progress_every)?
        }
        Some(server) => server.run(pipeline, &run_dir, announced(stop, opts.re_run()))?,
    };
    if !opts.no_summary {
        crate::run::output::stdout::print(format_args!("{}", summary.render(opts.re_run())));
    }
    Ok(summary.exit_code())
}

/// A program that will not start would fail every try of every block:
/// the run does not start (see [`crate::run::program_check`]).
fn refuse_programs_that_cannot_start(
    pipeline: &Pipeline,
    worker: Option<&Path>,
) -> anyhow::Result<()> {
    let dir = std::env::current_dir().context("reading the working directory")?;
    let problems = crate::run::program_check::check_programs(pipeline, &dir, worker).problems;
    match problems.as_slice() {
        [] => Ok(()),
        [one] => anyhow::bail!("{one}"),
        many => anyhow::bail!(
            "{} programs cannot start:\n  - {}",
            many.len(),
            many.join("\n  - ")
        ),
    }
}

/// A distributed run, checked and bound but not started.
struct BlockServer {
    options: RunOptions,
    listener: std::net::TcpListener,
    /// `--dashboard`'s, bound.
    dashboard: Option<std::net::TcpListener>,
    launcher: Box<dyn launchers::Launcher>,
    runtime: tokio::runtime::Runtime,
}

impl BlockServer {
    fn prepare(
        opts: &mut RunOpts,
        pipeline: &Pipeline,
        only_blocks: Option<crate::run::retry::OnlyBlocks>,
    ) -> anyhow::Result<Self> {
        let mut options = run_options(opts, only_blocks)?;
        let launcher = Box::new(TaskLaunchers::new(pipeline, launch_settings(opts))?);
        options.token = opts.reserved.token.take();
        let listener = match opts.reserved.listener.take() {
            Some(listener) => listener,
            None => {
                let address = (opts.listen)
                    .unwrap_or_else(|| crate::run::context::default_listen_address(pipeline));
                std::net::TcpListener::bind(address)
                    .with_context(|| format!("listening on {address}"))?
            }
        };
        let dashboard = (opts.dashboard.as_ref())
            .map(|addr| (addr.bind()).with_context(|| format!("--dashboard {addr}: listening")))
            .transpose()?;
        let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
        Ok(Self {
            options,
            listener,
            dashboard,
            launcher,
            runtime,
        })
    }

    fn run(
        self,
        pipeline: Pipeline,
        run_dir: &RunDir,
        stop: StopSignal,
    ) -> anyhow::Result<crate::run::output::summary::RunSummary> {
        self.runtime.block_on(async {
            let dashboard = (self.dashboard)
                .map(|listener| Dashboard::start(listener, run_dir))
                .transpose()?;
            let summary = crate::run::distributed::run(
                Arc::new(pipeline),
                run_dir,
                self.options,
                self.listener,
                self.launcher,
                stop,
            )
            .await;
            if let Some(dashboard) = dashboard {
                dashboard.finish().await;
            }
            summary
        })
    }
}

fn launch_settings(opts: &RunOpts) -> LaunchSettings {
    LaunchSettings {
        poll_interval: opts.poll_interval,
        stop_grace: STOP_GRACE,
        fork_server: opts.fork_server,
        fork_workers: !opts.no_fork_server,
    }
}

fn run_options(
    opts: &RunOpts,
    only_blocks: Option<crate::run::retry::OnlyBlocks>,
) -> anyhow::Result<RunOptions> {
    if opts.heartbeat_interval < MIN_HEARTBEAT {
        anyhow::bail!(
            "--heartbeat-interval {:?} is too short: at least {MIN_HEARTBEAT:?}",
            opts.heartbeat_interval
        );
    }
    let (worker_program, worker_args) = worker_program(opts.worker_bin.as_deref())?;
    Ok(RunOptions {
        heartbeat_interval: opts.heartbeat_interval,
        heartbeat_misses: opts.heartbeat_misses.max(1),
        worker_program,
        worker_args,
        leave_jobs: opts.leave_jobs,
        token: None,
        progress_every: opts.progress_every(),
        only_blocks,
    })
}

/// `--every`: a duration of at least [`MIN_WATCH_INTERVAL`], so that a
/// watch never asks the driver without a pause.
fn watch_interval(text: &str) -> Result<Duration, String> {
    let every = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    match every < MIN_WATCH_INTERVAL {
        true => Err(format!(
            "{text} is too short: at least {MIN_WATCH_INTERVAL:?}"
        )),
        false => Ok(every),
    }
}

const MIN_WATCH_INTERVAL: Duration = Duration::from_millis(100);

fn command_status(opts: StatusOpts) -> anyhow::Result<u8> {
    let run_dir = RunDir::at(&opts.run_dir);
    if opts.watch {
        let pipeline = opts.pipeline.as_deref();
        return crate::inspect::status::watch(&run_dir, pipeline, opts.every, opts.json);
    }
    let status = crate::inspect::status::status(&run_dir, opts.pipeline.as_deref())?;
    if opts.json {
        crate::run::output::stdout::print_line(format_args!(
            "{}",
            serde_json::to_string_pretty(&status).context("encoding the status")?
        ));
    } else {
        crate::run::output::stdout::print(format_args!("{}", status.render()));
    }
    Ok(status.state.exit_code())
}

fn command_reset(opts: ResetOpts) -> anyhow::Result<u8> {
    let (pipeline, run_dir) = load(&opts.pipeline)?;
    let markers = crate::run_dir::reset::markers_to_delete(&pipeline, &run_dir, &opts.tasks)?;
    crate::run_dir::reset::confirm(&markers, opts.yes)?;
    if !markers.is_empty() {
        let _lock = crate::run_dir::lock::RunLock::acquire(&run_dir, "reset")?;
        crate::run_dir::reset::delete(&markers)?;
        crate::run_dir::reset::announce_deleted(&markers);
    }
    Ok(crate::exit::SUCCESS)
}

/// What launched workers run: the given program, else the Python worker
/// of the interpreter this driver runs in (`crate::run::embedding`), else
/// `daisy-worker` beside this program or on PATH, else this program's
/// own `worker` subcommand (one binary is then enough).
fn worker_program(given: Option<&std::path::Path>) -> anyhow::Result<(PathBuf, Vec<String>)> {
    if let Some(path) = given {
        return Ok((path.to_path_buf(), Vec::new()));
    }
    if let Some(python_worker) = crate::run::embedding::python_worker() {
        return Ok(python_worker);
    }
    match launchers::find_worker_program() {
        Ok(path) => Ok((path, Vec::new())),
        Err(error) => {
            let driver = std::env::current_exe().context("finding daisy-driver's own path")?;
            tracing::info!("{error:#}; workers run `{} worker`", driver.display());
            Ok((driver, vec!["worker".to_string()]))
        }
    }
}

fn command_report(opts: ReportOpts) -> anyhow::Result<u8> {
    let run_dir = RunDir::at(&opts.run_dir);
    let output = opts.output.unwrap_or_else(|| {
        run_dir
            .path()
            .join(format!("report.{}", opts.format.extension()))
    });
    // The errors name the files at fault.
    let written = report::write(&run_dir, opts.format, &output, opts.run)?;
    for warning in &written.warnings {
        eprintln!("daisy-driver: warning: {warning}");
    }
    crate::run::output::stdout::print_line(format_args!("{}", written.path.display()));
    Ok(crate::exit::SUCCESS)
}

fn command_worker(args: Vec<String>) -> u8 {
    daisy_worker::cli::main(daisy_worker::cli::Cli::parse_from(worker_argv(args)))
}

/// `daisy-driver worker ARGS` as the worker's own command line, named so
/// that its usage lines show the command that was typed.
fn worker_argv(args: Vec<String>) -> impl Iterator<Item = String> {
    std::iter::once("daisy-driver worker".to_string()).chain(args)
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
}

/// `stop`, saying when it comes that the run stops and what a re-run
/// will do (see [`ReRun`]).
fn announced(stop: StopSignal, re_run: ReRun) -> StopSignal {
    Box::pin(async move {
        stop.await;
        eprintln!("daisy-driver: stopping ({})", re_run.stopping_note());
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_worker_subcommand_names_itself_in_its_usage() {
        let help = daisy_worker::cli::Cli::try_parse_from(worker_argv(vec!["--help".into()]))
            .unwrap_err()
            .to_string();
        assert!(help.contains("Usage: daisy-driver worker"), "{help}");
    }

    /// Issue 38: `--run`'s default and the closing paragraph said two
    /// different things about which run is drawn.
    #[test]
    fn report_help_says_one_thing_of_which_run_is_drawn() {
        let mut cli = Cli::command();
        let report = cli.find_subcommand_mut("report").unwrap();
        let help = report.render_long_help().to_string();
        assert!(
            help.contains("[default: the last that ran a block")
                && help.contains("by default the last\nthat ran a block (see --run)")
                && !help.contains("Only the last run"),
            "{help}"
        );
    }

    /// Issue 38: the user guide's command summary lacked `--fresh`, `-q`,
    /// `--format json` and `--run`; it names every option now.
    #[test]
    fn the_user_guides_command_summary_names_every_option() {
        let guide = include_str!("../../docs/user-guide.md");
        let start = guide.find("```sh\ndaisy-driver plan").unwrap();
        let summary = &guide[start..][..guide[start..][3..].find("```").unwrap()];
        let cli = Cli::command();
        for command in cli.get_subcommands().filter(|c| c.get_name() != "worker") {
            let visible = command.get_arguments().filter(|a| !a.is_hide_set());
            for long in visible
                .filter_map(|a| a.get_long())
                .filter(|&l| l != "help")
            {
                assert!(
                    summary.contains(&format!("--{long}")),
                    "`{} --{long}` is missing from:\n{summary}",
                    command.get_name()
                );
            }
        }
        for value in ["-q", "--format html|svg|png|json"] {
            assert!(
                summary.contains(value),
                "{value} is missing from:\n{summary}"
            );
        }
    }

    /// Issue 38: the README's `plan` command had no `--release`, so it
    /// built everything again after the demo's release build.
    #[test]
    fn every_cargo_run_in_the_readme_and_guides_reuses_the_first_ones_build() {
        let docs = [
            include_str!("../../README.md"),
            include_str!("../../docs/user-guide.md"),
            include_str!("../../docs/inspection.md"),
            include_str!("../../docs/cluster-guide.md"),
            include_str!("../../docs/python.md"),
        ];
        let commands: Vec<&str> = (docs.iter())
            .flat_map(|doc| doc.match_indices("cargo run").map(|(at, _)| &doc[at..]))
            .map(|rest| rest.split(" -- ").next().unwrap())
            .collect();
        assert!(commands.len() > 1, "{commands:?}");
        assert!(
            commands.iter().all(|c| *c == commands[0]),
            "each builds what the first does: {commands:?}"
        );
    }

    /// Issue 38: the wheel's extension was 80 MB of mostly debug info. What
    /// is shipped is built with a stripped profile without debug info.
    #[test]
    fn the_wheel_is_built_with_the_stripped_dist_profile() {
        let cargo: toml::Value = toml::from_str(include_str!("../../Cargo.toml")).unwrap();
        let dist = &cargo["profile"]["dist"];
        assert_eq!(dist["strip"].as_bool(), Some(true), "{dist}");
        assert_eq!(dist["debug"].as_bool(), Some(false), "{dist}");
        let pyproject: toml::Value =
            toml::from_str(include_str!("../../python/pyproject.toml")).unwrap();
        assert_eq!(
            pyproject["tool"]["maturin"]["profile"].as_str(),
            Some("dist")
        );
    }
}
