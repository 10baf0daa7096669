//! The two tasks that own an established connection.
//!
//! The writer owns the write half and is fed by a channel, so frames from
//! the caller and heartbeats are never interleaved; it also sends a
//! heartbeat every interval. Messages queued together leave in one
//! `write` (a release and the next acquire, typically), because on
//! loopback a `send` costs several microseconds, more than the rest of a
//! block's round trip. The reader owns the read half, because a frame
//! half read by a cancelled future would be lost: it forwards the answers
//! to `AcquireBlocks` (Blocks, Shutdown), logs `Error`s, and treats a
//! silence of `interval × misses` as the driver lost. Whichever task sees
//! the connection break first records why in a watch channel, which every
//! pending and later call of the client reads.

use super::ClientError;
use daisy_core::protocol::frame::encode;
use daisy_core::protocol::{
    read_frame, FrameError, FromDriver, Message, ToDriver, Welcome, WireBlock, MAX_FRAME_BYTES,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::{interval_at, timeout, Instant, MissedTickBehavior};

/// Messages the caller may queue before `send` waits for the writer.
const OUTGOING_CAPACITY: usize = 64;

/// The heartbeat settings of the Welcome, checked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Liveness {
    /// Both sides send a heartbeat this often.
    interval: Duration,
    /// The peer is gone after this many intervals without a message.
    misses: u32,
}

impl Liveness {
    pub(super) fn of(welcome: &Welcome) -> Result<Self, String> {
        let seconds = welcome.heartbeat_interval_s;
        let interval = Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|interval| !interval.is_zero())
            .ok_or_else(|| {
                format!("heartbeat_interval_s = {seconds} is not a positive number of seconds")
            })?;
        Ok(Self {
            interval,
            misses: welcome.heartbeat_misses.max(1),
        })
    }

    fn silence_limit(&self) -> Duration {
        self.interval * self.misses
    }
}

/// What the reader forwards: the answers to `AcquireBlocks`.
#[derive(Debug)]
pub(super) enum Answer {
    Blocks(Vec<WireBlock>),
    Shutdown(String),
}

/// The first reason the connection broke, shared by both tasks.
type Broken = Arc<watch::Sender<Option<ClientError>>>;

/// The caller's handles on the two tasks.
pub(super) struct Connection {
    outgoing: mpsc::Sender<ToDriver>,
    answers: mpsc::UnboundedReceiver<Answer>,
    broken: watch::Receiver<Option<ClientError>>,
    writer: JoinHandle<Result<(), ClientError>>,
    /// Both tasks end when the client is dropped.
    _abort: [AbortOnDrop; 2],
}

impl Connection {
    pub(super) fn start(stream: TcpStream, liveness: Liveness) -> Self {
        let (read_half, write_half) = stream.into_split();
        let (outgoing_tx, outgoing_rx) = mpsc::channel(OUTGOING_CAPACITY);
        let (answers_tx, answers_rx) = mpsc::unbounded_channel();
        let broken: Broken = Arc::new(watch::channel(None).0);
        let broken_rx = broken.subscribe();
        let reader = tokio::spawn(read_loop(read_half, answers_tx, broken.clone(), liveness));
        let writer = tokio::spawn(write_loop(write_half, outgoing_rx, broken, liveness));
        Self {
            outgoing: outgoing_tx,
            answers: answers_rx,
            broken: broken_rx,
            _abort: [
                AbortOnDrop(reader.abort_handle()),
                AbortOnDrop(writer.abort_handle()),
            ],
            writer,
        }
    }

    /// Queues `message` for the writer.
    pub(super) async fn send(&self, message: ToDriver) -> Result<(), ClientError> {
        if let Some(error) = self.broken.borrow().clone() {
            return Err(error);
        }
        match self.outgoing.send(message).await {
            Ok(()) => Ok(()),
            Err(_) => Err(self.lost().await),
        }
    }

    /// The next Blocks or Shutdown, or why none will come. Cancel safe.
    pub(super) async fn next_answer(&mut self) -> Result<Answer, ClientError> {
        let lost = self.lost();
        tokio::select! {
            biased;
            Some(answer) = self.answers.recv() => Ok(answer),
            error = lost => Err(error),
        }
    }

