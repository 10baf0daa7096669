//! The distributed run: a block server on TCP, workers started through a
//! launcher, and one run loop that owns all scheduling state.
//!
//! Like mini-redis's server: the run loop is one `select!` over
//! connection events, a periodic tick (job states, worker starts,
//! progress) and the stop signal, each branch a short `on_*` function on
//! [`state::Driver`]. Connections (one task each, in [`crate::connection`])
//! and the accept loop only move messages; nothing outside the loop
//! touches the scheduler, so there are no locks.

mod state;

use crate::connection::{self, ConnEvent, ConnSettings};
use crate::pipeline::Pipeline;
use crate::run_context::{advertised_addresses, new_token, run_context, write_context_file};
use crate::run_dir::RunDir;
use crate::summary::{RunEnd, RunSummary};
use anyhow::Context as _;
use launchers::Launcher;
use state::Driver;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// How often the run loop polls job states, starts workers and reports.
const TICK: Duration = Duration::from_millis(100);

/// How long connections get to close after being told to stop: idle
/// workers at the end of a run leave at once; on Ctrl-C only blocks that
/// finish right away are still recorded, the rest are stopped.
const GOODBYE_FINISHED: Duration = Duration::from_secs(2);
const GOODBYE_INTERRUPTED: Duration = Duration::from_millis(300);

/// Settings of a distributed run (resolved from the command line).
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where to listen; `0.0.0.0:0` = every interface, any free port.
    pub listen: SocketAddr,
    pub heartbeat_interval: Duration,
    pub heartbeat_misses: u32,
    /// The `daisy-worker` binary launched workers run.
    pub worker_program: PathBuf,
    /// How often a status line is printed when stdout is not a terminal.
    pub status_every: Duration,
}

/// Runs `pipeline` until every block is done or `stop` resolves.
pub async fn run(
    pipeline: Arc<Pipeline>,
    run_dir: &RunDir,
    options: RunOptions,
    launcher: Box<dyn Launcher>,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<RunSummary> {
    let started = Instant::now();
    std::fs::create_dir_all(run_dir.path())
        .with_context(|| format!("creating the run directory {}", run_dir.path().display()))?;
    let listener = TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("listening on {}", options.listen))?;
    let token = new_token()?;
    let addresses = advertised_addresses(listener.local_addr()?);
    let context = run_context(addresses, &token);
    write_context_file(&run_dir.context_file(), &context)?;
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let settings = Arc::new(ConnSettings {
        token,
        heartbeat_interval: options.heartbeat_interval,
        heartbeat_misses: options.heartbeat_misses,
        max_frame: daisy_core::protocol::MAX_FRAME_BYTES,
        hello_timeout: Duration::from_secs(10),
    });
    let accept = tokio::spawn(accept_loop(listener, settings, events_tx));
    let mut driver = Driver::open(pipeline, run_dir, &options, launcher, context)?;
    driver.announce();
    let end = run_loop(&mut driver, events_rx, stop).await;
    accept.abort();
    driver.finish(end, started.elapsed())
}

/// One task per accepted connection.
async fn accept_loop(
    listener: TcpListener,
    settings: Arc<ConnSettings>,
    events: mpsc::UnboundedSender<ConnEvent>,
) {
    let mut next_conn = 1;
    loop {
        match listener.accept().await {
            Ok((socket, peer)) => {
                tokio::spawn(connection::serve(
                    socket,
                    peer,
                    next_conn,
                    settings.clone(),
                    events.clone(),
                ));
                next_conn += 1;
            }
            Err(error) => {
                tracing::warn!("accepting a connection failed: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn run_loop(
    driver: &mut Driver,
    mut events: mpsc::UnboundedReceiver<ConnEvent>,
    stop: impl Future<Output = ()>,
) -> RunEnd {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(TICK);
    let end = loop {
        if let Some(end) = driver.end() {
            break end;
        }
        tokio::select! {
            Some(event) = events.recv() => driver.on_conn_event(event),
            _ = tick.tick() => driver.on_tick(),
            _ = &mut stop => break RunEnd::Interrupted,
        }
    };
    let grace = match end {
        RunEnd::Interrupted => GOODBYE_INTERRUPTED,
        RunEnd::Finished | RunEnd::Stalled => GOODBYE_FINISHED,
    };
    say_goodbye(driver, &mut events, grace).await;
    end
}

/// Tells every worker to stop and keeps serving them (their last releases
/// still count) until they are gone or the grace period is over.
async fn say_goodbye(
    driver: &mut Driver,
    events: &mut mpsc::UnboundedReceiver<ConnEvent>,
    grace: Duration,
) {
    driver.shutdown_all("the run is over");
    let deadline = tokio::time::Instant::now() + grace;
    while driver.has_connections() {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(event)) => driver.on_conn_event(event),
            _ => break,
        }
    }
}
