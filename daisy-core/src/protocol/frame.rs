//! Framing: a 4-byte big-endian payload length, then a MessagePack
//! payload (maps with field names, so any msgpack library can read it),
//! and [`Transport`], the one way both ends read and write frames.
//!
//! The transport is tokio-util's [`Framed`] over a [`Codec`] built on its
//! [`LengthDelimitedCodec`]. Reading is cancel safe (a frame half read
//! stays in the transport's buffer), so a connection can race its reads
//! against anything else in one `select!`. A frame is encoded into the
//! transport's write buffer and leaves in one write, so with TCP_NODELAY
//! a message leaves in one segment (daisy 2.0 wrote the length and the
//! payload separately and stalled ~40 ms per message on Linux through
//! Nagle + delayed ACK).
//!
//! The frame limit lives in the codec: a length over it is refused as
//! soon as its 4 bytes are read, before any of the payload, and a length
//! under it reserves nothing: the buffer grows as the payload's bytes
//! arrive, so a peer that sends only a length (or garbage that reads as
//! one) costs a few bytes, not what it declared. (The inner codec alone
//! would reserve the declared length at once, and its error does not say
//! the length, so the codec checks first.)

use crate::protocol::explain::{explain, message_type, not_a_map};
use crate::protocol::messages::Message;
use crate::protocol::outgoing::Outgoing;
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde::Serialize;
use std::marker::PhantomData;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder, Framed, LengthDelimitedCodec};

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    #[error("connection closed")]
    Closed,
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: u32, max: u32 },
    /// The payload is not a message; `reason` says why in the protocol's
    /// words, `source` in the decoder's (none when it is not even a map).
    #[error("{reason}")]
    Decode {
        reason: String,
        #[source]
        source: Option<rmp_serde::decode::Error>,
    },
    #[error("cannot encode message: {0}")]
    Encode(String),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Bytes of the length prefix.
const PREFIX: usize = 4;

/// One frame, length prefix included, ready for a single write (for a
/// blocking socket, or a write that must not wait).
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let mut frame = vec![0u8; PREFIX];
    rmp_serde::encode::write_named(&mut frame, message)
        .map_err(|e| FrameError::Encode(e.to_string()))?;
    let len = u32::try_from(frame.len() - PREFIX)
        .map_err(|_| FrameError::Encode("frame over 4 GiB".into()))?;
    frame[..PREFIX].copy_from_slice(&len.to_be_bytes());
    Ok(frame)
}

/// Decodes a payload (the bytes after the length prefix): a map, as the
/// protocol says (the decoder alone would also take an array whose first
/// item is a variant's index), in one pass (see [`super::tagged`]).
pub fn decode<T: Message>(payload: &[u8]) -> Result<T, FrameError> {
    if let Some(reason) = not_a_map(payload) {
        return Err(FrameError::Decode {
            reason,
            source: None,
        });
    }
    decode_map(payload).map_err(|e| FrameError::Decode {
        reason: explain::<T>(payload, &e),
        source: Some(e),
    })
}

/// Decodes a map in one pass: its `type` first, then the message.
fn decode_map<T: Message>(payload: &[u8]) -> Result<T, rmp_serde::decode::Error> {
    let body = &mut rmp_serde::Deserializer::from_read_ref(payload);
    if let Some(kind) = leading_type(payload) {
        if let Some(message) = T::read_directly(kind, payload) {
            return Ok(message);
        }
        return T::from_tagged(kind, body);
    }
    let no_type = || <rmp_serde::decode::Error as serde::de::Error>::missing_field("type");
    let kind = message_type(payload)?.ok_or_else(no_type)?;
    T::from_tagged(&kind, body)
}

/// The `type` of a map whose first key it is, as encoders of tagged
/// enums (ours among them) write it: read in place, sparing the scan of
/// the whole map that finds it anywhere, which cost a small message about
/// as much as decoding it.
fn leading_type(payload: &[u8]) -> Option<&str> {
    const KEY: &[u8] = b"\xa4type";
    let header = match payload.first()? {
        0x81..=0x8f => 1,
        0xde if payload.get(1..3)? != [0, 0] => 3,
        0xdf if payload.get(1..5)? != [0, 0, 0, 0] => 5,
        _ => return None,
    };
    let rest = payload.get(header..)?.strip_prefix(KEY)?;
    let (&marker, rest) = rest.split_first()?;
    let (len, rest) = match marker {
        0xa0..=0xbf => (usize::from(marker & 0x1f), rest),
        0xd9 => (usize::from(*rest.first()?), rest.get(1..)?),
        _ => return None,
    };
    std::str::from_utf8(rest.get(..len)?).ok()
}

