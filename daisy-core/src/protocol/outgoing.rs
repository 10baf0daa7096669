//! Writing a message as a frame's payload.
//!
//! Every message is written by serde (rmp-serde, maps with field names),
//! except the one the driver sends per block: `blocks`. Through serde its
//! blocks cost the driver about as much as the rest of handing them out
//! (a generic call per key and number); written here, they make the very
//! bytes serde makes (a test compares them). A block's keys and map
//! headers are the same bytes every time, so they are copied as such,
//! and numbers that are not negative are written here, as rmp would:
//! about half of a block's cost went to rmp's calls per key and number.

use crate::block::Block;
use crate::protocol::messages::{FromDriver, ToDriver};
use crate::protocol::user_code::{WireBlock, WireRoi};
use rmp::encode::{self, ValueWriteError};
use serde::Serialize;

/// A message this side sends.
pub trait Outgoing: Serialize {
    /// Appends the message's MessagePack map to `payload`.
    fn write_payload(&self, payload: &mut Vec<u8>) -> Result<(), rmp_serde::encode::Error> {
        rmp_serde::encode::write_named(payload, self)
    }
}

impl Outgoing for ToDriver {
    fn write_payload(&self, payload: &mut Vec<u8>) -> Result<(), rmp_serde::encode::Error> {
        super::worker_outgoing::write_payload(self, payload)
    }
}

impl Outgoing for FromDriver {
    fn write_payload(&self, payload: &mut Vec<u8>) -> Result<(), rmp_serde::encode::Error> {
        match self {
            FromDriver::Blocks { blocks } => Ok(write_blocks(payload, blocks)?),
            other => rmp_serde::encode::write_named(payload, other),
        }
    }
}

pub(super) type Written = Result<(), ValueWriteError<std::io::Error>>;

/// `{"type": "blocks", "blocks": [..]}`, field order as serde's.
fn write_blocks(out: &mut Vec<u8>, blocks: &[WireBlock]) -> Written {
    write_blocks_of(out, blocks.iter().map(WireBlock::fields))
}

/// The payload of a `blocks` message handing out `blocks` of the task
/// `task_id`, written straight from the scheduler's blocks: the bytes
/// of [`FromDriver::Blocks`] with their [`WireBlock`]s, without making
/// those (five allocations per block).
pub fn blocks_payload<'b>(
    task_id: &str,
    blocks: impl ExactSizeIterator<Item = &'b Block>,
) -> Vec<u8> {
    let mut payload = Vec::with_capacity(32 + 64 * blocks.len());
    let blocks = blocks.map(|block| BlockFields::of(task_id, block));
    write_blocks_of(&mut payload, blocks).expect("writing to a Vec fails only past u32::MAX items");
    payload
}

/// What a `blocks` message says of one block.
struct BlockFields<'a> {
    task_id: &'a str,
    block_id: u64,
    read: [&'a [i64]; 2],
    write: [&'a [i64]; 2],
}

impl<'a> BlockFields<'a> {
    fn of(task_id: &'a str, block: &'a Block) -> Self {
        Self {
            task_id,
            block_id: block.id.spatial,
            read: block.read_roi.as_slices(),
            write: block.write_roi.as_slices(),
        }
    }
}

impl WireBlock {
    fn fields(&self) -> BlockFields<'_> {
        fn roi(roi: &WireRoi) -> [&[i64]; 2] {
            [&roi.offset, &roi.shape]
        }
        BlockFields {
            task_id: &self.task_id,
            block_id: self.block_id,
            read: roi(&self.read_roi),
            write: roi(&self.write_roi),
        }
    }
}

fn write_blocks_of<'a>(
    out: &mut Vec<u8>,
    blocks: impl ExactSizeIterator<Item = BlockFields<'a>>,
) -> Written {
    encode::write_map_len(out, 2)?;
    write_key(out, "type")?;
    encode::write_str(out, "blocks")?;
    write_key(out, "blocks")?;
    encode::write_array_len(out, len(blocks.len())?)?;
    blocks
        .into_iter()
        .try_for_each(|block| write_block(out, &block))
}

/// A block's map of 4 and its first key, `task_id`.
const BLOCK_HEAD: &[u8] = b"\x84\xa7task_id";
const BLOCK_ID: &[u8] = b"\xa8block_id";
/// The key `read_roi`, the ROI's map of 2 and its first key, `offset`.
const READ_ROI: &[u8] = b"\xa8read_roi\x82\xa6offset";
const WRITE_ROI: &[u8] = b"\xa9write_roi\x82\xa6offset";
const SHAPE: &[u8] = b"\xa5shape";

fn write_block(out: &mut Vec<u8>, block: &BlockFields) -> Written {
    out.extend_from_slice(BLOCK_HEAD);
    encode::write_str(out, block.task_id)?;
    out.extend_from_slice(BLOCK_ID);
    write_uint(out, block.block_id);
    write_roi(out, READ_ROI, block.read)?;
    write_roi(out, WRITE_ROI, block.write)
}

