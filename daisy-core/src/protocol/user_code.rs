//! The block as user code sees it and the result user code reports. The
//! same shapes travel between driver and worker, so a worker command
//! written in Python and a worker written in Go read the same fields.

use crate::coordinate::Coordinate;
use crate::roi::Roi;
use serde::{Deserialize, Serialize};

/// An ROI as plain lists: `{"offset": [..], "shape": [..]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRoi {
    pub offset: Vec<i64>,
    pub shape: Vec<i64>,
}

impl From<&Roi> for WireRoi {
    fn from(roi: &Roi) -> Self {
        Self {
            offset: roi.offset().as_slice().to_vec(),
            shape: roi.shape().as_slice().to_vec(),
        }
    }
}

impl WireRoi {
    /// `{"offset":[..],"shape":[..]}`, as `serde_json` writes it.
    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"offset\":");
        write_json_ints(out, &self.offset);
        out.extend_from_slice(b",\"shape\":");
        write_json_ints(out, &self.shape);
        out.push(b'}');
    }

    /// The ROI, if offset and shape agree in dimension and fit in a
    /// [`Coordinate`].
    pub fn to_roi(&self) -> Option<Roi> {
        let fits = |v: &Vec<i64>| v.len() <= crate::coordinate::MAX_DIMS;
        (self.offset.len() == self.shape.len() && fits(&self.offset))
            .then(|| Roi::new(Coordinate::new(&self.offset), Coordinate::new(&self.shape)))
    }
}

fn write_json_ints(out: &mut Vec<u8>, values: &[i64]) {
    out.push(b'[');
    let mut digits = itoa::Buffer::new();
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(digits.format(*value).as_bytes());
    }
    out.push(b']');
}

/// One block as user code receives it (`DAISY_BLOCK`, or a line on a
/// worker command's stdin).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireBlock {
    pub task_id: String,
    pub block_id: u64,
    pub read_roi: WireRoi,
    pub write_roi: WireRoi,
}

impl WireBlock {
    /// Appends the block as one line of JSON, byte for byte what
    /// `serde_json` writes, in a fraction of its time: a worker command
    /// gets a line per block, which serde's generic calls per key and
    /// number made a good share of relaying a block.
    pub fn write_json_line(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"task_id\":");
        serde_json::to_writer(&mut *out, &self.task_id).expect("a string writes to a Vec");
        out.extend_from_slice(b",\"block_id\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.block_id).as_bytes());
        out.extend_from_slice(b",\"read_roi\":");
        self.read_roi.write_json(out);
        out.extend_from_slice(b",\"write_roi\":");
        self.write_roi.write_json(out);
        out.extend_from_slice(b"}\n");
    }

    pub fn new(task_id: &str, block: &crate::block::Block) -> Self {
        Self {
            task_id: task_id.to_string(),
            block_id: block.id.spatial,
            read_roi: WireRoi::from(&block.read_roi),
            write_roi: WireRoi::from(&block.write_roi),
        }
    }
}

/// What user code reports for one block: `{"block_id": 17, "ok": true}`
/// or `{"block_id": 17, "ok": false, "error": "why"}`, and
/// `{"block_id": 17, "ok": true, "skipped": true}` for a block it found
/// already done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockResult {
    pub block_id: u64,
    pub ok: bool,
    /// User code found the block done already and did not run it (a
    /// `check_function` said so): it counts as skipped, as daisy counts
    /// such a block, and is marked done like any other.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long the block ran, as the worker measured it (for reports
    /// and walltime estimates); a worker command need not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// What the block cost besides time, when the task tracks resources
    /// (`resource_tracking`); absent otherwise, and from workers that do
    /// not measure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<BlockCost>,
}

impl BlockResult {
    /// A block done, with nothing measured or said about it.
    pub fn succeeded(block_id: u64) -> Self {
        Self {
            block_id,
            ok: true,
            skipped: false,
            error: None,
            seconds: None,
            cost: None,
        }
    }

