//! One task per connection: handshake, then frames in; the way out is
//! shared with the run loop ([`outbox`]).
//!
//! The connection task reads the Hello, asks the run loop, and once the
//! peer is welcomed runs one `select!` over the frames the peer sends
//! (requests go straight to the run loop), its way out (what the socket
//! did not take at once is written when the peer reads; an outbox that
//! overflowed or was let go ends the connection) and the heartbeat tick
//! (which also notices a silent peer, or one that leaves what it was sent
//! unread). The run loop owns all state and writes its messages itself.
//! Reading a frame is cancel safe (a half-read frame stays in the read
//! buffer), so nothing else needs a task of its own. Whatever a peer
//! sends, the worst outcome is a refusal and a closed connection: errors
//! are reported to the run loop with the peer, never bubbled.
//!
//! What a peer can make the driver hold is bounded: before its Hello, a
//! small first frame and a few seconds, with at most `max_unwelcomed`
//! such connections at a time (more are turned away at once); after it,
//! frames of `max_frame` and [`OUTBOX_CAPACITY`] messages waiting for it
//! to read. A peer that does not read what it is sent is disconnected
//! when that many wait, or when they have waited as long as silence would
//! make it gone.

mod outbox;

pub use outbox::{Outbox, OUTBOX_CAPACITY};

use daisy_core::protocol::frame::{encode, Codec};
use daisy_core::protocol::hello::check_hello;
use daisy_core::protocol::{FrameError, FromDriver, Hello, Message, ToDriver, Transport, Welcome};
use outbox::{Shared, WriteEnd};
use std::fmt;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;

/// One accepted connection, for the run loop: never reused in a run, and
/// not a worker's id (a worker that reconnects gets a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(u64);

impl ConnId {
    /// The id of a run's first connection.
    pub const FIRST: ConnId = ConnId(1);

    /// The id of the connection accepted after this one.
    pub fn next(self) -> ConnId {
        ConnId(self.0 + 1)
    }

    /// The id as a number, unique in the run.
    pub fn number(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "connection {}", self.0)
    }
}

/// What every connection needs to know.
#[derive(Debug, Clone)]
pub struct ConnSettings {
    pub token: String,
    pub heartbeat_interval: Duration,
    pub heartbeat_misses: u32,
    pub max_frame: u32,
    /// The most bytes of the first frame (the Hello).
    pub max_hello: u32,
    /// How long a new connection may take to say Hello.
    pub hello_timeout: Duration,
    /// The most connections that have not been welcomed yet.
    pub max_unwelcomed: usize,
}

impl ConnSettings {
    /// How long the peer may be silent, or leave a write unread, before
    /// it counts as gone.
    fn silence_limit(&self) -> Duration {
        self.heartbeat_interval * self.heartbeat_misses
    }
}

/// What a connection tells the run loop.
#[derive(Debug)]
pub enum ConnEvent {
    /// A peer passed the token and version check; the run loop decides
    /// (does the task exist?) and answers with a Welcome or a reason.
    Hello {
        conn: ConnId,
        hello: Hello,
        outbox: Outbox,
        reply: oneshot::Sender<Result<Welcome, String>>,
    },
    Peer(PeerEvent),
}

/// What a peer did, as the run loop's core takes it.
#[derive(Debug)]
pub enum PeerEvent {
    Message {
        conn: ConnId,
        message: ToDriver,
    },
    /// A connection that had been welcomed ended, in one of three ways.
    Closed {
        conn: ConnId,
        ending: Ending,
        why: String,
    },
    /// A peer was turned away before it was welcomed.
    Refused {
        peer: SocketAddr,
        reason: String,
    },
}

/// How a welcomed connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// After a goodbye: the peer left when it was told to stop.
    Goodbye,
    /// The peer's end closed or broke without a goodbye: its process
    /// most likely ended.
    PeerLeft,
    /// The driver ended it: the peer fell silent, misbehaved, or the
    /// driver stops.
    CutOff,
}

