//! Reading a one-byte Zarr array whole: v3 (`zarr.json`) or v2
//! (`.zarray`), `bool`, `uint8` or `int8`, regularly chunked in C order,
//! chunks raw or compressed with gzip, zlib or zstd (zarr-python's v3
//! default), missing chunks read as the fill value. What else Zarr allows
//! (blosc, sharding, transposes) is refused with the way to save a mask
//! that is read.

use super::MaskError;
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

/// How to save a mask this reader takes, said with every refusal.
const HOW_TO_SAVE: &str = "save the mask as a uint8 or bool array with zstd, gzip or no \
     compression, e.g. zarr.create_array(path, data=mask, compressors=zarr.codecs.ZstdCodec())";

/// The array at `path`: its shape and its bytes in C order.
pub fn read_bytes(path: &Path) -> Result<(Vec<u64>, Vec<u8>), MaskError> {
    let array = Array::open(path)?;
    let mut cells = vec![array.fill; array.cells()?];
    for chunk in array.chunk_indices() {
        if let Some(bytes) = array.read_chunk(&chunk)? {
            array.copy_chunk(&chunk, &bytes, &mut cells);
        }
    }
    Ok((array.shape, cells))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Gzip,
    Zlib,
    Zstd,
}

/// Reads an array's metadata of one Zarr version.
type ParseMetadata = fn(&Path, &Value) -> Result<Array, String>;

/// What the metadata says about the array.
struct Array {
    dir: PathBuf,
    shape: Vec<u64>,
    chunk_shape: Vec<u64>,
    fill: u8,
    /// Chunk keys: `c/0/1` (v3 default), `0.1` (v2) or `0/1`.
    prefix: &'static str,
    separator: char,
    /// Decompressions in the order they are undone.
    codecs: Vec<Codec>,
}

impl Array {
    fn open(dir: &Path) -> Result<Self, MaskError> {
        let v3 = dir.join("zarr.json");
        let v2 = dir.join(".zarray");
        let invalid = |reason: String| MaskError::Invalid {
            path: dir.to_path_buf(),
            reason,
        };
        let (file, parse): (_, ParseMetadata) = match (v3.exists(), v2.exists()) {
            (true, _) => (v3, v3_array),
            (false, true) => (v2, v2_array),
            (false, false) => {
                let reason = "is not a Zarr array (it has no zarr.json nor .zarray)";
                return Err(invalid(reason.into()));
            }
        };
        let text = std::fs::read_to_string(&file).map_err(|source| MaskError::Io {
            path: file.clone(),
            source,
        })?;
        let meta: Value = serde_json::from_str(&text)
            .map_err(|e| invalid(format!("{} is not JSON: {e}", file.display())))?;
        let array = parse(dir, &meta).and_then(Array::checked);
        array.map_err(|reason| invalid(format!("{reason}; {HOW_TO_SAVE}")))
    }

    /// Chunks of the array's dimensions, none empty.
    fn checked(self) -> Result<Self, String> {
        let fits = self.chunk_shape.len() == self.shape.len();
        if !fits || self.chunk_shape.contains(&0) {
            let (shape, chunks) = (&self.shape, &self.chunk_shape);
            return Err(format!(
                "its chunk shape {chunks:?} does not fit its shape {shape:?}"
            ));
        }
        Ok(self)
    }

    fn cells(&self) -> Result<usize, MaskError> {
        let cells = (self.shape.iter()).try_fold(1usize, |n, &d| n.checked_mul(d as usize));
        cells.ok_or_else(|| MaskError::Invalid {
            path: self.dir.clone(),
            reason: format!("its shape {:?} is too large", self.shape),
        })
    }

