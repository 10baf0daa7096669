//! One task per connection: handshake, then frames in and out.
//!
//! The connection task owns the socket; the run loop owns all state. In
//! between are channels. The connection task reads the Hello itself;
//! once the peer is welcomed, a reader task owns the read half (reading a
//! frame is not cancel safe) and sends requests straight to the run loop,
//! while the connection task (the link) writes: the run loop's messages
//! from its outbox, heartbeats, and the reader's refusals. Each heartbeat
//! tick also checks when the reader last heard from the peer, so a silent
//! peer is noticed even while nothing else happens. Whatever a peer sends,
//! the worst outcome is a refusal and a closed connection: errors are
//! reported to the run loop with the peer, never bubbled.
//!
//! What a peer can make the driver hold is bounded: before its Hello, a
//! small first frame and a few seconds, with at most `max_unwelcomed`
//! such connections at a time (more are turned away at once); after it,
//! frames of `max_frame` and an outbox of [`OUTBOX_CAPACITY`] messages. A
//! peer that does not read what it is sent is disconnected when its outbox
//! is full, or when a write has waited for it as long as silence would.

use daisy_core::protocol::frame::encode;
use daisy_core::protocol::hello::check_hello;
use daisy_core::protocol::{
    read_frame, write_frame, FrameError, FromDriver, Hello, Message, ToDriver, Welcome,
};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::BufReader;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit};

pub type ConnId = u64;

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

/// The most messages waiting to be written to one peer: a peer that asks
/// and reads has one or two; one that keeps asking and never reads (an
/// observer wanting snapshots) is disconnected instead of growing it.
pub const OUTBOX_CAPACITY: usize = 64;

/// The run loop's way to a connection's writer.
#[derive(Debug, Clone)]
pub struct Outbox {
    messages: mpsc::Sender<FromDriver>,
    /// Told when a message did not fit: the writer then ends the
    /// connection, since its peer does not read.
    overflowed: Arc<Notify>,
}

impl Outbox {
    /// Queues `message`; if the outbox is full, the connection ends
    /// instead. Never waits: the run loop must not block on a peer.
    pub fn send(&self, message: FromDriver) {
        match self.messages.try_send(message) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.overflowed.notify_one(),
            // The connection is ending; its Closed event follows.
            Err(TrySendError::Closed(_)) => {}
        }
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
    Message {
        conn: ConnId,
        message: ToDriver,
    },
    /// A connection that had been welcomed ended.
    Closed {
        conn: ConnId,
        clean: bool,
        why: String,
    },
    /// A peer was turned away before it was welcomed.
    Refused {
        peer: SocketAddr,
        reason: String,
    },
}

/// Bytes read from the socket at a time: a worker's release and its next
/// acquire usually arrive together and are read with one `recv`.
const READ_BUFFER: usize = 8 * 1024;

type BufferedRead = BufReader<OwnedReadHalf>;

/// The receiving end of an [`Outbox`].
struct Inbox {
    messages: mpsc::Receiver<FromDriver>,
    overflowed: Arc<Notify>,
}

fn outbox() -> (Outbox, Inbox) {
    let (sender, messages) = mpsc::channel(OUTBOX_CAPACITY);
    let overflowed = Arc::new(Notify::new());
    let outbox = Outbox {
        messages: sender,
        overflowed: overflowed.clone(),
    };
    (
        outbox,
        Inbox {
            messages,
            overflowed,
        },
    )
}

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
    let (read_half, mut writer) = socket.into_split();
    let mut reader = BufReader::with_capacity(READ_BUFFER, read_half);
    let (outbox, inbox) = outbox();
    let handshake = handshake(&mut reader, conn, &settings, &events, outbox).await;
    drop(unwelcomed);
    let welcome = match handshake {
        Ok(welcome) => welcome,
        Err(reason) => return refuse(&mut writer, peer, reason, &events).await,
    };
    let (clean, why) = match write_frame(&mut writer, &FromDriver::Welcome(welcome)).await {
        Ok(()) => welcomed((conn, peer), settings, &events, (reader, writer), inbox).await,
        Err(error) => (false, error.to_string()),
    };
    let _ = events.send(ConnEvent::Closed { conn, clean, why });
}

/// Answers a refused Hello (the run loop logs it) and lets the peer go.
async fn refuse(
    writer: &mut OwnedWriteHalf,
    peer: SocketAddr,
    reason: String,
    events: &mpsc::UnboundedSender<ConnEvent>,
) {
    let rejected = FromDriver::Rejected {
        reason: reason.clone(),
    };
    // A peer that does not read its refusal is not waited for.
    let _ = tokio::time::timeout(REFUSAL_WRITE, write_frame(writer, &rejected)).await;
    let _ = events.send(ConnEvent::Refused { peer, reason });
}