/// The driver's end of a connection.
type DriverEnd = Transport<TcpStream, ToDriver, FromDriver>;

/// Serves one accepted connection until it ends. `unwelcomed` is its
/// place among the connections that have not been welcomed yet, given
/// up once the Hello has been answered.
pub async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    settings: Arc<ConnSettings>,
    events: mpsc::UnboundedSender<ConnEvent>,
    unwelcomed: OwnedSemaphorePermit,
) {
    let _ = socket.set_nodelay(true);
    let mut transport = DriverEnd::new(socket, settings.max_hello);
    let (outbox, shared) = Outbox::new();
    let handshake = handshake(&mut transport, conn, &settings, &events, outbox).await;
    drop(unwelcomed);
    let welcome = match handshake {
        Ok(welcome) => welcome,
        Err(reason) => return refuse(&mut transport, peer, reason, &events).await,
    };
    let ended = match transport.send(FromDriver::Welcome(welcome)).await {
        Ok(()) => {
            let (socket, read) = transport.into_parts();
            shared.open(socket);
            let link = Link::new((conn, peer), settings, events.clone(), shared.clone(), read);
            link.run().await
        }
        Err(error) => Ended::peer_left(error.to_string()),
    };
    shared.task_ended();
    let Ended { ending, why } = ended;
    let closed = PeerEvent::Closed { conn, ending, why };
    let _ = events.send(ConnEvent::Peer(closed));
}

/// Answers a refused Hello (the run loop logs it) and lets the peer go.
async fn refuse(
    transport: &mut DriverEnd,
    peer: SocketAddr,
    reason: String,
    events: &mpsc::UnboundedSender<ConnEvent>,
) {
    let rejected = FromDriver::Rejected {
        reason: reason.clone(),
        retry_later: false,
    };
    // A peer that does not read its refusal is not waited for.
    let _ = tokio::time::timeout(REFUSAL_WRITE, transport.send(rejected)).await;
    let _ = events.send(ConnEvent::Peer(PeerEvent::Refused { peer, reason }));
}

/// How long a refusal may take to write.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);

/// Turns away a connection over the `max_unwelcomed` limit at once, with
/// a reason it gets if it reads (never waiting for it to), telling it to
/// try again later: a thousand workers starting together are a crowd, not
/// an attack.
pub fn turn_away(
    socket: TcpStream,
    peer: SocketAddr,
    max_unwelcomed: usize,
    events: &mpsc::UnboundedSender<ConnEvent>,
) {
    let reason = format!(
        "too many connections have not said hello yet (the limit is {max_unwelcomed}); \
         try again later"
    );
    if let Ok(frame) = encode(&FromDriver::Rejected {
        reason: reason.clone(),
        retry_later: true,
    }) {
        let _ = socket.try_write(&frame);
    }
    let _ = events.send(ConnEvent::Peer(PeerEvent::Refused { peer, reason }));
}

/// Reads the Hello (nothing else runs yet) and asks the run loop.
async fn handshake(
    transport: &mut DriverEnd,
    conn: ConnId,
    settings: &ConnSettings,
    events: &mpsc::UnboundedSender<ConnEvent>,
    outbox: Outbox,
) -> Result<Welcome, String> {
    let first = tokio::time::timeout(settings.hello_timeout, transport.receive())
        .await
        .map_err(|_| format!("no Hello within {:?}", settings.hello_timeout))?;
    let hello = match first {
        Ok(ToDriver::Hello(hello)) => hello,
        Ok(other) => {
            return Err(format!(
                "the first message must be a Hello, not {}",
                other.kind()
            ))
        }
        Err(error) => return Err(error.to_string()),
    };
    check_hello(&hello, &settings.token)?;
    let (reply, answer) = oneshot::channel();
    events
        .send(ConnEvent::Hello {
            conn,
            hello,
            outbox,
            reply,
        })
        .map_err(|_| "the driver is shutting down".to_string())?;
    answer
        .await
        .map_err(|_| "the driver is shutting down".to_string())?
}