    /// Every chunk's grid index, in C order.
    fn chunk_indices(&self) -> impl Iterator<Item = Vec<u64>> + '_ {
        let grid: Vec<u64> = (self.shape.iter().zip(&self.chunk_shape))
            .map(|(&n, &c)| n.div_ceil(c.max(1)))
            .collect();
        let chunks: u64 = grid.iter().product();
        (0..chunks).map(move |i| unravel(i, &grid))
    }

    fn read_chunk(&self, index: &[u64]) -> Result<Option<Vec<u8>>, MaskError> {
        let key: Vec<String> = index.iter().map(u64::to_string).collect();
        let key = key.join(&self.separator.to_string());
        let path = self.dir.join(format!("{}{key}", self.prefix));
        let mut bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(MaskError::Io { path, source }),
        };
        for &codec in &self.codecs {
            bytes = decompress(codec, &bytes).map_err(|e| MaskError::Invalid {
                path: path.clone(),
                reason: format!("cannot decompress ({codec:?}): {e}"),
            })?;
        }
        let expected: u64 = self.chunk_shape.iter().product();
        if bytes.len() as u64 != expected {
            let reason = format!("holds {} bytes, expected {expected}", bytes.len());
            return Err(MaskError::Invalid { path, reason });
        }
        Ok(Some(bytes))
    }

    /// Copies the part of a chunk inside the array into `cells`, a row
    /// (the last dimension, contiguous in both) at a time.
    fn copy_chunk(&self, index: &[u64], chunk: &[u8], cells: &mut [u8]) {
        let Some((&row_len, rows_shape)) = self.chunk_shape.split_last() else {
            return cells.copy_from_slice(&chunk[..cells.len()]);
        };
        let origin: Vec<u64> = (index.iter().zip(&self.chunk_shape))
            .map(|(i, c)| i * c)
            .collect();
        let rows: u64 = rows_shape.iter().product();
        for (row, bytes) in (0..rows).zip(chunk.chunks(row_len as usize)) {
            let mut at = unravel(row, rows_shape);
            at.push(0);
            let at: Vec<u64> = at.iter().zip(&origin).map(|(a, o)| a + o).collect();
            if at.iter().zip(&self.shape).any(|(a, n)| a >= n) {
                continue;
            }
            let flat = (at.iter().zip(&self.shape)).fold(0u64, |f, (a, n)| f * n + a) as usize;
            let (end, start) = (self.shape[at.len() - 1], at[at.len() - 1]);
            let inside = (end - start).min(row_len) as usize;
            cells[flat..flat + inside].copy_from_slice(&bytes[..inside]);
        }
    }
}

/// The C-order coordinates of position `i` in a grid of `shape`.
fn unravel(mut i: u64, shape: &[u64]) -> Vec<u64> {
    let mut at = vec![0; shape.len()];
    for (a, &n) in at.iter_mut().zip(shape).rev() {
        *a = i % n.max(1);
        i /= n.max(1);
    }
    at
}

fn decompress(codec: Codec, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    match codec {
        Codec::Gzip => flate2::read::GzDecoder::new(bytes).read_to_end(&mut out)?,
        Codec::Zlib => flate2::read::ZlibDecoder::new(bytes).read_to_end(&mut out)?,
        Codec::Zstd => ruzstd::decoding::StreamingDecoder::new(bytes)
            .map_err(std::io::Error::other)?
            .read_to_end(&mut out)?,
    };
    Ok(out)
}

fn u64s(value: &Value, what: &str) -> Result<Vec<u64>, String> {
    let numbers = value
        .as_array()
        .and_then(|a| a.iter().map(Value::as_u64).collect());
    numbers.ok_or_else(|| format!("its {what} is not a list of whole numbers"))
}

/// The fill value as a byte: `true`/`false` or a number from 0 to 255
/// (an int8's negative fill is nonzero all the same).
fn fill_byte(value: &Value) -> u8 {
    match value {
        Value::Bool(b) => u8::from(*b),
        Value::Number(n) => u8::from(n.as_f64().is_some_and(|f| f != 0.0)),
        _ => 0,
    }
}

fn v3_array(dir: &Path, meta: &Value) -> Result<Array, String> {
    if meta["node_type"] != "array" {
        return Err("its zarr.json is not an array's".into());
    }
    let dtype = meta["data_type"].as_str().unwrap_or_default();
    if !["bool", "uint8", "int8"].contains(&dtype) {
        return Err(format!(
            "its data type {dtype:?} is not bool, uint8 or int8"
        ));
    }
    let grid = &meta["chunk_grid"];
    if grid["name"] != "regular" {
        return Err(format!("its chunk grid {} is not regular", grid["name"]));
    }
    let encoding = &meta["chunk_key_encoding"];
    let default = encoding["name"] != "v2";
    let separator = encoding
        .pointer("/configuration/separator")
        .and_then(Value::as_str);
    let separator = separator.unwrap_or(if default { "/" } else { "." });
    Ok(Array {
        dir: dir.to_path_buf(),
        shape: u64s(&meta["shape"], "shape")?,
        chunk_shape: u64s(&grid["configuration"]["chunk_shape"], "chunk shape")?,
        fill: fill_byte(&meta["fill_value"]),
        prefix: if default { "c/" } else { "" },
        separator: separator.chars().next().unwrap_or('/'),
        codecs: v3_codecs(&meta["codecs"])?,
    })
}

