//! One connection against a real loopback socket: handshake, order,
//! limits, back-pressure and the ways a connection ends.

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
    let ConnEvent::Peer(PeerEvent::Closed { ending, why, .. }) = c.event().await else {
        panic!("expected Closed");
    };
    assert_ne!(ending, Ending::Goodbye, "closed without being told to stop");
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
    let ConnEvent::Peer(PeerEvent::Closed { ending, why, .. }) = c.event().await else {
        panic!("expected Closed");
    };
    assert_ne!(ending, Ending::Goodbye);
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
    let ConnEvent::Peer(PeerEvent::Closed { ending, why, .. }) = closed else {
        panic!("expected Closed");
    };
    assert_ne!(ending, Ending::Goodbye);
    assert!(why.starts_with("the peer does not read"), "{why}");
}

#[tokio::test]
async fn a_peer_that_says_nothing_is_refused_after_the_hello_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut peer = connect(&listener).await;
    let limit = Duration::from_millis(50);
    let mut events = spawn_serve(&listener, settings(WAIT, limit)).await;
    let Some(ConnEvent::Peer(PeerEvent::Refused { reason, .. })) = next(&mut events).await else {
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
    let Some(ConnEvent::Peer(PeerEvent::Refused { reason, .. })) = next(&mut events).await else {
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
    let Some(ConnEvent::Peer(PeerEvent::Closed { ending, why, .. })) = next(&mut events).await
    else {
        panic!("expected Closed");
    };
    assert_eq!(ending, Ending::Goodbye);
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
    let ConnEvent::Peer(PeerEvent::Closed { ending, why, .. }) = closed else {
        panic!("expected Closed");
    };
    assert_ne!(ending, Ending::Goodbye);
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
    let ConnEvent::Peer(PeerEvent::Closed { ending, .. }) = c.event().await else {
        panic!("expected Closed");
    };
    assert_eq!(ending, Ending::Goodbye);
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
    let ConnEvent::Peer(PeerEvent::Closed { ending, why, .. }) = c.event().await else {
        panic!("expected Closed");
    };
    assert_ne!(ending, Ending::Goodbye);
    assert!(why.starts_with("no message for"), "{why}");
}