/// How a welcomed connection ended, and why (see [`PeerEvent::Closed`]).
struct Ended {
    ending: Ending,
    why: String,
}

impl Ended {
    fn goodbye(why: String) -> Self {
        let ending = Ending::Goodbye;
        Self { ending, why }
    }

    fn peer_left(why: String) -> Self {
        let ending = Ending::PeerLeft;
        Self { ending, why }
    }

    fn cut_off(why: String) -> Self {
        let ending = Ending::CutOff;
        Self { ending, why }
    }
}

/// A welcomed connection: what its one `select!` needs.
struct Link {
    conn: ConnId,
    peer: SocketAddr,
    settings: Arc<ConnSettings>,
    events: mpsc::UnboundedSender<ConnEvent>,
    /// The way out, shared with the run loop, and the socket.
    shared: Arc<Shared>,
    /// Read from the socket and not yet decoded.
    read: BytesMut,
    codec: Codec<ToDriver, FromDriver>,
    /// When the peer last sent a frame: silence longer than the limit
    /// means it is gone.
    heard: Instant,
}

impl Link {
    fn new(
        (conn, peer): (ConnId, SocketAddr),
        settings: Arc<ConnSettings>,
        events: mpsc::UnboundedSender<ConnEvent>,
        shared: Arc<Shared>,
        read: BytesMut,
    ) -> Self {
        Self {
            conn,
            peer,
            codec: Codec::new(settings.max_frame),
            settings,
            events,
            shared,
            read,
            heard: Instant::now(),
        }
    }

    /// Runs until the connection ends. Frames come first: one that is
    /// ready when the heartbeat falls due is no silence. While the run
    /// loop has not taken the peer's last [`REQUESTS_AHEAD`] requests, no
    /// more are read: those of a peer that sends faster than it is
    /// answered stay in its socket, not in the driver's memory.
    async fn run(mut self) -> Ended {
        let mut heartbeat = tokio::time::interval(self.settings.heartbeat_interval);
        let shared = self.shared.clone();
        let Some(socket) = shared.socket() else {
            return Ended::cut_off("the connection was never opened".into());
        };
        loop {
            let step = tokio::select! {
                biased;
                frame = receive(&shared, socket, &mut self.read, &mut self.codec) => {
                    self.on_frame(frame).await
                }
                end = poll_fn(|cx| shared.poll_end(cx)) => Err(self.write_ended(end)),
                _ = heartbeat.tick() => self.on_tick(),
            };
            if let Err(ended) = step {
                return ended;
            }
        }
    }

    /// Passes a request on to the run loop; a frame that cannot be read
    /// is answered, then ends the connection.
    async fn on_frame(&mut self, frame: Result<ToDriver, FrameError>) -> Result<(), Ended> {
        self.heard = Instant::now();
        let message = match frame {
            Err(FrameError::Closed) => return Err(self.ended("connection closed".into())),
            Err(error @ (FrameError::Truncated | FrameError::Io(_))) => {
                return Err(self.ended(error.to_string()))
            }
            Err(error) => {
                let why = error.to_string();
                // It ends for its own reason, whether the answer is written or not.
                self.shared.send(FromDriver::Error {
                    reason: why.clone(),
                });
                let written = poll_fn(|cx| self.shared.poll_written(cx));
                let _ = tokio::time::timeout(REFUSAL_WRITE, written).await;
                return Err(Ended::cut_off(why));
            }
            Ok(message) => message,
        };
        match message {
            ToDriver::Heartbeat => Ok(()),
            ToDriver::Hello(_) => {
                let reason = "Hello was already said".to_string();
                self.shared.send(FromDriver::Error { reason });
                Ok(())
            }
            message => {
                let event = ConnEvent::Peer(PeerEvent::Message {
                    conn: self.conn,
                    message: message.with_texts_cut(),
                });
                let gone = |_| Ended::cut_off("the driver is shutting down".into());
                self.events.send(event).map_err(gone)?;
                self.shared.request_passed_on();
                Ok(())
            }
        }
    }