/// The `bytes` codec, then bytes-to-bytes codecs, undone last first.
fn v3_codecs(codecs: &Value) -> Result<Vec<Codec>, String> {
    let names: Vec<&str> = (codecs.as_array().into_iter().flatten())
        .map(|c| c["name"].as_str().unwrap_or_default())
        .collect();
    let Some((&"bytes", compressions)) = names.split_first() else {
        return Err(format!("its codecs {names:?} do not start with \"bytes\""));
    };
    let mut undo = (compressions.iter())
        .map(|&name| match name {
            "gzip" => Ok(Codec::Gzip),
            "zstd" => Ok(Codec::Zstd),
            other => Err(format!("its codec {other:?} is not supported")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    undo.reverse();
    Ok(undo)
}

fn v2_array(dir: &Path, meta: &Value) -> Result<Array, String> {
    let dtype = meta["dtype"].as_str().unwrap_or_default();
    if !["|b1", "|u1", "|i1"].contains(&dtype) {
        return Err(format!("its dtype {dtype:?} is not |b1, |u1 or |i1"));
    }
    if meta["order"] != "C" {
        return Err(format!("its order {} is not \"C\"", meta["order"]));
    }
    if !meta["filters"].is_null() {
        return Err("it has filters".into());
    }
    let codecs = match &meta["compressor"] {
        Value::Null => Vec::new(),
        compressor => match compressor["id"].as_str().unwrap_or_default() {
            "gzip" => vec![Codec::Gzip],
            "zlib" => vec![Codec::Zlib],
            "zstd" => vec![Codec::Zstd],
            other => return Err(format!("its compressor {other:?} is not supported")),
        },
    };
    let separator = meta["dimension_separator"].as_str().unwrap_or(".");
    Ok(Array {
        dir: dir.to_path_buf(),
        shape: u64s(&meta["shape"], "shape")?,
        chunk_shape: u64s(&meta["chunks"], "chunk shape")?,
        fill: fill_byte(&meta["fill_value"]),
        prefix: "",
        separator: separator.chars().next().unwrap_or('.'),
        codecs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Write;

    fn write(dir: &Path, name: &str, bytes: &[u8]) {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn zstd(bytes: &[u8]) -> Vec<u8> {
        ruzstd::encoding::compress_to_vec(bytes, ruzstd::encoding::CompressionLevel::Fastest)
    }

    #[test]
    fn a_chunked_zstd_v3_array_is_read_whole_with_missing_chunks_as_the_fill() {
        let dir = tempfile::tempdir().unwrap();
        let meta = json!({
            "zarr_format": 3, "node_type": "array", "shape": [3, 4], "data_type": "bool",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": true,
            "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 0}}],
        });
        write(dir.path(), "zarr.json", meta.to_string().as_bytes());
        write(dir.path(), "c/0/0", &zstd(&[1, 0, 0, 0, 1, 0]));
        write(dir.path(), "c/0/1", &zstd(&[0, 9, 9, 1, 9, 9]));
        write(dir.path(), "c/1/1", &zstd(&[0, 9, 9, 9, 9, 9]));
        let (shape, cells) = read_bytes(dir.path()).unwrap();
        assert_eq!(shape, [3, 4]);
        assert_eq!(
            cells,
            [1, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 0],
            "row 2, columns 0-2: the fill"
        );
    }

    #[test]
    fn a_gzip_v2_array_with_slash_keys_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let meta = json!({
            "zarr_format": 2, "shape": [5], "chunks": [2], "dtype": "|u1", "order": "C",
            "compressor": {"id": "gzip", "level": 1}, "filters": null, "fill_value": 0,
            "dimension_separator": "/",
        });
        write(dir.path(), ".zarray", meta.to_string().as_bytes());
        for (key, chunk) in [("0", [0, 1]), ("1", [1, 0]), ("2", [1, 7])] {
            write(dir.path(), key, &gzip(&chunk));
        }
        assert_eq!(
            read_bytes(dir.path()).unwrap(),
            (vec![5], vec![0, 1, 1, 0, 1])
        );
    }

    #[test]
    fn blosc_and_wide_types_are_refused_with_how_to_save_a_mask() {
        let dir = tempfile::tempdir().unwrap();
        let meta = json!({
            "zarr_format": 2, "shape": [5], "chunks": [5], "dtype": "|u1", "order": "C",
            "compressor": {"id": "blosc", "cname": "lz4"}, "filters": null, "fill_value": 0,
        });
        write(dir.path(), ".zarray", meta.to_string().as_bytes());
        let refusal = read_bytes(dir.path()).unwrap_err().to_string();
        assert!(
            refusal.contains("its compressor \"blosc\" is not supported; save the mask as a uint8"),
            "{refusal}"
        );
        let meta =
            json!({"zarr_format": 3, "node_type": "array", "shape": [5], "data_type": "float32"});
        write(dir.path(), "zarr.json", meta.to_string().as_bytes());
        let refusal = read_bytes(dir.path()).unwrap_err().to_string();
        assert!(
            refusal.contains("its data type \"float32\" is not bool, uint8 or int8"),
            "{refusal}"
        );
    }
}
