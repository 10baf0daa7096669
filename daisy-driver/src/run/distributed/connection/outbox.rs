//! A connection's way out, shared by the run loop and the connection's
//! task: a message is encoded into the connection's one write buffer and
//! written to the socket at once by whoever sends it; only what the socket
//! does not take waits, for the connection's task to write when the peer
//! reads.
//!
//! Why not a channel to the connection's task: then every round trip woke
//! that task a second time (the channel, a `Notify`, its `select!`, its
//! own write buffer) only to pass on bytes the run loop had in hand. With
//! thousands of connections each of those is memory no cache still holds,
//! and the driver's work per block grew with the number of workers
//! (docs/benchmarks.md, "Many workers"). A socket write does not wait, so
//! the run loop can make it; only a peer that does not read needs a task.

use daisy_core::protocol::frame::{Codec, Payload};
use daisy_core::protocol::{FrameError, FromDriver, ToDriver};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_util::bytes::{Buf, BytesMut};
use tokio_util::codec::Encoder;

/// The most messages waiting to be written to one peer: a peer that asks
/// and reads has none waiting; one that keeps asking and never reads (an
/// observer wanting snapshots) is disconnected instead of growing them.
pub const OUTBOX_CAPACITY: usize = 64;

/// The most requests of one peer passed on and not yet taken by the run
/// loop; the rest wait in its socket. Without a bound, a peer that sends
/// faster than the run loop answers (a flood of snapshot requests) would
/// queue them all in the driver's memory.
pub const REQUESTS_AHEAD: usize = 64;

/// The run loop's handle on a connection's way out. Dropping it lets the
/// connection go, once what was sent is written.
#[derive(Debug)]
pub struct Outbox(Arc<Shared>);

impl Outbox {
    /// A new outbox, and the connection task's side of it. What is sent
    /// before [`Shared::open`] waits, so nothing overtakes the Welcome.
    pub(super) fn new() -> (Outbox, Arc<Shared>) {
        let shared = Arc::new(Shared {
            socket: OnceLock::new(),
            requests_ahead: AtomicUsize::new(0),
            out: Mutex::new(Outgoing {
                codec: Codec::new(0),
                unwritten: BytesMut::new(),
                waiting: 0,
                waiting_since: None,
                told_to_stop: false,
                end: None,
                task: None,
            }),
        });
        (Outbox(shared.clone()), shared)
    }

    /// Writes `message`, or queues it behind what waits; if too many
    /// wait, the connection ends instead. Never waits: the run loop must
    /// not block on a peer.
    pub fn send(&self, message: FromDriver) {
        self.0.send(message);
    }

    /// The run loop took one of the peer's requests. A connection that
    /// stopped reading at [`REQUESTS_AHEAD`] reads on once the run loop
    /// has taken half of them: then it reads many at a time, not one
    /// per turn of the run loop.
    pub fn request_taken(&self) {
        if self.0.requests_ahead.fetch_sub(1, Ordering::Relaxed) == REQUESTS_AHEAD / 2 {
            self.0.lock().wake_task();
        }
    }

    /// [`Self::send`] for a message's payload written already (blocks,
    /// written straight from the scheduler's).
    pub fn send_payload(&self, payload: Payload) {
        self.0
            .queue(false, |codec, buffer| codec.encode(payload, buffer));
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.0.lock().end_with(WriteEnd::ClosedByDriver);
    }
}

/// Why a connection's way out ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum WriteEnd {
    /// The run loop let the connection go (its outbox was dropped).
    ClosedByDriver,
    /// [`OUTBOX_CAPACITY`] messages waited for the peer to read.
    Overflowed,
    /// A message could not be encoded or written.
    Failed(String),
    /// The connection's task ended: nothing more is written.
    TaskEnded,
}

/// What the run loop and the connection's task share.
#[derive(Debug)]
pub(super) struct Shared {
    /// Set once the connection's task has written the Welcome.
    socket: OnceLock<TcpStream>,
    /// Requests passed on to the run loop and not yet taken by it.
    requests_ahead: AtomicUsize,
    out: Mutex<Outgoing>,
}

#[derive(Debug)]
struct Outgoing {
    codec: Codec<ToDriver, FromDriver>,
    /// Encoded and not yet taken by the socket.
    unwritten: BytesMut,
    /// Messages sent since `unwritten` was last empty.
    waiting: usize,
    /// Since when `unwritten` has waited for the peer to read.
    waiting_since: Option<Instant>,
    /// A Shutdown was sent: after it any end is clean.
    told_to_stop: bool,
    end: Option<WriteEnd>,
    /// The connection's task, woken when it has to write what waits or
    /// end.
    task: Option<Waker>,
}

impl Outgoing {
    /// The first end counts.
    fn end_with(&mut self, end: WriteEnd) {
        if self.end.is_none() {
            self.end = Some(end);
            self.wake_task();
        }
    }

    fn wake_task(&self) {
        if let Some(task) = &self.task {
            task.wake_by_ref();
        }
    }

    /// Writes what the socket takes without waiting.
    fn write_now(&mut self, socket: &TcpStream) {
        if let Err(error) = write_some(socket, &mut self.unwritten) {
            return self.end_with(WriteEnd::Failed(error.to_string()));
        }
        if self.unwritten.is_empty() {
            self.waiting = 0;
            self.waiting_since = None;
        } else if self.waiting_since.is_none() {
            self.waiting_since = Some(Instant::now());
            self.wake_task();
        }
    }

