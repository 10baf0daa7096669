//! The task that owns an established connection.
//!
//! One task runs one `select!` over the frames the driver sends, the
//! caller's messages (from a channel, so frames never interleave) and the
//! heartbeat tick. Reading a frame is cancel safe (the [`Transport`]
//! keeps a half-read frame), so reads can race the rest. Messages queued
//! together leave in one `write` (a release and the next acquire,
//! typically), because on loopback a `send` costs several microseconds,
//! more than the rest of a block's round trip. The task forwards the
//! answers to `AcquireBlocks` (Blocks, Shutdown), logs `Error`s, and
//! treats a silence of `interval × misses` (or a write the driver leaves
//! unread as long) as the driver lost. Why the connection broke is
//! recorded in a watch channel, which every pending and later call of the
//! client reads.

use super::ClientError;
use daisy_core::protocol::{
    FrameError, FromDriver, Message, ToDriver, Transport, Welcome, WireBlock,
};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::{interval_at, sleep_until, timeout, timeout_at, Instant, MissedTickBehavior};

/// The worker's end of a connection.
pub(super) type WorkerEnd = Transport<TcpStream, FromDriver, ToDriver>;

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

/// The first reason the connection broke.
type Broken = Arc<watch::Sender<Option<ClientError>>>;

/// The caller's handles on the task.
pub(super) struct Connection {
    outgoing: mpsc::Sender<ToDriver>,
    answers: mpsc::UnboundedReceiver<Answer>,
    broken: watch::Receiver<Option<ClientError>>,
    task: JoinHandle<Result<(), ClientError>>,
    /// The task ends when the client is dropped.
    _abort: AbortOnDrop,
}

impl Connection {
    pub(super) fn start(transport: WorkerEnd, liveness: Liveness) -> Self {
        let (outgoing_tx, outgoing) = mpsc::channel(OUTGOING_CAPACITY);
        let (answers, answers_rx) = mpsc::unbounded_channel();
        let broken: Broken = Arc::new(watch::channel(None).0);
        let broken_rx = broken.subscribe();
        let link = Link {
            transport,
            outgoing,
            answers,
            liveness,
        };
        let task = tokio::spawn(link.run(broken));
        Self {
            outgoing: outgoing_tx,
            answers: answers_rx,
            broken: broken_rx,
            _abort: AbortOnDrop(task.abort_handle()),
            task,
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

    /// Lets the task write what is queued and shut the write direction
    /// down.
    pub(super) async fn close(self, within: Duration) -> Result<(), ClientError> {
        let Self { outgoing, task, .. } = self;
        drop(outgoing);
        match timeout(within, task).await {
            Ok(Ok(written)) => written,
            Ok(Err(join)) => Err(ClientError::Io {
                reason: format!("the connection's task failed: {join}"),
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

/// The connection's task: what its one `select!` needs.
struct Link {
    transport: WorkerEnd,
    outgoing: mpsc::Receiver<ToDriver>,
    answers: mpsc::UnboundedSender<Answer>,
    liveness: Liveness,
}

impl Link {
    /// Runs until the client closes (then shuts the write direction
    /// down) or the connection breaks (then records why).
    async fn run(mut self, broken: Broken) -> Result<(), ClientError> {
        let ended = match self.serve().await {
            Ok(()) => self.transport.close().await.map_err(from_frame_error),
            Err(error) => Err(error),
        };
        if let Err(error) = &ended {
            tracing::debug!("connection to the driver ended: {error}");
            break_with(&broken, error.clone());
        }
        ended
    }

    /// Serves the connection until the client closes it.
    ///
    /// The silence timer is armed once and pushed back only when it
    /// fires early (something was heard meanwhile): a timer armed per
    /// frame would cost two updates of the runtime's timer wheel per
    /// message, a good share of relaying a block.
    async fn serve(&mut self) -> Result<(), ClientError> {
        let interval = self.liveness.interval;
        let mut heartbeat = interval_at(Instant::now() + interval, interval);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut heard = Instant::now();
        let mut silence = pin!(sleep_until(heard + self.liveness.silence_limit()));
        loop {
            let deadline = heard + self.liveness.silence_limit();
            tokio::select! {
                // The driver sends little unasked: reading first starves
                // nothing, and spares the random pick.
                biased;
                frame = self.transport.receive() => {
                    on_message(self.read(frame)?, &self.answers);
                    heard = Instant::now();
                }
                message = self.outgoing.recv() => match message {
                    Some(message) => self.write(message, deadline).await?,
                    None => return Ok(()),
                },
                _ = heartbeat.tick() => self.write(ToDriver::Heartbeat, deadline).await?,
                () = &mut silence => {
                    if Instant::now() >= deadline {
                        let silent_for = self.liveness.silence_limit();
                        return Err(ClientError::DriverLost { silent_for });
                    }
                    silence.as_mut().reset(deadline);
                }
            }
        }
    }

    /// The message read, or why the connection broke.
    fn read<T>(&self, frame: Result<T, FrameError>) -> Result<T, ClientError> {
        frame.map_err(from_frame_error)
    }

    /// Writes `first` and every message queued behind it in one write; a
    /// driver that leaves it unread past `deadline` is as lost as a silent one.
    async fn write(&mut self, first: ToDriver, deadline: Instant) -> Result<(), ClientError> {
        let silent_for = self.liveness.silence_limit();
        let mut written = pin!(self.write_queued(first));
        // Mostly the socket takes it at once: no timer to arm then.
        let done = match poll_once(written.as_mut()) {
            Poll::Ready(done) => done,
            Poll::Pending => timeout_at(deadline, written)
                .await
                .map_err(|_| ClientError::DriverLost { silent_for })?,
        };
        done.map_err(from_frame_error)
    }

    async fn write_queued(&mut self, first: ToDriver) -> Result<(), FrameError> {
        let mut next = Some(first);
        while let Some(message) = next {
            self.transport.feed(message).await?;
            next = self.outgoing.try_recv().ok();
        }
        self.transport.flush().await
    }
}

/// Polls `future` once, without a waker: a later poll registers one.
fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

/// Forwards answers (dropped if the client is gone: it is closing).
fn on_message(message: FromDriver, answers: &mpsc::UnboundedSender<Answer>) {
    let answer = match message {
        FromDriver::Heartbeat => return,
        FromDriver::Blocks { blocks } => Answer::Blocks(blocks),
        FromDriver::Shutdown { reason } => Answer::Shutdown(reason),
        FromDriver::Error { reason } => {
            tracing::warn!("the driver refused a message: {reason}");
            return;
        }
        other => {
            tracing::warn!("ignored an unexpected {} from the driver", other.kind());
            return;
        }
    };
    let _ = answers.send(answer);
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
