//! An established connection, driven by its owner's loop: frames are
//! read, decoded, encoded and written in the caller's task, with no task
//! or channel in between.
//!
//! [`Wire::next_answer`] is the one place that waits: for the driver's
//! next answer to `AcquireBlocks` (Blocks, Shutdown), meanwhile writing
//! what [`Wire::queue`] left unwritten, sending a `Heartbeat` every
//! interval, logging the driver's `Error`s and declaring the driver lost
//! after `interval × misses` of silence, or of a write it leaves unread.
//! Its owner polls it whenever it waits for anything else (the
//! `daisy-worker` runtime races it in its one `select!`; [`super::Client`]
//! runs it in a task of its own), so the connection stays alive.
//!
//! Messages are queued and leave in one write at [`Wire::flush_now`]
//! (a release and the next acquire, typically): on loopback a `send`
//! costs several microseconds, more than the rest of a block's round trip.

use super::ClientError;
use daisy_core::protocol::frame::Codec;
use daisy_core::protocol::{FrameError, FromDriver, Message, ToDriver, Welcome, WireBlock};
use std::io::ErrorKind;
use std::pin::Pin;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep_until, Instant, Sleep};
use tokio_util::bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// Bytes the read buffer keeps room for: a `Blocks` frame of a batch.
const READ_ROOM: usize = 64 * 1024;

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

/// The answers to `AcquireBlocks`.
#[derive(Debug)]
pub enum Answer {
    Blocks(Vec<WireBlock>),
    Shutdown(String),
}

/// One connection to the driver, after the Welcome.
pub struct Wire {
    stream: TcpStream,
    codec: Codec<FromDriver, ToDriver>,
    /// Read and not yet decoded.
    incoming: BytesMut,
    /// Encoded and not yet written.
    outgoing: BytesMut,
    liveness: Liveness,
    /// When the next `Heartbeat` is due.
    heartbeat_at: Instant,
    /// When the driver was last heard from.
    heard: Instant,
    /// Since when queued bytes wait for the driver to read them.
    stuck_since: Option<Instant>,
    /// One timer for the next heartbeat and the silence limit, whichever
    /// comes first: each timer the loop polls costs a few hundred
    /// instructions per wake-up (an `Interval` and a `Sleep` were a
    /// twentieth of relaying a block). Armed when it
    /// fires, never per frame: the silence limit only moves later as the
    /// driver is heard, so an alarm that fires early is just set again.
    alarm: Pin<Box<Sleep>>,
    /// The first reason the connection broke; every later call fails with it.
    broken: Option<ClientError>,
}

impl Wire {
    /// The wire over `stream`, with `read` what the handshake read past
    /// the Welcome.
    pub(super) fn new(stream: TcpStream, mut read: BytesMut, max: u32, liveness: Liveness) -> Self {
        read.reserve(READ_ROOM);
        let heard = Instant::now();
        let heartbeat_at = heard + liveness.interval;
        Self {
            stream,
            codec: Codec::new(max),
            incoming: read,
            outgoing: BytesMut::new(),
            alarm: Box::pin(sleep_until(heartbeat_at)),
            liveness,
            heartbeat_at,
            heard,
            stuck_since: None,
            broken: None,
        }
    }

    /// Queues `message` for the next [`Self::flush_now`] (or the writes of
    /// [`Self::next_answer`]).
    pub fn queue(&mut self, message: ToDriver) -> Result<(), ClientError> {
        self.check()?;
        let encoded = self.codec.encode(message, &mut self.outgoing);
        encoded.map_err(|e| self.break_with(from_frame_error(e)))
    }

    /// Writes what is queued, as far as the socket takes it without
    /// waiting; [`Self::next_answer`] writes the rest.
    pub fn flush_now(&mut self) -> Result<(), ClientError> {
        self.check()?;
        while !self.outgoing.is_empty() {
            match self.stream.try_write(&self.outgoing) {
                Ok(n) => self.outgoing.advance(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.stuck_since.get_or_insert_with(Instant::now);
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.break_with(io_error(e))),
            }
        }
        self.stuck_since = None;
        Ok(())
    }

    /// Whether everything queued was written.
    pub fn is_flushed(&self) -> bool {
        self.outgoing.is_empty()
    }

    /// The driver's next Blocks or Shutdown, keeping the connection alive
    /// meanwhile. Cancel safe: what was read stays in the buffer.
    pub async fn next_answer(&mut self) -> Result<Answer, ClientError> {
        self.check()?;
        let answer = self.serve().await;
        answer.map_err(|e| self.break_with(e))
    }