/// The capacity a transport's read and write buffers start with: a few
/// of the messages sent per block (batches of blocks grow them). Not
/// `Framed`'s 8 KiB each way: with thousands of connections, every
/// connection's state should sit on as few pages as it can.
const BUFFER_BYTES: usize = 1024;

/// Moves an emptied buffer's next byte back to the start of its memory.
/// Otherwise each frame is read (or written) after the last one, walking
/// through the whole buffer before it wraps: every frame lands on cache
/// lines not touched for a while, which with thousands of connections
/// (a buffer each way, each) are long gone from the caches. Costs nothing
/// when the buffer is at its start, allocates nothing otherwise.
fn rewind(buffer: &mut BytesMut) {
    if buffer.is_empty() && buffer.capacity() < BUFFER_BYTES {
        buffer.reserve(BUFFER_BYTES);
    }
}

/// Reads `In` messages and writes `Out` messages as frames of at most
/// `max` payload bytes (the limit applies to what is read).
#[derive(Debug)]
pub struct Codec<In, Out> {
    frames: LengthDelimitedCodec,
    max: u32,
    /// The payload being encoded, kept to spare an allocation per frame.
    payload: Vec<u8>,
    messages: PhantomData<fn(Out) -> In>,
}

impl<In, Out> Codec<In, Out> {
    pub fn new(max: u32) -> Self {
        // The codec checks `max` itself (see the module doc); the inner
        // one only needs to accept any length the prefix can hold.
        let frames = LengthDelimitedCodec::builder()
            .length_field_length(PREFIX)
            .max_frame_length(u32::MAX as usize)
            .new_codec();
        Self {
            frames,
            max,
            payload: Vec::new(),
            messages: PhantomData,
        }
    }

    /// The length of the frame at the start of `src`, if it is allowed.
    fn allowed_length(&self, src: &BytesMut) -> Result<Option<usize>, FrameError> {
        let Some(prefix) = src.first_chunk::<PREFIX>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*prefix);
        if len > self.max {
            return Err(FrameError::TooLarge { len, max: self.max });
        }
        Ok(Some(len as usize))
    }
}

