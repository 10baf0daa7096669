//! The `daisy-worker` command line: where the worker's context comes from
//! (flags, a context file, or `DAISY_CONTEXT`), then the runtime, then the
//! exit code. The binary only parses and calls [`main`].
//!
//! The run token is read from a file or from the context, never taken from
//! the command line (any user of a node can read `ps`), and never printed.

use crate::client::{ConnectError, ConnectOpts};
use crate::runtime::{run, RunConfig, RunError, Stopped};
use anyhow::{anyhow, bail, Context};
use clap::Parser;
use daisy_core::context::{WorkerContext, CONTEXT_ENV};
use daisy_core::protocol::PROTOCOL_VERSION;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

/// The driver was unreachable or lost, or the task's code cannot run.
pub const EXIT_FAILURE: u8 = 1;
/// No context, or an invalid one; bad flags.
pub const EXIT_USAGE: u8 = 2;
/// The driver refused this worker.
pub const EXIT_REJECTED: u8 = 3;

const NO_CONTEXT: &str = "no daisy context: this worker does not know its driver. Give one of:
  --connect HOST:PORT --task ID --token-file FILE   (a worker started by hand)
  --context-file FILE [--task ID]                   (e.g. <run-dir>/context.json, written by the driver)
  the DAISY_CONTEXT environment variable            (set by the driver for the workers it launches)";

const AFTER_HELP: &str = "\
Where the worker finds its driver, first match wins:
  --connect HOST:PORT --task ID --token-file FILE   a worker started by hand
  --context-file FILE [--task ID]                   e.g. <run-dir>/context.json, written by the driver
  DAISY_CONTEXT (environment)                       set by the driver for the workers it launches
--task overrides the task of a context. The token is never given on the command line.

The worker's own messages go to stderr; RUST_LOG sets how many (default: info).
SIGTERM, SIGINT, SIGUSR1 or SIGUSR2 (e.g. from `#SBATCH --signal=B:USR1@120`):
drain: take no more blocks, finish the running one and report it, hand back the
blocks not started, exit 0. The worker also drains by itself when its job's
walltime (--walltime, else SLURM's time left) is too short for another block.

Exit status:
  0  the driver has no more work, or the worker was stopped by a signal
  1  the driver was unreachable or lost, or the task's code cannot run here
  2  no context or an invalid one, or bad flags
  3  rejected by the driver (wrong token, unknown task, other protocol version)";

/// Runs the blocks of one daisy task on this machine.
///
/// The worker connects to a run's driver, receives the task's code (a
/// block command run once per block, or a long-running worker command fed
/// blocks on its stdin), and runs it on one block after another until the
/// driver has no more work for it. Workers are usually launched by the
/// driver; start one by hand to add a machine to a running run.
#[derive(Debug, Parser)]
#[command(name = "daisy-worker", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// The driver's address, for a worker started by hand; repeat it to
    /// give several, tried in order. Needs --task and --token-file.
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Vec<String>,
    /// The task to serve; overrides the task named by a context.
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// A file holding the run's token (with --connect).
    #[arg(long, value_name = "FILE", requires = "connect")]
    pub token_file: Option<PathBuf>,
    /// A daisy context as JSON, such as the driver's <run-dir>/context.json
    /// (which names no task: give --task).
    #[arg(long, value_name = "FILE", conflicts_with = "connect")]
    pub context_file: Option<PathBuf>,
    /// How long to keep trying while the driver is not reachable yet
    /// (e.g. "90s", "5m").
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
    /// Where the output of the task's code goes:
    /// <DIR>/worker-<id>-user.out and .err.
    #[arg(long, value_name = "DIR", env = "DAISY_LOG_DIR", default_value = ".")]
    pub log_dir: PathBuf,
    /// How long this worker's job may run, counted from the worker's start
    /// (e.g. "2h"); the driver sets it from a task's `time`. Without it, a
    /// worker in a SLURM job asks squeue for the time left.
    #[arg(long, value_name = "DURATION", env = "DAISY_WALLTIME", value_parser = humantime::parse_duration)]
    pub walltime: Option<Duration>,
}

