//! Framing: a 4-byte big-endian payload length, then a MessagePack
//! payload (maps with field names, so any msgpack library can read it).
//!
//! A frame is built in one buffer and written with one `write_all`, so
//! with TCP_NODELAY a message leaves in one segment (daisy 2.0 wrote the
//! length and the payload separately and stalled ~40 ms per message on
//! Linux through Nagle + delayed ACK). A length over the limit is refused
//! before anything is allocated, and a length under it reserves nothing:
//! the payload's buffer grows as its bytes arrive, so a peer that sends
//! only a length (or garbage that reads as one) costs a few bytes, not
//! what it declared.

use crate::protocol::explain::{explain, not_a_map};
use crate::protocol::messages::Message;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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
    /// The payload is not a message; the reason is in the protocol's words.
    #[error("{0}")]
    Decode(String),
    #[error("cannot encode message: {0}")]
    Encode(String),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// One frame, length prefix included, ready for a single write.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let mut frame = vec![0u8; 4];
    rmp_serde::encode::write_named(&mut frame, message)
        .map_err(|e| FrameError::Encode(e.to_string()))?;
    let len = u32::try_from(frame.len() - 4)
        .map_err(|_| FrameError::Encode("frame over 4 GiB".into()))?;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    Ok(frame)
}

/// Decodes a payload (the bytes after the length prefix): a map, as the
/// protocol says (the decoder alone would also take an array whose first
/// item is a variant's index).
pub fn decode<T: Message>(payload: &[u8]) -> Result<T, FrameError> {
    not_a_map(payload).map_or(Ok(()), |reason| Err(FrameError::Decode(reason)))?;
    rmp_serde::from_slice(payload).map_err(|e| FrameError::Decode(explain::<T>(payload, &e)))
}

/// Writes one message as one frame.
pub async fn write_frame<W, T>(writer: &mut W, message: &T) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    writer.write_all(&encode(message)?).await?;
    Ok(())
}

/// Reads one frame of at most `max` payload bytes and decodes it.
///
/// Not cancel safe: a frame half read when the future is dropped is lost,
/// so call it from a task (or loop) that does nothing else.
pub async fn read_frame<R, T>(reader: &mut R, max: u32) -> Result<T, FrameError>
where
    R: AsyncRead + Unpin,
    T: Message,
{
    let len = read_length(reader).await?;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut payload = Vec::new();
    (&mut *reader)
        .take(u64::from(len))
        .read_to_end(&mut payload)
        .await?;
    if payload.len() < len as usize {
        return Err(FrameError::Truncated);
    }
    decode(&payload)
}

async fn read_length<R: AsyncRead + Unpin>(reader: &mut R) -> Result<u32, FrameError> {
    let mut prefix = [0u8; 4];
    let first = reader.read(&mut prefix).await?;
    if first == 0 {
        return Err(FrameError::Closed);
    }
    reader
        .read_exact(&mut prefix[first..])
        .await
        .map_err(truncated)?;
    Ok(u32::from_be_bytes(prefix))
}

fn truncated(error: std::io::Error) -> FrameError {
    match error.kind() {
        std::io::ErrorKind::UnexpectedEof => FrameError::Truncated,
        _ => FrameError::Io(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::ToDriver;

    #[tokio::test]
    async fn a_frame_round_trips() {
        let message = ToDriver::AcquireBlocks { max: 3 };
        let bytes = encode(&message).unwrap();
        assert_eq!(
            u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize,
            bytes.len() - 4
        );
        let read: ToDriver = read_frame(&mut bytes.as_slice(), 1024).await.unwrap();
        assert_eq!(read, message);
    }

    #[tokio::test]
    async fn bad_input_gives_the_right_error() {
        let empty: &[u8] = &[];
        let closed = read_frame::<_, ToDriver>(&mut &*empty, 1024).await;
        assert!(matches!(closed, Err(FrameError::Closed)));
        let half_prefix: &[u8] = &[0, 0];
        let truncated = read_frame::<_, ToDriver>(&mut &*half_prefix, 1024).await;
        assert!(matches!(truncated, Err(FrameError::Truncated)));
        let short_payload: &[u8] = &[0, 0, 0, 10, 1, 2];
        let truncated = read_frame::<_, ToDriver>(&mut &*short_payload, 1024).await;
        assert!(matches!(truncated, Err(FrameError::Truncated)));
        let http: &[u8] = b"GET / HTTP/1.1\r\n\r\n";
        let too_large = read_frame::<_, ToDriver>(&mut &*http, 1024).await;
        assert!(
            matches!(too_large, Err(FrameError::TooLarge { .. })),
            "{too_large:?}"
        );
        let garbage: &[u8] = &[0, 0, 0, 3, 0xc1, 0xc1, 0xc1];
        let undecodable = read_frame::<_, ToDriver>(&mut &*garbage, 1024).await;
        assert!(
            matches!(undecodable, Err(FrameError::Decode(_))),
            "{undecodable:?}"
        );
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

    #[tokio::test]
    async fn a_declared_length_reserves_nothing_until_bytes_arrive() {
        let mut bytes = (16u32 << 20).to_be_bytes().to_vec();
        bytes.extend([0x81; 100]);
        let mut reader = Trickle {
            bytes,
            at: 0,
            most_room: 0,
        };
        let result = read_frame::<_, ToDriver>(&mut reader, 16 << 20).await;
        assert!(matches!(result, Err(FrameError::Truncated)), "{result:?}");
        assert!(
            reader.most_room < 4096,
            "room for {} bytes",
            reader.most_room
        );
    }
}