/// How long a refusal may take to write.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);

/// Turns away a connection over the `max_unwelcomed` limit at once, with
/// a reason it gets if it reads (never waiting for it to).
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
    }) {
        let _ = socket.try_write(&frame);
    }
    let _ = events.send(ConnEvent::Refused { peer, reason });
}

/// Runs a welcomed connection until it ends; returns (clean, why).
async fn welcomed(
    (conn, peer): (ConnId, SocketAddr),
    settings: Arc<ConnSettings>,
    events: &mpsc::UnboundedSender<ConnEvent>,
    (read_half, writer): (BufferedRead, OwnedWriteHalf),
    inbox: Inbox,
) -> (bool, String) {
    let heard = Arc::new(Heard::new());
    let (notes_tx, notes) = mpsc::unbounded_channel();
    let reader = Reader {
        conn,
        max_frame: settings.max_frame,
        events: events.clone(),
        heard: heard.clone(),
        notes: notes_tx,
    };
    let reader = tokio::spawn(reader.run(read_half));
    let link = Link {
        peer,
        settings,
        writer,
        notes,
        inbox,
        heard,
    };
    let ended = link.run().await;
    reader.abort();
    ended
}

/// Reads the Hello directly (nothing else runs yet) and asks the run loop.
async fn handshake(
    reader: &mut BufferedRead,
    conn: ConnId,
    settings: &ConnSettings,
    events: &mpsc::UnboundedSender<ConnEvent>,
    outbox: Outbox,
) -> Result<Welcome, String> {
    let first = tokio::time::timeout(
        settings.hello_timeout,
        read_frame(reader, settings.max_hello),
    )
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

/// When the peer was last heard from, in milliseconds since `since`: the
/// reader sets it on every frame, the link checks it on every heartbeat.
struct Heard {
    since: Instant,
    millis: AtomicU64,
}

impl Heard {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            millis: AtomicU64::new(0),
        }
    }

    fn now(&self) {
        let millis = self.since.elapsed().as_millis() as u64;
        self.millis.store(millis, Ordering::Relaxed);
    }

    fn silent_for(&self) -> Duration {
        let heard = Duration::from_millis(self.millis.load(Ordering::Relaxed));
        self.since.elapsed().saturating_sub(heard)
    }
}

/// What the reader tells the link: what only the link may write.
enum Note {
    /// Answer with this `Error`; the connection stays open.
    Complain(String),
    /// The reader stopped: why, and an `Error` to answer with first.
    Ended { why: String, answer: Option<String> },
}

/// The reader of a welcomed connection. It passes requests straight to
/// the run loop (one hop, not two), so the link only writes. It is the
/// only reader of the socket, because reading a frame is not cancel safe.
struct Reader {
    conn: ConnId,
    max_frame: u32,
    events: mpsc::UnboundedSender<ConnEvent>,
    heard: Arc<Heard>,
    notes: mpsc::UnboundedSender<Note>,
}

impl Reader {
    async fn run(self, mut reader: BufferedRead) {
        let note = loop {
            let frame = read_frame(&mut reader, self.max_frame).await;
            self.heard.now();
            match self.on_frame(frame) {
                Ok(None) => {}
                Ok(Some(note)) => {
                    let _ = self.notes.send(note);
                }
                Err(note) => break note,
            }
        };
        let _ = self.notes.send(note);
    }

    /// Passes a message on; `Err` ends the reading.
    fn on_frame(&self, frame: Result<ToDriver, FrameError>) -> Result<Option<Note>, Note> {
        let ended = |why: String, answer| Note::Ended { why, answer };
        let message = match frame {
            Err(FrameError::Closed) => return Err(ended("connection closed".into(), None)),
            Err(error) => return Err(ended(error.to_string(), Some(error.to_string()))),
            Ok(message) => message,
        };
        match message {
            ToDriver::Heartbeat => Ok(None),
            ToDriver::Hello(_) => Ok(Some(Note::Complain("Hello was already said".into()))),
            message => {
                let event = ConnEvent::Message {
                    conn: self.conn,
                    message: message.with_texts_cut(),
                };
                let gone = || ended("the driver is shutting down".into(), None);
                self.events.send(event).map(|()| None).map_err(|_| gone())
            }
        }
    }
}

