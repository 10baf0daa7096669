//! The worker's side of the wire protocol: one connection to the driver.
//!
//! [`Client`] is what a Rust program uses to take blocks in process, and
//! what the `daisy-worker` runtime builds on. It owns the connection and
//! keeps it alive on its own: one task sends the caller's messages and a
//! `Heartbeat` every `heartbeat_interval_s`, reads the driver's, and
//! declares the driver lost after `heartbeat_interval_s ×
//! heartbeat_misses` of silence. The caller only asks for blocks and
//! reports results.
//!
//! It leaves to others what to run (the runtime), how to find the driver
//! (DAISY_CONTEXT, see the CLI) and what the messages mean (daisy-core).
//!
//! - [`dial`]: reaching the driver, with backoff while it starts.
//! - [`wire`]: an established connection driven by its owner's loop
//!   (the runtime's): frames, heartbeats, liveness.
//! - [`connection`]: a task driving the wire, for [`Client`].

mod connection;
mod dial;
#[cfg(test)]
mod tests;
mod wire;

use connection::Connection;
use daisy_core::protocol::{
    BlockResult, FromDriver, Hello, Message, Role, ToDriver, Transport, Welcome, WireBlock,
    MAX_FRAME_BYTES, PROTOCOL_VERSION,
};
use dial::Backoff;
use std::fmt;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use wire::Liveness;
pub(crate) use wire::{Answer, Wire};

/// How long [`Client::connect`] keeps trying to reach a driver that is not
/// up yet: a batch job may start before its driver does.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the driver may take to answer a Hello.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Client::close`] waits for queued messages to be written.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and as whom to connect.
#[derive(Clone)]
pub struct ConnectOpts {
    /// Every `host:port` the driver listens on, tried in order.
    pub addresses: Vec<String>,
    /// The run's secret token; never logged (see the `Debug` impl).
    pub token: String,
    /// The task whose blocks this worker runs.
    pub task_id: String,
    /// The slot a launched worker was started for; `None` by hand.
    pub worker_id: Option<u64>,
    /// The batch job this worker runs in, so the driver can match it to
    /// its submission.
    pub job_id: Option<String>,
    /// Total time to keep retrying while the driver is unreachable.
    pub connect_timeout: Duration,
}