/// Resolves the context, runs the worker, picks the exit status. Call it
/// before any thread is started (see [`prepare`]).
pub fn main(cli: Cli) -> u8 {
    match prepare(cli) {
        Ok(config) => serve(config, StopSignals::Listen),
        Err(status) => status,
    }
}

/// What drains a worker from outside (SIGTERM, SIGINT, SIGUSR1, SIGUSR2;
/// see [`stop_signal`]).
pub enum StopSignals {
    /// The runtime installs its own handlers: the `daisy-worker` binary.
    Listen,
    /// An embedding that owns the process's handlers resolves this with
    /// the reason (`"received SIGTERM"`) when one arrives: an interpreter
    /// whose user code may install handlers of its own, which would
    /// replace the runtime's (one handler per signal and process).
    Given(Pin<Box<dyn Future<Output = String> + Send>>),
}

/// The worker's configuration, or the exit status if there is none (the
/// error is printed). It also readies the process for its user code:
/// it removes `DAISY_CONTEXT` from the environment, so nothing started
/// later inherits the token; it pins the calling thread to the cores the
/// driver gave (threads started later inherit them); and it makes the
/// process adopt what user code starts outside its process group. So
/// call it on the thread user code will run on, before any thread is
/// started; [`serve`] may then run on another.
pub fn prepare(cli: Cli) -> Result<RunConfig, u8> {
    let config = config(cli);
    std::env::remove_var(CONTEXT_ENV);
    let config = config.map_err(|e| {
        eprintln!("daisy-worker: error: {e:#}");
        EXIT_USAGE
    })?;
    crate::pinning::pin_to_given_cpus();
    // What user code starts outside its process group comes back to this
    // worker when its parent ends, and ends with it (in `serve`).
    crate::user_code::adopt_orphans();
    Ok(config)
}

/// Runs the worker prepared by [`prepare`] until it stops; its exit
/// status.
pub fn serve(config: RunConfig, stops: StopSignals) -> u8 {
    // One thread: the connection, the signals and a worker command's pipes
    // all wait on it, so passing a block on costs no thread hop (blocking
    // user code gets a thread of its own all the same).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("daisy-worker: error: cannot start the async runtime: {e}");
            return EXIT_FAILURE;
        }
    };
    // A task, not the `block_on` future itself: waking that one costs the
    // runtime an extra look at its I/O (an `epoll_wait`) per wake-up.
    let outcome = runtime.block_on(async {
        let stop = match stops {
            StopSignals::Listen => Box::pin(stop_signal()),
            StopSignals::Given(stop) => stop,
        };
        match tokio::spawn(run(config, stop)).await {
            Ok(outcome) => outcome,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    });
    // After an error a block may still run: exiting, not waiting, ends it,
    // and the watchdog stops whatever user processes are left.
    runtime.shutdown_background();
    crate::user_code::end_all_user_processes(crate::user_code::DEFAULT_GRACE);
    crate::user_code::end_children(crate::user_code::ADOPTED_GRACE);
    exit_code(outcome)
}

fn exit_code(outcome: Result<Stopped, RunError>) -> u8 {
    match outcome {
        Ok(Stopped::Shutdown { reason }) => {
            tracing::info!("no more work: {reason}");
            0
        }
        Ok(Stopped::Drained { reason }) => {
            tracing::info!("stopped ({reason})");
            0
        }
        Ok(Stopped::DriverGone { reason }) => {
            tracing::info!(
                "no more work: {reason}; the driver ended before the blocks in hand were \
                 reported, so a re-run runs them again"
            );
            0
        }
        Err(RunError::Connect(ConnectError::Rejected { reason })) => {
            eprintln!("daisy-worker: rejected by the driver: {reason}");
            EXIT_REJECTED
        }
        Err(e) => {
            eprintln!("daisy-worker: error: {e}");
            EXIT_FAILURE
        }
    }
}

/// Listens for the signals that drain a worker from now on (before
/// connecting, so that a signal arriving early drains the worker instead
/// of killing it): SIGTERM and SIGINT, and SIGUSR1 and SIGUSR2, which
/// SLURM (`--signal`) and LSF (`-wa`, and at a run limit) send ahead of
/// the end of a job. The future resolves when one arrives, saying which.
///
/// The signals are awaited in a task of their own: the main loop polls
/// its stop future on every wake-up, and polling four signal streams there
/// cost more than the rest of relaying a block.
fn stop_signal() -> impl Future<Output = String> + Send {
    let heard = tokio::spawn(signal_heard());
    async move {
        match heard.await {
            Ok(reason) => reason,
            // Only when the runtime shuts down: nothing waits any more.
            Err(_) => std::future::pending().await,
        }
    }
}

