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
    /// A connection that had been welcomed ended: `clean` after a
    /// goodbye; otherwise `peer_left` if the peer's end closed or broke
    /// (its process most likely ended) rather than falling silent or
    /// being cut off by the driver.
    Closed {
        conn: ConnId,
        clean: bool,
        peer_left: bool,
        why: String,
    },
    /// A peer was turned away before it was welcomed.
    Refused {
        peer: SocketAddr,
        reason: String,
    },
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
    let Ended {
        clean,
        peer_left,
        why,
    } = ended;
    let closed = PeerEvent::Closed {
        conn,
        clean,
        peer_left,
        why,
    };
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

/// How a welcomed connection ended (see [`PeerEvent::Closed`]).
struct Ended {
    clean: bool,
    peer_left: bool,
    why: String,
}

impl Ended {
    /// A goodbye: the peer left after it was told to stop.
    fn goodbye(why: String) -> Self {
        Self {
            clean: true,
            peer_left: false,
            why,
        }
    }

    /// The peer's end closed or broke without a goodbye.
    fn peer_left(why: String) -> Self {
        Self {
            clean: false,
            peer_left: true,
            why,
        }
    }

    /// The driver ended it: the peer fell silent, misbehaved, or the
    /// driver stops.
    fn cut_off(why: String) -> Self {
        Self {
            clean: false,
            peer_left: false,
            why,
        }
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
mod tests {
    use super::*;
    use daisy_core::protocol::{Role, PROTOCOL_VERSION};
    use outbox::REQUESTS_AHEAD;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// Every wait in these tests gives up after this long.
    const WAIT: Duration = Duration::from_secs(5);

    /// The peer's end of a connection.
    type PeerEnd = Transport<TcpStream, FromDriver, ToDriver>;

    /// A peer's end of a connection to `listener`.
    async fn connect(listener: &TcpListener) -> PeerEnd {
        let socket = TcpStream::connect(listener.local_addr().unwrap());
        Transport::new(socket.await.unwrap(), 1 << 20)
    }

    /// A welcomed connection: the peer's end, the run loop's side.
    struct Welcomed {
        peer: PeerEnd,
        events: mpsc::UnboundedReceiver<ConnEvent>,
        outbox: Outbox,
    }

    impl Welcomed {
        /// Serves one connection with `heartbeat` (2 misses), says Hello
        /// and plays the run loop's part of the handshake.
        async fn start(heartbeat: Duration) -> Self {
            Self::start_sending_early(heartbeat, None).await
        }

        /// [`Self::start`], with `early` sent on the outbox before the
        /// Hello is answered.
        async fn start_sending_early(heartbeat: Duration, early: Option<FromDriver>) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut peer = connect(&listener).await;
            let mut events = spawn_serve(&listener, settings(heartbeat, WAIT)).await;
            peer.send(hello()).await.unwrap();
            let Some(ConnEvent::Hello { outbox, reply, .. }) = next(&mut events).await else {
                panic!("expected the Hello first");
            };
            if let Some(message) = early {
                outbox.send(message);
            }
            reply.send(Ok(welcome())).unwrap();
            let mut welcomed = Self {
                peer,
                events,
                outbox,
            };
            assert!(matches!(welcomed.receive().await, FromDriver::Welcome(_)));
            welcomed
        }

        async fn send(&mut self, message: ToDriver) {
            self.peer.send(message).await.unwrap();
        }

        /// The next frame from the driver that is not a heartbeat.
        async fn receive(&mut self) -> FromDriver {
            not_a_heartbeat(&mut self.peer).await.unwrap()
        }

        async fn event(&mut self) -> ConnEvent {
            next(&mut self.events).await.expect("an event")
        }
    }

    /// What the driver writes next that is not a heartbeat.
    async fn not_a_heartbeat(peer: &mut PeerEnd) -> Result<FromDriver, FrameError> {
        loop {
            let frame = tokio::time::timeout(WAIT, peer.receive());
            match frame.await.expect("a frame in time") {
                Ok(FromDriver::Heartbeat) => {}
                frame => return frame,
            }
        }
    }

    fn settings(heartbeat: Duration, hello_timeout: Duration) -> ConnSettings {
        ConnSettings {
            token: "secret".into(),
            heartbeat_interval: heartbeat,
            heartbeat_misses: 2,
            max_frame: 1024,
            max_hello: 512,
            hello_timeout,
            max_unwelcomed: 1,
        }
    }

    /// Serves the next connection to `listener`; the run loop's side.
    async fn spawn_serve(
        listener: &TcpListener,
        settings: ConnSettings,
    ) -> mpsc::UnboundedReceiver<ConnEvent> {
        let (socket, address) = listener.accept().await.unwrap();
        let (events_tx, events) = mpsc::unbounded_channel();
        let permit = Arc::new(tokio::sync::Semaphore::new(1))
            .try_acquire_owned()
            .unwrap();
        let settings = Arc::new(settings);
        let serving = serve(socket, address, ConnId::FIRST, settings, events_tx, permit);
        tokio::spawn(serving);
        events
    }

    async fn next(events: &mut mpsc::UnboundedReceiver<ConnEvent>) -> Option<ConnEvent> {
        tokio::time::timeout(WAIT, events.recv())
            .await
            .expect("an event in time")
    }

    fn hello() -> ToDriver {
        ToDriver::Hello(Hello {
            protocol: PROTOCOL_VERSION,
            token: "secret".into(),
            role: Role::Worker,
            task_id: Some("predict".into()),
            worker_id: None,
            job_id: None,
            host: "here".into(),
            pid: 1,
        })
    }

    fn welcome() -> Welcome {
        Welcome {
            worker_id: 1,
            heartbeat_interval_s: 1.0,
            heartbeat_misses: 2,
            code: None,
            longest_block_s: None,
        }
    }

    #[tokio::test]
    async fn requests_reach_the_run_loop_in_order_and_closed_comes_last() {
        let mut c = Welcomed::start(Duration::from_secs(10)).await;
        c.send(ToDriver::AcquireBlocks { max: 3 }).await;
        c.send(ToDriver::Heartbeat).await;
        c.send(ToDriver::ReleaseBlocks { results: vec![] }).await;
        c.peer.close().await.unwrap();
        let acquire = c.event().await;
        assert!(matches!(
            acquire,
            ConnEvent::Peer(PeerEvent::Message {
                message: ToDriver::AcquireBlocks { max: 3 },
                ..
            })
        ));
        let release = c.event().await;
        assert!(matches!(
            release,
            ConnEvent::Peer(PeerEvent::Message {
                message: ToDriver::ReleaseBlocks { .. },
                ..
            })
        ));
        let ConnEvent::Peer(PeerEvent::Closed { clean, why, .. }) = c.event().await else {
            panic!("expected Closed");
        };
        assert!(!clean, "closed without being told to stop");
        assert_eq!(why, "connection closed");
    }

    #[tokio::test]
    async fn a_second_hello_is_refused_and_the_connection_goes_on() {
        let mut c = Welcomed::start(Duration::from_secs(10)).await;
        c.send(hello()).await;
        let FromDriver::Error { reason } = c.receive().await else {
            panic!("expected an Error");
        };
        assert!(reason.contains("already said"), "{reason}");
        c.send(ToDriver::AcquireBlocks { max: 1 }).await;
        assert!(matches!(
            c.event().await,
            ConnEvent::Peer(PeerEvent::Message { .. })
        ));
    }

    #[tokio::test]
    async fn garbage_after_the_welcome_is_answered_then_the_connection_ends() {
        let mut c = Welcomed::start(Duration::from_secs(10)).await;
        c.peer
            .stream_mut()
            .write_all(&[0, 0, 0, 2, 0xc1, 0xc1])
            .await
            .unwrap();
        let FromDriver::Error { reason } = c.receive().await else {
            panic!("expected an Error");
        };
        let expected = "the frame is not a MessagePack map (its first byte is 0xc1)";
        assert_eq!(reason, expected);
        let ConnEvent::Peer(PeerEvent::Closed { clean, why, .. }) = c.event().await else {
            panic!("expected Closed");
        };
        assert!(!clean);
        assert_eq!(why, expected);
    }

    #[tokio::test]
    async fn a_peer_that_does_not_read_is_disconnected_when_its_outbox_is_full() {
        let mut c = Welcomed::start(Duration::from_secs(10)).await;
        // Far more than the socket buffers and the outbox hold together.
        let big = FromDriver::Error {
            reason: "x".repeat(64 * 1024),
        };
        let closed = loop {
            c.outbox.send(big.clone());
            if let Ok(event) = c.events.try_recv() {
                break event;
            }
            tokio::task::yield_now().await;
        };
        let ConnEvent::Peer(PeerEvent::Closed { clean, why, .. }) = closed else {
            panic!("expected Closed");
        };
        assert!(!clean);
        assert!(why.starts_with("the peer does not read"), "{why}");
    }

    #[tokio::test]
    async fn a_peer_that_says_nothing_is_refused_after_the_hello_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut peer = connect(&listener).await;
        let limit = Duration::from_millis(50);
        let mut events = spawn_serve(&listener, settings(WAIT, limit)).await;
        let Some(ConnEvent::Peer(PeerEvent::Refused { reason, .. })) = next(&mut events).await
        else {
            panic!("expected a refusal");
        };
        assert_eq!(reason, "no Hello within 50ms");
        let frame = tokio::time::timeout(WAIT, peer.receive()).await;
        assert!(matches!(frame, Ok(Ok(FromDriver::Rejected { .. }))));
    }

