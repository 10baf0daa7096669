//! The distributed run: a block server on TCP, workers started through a
//! launcher, and one run loop that owns all scheduling state.
//!
//! Like mini-redis's server: the run loop is one `select!` over
//! connection events, launcher events, a periodic tick and the stop
//! signal, each branch handing its input to the [`shell::Shell`], which
//! passes it to the synchronous [`core::Core`] (every rule of the run)
//! and carries out what the core decides. Connections (one task each, in
//! [`crate::run::distributed::connection`]) and the accept loop only move messages; nothing
//! outside the loop touches the scheduler, so there are no locks. All of
//! it runs on one thread of its own (see [`run`] for why).

mod announce;
pub(crate) mod connection;
mod core;
mod shell;

use crate::pipeline::Pipeline;
use crate::run::context::{
    advertised_addresses, new_token, run_context, write_context_file, RunToken,
};
use crate::run::launching::thread::{LauncherEvent, LauncherThread};
use crate::run::output::summary::{RunEnd, RunSummary};
use crate::run_dir::RunDir;
use anyhow::Context as _;
use connection::{ConnEvent, ConnId, ConnSettings};
use launchers::Launcher;
use shell::Shell;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// How often the run loop polls job states, starts workers and reports.
const TICK: Duration = Duration::from_millis(100);

/// Connection events handled per turn of the run loop when they queue
/// up, before the tick and the stop signal get their turn again: fewer
/// turns (each polls every branch) under load, never a starved tick.
const EVENTS_PER_TURN: usize = 64;

/// How long connections get to close after being told to stop: idle
/// workers at the end of a run leave at once; on Ctrl-C only blocks that
/// finish right away are still recorded, the rest are stopped. A finished
/// run has every block done, so nothing its workers still do can change
/// it: those that linger (a worker function waiting for the interpreter
/// it started to exit, `volara-cli`'s takes 2 s) are stopped, as daisy 1.x
/// and 2.0 stop theirs at the end of a run.
const GOODBYE_FINISHED: Duration = Duration::from_millis(500);
const GOODBYE_INTERRUPTED: Duration = Duration::from_millis(300);

/// The most connections that may be waiting to be welcomed at a time: a
/// thousand workers connecting at once take a few rounds of retries, and
/// a flood of connections that never say hello costs a few MB.
const MAX_UNWELCOMED: usize = 256;

/// Settings of a distributed run (resolved from the command line).
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub heartbeat_interval: Duration,
    pub heartbeat_misses: u32,
    /// The program launched workers run: `daisy-worker`, or
    /// `daisy-driver` itself with `worker_args = ["worker"]`.
    pub worker_program: PathBuf,
    /// Arguments before the worker's own (`["worker"]` for daisy-driver).
    pub worker_args: Vec<String>,
    /// Leave submitted jobs running when the driver exits (they give up
    /// once the driver is gone for their connect timeout).
    pub leave_jobs: bool,
    /// The run's token, if the program that started the driver chose it
    /// (see [`crate::run::context::Reserved`]); else a fresh one.
    pub token: Option<RunToken>,
    /// How often a status line is printed when stdout is not a terminal;
    /// None: no progress output at all.
    pub progress_every: Option<Duration>,
    /// `--retry-failed`: the only blocks this run may run.
    pub only_blocks: Option<crate::run::retry::OnlyBlocks>,
}

