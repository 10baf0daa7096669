//! Reading the messages sent per block without serde when they are laid
//! out as daisy writes them: `blocks` as drivers write it
//! ([`super::outgoing`]), keys in that order, no others, and
//! `release_blocks` as daisy's workers write it (serde's order, results
//! with an id, `ok` and maybe `seconds`). Through serde (or rmp's own
//! readers, which read a byte at a time through `io::Read`) its blocks
//! cost a worker more than anything else it does per block but relaying
//! them, and a release was a tenth of the driver's work per block in
//! batches. Any other
//! layout, and any error, is left to serde, which reads every layout the
//! protocol allows and words the errors: this only ever gives what serde
//! would.

use crate::protocol::messages::{FromDriver, ToDriver};
use crate::protocol::user_code::{BlockResult, WireBlock, WireRoi};

/// The `blocks` message in `payload`, if it has the drivers' layout.
pub(super) fn read_blocks(payload: &[u8]) -> Option<FromDriver> {
    let blocks = read_list(payload, b"blocks", b"blocks", Reader::block)?;
    Some(FromDriver::Blocks { blocks })
}

/// The `release_blocks` message in `payload`, if it has the layout of
/// daisy's workers (results with an error or a cost go to serde).
pub(super) fn read_release(payload: &[u8]) -> Option<ToDriver> {
    let results = read_list(payload, b"release_blocks", b"results", Reader::result)?;
    Some(ToDriver::ReleaseBlocks { results })
}

/// The items of a message `{"type": kind, key: [item, ...]}` read by
/// `item`, if the payload holds exactly that.
fn read_list<'p, T>(
    payload: &'p [u8],
    kind: &[u8],
    key: &[u8],
    item: impl Fn(&mut Reader<'p>) -> Option<T>,
) -> Option<Vec<T>> {
    let mut rest = Reader(payload);
    rest.expect_map(2)?;
    rest.expect_key(b"type")?;
    rest.expect_key(kind)?;
    rest.expect_key(key)?;
    let count = rest.array_len()?;
    // Never trust a length for an allocation: an item takes bytes.
    let mut items = Vec::with_capacity(count.min(rest.0.len()));
    for _ in 0..count {
        items.push(item(&mut rest)?);
    }
    rest.0.is_empty().then_some(items)
}

