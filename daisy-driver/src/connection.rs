//! One task per connection: handshake, then frames in and out.
//!
//! The connection task owns the socket; the run loop owns all state. In
//! between are channels: the connection sends `ConnEvent`s to the run loop
//! and receives messages to write through its outbox. A reader task owns
//! the read half (reading a frame is not cancel safe), and a heartbeat
//! check races the reader, so a silent peer is noticed even while nothing
//! else happens. Whatever a peer sends, the worst outcome is a refusal and
//! a closed connection: errors are logged with the peer, never bubbled.

use daisy_core::protocol::hello::check_hello;
use daisy_core::protocol::{
    read_frame, write_frame, FrameError, FromDriver, Hello, ToDriver, Welcome,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::tcp::OwnedWriteHalf;
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
    let mut frames = spawn_reader(read_half, settings.max_frame);
    let (outbox, inbox) = mpsc::unbounded_channel();
    let welcome = match handshake(&mut frames, conn, &settings, &events, outbox).await {
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
    if let Err(error) = write_frame(&mut writer, &FromDriver::Welcome(welcome)).await {
        let _ = events.send(ConnEvent::Closed {
            conn,
            clean: false,
            why: error.to_string(),
        });
        return;
    }
    let link = Link {
        conn,
        settings,
        events: events.clone(),
        writer,
        frames,
        inbox,
    };
    let (clean, why) = link.run().await;
    let _ = events.send(ConnEvent::Closed { conn, clean, why });
}

type Frames = mpsc::Receiver<Result<ToDriver, FrameError>>;

/// Reads frames until the first error, which is passed on too.
fn spawn_reader(mut read_half: tokio::net::tcp::OwnedReadHalf, max_frame: u32) -> Frames {
    let (sender, receiver) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let frame = read_frame(&mut read_half, max_frame).await;
            let failed = frame.is_err();
            if sender.send(frame).await.is_err() || failed {
                return;
            }
        }
    });
    receiver
}

async fn handshake(
    frames: &mut Frames,
    conn: ConnId,
    settings: &ConnSettings,
    events: &mpsc::UnboundedSender<ConnEvent>,
    outbox: mpsc::UnboundedSender<FromDriver>,
) -> Result<Welcome, String> {
    let first = tokio::time::timeout(settings.hello_timeout, frames.recv())
        .await
        .map_err(|_| format!("no Hello within {:?}", settings.hello_timeout))?;
    let hello = match first {
        Some(Ok(ToDriver::Hello(hello))) => hello,
        Some(Ok(other)) => {
            return Err(format!(
                "the first message must be a Hello, not {}",
                kind(&other)
            ))
        }
        Some(Err(error)) => return Err(error.to_string()),
        None => return Err("connection closed before Hello".to_string()),
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

/// A welcomed connection.
struct Link {
    conn: ConnId,
    settings: Arc<ConnSettings>,
    events: mpsc::UnboundedSender<ConnEvent>,
    writer: OwnedWriteHalf,
    frames: Frames,
    inbox: mpsc::UnboundedReceiver<FromDriver>,
}

impl Link {
    /// Runs until the connection ends; returns (clean, why).
    async fn run(mut self) -> (bool, String) {
        let mut heartbeat = tokio::time::interval(self.settings.heartbeat_interval);
        let silence_limit = self.settings.heartbeat_interval * self.settings.heartbeat_misses;
        let mut last_heard = Instant::now();
        let mut told_to_stop = false;
        loop {
            tokio::select! {
                frame = self.frames.recv() => {
                    last_heard = Instant::now();
                    if let Err(why) = self.on_frame(frame).await {
                        return (told_to_stop && why == "connection closed", why);
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
                    if last_heard.elapsed() > silence_limit {
                        return (false, format!("no message for {:.1} s", last_heard.elapsed().as_secs_f64()));
                    }
                    if let Err(error) = write_frame(&mut self.writer, &FromDriver::Heartbeat).await {
                        return (false, error.to_string());
                    }
                }
            }
        }
    }

    /// Passes a message on; an error ends the connection with its reason.
    async fn on_frame(
        &mut self,
        frame: Option<Result<ToDriver, FrameError>>,
    ) -> Result<(), String> {
        let message = match frame {
            None => return Err("connection closed".to_string()),
            Some(Err(FrameError::Closed)) => return Err("connection closed".to_string()),
            Some(Err(error)) => {
                let reason = error.to_string();
                let _ = write_frame(
                    &mut self.writer,
                    &FromDriver::Error {
                        reason: reason.clone(),
                    },
                )
                .await;
                return Err(reason);
            }
            Some(Ok(message)) => message,
        };
        match message {
            ToDriver::Heartbeat => Ok(()),
            ToDriver::Hello(_) => {
                let reason = "Hello was already said".to_string();
                let _ = write_frame(&mut self.writer, &FromDriver::Error { reason }).await;
                Ok(())
            }
            message => self
                .events
                .send(ConnEvent::Message {
                    conn: self.conn,
                    message,
                })
                .map_err(|_| "the driver is shutting down".to_string()),
        }
    }
}

fn kind(message: &ToDriver) -> &'static str {
    match message {
        ToDriver::Hello(_) => "hello",
        ToDriver::AcquireBlocks { .. } => "acquire_blocks",
        ToDriver::ReleaseBlocks { .. } => "release_blocks",
        ToDriver::Heartbeat => "heartbeat",
        ToDriver::Draining { .. } => "draining",
        ToDriver::GetSnapshot => "get_snapshot",
    }
}
