//! Markers written by this project before it wrote daisy 2.0.0's layout:
//! a bare Zarr v3 `uint8` array at the marker's directory (not a group),
//! its task hash taken with another prefix, and no failure counts:
//!
//! ```text
//! <dir>/zarr.json    array metadata, attributes.daisy_task_hash
//! <dir>/c/0/…/0      the only chunk: one byte per block, 1 = done
//! ```
//!
//! Read-only opens (`plan`, `status`, `report`, `reset`) read it as it is,
//! because they never change a run directory. A run migrates it in place
//! before it marks anything, because what it writes must be the layout
//! daisy 2.0.0 reads; the done bytes are kept, failure counts start at 0.

use super::array::{DONE, FAILURES};
use super::chunk::Chunk;
use super::error::{invalid, io_error, DoneMarkerError};
use super::layout::Layout;
use super::zarr::{
    chunk_path, group_metadata, publish_metadata, sync_dir, verify_array, Dtype, ZARR_JSON,
};
use serde_json::Value;
use std::fs;
use std::io;
use std::path::Path;

/// The stored root `zarr.json` is an array: the earlier layout.
pub(super) fn is_legacy(stored: &Value) -> bool {
    stored["node_type"] == "array"
}

/// Checks the earlier layout's metadata (the hash first, because a layout
/// change is the likely cause and its error says what to do) and reads
/// its done bytes.
pub(super) fn read_done(
    dir: &Path,
    layout: &Layout,
    stored: &Value,
) -> Result<Vec<u8>, DoneMarkerError> {
    let path = dir.join(ZARR_JSON);
    let stored_hash = stored
        .pointer("/attributes/daisy_task_hash")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            invalid(
                dir,
                &path,
                "no attributes.daisy_task_hash: not a done marker",
            )
        })?;
    if stored_hash != layout.legacy_hash {
        return Err(DoneMarkerError::LayoutMismatch {
            dir: dir.to_path_buf(),
            stored: stored_hash.to_string(),
            expected: layout.legacy_hash.clone(),
        });
    }
    verify_array(dir, &path, stored, &layout.grid, Dtype::U8)?;
    let chunk = chunk_path(dir, layout.grid.len());
    Chunk::open(dir, &chunk, layout.cells, false)?.read_all(layout.cells)
}

/// Rewrites the marker at `dir` in daisy 2.0.0's layout with the same
/// done bytes. The arrays are written first; the group's `zarr.json` then
/// replaces the array's in one rename, the moment the marker changes
/// layout (a kill before it leaves the earlier marker, which the next run
/// migrates again); the old chunk goes last.
pub(super) fn migrate(dir: &Path, layout: &Layout, done: &[u8]) -> Result<(), DoneMarkerError> {
    DONE.create(dir, layout, Some(done))?;
    FAILURES.create(dir, layout, None)?;
    publish_metadata(dir, &group_metadata(&layout.hash))?;
    remove_chunks(dir)
}

/// Removes the earlier layout's chunks, left over when a migration was
/// killed after its rename.
pub(super) fn remove_chunks(dir: &Path) -> Result<(), DoneMarkerError> {
    let chunks = dir.join("c");
    match fs::remove_dir_all(&chunks) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        removed => {
            removed.map_err(io_error(&chunks))?;
            sync_dir(dir)
        }
    }
}