/// A ROI under the key that `head` ends with (up to its first key).
fn write_roi(out: &mut Vec<u8>, head: &[u8], [offset, shape]: [&[i64]; 2]) -> Written {
    out.extend_from_slice(head);
    write_ints(out, offset)?;
    out.extend_from_slice(SHAPE);
    write_ints(out, shape)
}

fn write_ints(out: &mut Vec<u8>, values: &[i64]) -> Written {
    match values.len() {
        short @ 0..16 => out.push(0x90 | short as u8),
        long => drop(encode::write_array_len(out, len(long)?)?),
    }
    for &value in values {
        match u64::try_from(value) {
            Ok(value) => write_uint(out, value),
            Err(_) => drop(encode::write_sint(out, value)?),
        }
    }
    Ok(())
}

/// `value` in its shortest form, as rmp writes an unsigned or a
/// non-negative signed number: a positive fixint, or a marker and the
/// number big-endian in 1, 2, 4 or 8 bytes.
pub(super) fn write_uint(out: &mut Vec<u8>, value: u64) {
    let bytes = value.to_be_bytes();
    match value {
        0..0x80 => out.push(value as u8),
        0x80..0x100 => out.extend_from_slice(&[0xcc, value as u8]),
        0x100..0x1_0000 => out.extend_from_slice(&[0xcd, bytes[6], bytes[7]]),
        0x1_0000..0x1_0000_0000 => {
            out.push(0xce);
            out.extend_from_slice(&bytes[4..]);
        }
        _ => {
            out.push(0xcf);
            out.extend_from_slice(&bytes);
        }
    }
}

fn write_key(out: &mut Vec<u8>, key: &str) -> Written {
    encode::write_str(out, key)
}

/// A MessagePack array holds at most `u32::MAX` items.
pub(super) fn len(items: usize) -> Result<u32, ValueWriteError<std::io::Error>> {
    u32::try_from(items).map_err(|_| {
        let too_long = std::io::Error::other("an array longer than u32::MAX");
        ValueWriteError::InvalidMarkerWrite(too_long)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(task_id: &str, block_id: u64, offset: Vec<i64>, shape: Vec<i64>) -> WireBlock {
        let roi = WireRoi { offset, shape };
        WireBlock {
            task_id: task_id.to_string(),
            block_id,
            read_roi: roi.clone(),
            write_roi: WireRoi {
                offset: roi.offset.iter().map(|x| x.wrapping_add(1)).collect(),
                shape: roi.shape,
            },
        }
    }

    fn written(message: &FromDriver) -> Vec<u8> {
        let mut payload = Vec::new();
        message.write_payload(&mut payload).unwrap();
        payload
    }

    #[test]
    fn blocks_are_written_byte_for_byte_as_serde_writes_them() {
        let numbers = [
            0,
            1,
            127,
            128,
            255,
            256,
            65_535,
            65_536,
            (1 << 32) - 1,
            1 << 32,
            1 << 40,
            i64::MAX,
        ];
        let blocks: Vec<WireBlock> = numbers
            .iter()
            .flat_map(|&n| {
                let long_id = "t".repeat(300);
                [
                    block(
                        "predict",
                        n as u64,
                        vec![n, -n, -33, -129],
                        vec![n, 1, 2, 3],
                    ),
                    block(&long_id, u64::MAX - n as u64, vec![i64::MIN + 1], vec![n]),
                    // The longest fixarray, and the shortest longer one.
                    block("t", n as u64, vec![n; 15], vec![-n; 16]),
                ]
            })
            .collect();
        for blocks in [vec![], blocks] {
            let message = FromDriver::Blocks { blocks };
            let by_serde = rmp_serde::to_vec_named(&message).unwrap();
            assert_eq!(written(&message), by_serde);
        }
    }

    #[test]
    fn blocks_are_written_from_the_schedulers_blocks_as_serde_writes_them() {
        use crate::{BlockId, Roi, TaskIdx};
        let block = |spatial, offset: &[i64], shape: &[i64]| Block {
            id: BlockId {
                task: TaskIdx(2),
                spatial,
            },
            read_roi: Roi::from_slices(offset, shape),
            write_roi: Roi::from_slices(&offset[1..], &shape[1..]),
        };
        let blocks = [
            block(0, &[0, -1], &[3, 1]),
            block(1 << 40, &[i64::MAX, 128, -129], &[65_536, 255, 256]),
        ];
        for blocks in [&blocks[..0], &blocks[..]] {
            let wire = blocks
                .iter()
                .map(|b| WireBlock::new("predict", b))
                .collect();
            let by_serde = rmp_serde::to_vec_named(&FromDriver::Blocks { blocks: wire }).unwrap();
            assert_eq!(blocks_payload("predict", blocks.iter()), by_serde);
        }
    }

    #[test]
    fn other_messages_are_written_by_serde() {
        let message = FromDriver::Shutdown {
            reason: "the task is done".into(),
        };
        assert_eq!(
            written(&message),
            rmp_serde::to_vec_named(&message).unwrap()
        );
    }
}
