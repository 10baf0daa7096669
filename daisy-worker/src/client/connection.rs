//! The task that owns an established connection, for [`super::Client`].
//!
//! The task runs one `select!` over the driver's answers (a [`Wire`],
//! which also heartbeats and watches for silence) and the caller's
//! messages (from a channel, so frames never interleave). Messages queued
//! together leave in one write (a release and the next acquire,
//! typically). The task forwards the answers to `AcquireBlocks` (Blocks,
//! Shutdown); why the connection broke is recorded in a watch channel,
//! which every pending and later call of the client reads.
//!
//! The `daisy-worker` runtime drives a [`Wire`] in its own loop instead:
//! a task in between costs a hand-over per message.

use super::wire::{Answer, Wire};
use super::ClientError;
use daisy_core::protocol::ToDriver;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::timeout;

/// Messages the caller may queue before `send` waits for the writer.
const OUTGOING_CAPACITY: usize = 64;

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
    pub(super) fn start(wire: Wire) -> Self {
        let (outgoing_tx, outgoing) = mpsc::channel(OUTGOING_CAPACITY);
        let (answers, answers_rx) = mpsc::unbounded_channel();
        let broken: Broken = Arc::new(watch::channel(None).0);
        let broken_rx = broken.subscribe();
        let link = Link {
            wire,
            outgoing,
            answers,
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

/// The connection's task: what its one `select!` needs.
struct Link {
    wire: Wire,
    outgoing: mpsc::Receiver<ToDriver>,
    answers: mpsc::UnboundedSender<Answer>,
}

impl Link {
    /// Runs until the client closes (then shuts the write direction
    /// down) or the connection breaks (then records why).
    async fn run(mut self, broken: Broken) -> Result<(), ClientError> {
        let ended = match self.serve().await {
            Ok(()) => self.wire.close().await,
            Err(error) => Err(error),
        };
        if let Err(error) = &ended {
            tracing::debug!("connection to the driver ended: {error}");
            broken.send_replace(Some(error.clone()));
        }
        ended
    }

    /// Serves the connection until the client closes it; answers are
    /// dropped if the client is gone (it is closing). While the driver
    /// leaves a write unread, the caller's messages wait in the channel,
    /// so a caller that sends on and on waits too.
    async fn serve(&mut self) -> Result<(), ClientError> {
        loop {
            let flushed = self.wire.is_flushed();
            tokio::select! {
                biased;
                answer = self.wire.next_answer() => {
                    let _ = self.answers.send(answer?);
                }
                message = self.outgoing.recv(), if flushed => match message {
                    Some(message) => self.write(message)?,
                    None => return Ok(()),
                },
            }
        }
    }

    /// Queues `first` and every message queued behind it, for one write.
    fn write(&mut self, first: ToDriver) -> Result<(), ClientError> {
        let mut next = Some(first);
        while let Some(message) = next {
            self.wire.queue(message)?;
            next = self.outgoing.try_recv().ok();
        }
        self.wire.flush_now()
    }
}