    #[tokio::test]
    async fn a_first_frame_over_the_hello_limit_is_refused_before_it_is_read() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut peer = connect(&listener).await;
        let mut events = spawn_serve(&listener, settings(WAIT, WAIT)).await;
        let prefix = 1000u32.to_be_bytes();
        peer.stream_mut().write_all(&prefix).await.unwrap();
        let Some(ConnEvent::Peer(PeerEvent::Refused { reason, .. })) = next(&mut events).await
        else {
            panic!("expected a refusal");
        };
        assert_eq!(reason, "frame of 1000 bytes exceeds the limit of 512 bytes");
    }

    #[tokio::test]
    async fn what_the_run_loop_sends_before_the_welcome_is_written_follows_it() {
        let reason = "the task is done".to_string();
        let early = FromDriver::Shutdown { reason };
        // `start` checks that the Welcome comes first.
        let mut c = Welcomed::start_sending_early(Duration::from_secs(10), Some(early)).await;
        assert!(matches!(c.receive().await, FromDriver::Shutdown { .. }));
    }

    #[tokio::test]
    async fn an_outbox_let_go_ends_the_connection_cleanly_after_what_it_held() {
        let Welcomed {
            mut peer,
            mut events,
            outbox,
        } = Welcomed::start(Duration::from_secs(10)).await;
        outbox.send(FromDriver::Error {
            reason: "last words".into(),
        });
        drop(outbox);
        let last = not_a_heartbeat(&mut peer).await;
        assert!(
            matches!(&last, Ok(FromDriver::Error { reason }) if reason == "last words"),
            "{last:?}"
        );
        let end = not_a_heartbeat(&mut peer).await;
        assert!(matches!(end, Err(FrameError::Closed)), "{end:?}");
        let Some(ConnEvent::Peer(PeerEvent::Closed { clean, why, .. })) = next(&mut events).await
        else {
            panic!("expected Closed");
        };
        assert!(clean);
        assert_eq!(why, "closed by the driver");
    }

    #[tokio::test]
    async fn a_peer_that_talks_but_never_reads_is_disconnected_after_the_silence_limit() {
        let heartbeat = Duration::from_millis(20);
        let mut c = Welcomed::start(heartbeat).await;
        // Fewer messages than overflow the outbox, more bytes than the
        // socket buffers hold.
        let big = FromDriver::Error {
            reason: "x".repeat(512 * 1024),
        };
        for _ in 0..OUTBOX_CAPACITY / 2 {
            c.outbox.send(big.clone());
        }
        let closed = loop {
            c.send(ToDriver::Heartbeat).await;
            if let Ok(event) = c.events.try_recv() {
                break event;
            }
            tokio::time::sleep(heartbeat / 4).await;
        };
        let ConnEvent::Peer(PeerEvent::Closed { clean, why, .. }) = closed else {
            panic!("expected Closed");
        };
        assert!(!clean);
        assert_eq!(why, "the peer read nothing for 40ms");
    }

    #[tokio::test]
    async fn a_peer_is_read_at_most_requests_ahead_of_the_run_loop() {
        let mut c = Welcomed::start(Duration::from_secs(10)).await;
        let sent = 3 * REQUESTS_AHEAD;
        for _ in 0..sent {
            c.send(ToDriver::GetSnapshot).await;
        }
        let mut passed_on = 0;
        for _ in 0..REQUESTS_AHEAD {
            assert!(matches!(
                c.event().await,
                ConnEvent::Peer(PeerEvent::Message { .. })
            ));
            passed_on += 1;
        }
        let more = tokio::time::timeout(Duration::from_millis(200), c.events.recv()).await;
        assert!(more.is_err(), "more than {REQUESTS_AHEAD} requests ahead");
        // The run loop takes them, and each that follows: all come.
        for _ in 0..passed_on {
            c.outbox.request_taken();
        }
        while passed_on < sent {
            assert!(matches!(
                c.event().await,
                ConnEvent::Peer(PeerEvent::Message { .. })
            ));
            passed_on += 1;
            c.outbox.request_taken();
        }
    }

    #[tokio::test]
    async fn a_peer_that_leaves_after_shutdown_leaves_cleanly() {
        let mut c = Welcomed::start(Duration::from_secs(10)).await;
        let reason = "the task is done".to_string();
        c.outbox.send(FromDriver::Shutdown { reason });
        assert!(matches!(c.receive().await, FromDriver::Shutdown { .. }));
        c.peer.close().await.unwrap();
        let ConnEvent::Peer(PeerEvent::Closed { clean, .. }) = c.event().await else {
            panic!("expected Closed");
        };
        assert!(clean);
    }

    /// Both ends of a fresh loopback connection: the peer's, then ours.
    async fn loopback_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap());
        let (peer, accepted) = tokio::join!(peer, listener.accept());
        (peer.unwrap(), accepted.unwrap().0)
    }

    /// Whether the socket is readable as far as tokio knows, without waiting.
    async fn readable_now(socket: &TcpStream) -> bool {
        poll_fn(|cx| std::task::Poll::Ready(socket.poll_read_ready(cx).is_ready())).await
    }

    #[tokio::test]
    async fn a_read_that_empties_the_socket_clears_its_readiness_and_new_bytes_set_it() {
        let (mut peer, socket) = loopback_pair().await;
        let mut read = BytesMut::with_capacity(64);
        peer.write_all(b"first").await.unwrap();
        socket.readable().await.unwrap();
        assert_eq!(read_some(&socket, &mut read).unwrap(), 5);
        assert!(!readable_now(&socket).await, "an empty socket still ready");
        peer.write_all(b" second").await.unwrap();
        let ready = tokio::time::timeout(WAIT, socket.readable()).await;
        ready.expect("new bytes make it ready").unwrap();
        assert_eq!(read_some(&socket, &mut read).unwrap(), 7);
        assert_eq!(&read[..], b"first second");
    }

    #[tokio::test]
    async fn a_read_that_fills_the_buffer_leaves_the_socket_ready_for_the_rest() {
        let (mut peer, socket) = loopback_pair().await;
        let mut read = BytesMut::new();
        let sent = vec![7u8; 4096];
        peer.write_all(&sent).await.unwrap();
        socket.readable().await.unwrap();
        while read.len() < sent.len() {
            assert!(readable_now(&socket).await, "bytes left unread, not ready");
            read_some(&socket, &mut read).unwrap();
        }
        assert_eq!(&read[..], &sent[..]);
    }

    #[tokio::test]
    async fn a_silent_peer_is_dropped_after_the_missed_heartbeats() {
        let mut c = Welcomed::start(Duration::from_millis(20)).await;
        let ConnEvent::Peer(PeerEvent::Closed { clean, why, .. }) = c.event().await else {
            panic!("expected Closed");
        };
        assert!(!clean);
        assert!(why.starts_with("no message for"), "{why}");
    }
}