impl ConnectOpts {
    /// Options for a hand-started worker: no slot, the batch job id from
    /// the environment (see [`job_id_from_env`]), the default timeout.
    pub fn new(addresses: Vec<String>, token: String, task_id: String) -> Self {
        Self {
            addresses,
            token,
            task_id,
            worker_id: None,
            job_id: job_id_from_env(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

impl fmt::Debug for ConnectOpts {
    /// Everything but the token, which must never reach a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOpts")
            .field("addresses", &self.addresses)
            .field("token", &"<redacted>")
            .field("task_id", &self.task_id)
            .field("worker_id", &self.worker_id)
            .field("job_id", &self.job_id)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// The SLURM or LSF job this process runs in, if any; in a SLURM job
/// step (a job of several workers), `<job>.<step>`.
pub fn job_id_from_env() -> Option<String> {
    job_id_in(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
}

fn job_id_in(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(job) = var("SLURM_JOB_ID") {
        return Some(
            match var("SLURM_STEP_ID").filter(|step| step.parse::<u32>().is_ok()) {
                Some(step) => format!("{job}.{step}"),
                None => job,
            },
        );
    }
    var("LSB_JOBID")
}

/// Why no connection was established.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error("no driver address to connect to")]
    NoAddress,
    /// Not retried: the address cannot work however long one waits.
    #[error("invalid driver address {address:?}: {reason}")]
    BadAddress { address: String, reason: String },
    /// Every address refused or timed out until the connect timeout.
    #[error("cannot reach the driver at {addresses} within {timeout:?}; last error: {last_error}")]
    Unreachable {
        addresses: String,
        timeout: Duration,
        last_error: String,
    },
    /// The driver refused this worker (wrong token, unknown task, other
    /// protocol version). Not retryable: retrying would be refused again.
    /// (A driver only too busy is retried until the connect timeout, and
    /// its refusal is this error only after that.)
    #[error("rejected by the driver: {reason}")]
    Rejected { reason: String },
    /// Something answered, but not a daisy driver's Welcome in time.
    #[error("handshake with the driver at {address} failed: {reason}")]
    Handshake { address: String, reason: String },
}

/// Why a connected client can no longer talk to the driver. Once one
/// happens, every pending and later call fails with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// Nothing, not even a heartbeat, came for this long.
    #[error("lost the driver: nothing heard from it for {silent_for:?}")]
    DriverLost { silent_for: Duration },
    #[error("the driver closed the connection")]
    Disconnected,
    /// The driver sent something that is not a valid message.
    #[error("the driver sent an invalid message: {reason}")]
    Protocol { reason: String },
    #[error("connection to the driver failed: {reason}")]
    Io { reason: String },
}

/// The answer to [`Client::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    Blocks(Vec<WireBlock>),
    /// No more work for this worker: close and exit cleanly.
    Shutdown {
        reason: String,
    },
}

/// A connection to the driver, heartbeating on its own.
pub struct Client {
    welcome: Welcome,
    connection: Connection,
    /// An `AcquireBlocks` was sent and is not answered yet (its `acquire`
    /// was cancelled); the next `acquire` waits for that answer instead of
    /// asking again, so no answer is ever mismatched.
    acquire_pending: bool,
    /// Set once the driver said Shutdown: later acquires return it at once.
    shutdown: Option<String>,
}

impl Client {
    /// Reaches the driver (retrying with backoff while it is unreachable,
    /// or too busy to take the connection), says Hello and waits for
    /// Welcome.
    pub async fn connect(opts: ConnectOpts) -> Result<Self, ConnectError> {
        let (welcome, wire) = connect(opts).await?;
        Ok(Self {
            connection: Connection::start(wire),
            welcome,
            acquire_pending: false,
            shutdown: None,
        })
    }

    /// What the driver said when it accepted this worker: its id, the
    /// task's code, the heartbeat settings.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Asks for up to `max` blocks and waits until the driver has some, or
    /// says there is no more work.
    ///
    /// Cancel safe: if the returned future is dropped while waiting, the
    /// request stays parked at the driver and the next call (whatever its
    /// `max`) returns its answer.
    pub async fn acquire(&mut self, max: u32) -> Result<Acquired, ClientError> {
        if let Some(reason) = &self.shutdown {
            return Ok(Acquired::Shutdown {
                reason: reason.clone(),
            });
        }
        if !self.acquire_pending {
            self.connection
                .send(ToDriver::AcquireBlocks { max })
                .await?;
            self.acquire_pending = true;
        }
        let answer = self.connection.next_answer().await?;
        self.acquire_pending = false;
        Ok(match answer {
            Answer::Blocks(blocks) => Acquired::Blocks(blocks),
            Answer::Shutdown(reason) => {
                self.shutdown = Some(reason.clone());
                Acquired::Shutdown { reason }
            }
        })
    }

    /// Whether the driver still owes an answer to an `AcquireBlocks`
    /// (its [`Self::acquire`] was cancelled): blocks may still come.
    pub fn awaits_blocks(&self) -> bool {
        self.acquire_pending
    }

    /// Reports results of blocks this worker was given.
    pub async fn release(&mut self, results: Vec<BlockResult>) -> Result<(), ClientError> {
        self.connection
            .send(ToDriver::ReleaseBlocks { results })
            .await
    }

    /// Tells the driver this worker takes no more blocks, and whether that
    /// is because its job's walltime runs out.
    pub async fn draining(&mut self, reason: String, out_of_time: bool) -> Result<(), ClientError> {
        let draining = ToDriver::Draining {
            reason,
            out_of_time,
            by_choice: false,
        };
        self.connection.send(draining).await
    }

    /// Tells the driver this worker cannot run the task's code and leaves.
    pub async fn cannot_serve(&mut self, reason: String) -> Result<(), ClientError> {
        self.connection.send(ToDriver::CannotServe { reason }).await
    }

    /// Gives blocks back unrun (the worker drains); the driver queues
    /// them again without counting a failed attempt.
    pub async fn return_blocks(
        &mut self,
        block_ids: Vec<u64>,
        reason: String,
    ) -> Result<(), ClientError> {
        self.connection
            .send(ToDriver::ReturnBlocks { block_ids, reason })
            .await
    }

    /// Resolves when the connection breaks, with why. Independent of the
    /// client's borrow, so it can race [`Self::acquire`] in a `select!`.
    pub fn lost(&self) -> impl Future<Output = ClientError> + Send + 'static {
        self.connection.lost()
    }

    /// Ends the connection politely: writes what is queued, then shuts
    /// the write half down. Fails if queued messages could not be written.
    pub async fn close(self) -> Result<(), ClientError> {
        self.connection.close(CLOSE_TIMEOUT).await
    }
}

/// Reaches the driver (retrying with backoff while it is unreachable, or
/// too busy to take the connection), says Hello and waits for Welcome:
/// the connection, for its owner's loop to drive ([`Client::connect`]
/// drives it in a task).
pub(crate) async fn connect(opts: ConnectOpts) -> Result<(Welcome, Wire), ConnectError> {
    let deadline = Instant::now() + opts.connect_timeout;
    let mut backoff = Backoff::until(deadline);
    loop {
        let within = deadline.saturating_duration_since(Instant::now());
        let (stream, address) = dial::dial(&opts.addresses, within).await?;
        match say_hello(stream, &address, &opts).await {
            Err(HandshakeFailure::Busy(reason)) => {
                tracing::info!(%address, "the driver is busy ({reason}); connecting again");
                if !backoff.pause().await {
                    return Err(ConnectError::Rejected { reason });
                }
            }
            connected => return connected.map_err(|failure| failure.at(&address)),
        }
    }
}

/// The worker's end of a connection, during the handshake.
type WorkerEnd = Transport<TcpStream, FromDriver, ToDriver>;

/// Says Hello on a new connection; a Welcome makes the wire.
async fn say_hello(
    stream: TcpStream,
    address: &str,
    opts: &ConnectOpts,
) -> Result<(Welcome, Wire), HandshakeFailure> {
    let mut transport = WorkerEnd::new(stream, MAX_FRAME_BYTES);
    let welcome = handshake(&mut transport, opts).await?;
    let liveness = Liveness::of(&welcome).map_err(HandshakeFailure::Other)?;
    tracing::info!(
        %address, task = %opts.task_id, worker_id = welcome.worker_id,
        "connected to the driver"
    );
    let (stream, read) = transport.into_parts();
    Ok((welcome, Wire::new(stream, read, MAX_FRAME_BYTES, liveness)))
}

/// A handshake failure before the address is attached.
enum HandshakeFailure {
    Rejected(String),
    /// Rejected only because the driver was busy: try again later.
    Busy(String),
    Other(String),
}

impl HandshakeFailure {
    fn at(self, address: &str) -> ConnectError {
        match self {
            Self::Rejected(reason) | Self::Busy(reason) => ConnectError::Rejected { reason },
            Self::Other(reason) => ConnectError::Handshake {
                address: address.to_string(),
                reason,
            },
        }
    }
}

/// Says Hello and reads the driver's first answer.
async fn handshake(
    transport: &mut WorkerEnd,
    opts: &ConnectOpts,
) -> Result<Welcome, HandshakeFailure> {
    let other = |e: daisy_core::protocol::FrameError| HandshakeFailure::Other(e.to_string());
    transport
        .send(ToDriver::Hello(hello(opts)))
        .await
        .map_err(other)?;
    let answer = tokio::time::timeout(HANDSHAKE_TIMEOUT, transport.receive())
        .await
        .map_err(|_| {
            HandshakeFailure::Other(format!("no answer to Hello within {HANDSHAKE_TIMEOUT:?}"))
        })?;
    match answer.map_err(other)? {
        FromDriver::Welcome(welcome) => Ok(welcome),
        FromDriver::Rejected {
            reason,
            retry_later: true,
        } => Err(HandshakeFailure::Busy(reason)),
        FromDriver::Rejected { reason, .. } => Err(HandshakeFailure::Rejected(reason)),
        unexpected => Err(HandshakeFailure::Other(format!(
            "expected welcome or rejected, got {}",
            unexpected.kind()
        ))),
    }
}

fn hello(opts: &ConnectOpts) -> Hello {
    Hello {
        protocol: PROTOCOL_VERSION,
        token: opts.token.clone(),
        role: Role::Worker,
        task_id: Some(opts.task_id.clone()),
        worker_id: opts.worker_id,
        job_id: opts.job_id.clone(),
        host: hostname(),
        pid: std::process::id(),
    }
}

/// This machine's name, for the driver's events (which node ran what).
fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|e| format!("(unknown host: {e})"))
}