/// Resolves when one of the stop signals arrives, saying which.
fn signal_heard() -> impl std::future::Future<Output = String> {
    let listeners = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
    );
    async move {
        let (Ok(mut term), Ok(mut int), Ok(mut usr1), Ok(mut usr2)) = listeners else {
            tracing::warn!("cannot listen for signals: only the driver can stop this worker");
            return std::future::pending().await;
        };
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            _ = usr1.recv() => "SIGUSR1",
            _ = usr2.recv() => "SIGUSR2",
        };
        format!("received {name}")
    }
}

fn config(cli: Cli) -> anyhow::Result<RunConfig> {
    Ok(RunConfig {
        connect: connect_opts(&cli)?,
        log_dir: cli.log_dir,
        job_end: crate::job_end::job_end(cli.walltime),
    })
}

fn connect_opts(cli: &Cli) -> anyhow::Result<ConnectOpts> {
    let (context, source) = load_context(cli)?;
    if context.protocol != PROTOCOL_VERSION {
        bail!(
            "{source}: the context is for protocol version {}, this daisy-worker speaks version \
             {PROTOCOL_VERSION}: use the daisy-worker of the driver's release",
            context.protocol
        );
    }
    if context.addresses.is_empty() {
        bail!("{source}: the context lists no driver address");
    }
    let task = cli.task.clone().or(context.task_id);
    let task = task.ok_or_else(|| anyhow!("{source} names no task: give --task ID"))?;
    let mut opts = ConnectOpts::new(context.addresses, context.token, task);
    opts.worker_id = context
        .worker_id
        .map(|first| worker_id(first, |name| std::env::var(name).ok()));
    opts.connect_timeout = cli.connect_timeout;
    Ok(opts)
}

/// The id of a worker the driver started: `DAISY_WORKER_ID`, which a job
/// of several workers sets for each (see the sbatch template's
/// `run_workers`), else the array's `first` plus [`array_index`].
fn worker_id(first: u64, var: impl Fn(&str) -> Option<String>) -> u64 {
    let own = var("DAISY_WORKER_ID").and_then(|id| id.parse().ok());
    own.unwrap_or_else(|| first + array_index(var))
}

/// This worker's position in a job array: the driver submits N workers as
/// one array with one context naming the first worker id, so array task i
/// is worker `first + i`. SLURM numbers array tasks from 0
/// (`SLURM_ARRAY_TASK_ID`), LSF from 1 (`LSB_JOBINDEX`, 0 outside arrays).
fn array_index(var: impl Fn(&str) -> Option<String>) -> u64 {
    let number = |name: &str| var(name)?.parse::<u64>().ok();
    number("SLURM_ARRAY_TASK_ID")
        .or_else(|| number("LSB_JOBINDEX").map(|i| i.saturating_sub(1)))
        .unwrap_or(0)
}

/// The context, and where it came from (for messages).
fn load_context(cli: &Cli) -> anyhow::Result<(WorkerContext, String)> {
    if !cli.connect.is_empty() {
        return Ok((flags_context(cli)?, "--connect".into()));
    }
    if let Some(file) = &cli.context_file {
        return Ok((
            file_context(file)?,
            format!("context file {}", file.display()),
        ));
    }
    let text = std::env::var_os(CONTEXT_ENV).ok_or_else(|| anyhow!(NO_CONTEXT))?;
    let text = text
        .into_string()
        .map_err(|_| anyhow!("{CONTEXT_ENV} is not valid UTF-8"))?;
    let context = WorkerContext::from_json(&text).map_err(|e| anyhow!("{CONTEXT_ENV}: {e}"))?;
    Ok((context, CONTEXT_ENV.into()))
}