/// MessagePack, read from the front of a slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn block(&mut self) -> Option<WireBlock> {
        self.expect_map(4)?;
        self.expect_key(b"task_id")?;
        let task_id = std::str::from_utf8(self.str()?).ok()?.to_string();
        self.expect_key(b"block_id")?;
        let block_id = u64::try_from(self.int()?).ok()?;
        self.expect_key(b"read_roi")?;
        let read_roi = self.roi()?;
        self.expect_key(b"write_roi")?;
        let write_roi = self.roi()?;
        Some(WireBlock {
            task_id,
            block_id,
            read_roi,
            write_roi,
        })
    }

    fn result(&mut self) -> Option<BlockResult> {
        let fields = self.map_len()?;
        self.expect_key(b"block_id")?;
        let block_id = u64::try_from(self.int()?).ok()?;
        self.expect_key(b"ok")?;
        let ok = match self.byte()? {
            0xc2 => false,
            0xc3 => true,
            _ => return None,
        };
        let seconds = match fields {
            2 => None,
            3 => {
                self.expect_key(b"seconds")?;
                Some(self.float()?)
            }
            _ => return None,
        };
        Some(BlockResult {
            block_id,
            ok,
            skipped: false,
            error: None,
            seconds,
            cost: None,
        })
    }

    fn float(&mut self) -> Option<f64> {
        match self.byte()? {
            0xcb => Some(f64::from_be_bytes(self.take(8)?.try_into().ok()?)),
            0xca => Some(f64::from(f32::from_be_bytes(
                self.take(4)?.try_into().ok()?,
            ))),
            _ => None,
        }
    }

    fn roi(&mut self) -> Option<WireRoi> {
        self.expect_map(2)?;
        self.expect_key(b"offset")?;
        let offset = self.ints()?;
        self.expect_key(b"shape")?;
        let shape = self.ints()?;
        Some(WireRoi { offset, shape })
    }

    fn ints(&mut self) -> Option<Vec<i64>> {
        let count = self.array_len()?;
        let mut values = Vec::with_capacity(count.min(self.0.len()));
        for _ in 0..count {
            values.push(i64::try_from(self.int()?).ok()?);
        }
        Some(values)
    }

    fn expect_map(&mut self, len: usize) -> Option<()> {
        (self.map_len()? == len).then_some(())
    }

    fn map_len(&mut self) -> Option<usize> {
        match self.byte()? {
            marker @ 0x80..=0x8f => Some(usize::from(marker & 0x0f)),
            0xde => self.uint(2),
            0xdf => self.uint(4),
            _ => None,
        }
    }

    fn array_len(&mut self) -> Option<usize> {
        match self.byte()? {
            marker @ 0x90..=0x9f => Some(usize::from(marker & 0x0f)),
            0xdc => self.uint(2),
            0xdd => self.uint(4),
            _ => None,
        }
    }

    fn expect_key(&mut self, key: &[u8]) -> Option<()> {
        (self.str()? == key).then_some(())
    }

    fn str(&mut self) -> Option<&'a [u8]> {
        let len = match self.byte()? {
            marker @ 0xa0..=0xbf => usize::from(marker & 0x1f),
            0xd9 => self.uint(1)?,
            0xda => self.uint(2)?,
            0xdb => self.uint(4)?,
            _ => return None,
        };
        self.take(len)
    }

    /// Any integer, widened (a u64 over i64::MAX included).
    fn int(&mut self) -> Option<i128> {
        let marker = self.byte()?;
        let signed = |bytes: &[u8]| {
            let mut be = [if bytes[0] & 0x80 != 0 { 0xff } else { 0 }; 16];
            be[16 - bytes.len()..].copy_from_slice(bytes);
            i128::from_be_bytes(be)
        };
        Some(match marker {
            0x00..=0x7f => i128::from(marker),
            0xe0..=0xff => i128::from(marker as i8),
            0xcc..=0xcf => self.uint(1 << (marker - 0xcc))? as i128,
            0xd0..=0xd3 => signed(self.take(1 << (marker - 0xd0))?),
            _ => return None,
        })
    }

    /// A big-endian unsigned number of `len` bytes.
    fn uint(&mut self, len: usize) -> Option<usize> {
        let bytes = self.take(len)?;
        let value = bytes.iter().fold(0u64, |n, &b| n << 8 | u64::from(b));
        usize::try_from(value).ok()
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::outgoing::Outgoing;

    fn blocks() -> FromDriver {
        let roi = |offset: Vec<i64>| WireRoi {
            shape: vec![64; offset.len()],
            offset,
        };
        FromDriver::Blocks {
            blocks: vec![
                WireBlock {
                    // 40 bytes: a str8, past the fixstr's 31.
                    task_id: "predict-".repeat(5),
                    block_id: 17,
                    read_roi: roi(vec![-8, 0, 1 << 40]),
                    write_roi: roi(vec![0, 8, i64::MIN]),
                },
                WireBlock {
                    task_id: "p".repeat(300),
                    block_id: u64::MAX,
                    read_roi: roi(vec![]),
                    write_roi: roi(vec![i64::MAX]),
                },
            ],
        }
    }

    #[test]
    fn blocks_as_drivers_write_them_are_read_back() {
        let mut payload = Vec::new();
        blocks().write_payload(&mut payload).unwrap();
        assert_eq!(read_blocks(&payload), Some(blocks()));
    }

    #[test]
    fn any_other_layout_is_left_to_serde() {
        let reordered = serde_json::json!({"blocks": [], "type": "blocks"});
        let extra_field = serde_json::json!({"type": "blocks", "blocks": [], "more": 1});
        for other in [reordered, extra_field] {
            let payload = rmp_serde::to_vec_named(&other).unwrap();
            assert_eq!(read_blocks(&payload), None, "{other}");
        }
        // The drivers' layout with block 17's id made -1 (a negative fixint).
        let mut negative_id = Vec::new();
        blocks().write_payload(&mut negative_id).unwrap();
        let at = negative_id
            .windows(10)
            .position(|w| w == b"\xa8block_id\x11")
            .unwrap();
        negative_id[at + 9] = 0xff;
        assert_eq!(read_blocks(&negative_id), None);
        assert!(crate::protocol::frame::decode::<FromDriver>(&negative_id).is_err());
        let mut cut_short = Vec::new();
        blocks().write_payload(&mut cut_short).unwrap();
        cut_short.pop();
        assert_eq!(read_blocks(&cut_short), None);
    }

    fn release() -> ToDriver {
        let result = |block_id, ok, seconds| BlockResult {
            block_id,
            ok,
            skipped: false,
            error: None,
            seconds,
            cost: None,
        };
        let results = vec![
            result(0, true, None),
            result(u64::MAX, false, Some(0.25)),
            result(1 << 40, true, Some(f64::INFINITY)),
        ];
        ToDriver::ReleaseBlocks { results }
    }

    #[test]
    fn releases_as_workers_write_them_are_read_as_serde_reads_them() {
        let payload = rmp_serde::to_vec_named(&release()).unwrap();
        assert_eq!(read_release(&payload), Some(release()));
        // As a worker in another language may write it: seconds as an f32.
        let mut payload = b"\x82\xa4type\xaerelease_blocks\xa7results\x91".to_vec();
        payload.extend(b"\x83\xa8block_id\x03\xa2ok\xc3\xa7seconds\xca");
        payload.extend(0.1f32.to_be_bytes());
        let by_serde = crate::protocol::frame::decode::<ToDriver>(&payload).unwrap();
        assert_eq!(read_release(&payload), Some(by_serde));
    }

    #[test]
    fn releases_in_any_other_layout_are_left_to_serde() {
        let with_error = &b"\x83\xa8block_id\x01\xa2ok\xc2\xa5error\xa1e"[..];
        let reordered = &b"\x82\xa2ok\xc3\xa8block_id\x01"[..];
        let int_seconds = &b"\x83\xa8block_id\x01\xa2ok\xc3\xa7seconds\x01"[..];
        for result in [with_error, reordered, int_seconds] {
            let mut payload = b"\x82\xa4type\xaerelease_blocks\xa7results\x91".to_vec();
            payload.extend(result);
            assert_eq!(read_release(&payload), None, "{result:?}");
            assert!(crate::protocol::frame::decode::<ToDriver>(&payload).is_ok());
        }
        let mut cut_short = rmp_serde::to_vec_named(&release()).unwrap();
        cut_short.pop();
        assert_eq!(read_release(&cut_short), None);
    }

    #[test]
    fn a_declared_length_reserves_no_more_than_the_bytes_that_follow() {
        // An array of 2^32 - 1 blocks in a 12-byte frame.
        let mut payload = Vec::new();
        rmp::encode::write_map_len(&mut payload, 2).unwrap();
        for key in ["type", "blocks", "blocks"] {
            rmp::encode::write_str(&mut payload, key).unwrap();
        }
        rmp::encode::write_array_len(&mut payload, u32::MAX).unwrap();
        assert_eq!(read_blocks(&payload), None);
    }
}