    /// The result a worker command's stdout line is, if it is a JSON
    /// object that reads as one. The common answer, `{"block_id": N, "ok":
    /// true}` (any JSON spacing), is read in place, a fraction of what
    /// serde costs per block; any other object goes to serde.
    pub fn from_json_line(line: &str) -> Option<Self> {
        let line = line.trim();
        if !line.starts_with('{') {
            return None;
        }
        match plain_ok(line) {
            Some(block_id) => Some(Self::succeeded(block_id)),
            None => serde_json::from_str(line).ok(),
        }
    }
}

/// The block id of exactly `{"block_id": N, "ok": true}`, with JSON's
/// spacing anywhere between tokens; `None` for anything else.
fn plain_ok(line: &str) -> Option<u64> {
    let mut rest = line.as_bytes();
    for token in [&b"{"[..], b"\"block_id\"", b":"] {
        rest = after(rest, token)?;
    }
    let start = rest.iter().position(|b| !JSON_SPACE.contains(b))?;
    let digits = rest[start..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let (number, tail) = rest[start..].split_at(digits);
    // JSON has no leading zeros (serde refuses them).
    if digits == 0 || digits > 1 && number[0] == b'0' {
        return None;
    }
    let block_id = number.iter().try_fold(0u64, |n, &digit| {
        n.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })?;
    rest = tail;
    for token in [&b","[..], b"\"ok\"", b":", b"true", b"}"] {
        rest = after(rest, token)?;
    }
    rest.iter()
        .all(|b| JSON_SPACE.contains(b))
        .then_some(block_id)
}

/// `bytes` after `token`, which must come first but for JSON spacing.
fn after<'a>(bytes: &'a [u8], token: &[u8]) -> Option<&'a [u8]> {
    let start = bytes.iter().position(|b| !JSON_SPACE.contains(b))?;
    bytes[start..].strip_prefix(token)
}

/// What JSON counts as space between tokens.
const JSON_SPACE: [u8; 4] = [b' ', b'\t', b'\n', b'\r'];

