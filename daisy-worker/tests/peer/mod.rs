//! A stand-in for the driver's end of the wire protocol, for tests of the
//! worker's end: it listens on 127.0.0.1, reads Hellos and says what the
//! test tells it to, through daisy-core's real framing. Every wait is
//! bounded, so a test that goes wrong fails naming what it waited for.
//!
//! Shared by the client's unit tests (src/client/tests.rs) and the
//! binary's tests (tests/cli.rs).

use daisy_core::protocol::frame::encode;
use daisy_core::protocol::{
    CodeKind, FrameError, FromDriver, Hello, TaskCode, ToDriver, Transport, Welcome, WireBlock,
    WireRoi, MAX_FRAME_BYTES,
};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// How long a test waits for anything.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// `future`, or a panic naming `what` after [`PATIENCE`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(PATIENCE, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {PATIENCE:?} waiting for {what}"),
    }
}

/// A listening fake driver.
pub struct Peer {
    listener: TcpListener,
}

impl Peer {
    pub async fn bind() -> Self {
        Self::bind_at("127.0.0.1:0").await
    }

    pub async fn bind_at(address: &str) -> Self {
        let listener = TcpListener::bind(address)
            .await
            .expect("bind the test peer");
        Self { listener }
    }

    pub fn address(&self) -> String {
        self.listener.local_addr().unwrap().to_string()
    }

    /// The next connection and its Hello.
    pub async fn accept(&self) -> (PeerConn, Hello) {
        let (stream, _) = within("a connection", self.listener.accept())
            .await
            .unwrap();
        stream.set_nodelay(true).unwrap();
        let mut conn = PeerConn {
            transport: Transport::new(stream, MAX_FRAME_BYTES),
        };
        match conn.recv_any().await {
            Ok(ToDriver::Hello(hello)) => (conn, hello),
            other => panic!("expected a Hello, got {other:?}"),
        }
    }

    /// Whether a connection arrives within `wait`.
    pub async fn connection_within(&self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.listener.accept())
            .await
            .is_ok()
    }
}

/// One accepted connection.
pub struct PeerConn {
    transport: Transport<TcpStream, ToDriver, FromDriver>,
}

impl PeerConn {
    pub async fn send(&mut self, message: &FromDriver) {
        self.transport.send(message.clone()).await.unwrap();
    }

    /// Writes raw bytes, e.g. garbage.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let stream = self.transport.stream_mut();
        stream.write_all(bytes).await.unwrap();
    }

    /// Ends the connection as a driver process that exits does. (Dropping
    /// it may not: a process this test process forked may hold the socket.)
    pub async fn hang_up(&mut self) {
        self.transport.stream_mut().shutdown().await.unwrap();
    }

    /// Welcomes the worker with `code`, heartbeats every `interval_s`.
    pub async fn welcome(&mut self, code: Option<TaskCode>, interval_s: f64, misses: u32) {
        self.send(&welcome(code, interval_s, misses)).await;
    }

    /// The next message, heartbeats included.
    pub async fn recv_any(&mut self) -> Result<ToDriver, FrameError> {
        within("a message from the worker", self.transport.receive()).await
    }

    /// The next message that is not a heartbeat.
    pub async fn recv(&mut self) -> ToDriver {
        loop {
            match self.recv_any().await {
                Ok(ToDriver::Heartbeat) => continue,
                Ok(message) => return message,
                Err(e) => panic!("expected a message from the worker: {e}"),
            }
        }
    }

    /// Waits until the worker closes the connection, skipping heartbeats;
    /// panics on any other message.
    pub async fn expect_closed(&mut self) {
        loop {
            match self.recv_any().await {
                Ok(ToDriver::Heartbeat) => continue,
                Err(FrameError::Closed) => return,
                other => panic!("expected the worker to close, got {other:?}"),
            }
        }
    }
}

pub fn welcome(code: Option<TaskCode>, interval_s: f64, misses: u32) -> FromDriver {
    FromDriver::Welcome(Welcome {
        worker_id: 7,
        heartbeat_interval_s: interval_s,
        heartbeat_misses: misses,
        code,
        longest_block_s: None,
    })
}

/// A block command (`argv` once per block), no timeout.
pub fn block_command(argv: &[&str]) -> TaskCode {
    TaskCode {
        kind: CodeKind::BlockCommand,
        argv: argv.iter().map(|a| a.to_string()).collect(),
        env: BTreeMap::new(),
        timeout_s: None,
        batch_size: 1,
        prefetch: 0,
        function: None,
        resource_tracking: false,
    }
}

/// Block `id` of task "predict".
pub fn block(id: u64) -> WireBlock {
    WireBlock {
        task_id: "predict".into(),
        block_id: id,
        read_roi: WireRoi {
            offset: vec![0, 0],
            shape: vec![10, 10],
        },
        write_roi: WireRoi {
            offset: vec![0, 0],
            shape: vec![10, 10],
        },
    }
}

/// A well-formed frame whose payload is no message (a bare string).
pub fn garbage_frame() -> Vec<u8> {
    encode(&"not a message").unwrap()
}