    pub(super) fn lost(&self) -> impl Future<Output = ClientError> + Send + 'static {
        let mut broken = self.broken.clone();
        async move {
            let error = broken.wait_for(Option::is_some).await.ok();
            error
                .and_then(|error| error.clone())
                .unwrap_or(ClientError::Disconnected)
        }
    }

    /// Lets the writer write what is queued and shut the write half down;
    /// the reader ends when `self` is dropped.
    pub(super) async fn close(self, within: Duration) -> Result<(), ClientError> {
        let Self {
            outgoing, writer, ..
        } = self;
        drop(outgoing);
        match timeout(within, writer).await {
            Ok(Ok(written)) => written,
            Ok(Err(join)) => Err(ClientError::Io {
                reason: format!("the connection's writer task failed: {join}"),
            }),
            Err(_) => Err(ClientError::Io {
                reason: format!("could not write the last messages within {within:?}"),
            }),
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Records the first reason the connection broke; later ones are effects.
fn break_with(broken: &Broken, error: ClientError) {
    broken.send_if_modified(|slot| {
        let first = slot.is_none();
        if first {
            *slot = Some(error);
        }
        first
    });
}

async fn write_loop(
    mut writer: OwnedWriteHalf,
    mut outgoing: mpsc::Receiver<ToDriver>,
    broken: Broken,
    liveness: Liveness,
) -> Result<(), ClientError> {
    let start = Instant::now() + liveness.interval;
    let mut heartbeat = interval_at(start, liveness.interval);
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut frames = Vec::new();
    loop {
        let message = tokio::select! {
            message = outgoing.recv() => match message {
                Some(message) => message,
                None => break,
            },
            _ = heartbeat.tick() => ToDriver::Heartbeat,
        };
        if let Err(e) = write_queued(&mut writer, &mut outgoing, message, &mut frames).await {
            let error = from_frame_error(e);
            break_with(&broken, error.clone());
            return Err(error);
        }
    }
    writer.shutdown().await.map_err(|e| ClientError::Io {
        reason: e.to_string(),
    })
}

/// Writes `first` and every message queued behind it in one `write_all`.
async fn write_queued(
    writer: &mut OwnedWriteHalf,
    outgoing: &mut mpsc::Receiver<ToDriver>,
    first: ToDriver,
    frames: &mut Vec<u8>,
) -> Result<(), FrameError> {
    frames.clear();
    frames.extend(encode(&first)?);
    while let Ok(message) = outgoing.try_recv() {
        frames.extend(encode(&message)?);
    }
    writer.write_all(frames).await?;
    Ok(())
}

/// Reads through a buffer: one `recv` per wake-up instead of two or
/// three per frame (length, payload, and the read that finds no more).
async fn read_loop(
    reader: OwnedReadHalf,
    answers: mpsc::UnboundedSender<Answer>,
    broken: Broken,
    liveness: Liveness,
) {
    let mut reader = BufReader::new(reader);
    let silent_for = liveness.silence_limit();
    let error = loop {
        let message = match timeout(silent_for, read_frame(&mut reader, MAX_FRAME_BYTES)).await {
            Err(_) => break ClientError::DriverLost { silent_for },
            Ok(Err(e)) => break from_frame_error(e),
            Ok(Ok(message)) => message,
        };
        if on_message(message, &answers).is_err() {
            return; // the client is gone: nobody to tell
        }
    };
    tracing::debug!("connection to the driver ended: {error}");
    break_with(&broken, error);
}

/// Forwards answers; fails only if the client is gone.
fn on_message(message: FromDriver, answers: &mpsc::UnboundedSender<Answer>) -> Result<(), ()> {
    let answer = match message {
        FromDriver::Heartbeat => return Ok(()),
        FromDriver::Blocks { blocks } => Answer::Blocks(blocks),
        FromDriver::Shutdown { reason } => Answer::Shutdown(reason),
        FromDriver::Error { reason } => {
            tracing::warn!("the driver refused a message: {reason}");
            return Ok(());
        }
        other => {
            tracing::warn!("ignored an unexpected {} from the driver", other.kind());
            return Ok(());
        }
    };
    answers.send(answer).map_err(|_| ())
}

fn from_frame_error(error: FrameError) -> ClientError {
    match error {
        FrameError::Closed => ClientError::Disconnected,
        FrameError::Io(e) => ClientError::Io {
            reason: e.to_string(),
        },
        other => ClientError::Protocol {
            reason: other.to_string(),
        },
    }
}