    /// Writes what waits as the socket takes it; on `Pending` the socket
    /// wakes the task when it takes more.
    fn write_waiting(&mut self, socket: &TcpStream, cx: &mut Context<'_>) {
        while !self.unwritten.is_empty() && self.end_allows_writing() {
            match socket.poll_write_ready(cx) {
                Poll::Pending => return,
                Poll::Ready(Err(error)) => self.end_with(WriteEnd::Failed(error.to_string())),
                Poll::Ready(Ok(())) => self.write_now(socket),
            }
        }
    }

    /// What was sent before the run loop let the connection go is still
    /// written; after any other end, nothing is.
    fn end_allows_writing(&self) -> bool {
        matches!(self.end, None | Some(WriteEnd::ClosedByDriver))
    }

    fn register(&mut self, cx: &Context<'_>) {
        if !self.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            self.task = Some(cx.waker().clone());
        }
    }
}

/// Writes from the start of `bytes` until the socket would block.
fn write_some(socket: &TcpStream, bytes: &mut BytesMut) -> io::Result<()> {
    while !bytes.is_empty() {
        match socket.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => bytes.advance(written),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Outgoing> {
        // Nothing panics while holding it; if something did, the buffer
        // is still whole frames.
        self.out.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn socket(&self) -> Option<&TcpStream> {
        self.socket.get()
    }

    /// The Welcome is written: from now on messages go out, first those
    /// that waited for it.
    pub(super) fn open(&self, socket: TcpStream) {
        let socket = self.socket.get_or_init(|| socket);
        let mut out = self.lock();
        if !out.unwritten.is_empty() {
            out.write_now(socket);
        }
    }

    pub(super) fn send(&self, message: FromDriver) {
        let shutdown = matches!(message, FromDriver::Shutdown { .. });
        self.queue(shutdown, |codec, buffer| codec.encode(message, buffer));
    }

    /// Encodes a frame behind what waits, and writes it unless something
    /// already waited (the task writes that when the peer reads).
    fn queue(
        &self,
        shutdown: bool,
        encode: impl FnOnce(&mut Codec<ToDriver, FromDriver>, &mut BytesMut) -> Result<(), FrameError>,
    ) {
        let mut out = self.lock();
        if out.end.is_some() {
            return;
        }
        if out.waiting >= OUTBOX_CAPACITY {
            return out.end_with(WriteEnd::Overflowed);
        }
        let Outgoing {
            codec, unwritten, ..
        } = &mut *out;
        if let Err(error) = encode(codec, unwritten) {
            return out.end_with(WriteEnd::Failed(error.to_string()));
        }
        out.waiting += 1;
        out.told_to_stop |= shutdown;
        if let (None, Some(socket)) = (out.waiting_since, self.socket.get()) {
            out.write_now(socket);
        }
    }

    /// Writes what waits as the peer reads it; ready when the connection
    /// must end (after the run loop let it go, once all is written).
    pub(super) fn poll_end(&self, cx: &mut Context<'_>) -> Poll<WriteEnd> {
        let mut out = self.lock();
        if let Some(socket) = self.socket.get() {
            out.write_waiting(socket, cx);
        }
        match &out.end {
            Some(WriteEnd::ClosedByDriver) if !out.unwritten.is_empty() => {}
            Some(end) => return Poll::Ready(end.clone()),
            None => {}
        }
        out.register(cx);
        Poll::Pending
    }

    /// Ready once everything sent is written, or nothing more can be.
    pub(super) fn poll_written(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut out = self.lock();
        if let Some(socket) = self.socket.get() {
            out.write_waiting(socket, cx);
        }
        if out.unwritten.is_empty() || !out.end_allows_writing() {
            return Poll::Ready(());
        }
        out.register(cx);
        Poll::Pending
    }

    /// Ready when the peer's next frame may be read: not while the run
    /// loop is [`REQUESTS_AHEAD`] requests behind it (the task is woken
    /// when it has caught up half way).
    pub(super) fn poll_may_read(&self, cx: &mut Context<'_>) -> Poll<()> {
        let may_read = || self.requests_ahead.load(Ordering::Relaxed) < REQUESTS_AHEAD;
        if may_read() {
            return Poll::Ready(());
        }
        self.lock().register(cx);
        // Checked again: the run loop may have taken some meanwhile.
        match may_read() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }

    /// A request was passed on to the run loop.
    pub(super) fn request_passed_on(&self) {
        self.requests_ahead.fetch_add(1, Ordering::Relaxed);
    }

    /// How long what was sent has waited for the peer to read it.
    pub(super) fn waited(&self, now: Instant) -> Option<Duration> {
        let since = self.lock().waiting_since?;
        Some(now.saturating_duration_since(since))
    }

    pub(super) fn told_to_stop(&self) -> bool {
        self.lock().told_to_stop
    }

    /// The connection's task ended: what is sent from now on is dropped.
    pub(super) fn task_ended(&self) {
        self.lock().end_with(WriteEnd::TaskEnded);
    }
}