    /// Writes what is queued and shuts the write direction down.
    pub async fn close(&mut self) -> Result<(), ClientError> {
        self.check()?;
        let written = async {
            self.stream.write_all_buf(&mut self.outgoing).await?;
            self.stream.shutdown().await
        };
        written.await.map_err(|e| self.break_with(io_error(e)))
    }

    fn check(&self) -> Result<(), ClientError> {
        self.broken.clone().map_or(Ok(()), Err)
    }

    /// Records the first reason the connection broke; later ones are effects.
    fn break_with(&mut self, error: ClientError) -> ClientError {
        self.broken.get_or_insert(error).clone()
    }

    async fn serve(&mut self) -> Result<Answer, ClientError> {
        loop {
            while let Some(message) = self.decoded()? {
                if let Some(answer) = answer_in(message) {
                    return Ok(answer);
                }
            }
            let writing = !self.outgoing.is_empty();
            let lost_at = self.lost_at();
            let (mut reader, writer) = self.stream.split();
            tokio::select! {
                // The driver sends little unasked: reading first starves
                // nothing, and spares the random pick.
                biased;
                read = reader.read_buf(&mut self.incoming) => self.on_read(read)?,
                ready = writer.writable(), if writing => {
                    ready.map_err(io_error)?;
                    self.flush_now()?;
                }
                () = self.alarm.as_mut() => self.on_alarm(lost_at)?,
            }
        }
    }

    /// Declares the driver lost past `lost_at`, sends the heartbeat if it
    /// is due, and sets the alarm for whichever comes next.
    fn on_alarm(&mut self, lost_at: Instant) -> Result<(), ClientError> {
        let now = Instant::now();
        if now >= lost_at {
            let silent_for = self.liveness.silence_limit();
            return Err(ClientError::DriverLost { silent_for });
        }
        if now >= self.heartbeat_at {
            self.queue(ToDriver::Heartbeat)?;
            self.flush_now()?;
            self.heartbeat_at = next_heartbeat(self.heartbeat_at, now, self.liveness.interval);
        }
        let next = self.heartbeat_at.min(lost_at);
        self.alarm.as_mut().reset(next);
        Ok(())
    }

    /// The next whole message read, if any.
    fn decoded(&mut self) -> Result<Option<FromDriver>, ClientError> {
        self.codec
            .decode(&mut self.incoming)
            .map_err(from_frame_error)
    }

    fn on_read(&mut self, read: std::io::Result<usize>) -> Result<(), ClientError> {
        match read.map_err(io_error)? {
            0 if self.incoming.is_empty() => Err(ClientError::Disconnected),
            0 => Err(from_frame_error(FrameError::Truncated)),
            _ => {
                self.heard = Instant::now();
                if self.incoming.capacity() - self.incoming.len() < READ_ROOM / 4 {
                    self.incoming.reserve(READ_ROOM);
                }
                Ok(())
            }
        }
    }

    /// When the driver counts as lost: silent, or leaving a write unread,
    /// for the silence limit.
    fn lost_at(&self) -> Instant {
        let since = self.stuck_since.map_or(self.heard, |s| s.min(self.heard));
        since + self.liveness.silence_limit()
    }
}

/// When the heartbeat after the one due at `due`, sent at `now`, is due:
/// an interval after `due`, or after `now` if that is already past (a
/// late turn of the loop delays the heartbeats, never bunches them).
fn next_heartbeat(due: Instant, now: Instant, interval: Duration) -> Instant {
    let on_time = due + interval;
    if on_time > now {
        on_time
    } else {
        now + interval
    }
}

/// The answer `message` is, if any; the rest is logged or ignored.
fn answer_in(message: FromDriver) -> Option<Answer> {
    match message {
        FromDriver::Heartbeat => None,
        FromDriver::Blocks { blocks } => Some(Answer::Blocks(blocks)),
        FromDriver::Shutdown { reason } => Some(Answer::Shutdown(reason)),
        FromDriver::Error { reason } => {
            tracing::warn!("the driver refused a message: {reason}");
            None
        }
        other => {
            tracing::warn!("ignored an unexpected {} from the driver", other.kind());
            None
        }
    }
}

fn io_error(error: std::io::Error) -> ClientError {
    from_frame_error(FrameError::Io(error))
}

pub(super) fn from_frame_error(error: FrameError) -> ClientError {
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

#[cfg(test)]
mod tests {
    use super::next_heartbeat;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn heartbeats_keep_their_interval_and_a_late_one_delays_the_next() {
        let (start, interval) = (Instant::now(), Duration::from_secs(2));
        let due = start + interval;
        let a_bit_late = due + Duration::from_millis(3);
        assert_eq!(next_heartbeat(due, a_bit_late, interval), due + interval);
        let past_the_next = due + interval * 3;
        assert_eq!(
            next_heartbeat(due, past_the_next, interval),
            past_the_next + interval
        );
    }
}