/// The writing side of a welcomed connection: the run loop's messages,
/// heartbeats, and the reader's complaints.
struct Link {
    peer: SocketAddr,
    settings: Arc<ConnSettings>,
    writer: OwnedWriteHalf,
    notes: mpsc::UnboundedReceiver<Note>,
    inbox: Inbox,
    heard: Arc<Heard>,
}

impl Link {
    /// Runs until the connection ends; returns (clean, why).
    async fn run(mut self) -> (bool, String) {
        let mut heartbeat = tokio::time::interval(self.settings.heartbeat_interval);
        let silence_limit = self.settings.silence_limit();
        let mut told_to_stop = false;
        loop {
            tokio::select! {
                note = self.notes.recv() => {
                    if let Err(why) = self.on_note(note).await {
                        // After Shutdown any end is clean: a worker that
                        // closes with heartbeats unread makes the kernel
                        // send a reset, which is still a goodbye.
                        return (told_to_stop, why);
                    }
                }
                out = self.inbox.messages.recv() => {
                    let Some(message) = out else {
                        return (true, "closed by the driver".to_string());
                    };
                    told_to_stop |= matches!(message, FromDriver::Shutdown { .. });
                    if let Err(why) = self.write(&message).await {
                        return (false, why);
                    }
                }
                () = self.inbox.overflowed.notified() => return (false, self.unread()),
                _ = heartbeat.tick() => {
                    let silent = self.heard.silent_for();
                    if silent > silence_limit {
                        return (false, format!("no message for {:.1} s", silent.as_secs_f64()));
                    }
                    if let Err(why) = self.write(&FromDriver::Heartbeat).await {
                        return (false, why);
                    }
                }
            }
        }
    }

    /// Writes one message, unless the peer leaves it unread for as long
    /// as silence would make it gone, or its outbox overflows meanwhile.
    async fn write(&mut self, message: &FromDriver) -> Result<(), String> {
        let limit = self.settings.silence_limit();
        let write = tokio::time::timeout(limit, write_frame(&mut self.writer, message));
        tokio::select! {
            written = write => match written {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err(self.disconnect(format!("the peer read nothing for {limit:?}"))),
            },
            () = self.inbox.overflowed.notified() => Err(self.unread()),
        }
    }

    /// Writes what the reader asked for; an error ends the connection
    /// with its reason.
    async fn on_note(&mut self, note: Option<Note>) -> Result<(), String> {
        let (reason, ended) = match note {
            None => return Err("connection closed".to_string()),
            Some(Note::Complain(reason)) => (Some(reason), None),
            Some(Note::Ended { why, answer }) => (answer, Some(why)),
        };
        let written = match reason {
            Some(reason) => self.write(&FromDriver::Error { reason }).await,
            None => Ok(()),
        };
        // An ending connection ends for its own reason, written or not.
        ended.map_or(written, Err)
    }
}

impl Link {
    /// Why a peer whose outbox overflowed is disconnected.
    fn unread(&self) -> String {
        let why = format!("the peer does not read: {OUTBOX_CAPACITY} messages for it were waiting");
        self.disconnect(why)
    }

