//! Writing the two messages a worker sends per block, `acquire_blocks`
//! and `release_blocks` (results with an id, `ok` and maybe `seconds`),
//! with their constant bytes made once: through serde (a generic call per key
//! and value, the tagged enum's map) they were a twentieth of what
//! `daisy-worker` spends relaying a block. The bytes are serde's (a test
//! compares them); every other message, and a result with an error or a
//! cost, is written by serde.

use crate::protocol::messages::ToDriver;
use crate::protocol::outgoing::{len, write_uint, Written};
use crate::protocol::user_code::BlockResult;
use rmp::encode;

/// Appends `message`'s MessagePack map to `out`, as serde writes it.
pub(super) fn write_payload(
    message: &ToDriver,
    out: &mut Vec<u8>,
) -> Result<(), rmp_serde::encode::Error> {
    let written = match message {
        ToDriver::AcquireBlocks { max } => {
            write_acquire(out, *max);
            Ok(())
        }
        ToDriver::ReleaseBlocks { results } if results.iter().all(is_plain) => {
            write_release(out, results)
        }
        other => return rmp_serde::encode::write_named(out, other),
    };
    Ok(written?)
}

/// Without an error, a cost or a skip: the fields written here.
fn is_plain(result: &BlockResult) -> bool {
    result.error.is_none() && result.cost.is_none() && !result.skipped
}

/// `{"type": "acquire_blocks", "max": ` and `max`.
const ACQUIRE: &[u8] = b"\x82\xa4type\xaeacquire_blocks\xa3max";
/// `{"type": "release_blocks", "results": ` and the array.
const RELEASE: &[u8] = b"\x82\xa4type\xaerelease_blocks\xa7results";
/// A result's `block_id` key, after its map's length.
const BLOCK_ID: &[u8] = b"\xa8block_id";
const OK: &[u8] = b"\xa2ok";
/// The `seconds` key and the marker of an f64.
const SECONDS: &[u8] = b"\xa7seconds\xcb";

/// `{"type": "acquire_blocks", "max": max}`. Keys are written as bytes
/// made once (rmp's encoders write a string through `io::Write` a piece at
/// a time).
fn write_acquire(out: &mut Vec<u8>, max: u32) {
    out.extend_from_slice(ACQUIRE);
    write_uint(out, u64::from(max));
}

/// `{"type": "release_blocks", "results": [..]}`.
fn write_release(out: &mut Vec<u8>, results: &[BlockResult]) -> Written {
    out.extend_from_slice(RELEASE);
    encode::write_array_len(out, len(results.len())?)?;
    results.iter().for_each(|result| write_result(out, result));
    Ok(())
}

/// `{"block_id": N, "ok": B}`, with `"seconds": S` if known.
fn write_result(out: &mut Vec<u8>, result: &BlockResult) {
    // A fixmap of 2 or 3 entries.
    out.push(0x82 + u8::from(result.seconds.is_some()));
    out.extend_from_slice(BLOCK_ID);
    write_uint(out, result.block_id);
    out.extend_from_slice(OK);
    out.push(if result.ok { 0xc3 } else { 0xc2 });
    if let Some(seconds) = result.seconds {
        out.extend_from_slice(SECONDS);
        out.extend_from_slice(&seconds.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::user_code::BlockCost;

    fn written(message: &ToDriver) -> Vec<u8> {
        let mut payload = Vec::new();
        write_payload(message, &mut payload).unwrap();
        payload
    }

    fn result(block_id: u64, ok: bool, seconds: Option<f64>) -> BlockResult {
        BlockResult {
            block_id,
            ok,
            skipped: false,
            error: None,
            seconds,
            cost: None,
        }
    }

    #[test]
    fn acquires_and_releases_are_written_byte_for_byte_as_serde_writes_them() {
        let numbers = [0, 1, 127, 128, 255, 256, 65_535, 65_536, 1 << 40, u64::MAX];
        let mut messages: Vec<ToDriver> = [0, 1, 64, 255, 65_536, u32::MAX]
            .map(|max| ToDriver::AcquireBlocks { max })
            .into();
        let results = numbers.iter().enumerate().map(|(i, &n)| {
            let seconds = [None, Some(0.0), Some(1.5e-6), Some(f64::INFINITY)][i % 4];
            result(n, i % 3 != 0, seconds)
        });
        let with_error = BlockResult {
            error: Some("no disk".into()),
            ..result(3, false, Some(2.0))
        };
        let with_cost = BlockResult {
            cost: Some(BlockCost::default()),
            ..result(4, true, None)
        };
        let skipped = BlockResult {
            skipped: true,
            ..result(5, true, None)
        };
        let others = vec![with_error, with_cost, skipped];
        for results in [vec![], results.collect(), others] {
            messages.push(ToDriver::ReleaseBlocks { results });
        }
        messages.push(ToDriver::Heartbeat);
        for message in messages {
            let by_serde = rmp_serde::to_vec_named(&message).unwrap();
            assert_eq!(written(&message), by_serde, "{message:?}");
        }
    }
}