    /// Sends a heartbeat, unless the peer has been silent, or has left
    /// what it was sent unread, for too long.
    fn on_tick(&mut self) -> Result<(), Ended> {
        let (now, limit) = (Instant::now(), self.settings.silence_limit());
        let silent = now.saturating_duration_since(self.heard);
        if self.shared.waited(now).is_some_and(|waited| waited > limit) {
            let why = format!("the peer read nothing for {limit:?}");
            return Err(Ended::cut_off(self.disconnect(why)));
        }
        if silent > limit {
            let why = format!("no message for {:.1} s", silent.as_secs_f64());
            return Err(Ended::cut_off(why));
        }
        self.shared.send(FromDriver::Heartbeat);
        Ok(())
    }

    /// How the connection ends when its way out does.
    fn write_ended(&self, end: WriteEnd) -> Ended {
        match end {
            WriteEnd::ClosedByDriver => Ended::goodbye("closed by the driver".to_string()),
            WriteEnd::Overflowed => {
                let why = format!(
                    "the peer does not read: {OUTBOX_CAPACITY} messages for it were waiting"
                );
                Ended::cut_off(self.disconnect(why))
            }
            WriteEnd::Failed(why) => Ended::peer_left(why),
            WriteEnd::TaskEnded => Ended::cut_off("the connection ended".to_string()),
        }
    }

    /// The connection ends for `why`: clean only after a Shutdown, since
    /// a worker that closes with heartbeats unread makes the kernel send
    /// a reset, which is still a goodbye.
    fn ended(&self, why: String) -> Ended {
        match self.shared.told_to_stop() {
            true => Ended::goodbye(why),
            false => Ended::peer_left(why),
        }
    }

    /// Says why the driver ends this connection (the run loop records
    /// only workers' ends); returns why.
    fn disconnect(&self, why: String) -> String {
        tracing::warn!(peer = %self.peer, "disconnected: {why}");
        why
    }
}

/// The peer's next message, once the run loop may take it. Cancel safe:
/// what was read stays in `read`.
async fn receive(
    shared: &Shared,
    socket: &TcpStream,
    read: &mut BytesMut,
    codec: &mut Codec<ToDriver, FromDriver>,
) -> Result<ToDriver, FrameError> {
    poll_fn(|cx| shared.poll_may_read(cx)).await;
    loop {
        if let Some(message) = codec.decode(read)? {
            return Ok(message);
        }
        socket.readable().await?;
        match read_some(socket, read) {
            Ok(0) => return codec.decode_eof(read)?.ok_or(FrameError::Closed),
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error.into()),
        }
    }
}

/// Reads what the socket holds into `read` (`Ok(0)`: the peer closed).
///
/// A read that leaves room in `read` has emptied the socket, so the
/// socket's readiness is cleared at once, as tokio's own `poll_read`
/// does: otherwise the next wait for readiness would return at once and
/// one more read, finding nothing, would clear it, a system call per
/// round trip on a socket no cache still holds when thousands are open.
/// The readiness cleared is the one seen before the read (`try_io` takes
/// it first), so bytes that arrive after the read still wake the task.
/// (Edge-triggered readiness, as on Linux and the BSDs, tells of every
/// arrival; a level-triggered one would repeat it.)
fn read_some(socket: &TcpStream, read: &mut BytesMut) -> io::Result<usize> {
    read.reserve(1);
    let room = read.capacity() - read.len();
    let mut got = 0;
    let result = socket.try_io(Interest::READABLE, || {
        got = socket.try_read_buf(read)?;
        match got {
            n if 0 < n && n < room => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    });
    match result {
        Err(error) if error.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
        result => result,
    }
}

#[cfg(test)]
mod tests;