fn flags_context(cli: &Cli) -> anyhow::Result<WorkerContext> {
    let token_file = cli.token_file.as_deref().ok_or_else(|| {
        anyhow!(
            "--connect needs --token-file FILE: the run token is never given on the command line"
        )
    })?;
    Ok(WorkerContext {
        addresses: cli.connect.clone(),
        task_id: None,
        worker_id: None,
        token: read_token(token_file)?,
        protocol: PROTOCOL_VERSION,
    })
}

fn file_context(path: &Path) -> anyhow::Result<WorkerContext> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the context file {}", path.display()))?;
    WorkerContext::from_json(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
}

fn read_token(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("daisy-worker").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn flags_make_a_context_with_the_token_from_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret\n").unwrap();
        let token = token.to_str().unwrap();
        let cli = parse(&[
            "--connect",
            "h:1",
            "--connect",
            "h:2",
            "--task",
            "t",
            "--token-file",
            token,
        ]);
        let opts = connect_opts(&cli).unwrap();
        assert_eq!(opts.addresses, ["h:1", "h:2"]);
        assert_eq!(
            (opts.token.as_str(), opts.task_id.as_str()),
            ("s3cret", "t")
        );
        let no_task = parse(&["--connect", "h:1", "--token-file", token]);
        let error = connect_opts(&no_task).unwrap_err().to_string();
        assert!(error.contains("--task ID"), "{error}");
        let error = connect_opts(&parse(&["--connect", "h:1", "--task", "t"])).unwrap_err();
        assert!(error.to_string().contains("--token-file"), "{error}");
    }

    #[test]
    fn a_context_file_needs_a_task_and_the_right_protocol() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("context.json");
        let context = WorkerContext {
            addresses: vec!["h:1".into()],
            task_id: None,
            worker_id: None,
            token: "s3cret".into(),
            protocol: PROTOCOL_VERSION,
        };
        std::fs::write(&file, context.to_json()).unwrap();
        let path = file.to_str().unwrap();
        let error = connect_opts(&parse(&["--context-file", path])).unwrap_err();
        assert!(
            error.to_string().contains("names no task: give --task"),
            "{error}"
        );
        let opts = connect_opts(&parse(&["--context-file", path, "--task", "t"])).unwrap();
        assert_eq!((opts.task_id.as_str(), opts.worker_id), ("t", None));
        let old = WorkerContext {
            protocol: 0,
            ..context
        };
        std::fs::write(&file, old.to_json()).unwrap();
        let error = connect_opts(&parse(&["--context-file", path, "--task", "t"])).unwrap_err();
        assert!(error.to_string().contains("protocol version 0"), "{error}");
    }

    #[test]
    fn bad_flag_combinations_are_refused_by_the_parser() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("daisy-worker").chain(args.iter().copied()))
        };
        assert!(parse(&["--token-file", "f"]).is_err());
        assert!(parse(&["--connect", "h:1", "--context-file", "c"]).is_err());
        assert!(parse(&["--connect-timeout", "soon"]).is_err());
        let cli = parse(&["--context-file", "c", "--connect-timeout", "90s"]).unwrap();
        assert_eq!(cli.connect_timeout, Duration::from_secs(90));
    }

    #[test]
    fn array_tasks_count_from_the_first_worker_id() {
        let index = |name: &'static str, value: &'static str| {
            array_index(move |asked: &str| (asked == name).then(|| value.to_string()))
        };
        assert_eq!(array_index(|_: &str| None), 0);
        assert_eq!(index("SLURM_ARRAY_TASK_ID", "4"), 4);
        assert_eq!(index("LSB_JOBINDEX", "3"), 2);
        assert_eq!(index("LSB_JOBINDEX", "0"), 0);
        assert_eq!(index("SLURM_ARRAY_TASK_ID", "x"), 0);
    }

    #[test]
    fn a_worker_of_a_job_of_several_has_its_own_id() {
        let env = crate::test_env::env_of;
        let step = env(&[("SLURM_ARRAY_TASK_ID", "1"), ("DAISY_WORKER_ID", "13")]);
        assert_eq!(worker_id(10, step), 13);
        assert_eq!(worker_id(10, env(&[("SLURM_ARRAY_TASK_ID", "1")])), 11);
        assert_eq!(worker_id(10, env(&[("DAISY_WORKER_ID", "x")])), 10);
    }
}