/// What one block cost, as its worker measured it (docs/user-guide.md,
/// "What each block cost" says what each figure covers). Names and units
/// are those of daisy 2.0.0's per-block arrays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BlockCost {
    /// User plus system CPU time.
    #[serde(default)]
    pub cpu_seconds: f64,
    /// The largest resident set size.
    #[serde(default)]
    pub peak_rss_bytes: u64,
    /// Bytes passed to `read`-like system calls (files, pipes, sockets).
    #[serde(default)]
    pub io_read_bytes: u64,
    /// Bytes passed to `write`-like system calls.
    #[serde(default)]
    pub io_write_bytes: u64,
    /// Mean utilisation of the GPUs the block used; absent without a GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util_pct: Option<f32>,
    /// The most GPU memory the block's processes held; absent without a GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_bytes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{Block, TaskIdx};

    #[test]
    fn a_block_serialises_to_the_documented_json() {
        let total = Roi::from_slices(&[0, 0], &[6, 6]);
        let block = Block::new(
            TaskIdx(0),
            &total,
            Roi::from_slices(&[1, 1], &[3, 3]),
            Roi::from_slices(&[2, 2], &[1, 1]),
        );
        let json = serde_json::to_string(&WireBlock::new("predict", &block)).unwrap();
        assert_eq!(
            json,
            r#"{"task_id":"predict","block_id":12,"read_roi":{"offset":[1,1],"shape":[3,3]},"write_roi":{"offset":[2,2],"shape":[1,1]}}"#
        );
    }

    #[test]
    fn a_json_line_is_what_serde_writes() {
        let roi = |offset: Vec<i64>| WireRoi {
            shape: offset.iter().map(|x| x.saturating_abs()).collect(),
            offset,
        };
        let blocks = [
            WireBlock {
                task_id: "predict".into(),
                block_id: 0,
                read_roi: roi(vec![]),
                write_roi: roi(vec![-1]),
            },
            WireBlock {
                task_id: "quote \" back\\slash \n tab\t bell\u{7} é 🦀".into(),
                block_id: u64::MAX,
                read_roi: roi(vec![i64::MIN, -12_345, 0, 9, 1 << 40, i64::MAX]),
                write_roi: roi(vec![7, 8, 9]),
            },
        ];
        for block in blocks {
            let mut line = Vec::new();
            block.write_json_line(&mut line);
            let mut by_serde = serde_json::to_vec(&block).unwrap();
            by_serde.push(b'\n');
            assert_eq!(
                String::from_utf8(line).unwrap(),
                String::from_utf8(by_serde).unwrap()
            );
        }
    }

    #[test]
    fn a_result_line_reads_as_serde_reads_it() {
        let lines = [
            r#"{"block_id": 3, "ok": true}"#,
            r#"{"block_id":3,"ok":true}"#,
            "\t{ \"block_id\" :\r\n 18446744073709551615 , \"ok\" : true }  ",
            r#"{"block_id": 18446744073709551616, "ok": true}"#,
            r#"{"block_id": 03, "ok": true}"#,
            r#"{"block_id": 0, "ok": true}"#,
            r#"{"block_id": -1, "ok": true}"#,
            r#"{"block_id": 3, "ok": true, "took": 1.5}"#,
            r#"{"ok": true, "block_id": 3}"#,
            r#"{"block_id": 3, "ok": false, "error": "no disk"}"#,
            r#"{"block_id": 3, "ok": truex}"#,
            r#"{"block_id": 3, "ok": true}}"#,
            r#"{"block_id": 3}"#,
            "{\"block_id\": 3,\u{a0}\"ok\": true}",
            "[1, true]",
            "progress 3/10",
        ];
        for line in lines {
            let by_serde = line
                .trim()
                .starts_with('{')
                .then(|| serde_json::from_str::<BlockResult>(line.trim()).ok())
                .flatten();
            assert_eq!(BlockResult::from_json_line(line), by_serde, "{line:?}");
        }
    }

    #[test]
    fn results_parse_with_and_without_an_error_and_ignore_extra_fields() {
        let ok: BlockResult =
            serde_json::from_str(r#"{"block_id": 3, "ok": true, "took": 1.5}"#).unwrap();
        assert_eq!(
            ok,
            BlockResult {
                block_id: 3,
                ok: true,
                skipped: false,
                error: None,
                seconds: None,
                cost: None,
            }
        );
        let failed: BlockResult =
            serde_json::from_str(r#"{"block_id": 4, "ok": false, "error": "no disk"}"#).unwrap();
        assert_eq!(failed.error.as_deref(), Some("no disk"));
    }

    #[test]
    fn a_cost_travels_with_its_result_and_missing_figures_read_as_absent() {
        let result = BlockResult {
            block_id: 7,
            ok: true,
            skipped: false,
            error: None,
            seconds: Some(1.5),
            cost: Some(BlockCost {
                cpu_seconds: 1.25,
                peak_rss_bytes: 50_000_000,
                io_read_bytes: 1,
                io_write_bytes: 2,
                gpu_util_pct: None,
                gpu_mem_bytes: None,
            }),
        };
        let bytes = rmp_serde::to_vec_named(&result).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<BlockResult>(&bytes).unwrap(),
            result
        );
        let json = serde_json::to_string(&result.cost).unwrap();
        assert!(!json.contains("gpu"), "no GPU, no GPU field: {json}");
        let partial: BlockResult =
            serde_json::from_str(r#"{"block_id": 7, "ok": true, "cost": {"cpu_seconds": 2}}"#)
                .unwrap();
        let cost = partial.cost.unwrap();
        assert_eq!(
            (cost.cpu_seconds, cost.peak_rss_bytes, cost.gpu_mem_bytes),
            (2.0, 0, None)
        );
        let old: BlockResult = serde_json::from_str(r#"{"block_id": 7, "ok": true}"#).unwrap();
        assert_eq!(old.cost, None, "an older worker sends none");
    }

    #[test]
    fn mismatched_wire_rois_are_refused() {
        let roi = WireRoi {
            offset: vec![0, 0],
            shape: vec![1],
        };
        assert!(roi.to_roi().is_none());
        let roi = WireRoi {
            offset: vec![0; 9],
            shape: vec![1; 9],
        };
        assert!(roi.to_roi().is_none());
    }
}
