//! Writing a message as a frame's payload.
//!
//! Every message is written by serde (rmp-serde, maps with field names),
//! except the one the driver sends per block: `blocks`. Through serde its
//! blocks cost the driver about as much as the rest of handing them out
//! (a generic call per key and number); written here straight with rmp's
//! encoders, they make the very bytes serde makes (a test compares them).

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

impl Outgoing for ToDriver {}

impl Outgoing for FromDriver {
    fn write_payload(&self, payload: &mut Vec<u8>) -> Result<(), rmp_serde::encode::Error> {
        match self {
            FromDriver::Blocks { blocks } => Ok(write_blocks(payload, blocks)?),
            other => rmp_serde::encode::write_named(payload, other),
        }
    }
}

type Written = Result<(), ValueWriteError<std::io::Error>>;

/// `{"type": "blocks", "blocks": [..]}`, field order as serde's.
fn write_blocks(out: &mut Vec<u8>, blocks: &[WireBlock]) -> Written {
    encode::write_map_len(out, 2)?;
    write_key(out, "type")?;
    encode::write_str(out, "blocks")?;
    write_key(out, "blocks")?;
    encode::write_array_len(out, len(blocks.len())?)?;
    blocks.iter().try_for_each(|block| write_block(out, block))
}

fn write_block(out: &mut Vec<u8>, block: &WireBlock) -> Written {
    encode::write_map_len(out, 4)?;
    write_key(out, "task_id")?;
    encode::write_str(out, &block.task_id)?;
    write_key(out, "block_id")?;
    encode::write_uint(out, block.block_id)?;
    write_key(out, "read_roi")?;
    write_roi(out, &block.read_roi)?;
    write_key(out, "write_roi")?;
    write_roi(out, &block.write_roi)
}

fn write_roi(out: &mut Vec<u8>, roi: &WireRoi) -> Written {
    encode::write_map_len(out, 2)?;
    write_key(out, "offset")?;
    write_ints(out, &roi.offset)?;
    write_key(out, "shape")?;
    write_ints(out, &roi.shape)
}

fn write_ints(out: &mut Vec<u8>, values: &[i64]) -> Written {
    encode::write_array_len(out, len(values.len())?)?;
    values
        .iter()
        .try_for_each(|&value| encode::write_sint(out, value).map(drop))
}

fn write_key(out: &mut Vec<u8>, key: &str) -> Written {
    encode::write_str(out, key)
}

/// A MessagePack array holds at most `u32::MAX` items.
fn len(items: usize) -> Result<u32, ValueWriteError<std::io::Error>> {
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
        let numbers = [0, 1, 127, 128, 255, 256, 65_535, 65_536, 1 << 40, i64::MAX];
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