impl<In: Message, Out> Decoder for Codec<In, Out> {
    type Item = In;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, FrameError> {
        match self.allowed_length(src)? {
            // Only a whole frame goes to the inner codec, which then
            // reserves nothing more.
            Some(len) if src.len() >= PREFIX + len => match self.frames.decode(src)? {
                Some(payload) => {
                    let message = decode(&payload);
                    drop(payload);
                    rewind(src);
                    message.map(Some)
                }
                None => Ok(None),
            },
            _ => Ok(None),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<In>, FrameError> {
        match self.decode(src)? {
            None if !src.is_empty() => Err(FrameError::Truncated),
            decoded => Ok(decoded),
        }
    }
}

impl<In, Out: Outgoing> Encoder<Out> for Codec<In, Out> {
    type Error = FrameError;

    fn encode(&mut self, message: Out, dst: &mut BytesMut) -> Result<(), FrameError> {
        self.payload.clear();
        message
            .write_payload(&mut self.payload)
            .map_err(|e| FrameError::Encode(e.to_string()))?;
        rewind(dst);
        Ok(self.frames.encode(self.payload.as_slice(), dst)?)
    }
}

/// A payload written already, sent as one frame like any `Out` message
/// (the driver writes its `blocks` messages straight from its blocks:
/// [`crate::protocol::outgoing::blocks_payload`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload(pub Vec<u8>);

impl<In, Out> Encoder<Payload> for Codec<In, Out> {
    type Error = FrameError;

    fn encode(&mut self, payload: Payload, dst: &mut BytesMut) -> Result<(), FrameError> {
        rewind(dst);
        Ok(self.frames.encode(payload.0.as_slice(), dst)?)
    }
}

/// One end of a connection: reads `In`, writes `Out`.
#[derive(Debug)]
pub struct Transport<S, In, Out> {
    framed: Framed<S, Codec<In, Out>>,
}

impl<S, In, Out> Transport<S, In, Out>
where
    S: AsyncRead + AsyncWrite + Unpin,
    In: Message,
    Out: Outgoing,
{
    /// A transport over `stream` that reads frames of at most `max` bytes.
    pub fn new(stream: S, max: u32) -> Self {
        let mut framed = Framed::with_capacity(stream, Codec::new(max), BUFFER_BYTES);
        *framed.write_buffer_mut() = BytesMut::with_capacity(BUFFER_BYTES);
        Self { framed }
    }

    /// Changes the limit on frames read from now on (the Hello has a
    /// smaller one than what follows it).
    pub fn set_max_frame(&mut self, max: u32) {
        self.framed.codec_mut().max = max;
    }

    /// The next message. Cancel safe: a frame half read when the future
    /// is dropped is finished by the next call.
    pub async fn receive(&mut self) -> Result<In, FrameError> {
        self.framed.next().await.unwrap_or(Err(FrameError::Closed))
    }

    /// A message that can be read without waiting, if there is one.
    pub fn try_receive(&mut self) -> Option<Result<In, FrameError>> {
        self.receive().now_or_never()
    }

    /// Writes one message as one frame.
    pub async fn send(&mut self, message: Out) -> Result<(), FrameError> {
        self.framed.send(message).await
    }

    /// Queues a message for the next [`Self::flush`], so that messages
    /// queued together leave in one write.
    pub async fn feed(&mut self, message: Out) -> Result<(), FrameError> {
        self.framed.feed(message).await
    }

    /// [`Self::feed`] for a payload written already.
    pub async fn feed_payload(&mut self, payload: Payload) -> Result<(), FrameError> {
        self.framed.feed(payload).await
    }

    /// Writes what was fed.
    pub async fn flush(&mut self) -> Result<(), FrameError> {
        SinkExt::<Out>::flush(&mut self.framed).await
    }

    /// Writes what was fed, then shuts the write direction down.
    pub async fn close(&mut self) -> Result<(), FrameError> {
        SinkExt::<Out>::close(&mut self.framed).await
    }

    /// The stream and what was read past the last message, to go on with
    /// the connection without the transport (the worker reads it in its
    /// own loop).
    pub fn into_parts(self) -> (S, BytesMut) {
        let parts = self.framed.into_parts();
        (parts.io, parts.read_buf)
    }

    /// The stream underneath.
    pub fn stream(&self) -> &S {
        self.framed.get_ref()
    }

    /// The stream underneath, to write bytes that are not a message
    /// (tests of hostile peers).
    pub fn stream_mut(&mut self) -> &mut S {
        self.framed.get_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::{FromDriver, ToDriver};
    use tokio::io::AsyncWriteExt;

    /// The driver's end of `bytes` (written, then closed) with `max`.
    async fn driver_end(
        bytes: &[u8],
        max: u32,
    ) -> Transport<tokio::io::DuplexStream, ToDriver, FromDriver> {
        let (mut peer, driver) = tokio::io::duplex(64 * 1024);
        peer.write_all(bytes).await.unwrap();
        drop(peer);
        Transport::new(driver, max)
    }

    async fn first(bytes: &[u8]) -> Result<ToDriver, FrameError> {
        driver_end(bytes, 1024).await.receive().await
    }

    #[test]
    fn a_leading_type_is_read_in_place_whatever_the_map_header() {
        let acquire = ToDriver::AcquireBlocks { max: 3 };
        let payload = rmp_serde::to_vec_named(&acquire).unwrap();
        assert_eq!(leading_type(&payload), Some("acquire_blocks"));
        // The same map with a map16 and a map32 header.
        for header in [&[0xde, 0, 2][..], &[0xdf, 0, 0, 0, 2]] {
            let long = [header, &payload[1..]].concat();
            assert_eq!(leading_type(&long), Some("acquire_blocks"));
            assert_eq!(decode::<ToDriver>(&long).unwrap(), acquire);
        }
        // An empty map holds no type, whatever follows it.
        assert_eq!(leading_type(&[&[0x80][..], &payload[1..]].concat()), None);
    }

    #[test]
    fn a_type_that_is_not_the_first_key_is_found_all_the_same() {
        let payload =
            rmp_serde::to_vec_named(&serde_json::json!({"max": 2, "type": "acquire_blocks"}))
                .unwrap();
        assert_eq!(leading_type(&payload), None);
        assert_eq!(
            decode::<ToDriver>(&payload).unwrap(),
            ToDriver::AcquireBlocks { max: 2 }
        );
    }

    #[test]
    fn each_frame_is_read_and_written_at_the_start_of_its_buffer() {
        use tokio_util::bytes::Buf;
        let mut codec = Codec::<ToDriver, ToDriver>::new(1024);
        let (mut read, mut written) = (BytesMut::with_capacity(BUFFER_BYTES), BytesMut::new());
        written.reserve(BUFFER_BYTES);
        let (read_start, write_start) = (read.as_ptr(), written.as_ptr());
        let frame = encode(&ToDriver::AcquireBlocks { max: 1 }).unwrap();
        for _ in 0..3 {
            read.extend_from_slice(&frame);
            assert!(codec.decode(&mut read).unwrap().is_some());
            assert_eq!(
                read.as_ptr(),
                read_start,
                "the next read lands at the start"
            );
            codec.encode(ToDriver::Heartbeat, &mut written).unwrap();
            assert_eq!(written.as_ptr(), write_start, "written from the start");
            written.advance(written.len());
        }
    }

    #[tokio::test]
    async fn a_frame_round_trips_with_its_length_first() {
        let message = ToDriver::AcquireBlocks { max: 3 };
        let bytes = encode(&message).unwrap();
        assert_eq!(
            u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize,
            bytes.len() - 4
        );
        let (worker, driver) = tokio::io::duplex(1024);
        let mut worker = Transport::<_, FromDriver, ToDriver>::new(worker, 1024);
        let mut driver = Transport::<_, ToDriver, FromDriver>::new(driver, 1024);
        worker.send(message.clone()).await.unwrap();
        assert_eq!(driver.receive().await.unwrap(), message);
        driver.send(FromDriver::Heartbeat).await.unwrap();
        assert_eq!(worker.receive().await.unwrap(), FromDriver::Heartbeat);
    }

    #[tokio::test]
    async fn bad_input_gives_the_right_error() {
        assert!(matches!(first(&[]).await, Err(FrameError::Closed)));
        assert!(matches!(first(&[0, 0]).await, Err(FrameError::Truncated)));
        let short_payload = first(&[0, 0, 0, 10, 1, 2]).await;
        assert!(matches!(short_payload, Err(FrameError::Truncated)));
        let http = first(b"GET / HTTP/1.1\r\n\r\n").await.unwrap_err();
        assert_eq!(
            http.to_string(),
            "frame of 1195725856 bytes exceeds the limit of 1024 bytes"
        );
        let garbage = first(&[0, 0, 0, 3, 0xc1, 0xc1, 0xc1]).await;
        assert!(
            matches!(garbage, Err(FrameError::Decode { .. })),
            "{garbage:?}"
        );
    }

    #[tokio::test]
    async fn a_decode_error_keeps_the_decoders_own_error_as_its_source() {
        let payload = rmp_serde::to_vec_named(&serde_json::json!({"type": "acquire_blocks"}));
        let error = decode::<ToDriver>(&payload.unwrap()).unwrap_err();
        assert_eq!(error.to_string(), "field `max` missing in acquire_blocks");
        let source = std::error::Error::source(&error).expect("a source");
        assert!(source.to_string().contains("missing field"), "{source}");
    }

    #[tokio::test]
    async fn a_half_read_frame_survives_a_cancelled_receive() {
        let frame = encode(&ToDriver::AcquireBlocks { max: 5 }).unwrap();
        let (mut peer, driver) = tokio::io::duplex(1024);
        let mut driver = Transport::<_, ToDriver, FromDriver>::new(driver, 1024);
        peer.write_all(&frame[..3]).await.unwrap();
        assert!(driver.try_receive().is_none(), "half a frame is no message");
        peer.write_all(&frame[3..]).await.unwrap();
        let message = driver.receive().await.unwrap();
        assert_eq!(message, ToDriver::AcquireBlocks { max: 5 });
    }

    #[tokio::test]
    async fn a_lower_limit_applies_to_the_next_frame() {
        let mut bytes = encode(&ToDriver::Heartbeat).unwrap();
        bytes.extend(encode(&ToDriver::AcquireBlocks { max: 1 }).unwrap());
        let mut driver = driver_end(&bytes, 1024).await;
        assert_eq!(driver.receive().await.unwrap(), ToDriver::Heartbeat);
        driver.set_max_frame(4);
        let error = driver.receive().await.unwrap_err().to_string();
        assert!(error.ends_with("exceeds the limit of 4 bytes"), "{error}");
    }

    /// Hands out a 16 MiB length, then one byte per read, recording the
    /// most room a read was given: the room the frame's buffer had.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        most_room: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            self.most_room = self.most_room.max(buf.remaining());
            if let Some(&byte) = self.bytes.get(self.at) {
                buf.put_slice(&[byte]);
                self.at += 1;
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::task::Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_declared_length_reserves_nothing_until_bytes_arrive() {
        let mut bytes = (16u32 << 20).to_be_bytes().to_vec();
        bytes.extend([0x81; 100]);
        let trickle = Trickle {
            bytes,
            at: 0,
            most_room: 0,
        };
        let mut transport = Transport::<_, ToDriver, FromDriver>::new(trickle, 16 << 20);
        let result = transport.receive().await;
        assert!(matches!(result, Err(FrameError::Truncated)), "{result:?}");
        let most_room = transport.stream().most_room;
        assert!(most_room < 64 * 1024, "room for {most_room} bytes");
    }
}
