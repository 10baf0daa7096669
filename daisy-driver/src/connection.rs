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
//! logged with the peer, never bubbled.

use daisy_core::protocol::hello::check_hello;
use daisy_core::protocol::{
    read_frame, write_frame, FrameError, FromDriver, Hello, ToDriver, Welcome,
};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::BufReader;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

pub type ConnId = u64;

/// What every connection needs to know.
#[derive(Debug, Clone)]
pub struct ConnSettings {
    pub token: String,
    pub heartbeat_interval: Duration,
    pub heartbeat_misses: u32,
    pub max_frame: u32,
    /// How long a new connection may take to say Hello.
    pub hello_timeout: Duration,
}

/// What a connection tells the run loop.
#[derive(Debug)]
pub enum ConnEvent {
    /// A peer passed the token and version check; the run loop decides
    /// (does the task exist?) and answers with a Welcome or a reason.
    Hello {
        conn: ConnId,
        hello: Hello,
        outbox: mpsc::UnboundedSender<FromDriver>,
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

/// Serves one accepted connection until it ends.
pub async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    settings: Arc<ConnSettings>,
    events: mpsc::UnboundedSender<ConnEvent>,
) {
    let _ = socket.set_nodelay(true);
    let (read_half, mut writer) = socket.into_split();
    let mut reader = BufReader::with_capacity(READ_BUFFER, read_half);
    let (outbox, inbox) = mpsc::unbounded_channel();
    let welcome = match handshake(&mut reader, conn, &settings, &events, outbox).await {
        Ok(welcome) => welcome,
        Err(reason) => {
            tracing::warn!(%peer, "refused: {reason}");
            let _ = write_frame(
                &mut writer,
                &FromDriver::Rejected {
                    reason: reason.clone(),
                },
            )
            .await;
            let _ = events.send(ConnEvent::Refused { peer, reason });
            return;
        }
    };
    let (clean, why) = match write_frame(&mut writer, &FromDriver::Welcome(welcome)).await {
        Ok(()) => welcomed(conn, settings, &events, (reader, writer), inbox).await,
        Err(error) => (false, error.to_string()),
    };
    let _ = events.send(ConnEvent::Closed { conn, clean, why });
}

/// Runs a welcomed connection until it ends; returns (clean, why).
async fn welcomed(
    conn: ConnId,
    settings: Arc<ConnSettings>,
    events: &mpsc::UnboundedSender<ConnEvent>,
    (read_half, writer): (BufferedRead, OwnedWriteHalf),
    inbox: mpsc::UnboundedReceiver<FromDriver>,
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
    outbox: mpsc::UnboundedSender<FromDriver>,
) -> Result<Welcome, String> {
    let first = tokio::time::timeout(
        settings.hello_timeout,
        read_frame(reader, settings.max_frame),
    )
    .await
    .map_err(|_| format!("no Hello within {:?}", settings.hello_timeout))?;
    let hello = match first {
        Ok(ToDriver::Hello(hello)) => hello,
        Ok(other) => {
            return Err(format!(
                "the first message must be a Hello, not {}",
                kind(&other)
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
                    message,
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
    settings: Arc<ConnSettings>,
    writer: OwnedWriteHalf,
    notes: mpsc::UnboundedReceiver<Note>,
    inbox: mpsc::UnboundedReceiver<FromDriver>,
    heard: Arc<Heard>,
}

impl Link {
    /// Runs until the connection ends; returns (clean, why).
    async fn run(mut self) -> (bool, String) {
        let mut heartbeat = tokio::time::interval(self.settings.heartbeat_interval);
        let silence_limit = self.settings.heartbeat_interval * self.settings.heartbeat_misses;
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
                out = self.inbox.recv() => {
                    let Some(message) = out else {
                        return (true, "closed by the driver".to_string());
                    };
                    told_to_stop |= matches!(message, FromDriver::Shutdown { .. });
                    if let Err(error) = write_frame(&mut self.writer, &message).await {
                        return (false, error.to_string());
                    }
                }
                _ = heartbeat.tick() => {
                    let silent = self.heard.silent_for();
                    if silent > silence_limit {
                        return (false, format!("no message for {:.1} s", silent.as_secs_f64()));
                    }
                    if let Err(error) = write_frame(&mut self.writer, &FromDriver::Heartbeat).await {
                        return (false, error.to_string());
                    }
                }
            }
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
        if let Some(reason) = reason {
            let _ = write_frame(&mut self.writer, &FromDriver::Error { reason }).await;
        }
        ended.map_or(Ok(()), Err)
    }
}

fn kind(message: &ToDriver) -> &'static str {
    match message {
        ToDriver::Hello(_) => "hello",
        ToDriver::AcquireBlocks { .. } => "acquire_blocks",
        ToDriver::ReleaseBlocks { .. } => "release_blocks",
        ToDriver::Heartbeat => "heartbeat",
        ToDriver::Draining { .. } => "draining",
        ToDriver::ReturnBlocks { .. } => "return_blocks",
        ToDriver::CannotServe { .. } => "cannot_serve",
        ToDriver::GetSnapshot => "get_snapshot",
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
        outbox: mpsc::UnboundedSender<FromDriver>,
    }

    impl Welcomed {
        /// Serves one connection with `heartbeat` (2 misses), says Hello
        /// and plays the run loop's part of the handshake.
        async fn start(heartbeat: Duration) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut peer = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (socket, address) = listener.accept().await.unwrap();
            let settings = Arc::new(ConnSettings {
                token: "secret".into(),
                heartbeat_interval: heartbeat,
                heartbeat_misses: 2,
                max_frame: 1024,
                hello_timeout: WAIT,
            });
            let (events_tx, mut events) = mpsc::unbounded_channel();
            tokio::spawn(serve(socket, address, 1, settings, events_tx));
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
        assert!(reason.contains("undecodable"), "{reason}");
        let ConnEvent::Closed { clean, why, .. } = c.event().await else {
            panic!("expected Closed");
        };
        assert!(!clean);
        assert!(why.contains("undecodable"), "{why}");
    }

    #[tokio::test]
    async fn a_peer_that_leaves_after_shutdown_leaves_cleanly() {
        let mut c = Welcomed::start(Duration::from_secs(10)).await;
        let reason = "the task is done".to_string();
        c.outbox.send(FromDriver::Shutdown { reason }).unwrap();
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
