//! The Zarr v3 metadata of a marker, byte for byte as daisy 2.0.0 writes
//! it (serde_json pretty, keys sorted, a trailing newline), how a stored
//! one is checked, and how one is written so no reader sees half of it.
//!
//! A *node* is a directory holding a `zarr.json`: the marker's group, or
//! one of its arrays. Every array has a single chunk covering the whole
//! block grid, at `c/0/…/0` (Zarr v3's default chunk key, "/" separated,
//! one `0` per dimension).

use super::error::{invalid, io_error, DoneMarkerError};
use serde_json::{json, Value};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The metadata file of a node, as the Zarr v3 spec names it.
pub(super) const ZARR_JSON: &str = "zarr.json";

/// Where `zarr.json` is written before the rename publishes it. A dot
/// file, so Zarr readers ignore a leftover one; the next write
/// overwrites it.
pub(super) const ZARR_JSON_TMP: &str = ".zarr.json.tmp";

/// The element types of the arrays a marker holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dtype {
    U8,
    U32,
    U64,
    F32,
}

impl Dtype {
    /// Bytes per element in the chunk (little-endian).
    pub fn width(self) -> usize {
        match self {
            Dtype::U8 => 1,
            Dtype::U32 | Dtype::F32 => 4,
            Dtype::U64 => 8,
        }
    }

    /// Zero in the element's own JSON type, as daisy 2.0.0 writes it
    /// (`0.0` for floats, which a layout check must match exactly).
    fn fill_value(self) -> Value {
        match self {
            Dtype::F32 => json!(0.0),
            _ => json!(0),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Dtype::U8 => "uint8",
            Dtype::U32 => "uint32",
            Dtype::U64 => "uint64",
            Dtype::F32 => "float32",
        }
    }
}

/// Array metadata fields that decide how the chunk's bytes are read; a
/// stored array must agree on all of them, or its bytes mean something
/// else. (A missing chunk reads as `fill_value`.)
const LAYOUT_FIELDS: [&str; 7] = [
    "zarr_format",
    "node_type",
    "data_type",
    "shape",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
];

/// The group's `zarr.json`: the task hash is its only attribute.
pub(super) fn group_metadata(hash: &str) -> Value {
    json!({
        "attributes": { "daisy_task_hash": hash },
        "node_type": "group",
        "zarr_format": 3
    })
}

/// An array's `zarr.json`: one chunk of `grid` elements of `dtype`.
pub(super) fn array_metadata(grid: &[u64], dtype: Dtype) -> Value {
    json!({
        "attributes": {},
        "chunk_grid": {
            "configuration": { "chunk_shape": grid },
            "name": "regular"
        },
        "chunk_key_encoding": {
            "configuration": { "separator": "/" },
            "name": "default"
        },
        "codecs": [{ "configuration": { "endian": "little" }, "name": "bytes" }],
        "data_type": dtype.name(),
        "fill_value": dtype.fill_value(),
        "node_type": "array",
        "shape": grid,
        "storage_transformers": [],
        "zarr_format": 3
    })
}

/// Checks a stored array's metadata (at `path`, in the marker at `dir`)
/// against the one this layout writes.
pub(super) fn verify_array(
    dir: &Path,
    path: &Path,
    stored: &Value,
    grid: &[u64],
    dtype: Dtype,
) -> Result<(), DoneMarkerError> {
    let expected = array_metadata(grid, dtype);
    for field in LAYOUT_FIELDS {
        if stored.get(field) != expected.get(field) {
            let found = stored.get(field).map_or("missing".into(), Value::to_string);
            let reason = format!("{field} is {found}, expected {}", expected[field]);
            return Err(invalid(dir, path, reason));
        }
    }
    verify_codecs(dir, path, stored, dtype)
}

/// Only the `bytes` codec keeps each element at its own offset; wider
/// elements must be little-endian, as daisy 2.0.0 reads them. One byte
/// has no endianness (this project's earlier markers name none).
fn verify_codecs(
    dir: &Path,
    path: &Path,
    stored: &Value,
    dtype: Dtype,
) -> Result<(), DoneMarkerError> {
    let codecs = stored["codecs"].as_array().map(Vec::as_slice);
    let endian = |codec: &Value| codec.pointer("/configuration/endian").cloned();
    let ok = match codecs {
        Some([codec]) if codec["name"] == "bytes" => match endian(codec) {
            Some(endian) => endian == "little",
            None => dtype.width() == 1,
        },
        _ => false,
    };
    if ok {
        return Ok(());
    }
    let reason = format!(
        "codecs are {}, expected only bytes (little-endian)",
        stored["codecs"]
    );
    Err(invalid(dir, path, reason))
}

/// The `zarr.json` of the node at `node`, or `None` if there is none.
/// `dir` is the marker, named in errors.
pub(super) fn read_metadata(dir: &Path, node: &Path) -> Result<Option<Value>, DoneMarkerError> {
    let path = node.join(ZARR_JSON);
    let text = match fs::read(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        text => text.map_err(io_error(&path))?,
    };
    let value = serde_json::from_slice(&text).map_err(|e| invalid(dir, &path, e.to_string()))?;
    Ok(Some(value))
}

/// Writes the node's `zarr.json` to a temporary file and renames it into
/// place, so no reader ever sees a half-written one.
pub(super) fn publish_metadata(node: &Path, metadata: &Value) -> Result<(), DoneMarkerError> {
    let staged = stage_metadata(node, metadata)?;
    sync_file(&staged, &node.join(ZARR_JSON_TMP))?;
    publish_staged(node)?;
    sync_dir(node)
}

/// Writes the node's `zarr.json` to its temporary file, not yet synced:
/// the file, for the caller to sync before [`publish_staged`].
pub(super) fn stage_metadata(node: &Path, metadata: &Value) -> Result<File, DoneMarkerError> {
    let tmp = node.join(ZARR_JSON_TMP);
    let mut file = File::create(&tmp).map_err(io_error(&tmp))?;
    file.write_all(format!("{metadata:#}\n").as_bytes())
        .map_err(io_error(&tmp))?;
    Ok(file)
}

/// Renames the node's staged `zarr.json` into place; durable once the
/// node's directory is synced.
pub(super) fn publish_staged(node: &Path) -> Result<(), DoneMarkerError> {
    let path = node.join(ZARR_JSON);
    fs::rename(node.join(ZARR_JSON_TMP), &path).map_err(io_error(&path))
}

pub(super) fn sync_file(file: &File, path: &Path) -> Result<(), DoneMarkerError> {
    file.sync_all().map_err(io_error(path))
}

/// The node's only chunk: `<node>/c/0/…/0`, one `0` per dimension.
pub(super) fn chunk_path(node: &Path, dims: usize) -> PathBuf {
    let mut path = node.join("c");
    path.extend(std::iter::repeat_n("0", dims.max(1)));
    path
}

/// Makes the entries from `leaf` up to `dir`, and `dir`'s own entry in its
/// parent, durable, so a power loss cannot keep a `zarr.json` but drop
/// the chunk it describes.
pub(super) fn sync_dirs(leaf: &Path, dir: &Path) -> Result<(), DoneMarkerError> {
    let below_dir = leaf.ancestors().take_while(|d| *d != dir);
    for d in below_dir {
        sync_dir(d)?;
    }
    sync_dir(dir)?;
    sync_dir(&dir.join(".."))
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), DoneMarkerError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}