    /// Says why the driver ends this connection (the run loop records
    /// only workers' ends); returns why.
    fn disconnect(&self, why: String) -> String {
        tracing::warn!(peer = %self.peer, "disconnected: {why}");
        why
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use daisy_core::protocol::{Role, PROTOCOL_VERSION};
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// Every wait in these tests gives up after this long.
    const WAIT: Duration = Duration::from_secs(5);

    /// A welcomed connection: the peer's socket, the run loop's side.
    struct Welcomed {
        peer: TcpStream,
        events: mpsc::UnboundedReceiver<ConnEvent>,
        outbox: Outbox,
    }

    impl Welcomed {
        /// Serves one connection with `heartbeat` (2 misses), says Hello
        /// and plays the run loop's part of the handshake.
        async fn start(heartbeat: Duration) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut peer = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let mut events = spawn_serve(&listener, settings(heartbeat, WAIT)).await;
            write_frame(&mut peer, &hello()).await.unwrap();
            let Some(ConnEvent::Hello { outbox, reply, .. }) = next(&mut events).await else {
                panic!("expected the Hello first");
            };
            reply.send(Ok(welcome())).unwrap();
            let mut welcomed = Self {
                peer,
                events,
                outbox,
            };
            assert!(matches!(welcomed.receive().await, FromDriver::Welcome(_)));
            welcomed
        }

        async fn send(&mut self, message: &ToDriver) {
            write_frame(&mut self.peer, message).await.unwrap();
        }

        /// The next frame from the driver that is not a heartbeat.
        async fn receive(&mut self) -> FromDriver {
            loop {
                let frame = tokio::time::timeout(WAIT, read_frame(&mut self.peer, 1 << 20));
                match frame.await.expect("a frame in time").unwrap() {
                    FromDriver::Heartbeat => {}
                    message => return message,
                }
            }
        }

        async fn event(&mut self) -> ConnEvent {
            next(&mut self.events).await.expect("an event")
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
        let serving = serve(socket, address, 1, Arc::new(settings), events_tx, permit);
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
        c.send(&ToDriver::AcquireBlocks { max: 3 }).await;
        c.send(&ToDriver::Heartbeat).await;
        c.send(&ToDriver::ReleaseBlocks { results: vec![] }).await;
        c.peer.shutdown().await.unwrap();
        let acquire = c.event().await;
        assert!(matches!(
            acquire,
            ConnEvent::Message {
                message: ToDriver::AcquireBlocks { max: 3 },
                ..
            }
        ));
        let release = c.event().await;
        assert!(matches!(
            release,
            ConnEvent::Message {
                message: ToDriver::ReleaseBlocks { .. },
                ..
            }
        ));
        let ConnEvent::Closed { clean, why, .. } = c.event().await else {
            panic!("expected Closed");
        };
        assert!(!clean, "closed without being told to stop");
        assert_eq!(why, "connection closed");
    }

    #[tokio::test]
    async fn a_second_hello_is_refused_and_the_connection_goes_on() {
        let mut c = Welcomed::start(Duration::from_secs(10)).await;
        c.send(&hello()).await;
        let FromDriver::Error { reason } = c.receive().await else {
            panic!("expected an Error");
        };
        assert!(reason.contains("already said"), "{reason}");
        c.send(&ToDriver::AcquireBlocks { max: 1 }).await;
        assert!(matches!(c.event().await, ConnEvent::Message { .. }));
    }

    #[tokio::test]
    async fn garbage_after_the_welcome_is_answered_then_the_connection_ends() {
        let mut c = Welcomed::start(Duration::from_secs(10)).await;
        c.peer.write_all(&[0, 0, 0, 2, 0xc1, 0xc1]).await.unwrap();
        let FromDriver::Error { reason } = c.receive().await else {
            panic!("expected an Error");
        };
        let expected = "the frame is not a MessagePack map (its first byte is 0xc1)";
        assert_eq!(reason, expected);
        let ConnEvent::Closed { clean, why, .. } = c.event().await else {
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
        let ConnEvent::Closed { clean, why, .. } = closed else {
            panic!("expected Closed");
        };
        assert!(!clean);
        assert!(why.starts_with("the peer does not read"), "{why}");
    }

    #[tokio::test]
    async fn a_peer_that_says_nothing_is_refused_after_the_hello_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let limit = Duration::from_millis(50);
        let mut events = spawn_serve(&listener, settings(WAIT, limit)).await;
        let Some(ConnEvent::Refused { reason, .. }) = next(&mut events).await else {
            panic!("expected a refusal");
        };
        assert_eq!(reason, "no Hello within 50ms");
        let frame = tokio::time::timeout(WAIT, read_frame(&mut peer, 1024)).await;
        assert!(matches!(frame, Ok(Ok(FromDriver::Rejected { .. }))));
    }

    #[tokio::test]
    async fn a_first_frame_over_the_hello_limit_is_refused_before_it_is_read() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let mut events = spawn_serve(&listener, settings(WAIT, WAIT)).await;
        peer.write_all(&1000u32.to_be_bytes()).await.unwrap();
        let Some(ConnEvent::Refused { reason, .. }) = next(&mut events).await else {
            panic!("expected a refusal");
        };
        assert_eq!(reason, "frame of 1000 bytes exceeds the limit of 512 bytes");
    }

    #[tokio::test]
    async fn a_peer_that_leaves_after_shutdown_leaves_cleanly() {
        let mut c = Welcomed::start(Duration::from_secs(10)).await;
        let reason = "the task is done".to_string();
        c.outbox.send(FromDriver::Shutdown { reason });
        assert!(matches!(c.receive().await, FromDriver::Shutdown { .. }));
        c.peer.shutdown().await.unwrap();
        let ConnEvent::Closed { clean, .. } = c.event().await else {
            panic!("expected Closed");
        };
        assert!(clean);
    }

    #[tokio::test]
    async fn a_silent_peer_is_dropped_after_the_missed_heartbeats() {
        let mut c = Welcomed::start(Duration::from_millis(20)).await;
        let ConnEvent::Closed { clean, why, .. } = c.event().await else {
            panic!("expected Closed");
        };
        assert!(!clean);
        assert!(why.starts_with("no message for"), "{why}");
    }
}