/// Runs `pipeline` until every block is done or `stop` resolves.
///
/// The block server (listener, connections, run loop) runs on a thread of
/// its own with a single-threaded runtime, whatever runtime the caller
/// has. A message takes a few microseconds to handle, most of them in
/// the kernel, and on a multi-threaded runtime each hand-over between
/// tasks could be a futex wake-up of another thread: one thread needs
/// about half the CPU time per block and serves up to twice as many
/// (docs/benchmarks.md, "End-to-end throughput"). This function only
/// waits for the thread, and tells it when `stop` resolves.
pub async fn run(
    pipeline: Arc<Pipeline>,
    run_dir: &RunDir,
    options: RunOptions,
    listener: std::net::TcpListener,
    launcher: Box<dyn Launcher>,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<RunSummary> {
    let (stop_tx, stop_rx) = oneshot::channel();
    let (done_tx, mut done_rx) = oneshot::channel();
    let run_dir = run_dir.clone();
    std::thread::Builder::new()
        .name("daisy-server".into())
        .spawn(move || {
            let stop = async {
                // An error means `run` was dropped: stop as well.
                let _ = stop_rx.await;
            };
            let _ = done_tx.send(serve_on_this_thread(
                pipeline, &run_dir, options, listener, launcher, stop,
            ));
        })
        .context("starting the block server thread")?;
    tokio::pin!(stop);
    tokio::select! {
        done = &mut done_rx => return done.context("the block server thread panicked")?,
        () = &mut stop => {}
    }
    let _ = stop_tx.send(());
    done_rx.await.context("the block server thread panicked")?
}

fn serve_on_this_thread(
    pipeline: Arc<Pipeline>,
    run_dir: &RunDir,
    options: RunOptions,
    listener: std::net::TcpListener,
    launcher: Box<dyn Launcher>,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<RunSummary> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the block server's runtime")?;
    runtime.block_on(serve(pipeline, run_dir, options, listener, launcher, stop))
}

/// The block server: accepts on `listener` (bound by the caller, so that
/// a port in use refuses the run before it writes anything), runs the
/// loop until the end.
async fn serve(
    pipeline: Arc<Pipeline>,
    run_dir: &RunDir,
    options: RunOptions,
    listener: std::net::TcpListener,
    launcher: Box<dyn Launcher>,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<RunSummary> {
    let started = Instant::now();
    let listener = listener
        .set_nonblocking(true)
        .and_then(|()| TcpListener::from_std(listener))
        .context("serving on the bound listener")?;
    let token = match &options.token {
        Some(token) => token.secret().to_string(),
        None => new_token()?,
    };
    let addresses = advertised_addresses(listener.local_addr()?);
    let context = run_context(addresses, &token);
    write_context_file(&run_dir.context_file(), &context)?;
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let settings = Arc::new(ConnSettings {
        token,
        heartbeat_interval: options.heartbeat_interval,
        heartbeat_misses: options.heartbeat_misses,
        max_frame: daisy_core::protocol::MAX_FRAME_BYTES,
        max_hello: daisy_core::protocol::MAX_HELLO_BYTES,
        hello_timeout: Duration::from_secs(10),
        max_unwelcomed: MAX_UNWELCOMED,
    });
    let accept = tokio::spawn(accept_loop(listener, settings, events_tx));
    let (launcher_tx, launcher_rx) = mpsc::unbounded_channel();
    let launcher =
        LauncherThread::spawn(launcher, launcher_tx).context("starting the launcher thread")?;
    announce::announce(&pipeline, run_dir, &options, &context);
    let mut shell = Shell::open(pipeline, run_dir, &options, launcher, context)?;
    let end = run_loop(&mut shell, events_rx, launcher_rx, stop).await;
    accept.abort();
    shell.finish(end, started)
}

/// One task per accepted connection, as long as few enough of them have
/// not been welcomed yet; the others are turned away.
async fn accept_loop(
    listener: TcpListener,
    settings: Arc<ConnSettings>,
    events: mpsc::UnboundedSender<ConnEvent>,
) {
    let unwelcomed = Arc::new(Semaphore::new(settings.max_unwelcomed));
    let mut next_conn = ConnId::FIRST;
    loop {
        match listener.accept().await {
            Ok((socket, peer)) => {
                let Ok(permit) = unwelcomed.clone().try_acquire_owned() else {
                    connection::turn_away(socket, peer, settings.max_unwelcomed, &events);
                    continue;
                };
                tokio::spawn(connection::serve(
                    socket,
                    peer,
                    next_conn,
                    settings.clone(),
                    events.clone(),
                    permit,
                ));
                next_conn = next_conn.next();
            }
            Err(error) => {
                tracing::warn!("accepting a connection failed: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn run_loop(
    shell: &mut Shell,
    mut events: mpsc::UnboundedReceiver<ConnEvent>,
    mut launcher_events: mpsc::UnboundedReceiver<LauncherEvent>,
    stop: impl Future<Output = ()>,
) -> RunEnd {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(TICK);
    let end = loop {
        if let Some(end) = shell.end() {
            break end;
        }
        tokio::select! {
            Some(event) = events.recv() => on_conn_events(shell, event, &mut events),
            Some(event) = launcher_events.recv() => shell.on_launcher_event(event),
            _ = tick.tick() => shell.on_tick(),
            // Skipping done blocks goes on once the connections had a turn.
            () = tokio::task::yield_now(), if shell.is_catching_up() => shell.on_catch_up(),
            _ = &mut stop => break RunEnd::Interrupted,
        }
    };
    let (grace, why) = match end {
        RunEnd::Interrupted => (GOODBYE_INTERRUPTED, "the run was interrupted"),
        RunEnd::Finished | RunEnd::Stalled => (GOODBYE_FINISHED, "the run is over"),
    };
    say_goodbye(shell, &mut events, &mut launcher_events, grace, why).await;
    end
}

/// Handles `first` and the events queued behind it, up to
/// `EVENTS_PER_TURN`, stopping as soon as the run is over (what comes
/// after is handled while saying goodbye, as usual).
fn on_conn_events(
    shell: &mut Shell,
    first: ConnEvent,
    events: &mut mpsc::UnboundedReceiver<ConnEvent>,
) {
    shell.on_conn_event(first);
    for _ in 1..EVENTS_PER_TURN {
        if shell.end().is_some() {
            return;
        }
        match events.try_recv() {
            Ok(event) => shell.on_conn_event(event),
            Err(_) => return,
        }
    }
}

/// Tells every worker to stop, saying `why`, and keeps serving them
/// (their last releases still count) until they are gone or the grace
/// period is over. What the launcher reported meanwhile is taken in too:
/// a forked worker can connect, finish the run's blocks and leave before
/// the launcher's word that it started was read, and that word is still
/// recorded (`worker_submitted`).
async fn say_goodbye(
    shell: &mut Shell,
    events: &mut mpsc::UnboundedReceiver<ConnEvent>,
    launcher_events: &mut mpsc::UnboundedReceiver<LauncherEvent>,
    grace: Duration,
    why: &str,
) {
    while let Ok(event) = launcher_events.try_recv() {
        shell.on_launcher_event(event);
    }
    shell.shutdown_all(why);
    let deadline = tokio::time::Instant::now() + grace;
    while shell.has_connections() {
        tokio::select! {
            Some(event) = events.recv() => shell.on_conn_event(event),
            Some(event) = launcher_events.recv() => shell.on_launcher_event(event),
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
}
