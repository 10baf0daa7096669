//! The marker's root: a Zarr v3 group whose attributes hold the task
//! hash, as daisy 2.0.0 writes it, or one of the other things a marker
//! directory can hold (nothing yet, this project's earlier layout).

use super::array::{refuse_data_without_metadata, DONE, FAILURES};
use super::error::{invalid, DoneMarkerError};
use super::layout::Layout;
use super::legacy;
use super::zarr::{group_metadata, publish_metadata, read_metadata, ZARR_JSON};
use serde_json::Value;
use std::path::Path;

/// What the marker directory holds.
pub(super) enum Stored {
    /// No root `zarr.json`, and no recorded data: no marker, or its
    /// creation was killed before publishing the group.
    Absent,
    /// daisy 2.0.0's group, its hash checked.
    Group,
    /// This project's earlier layout, its hash checked: its done bytes.
    Legacy(Vec<u8>),
}

/// Reads and checks the root `zarr.json` of the marker at `dir`.
pub(super) fn inspect(dir: &Path, layout: &Layout) -> Result<Stored, DoneMarkerError> {
    let Some(stored) = read_metadata(dir, dir)? else {
        refuse_orphaned_data(dir)?;
        return Ok(Stored::Absent);
    };
    if legacy::is_legacy(&stored) {
        return legacy::read_done(dir, layout, &stored).map(Stored::Legacy);
    }
    verify_group(dir, layout, &stored)?;
    Ok(Stored::Group)
}

/// A group whose hash is this layout's. As in daisy 2.0.0, a group
/// without a hash is a store the user made (a `done` array marking
/// blocks to skip) and is trusted by its arrays' shapes alone.
fn verify_group(dir: &Path, layout: &Layout, stored: &Value) -> Result<(), DoneMarkerError> {
    let path = dir.join(ZARR_JSON);
    if stored["node_type"] != "group" {
        let reason = format!("node_type is {}, expected \"group\"", stored["node_type"]);
        return Err(invalid(dir, &path, reason));
    }
    match stored.pointer("/attributes/daisy_task_hash") {
        None => Ok(()),
        Some(hash) if *hash == layout.hash.as_str() => Ok(()),
        Some(hash) => Err(DoneMarkerError::LayoutMismatch {
            dir: dir.to_path_buf(),
            stored: hash
                .as_str()
                .map_or_else(|| hash.to_string(), str::to_string),
            expected: layout.hash.clone(),
        }),
    }
}

/// Without a root `zarr.json`, zeroed chunks are what an interrupted
/// creation leaves; data in any of them was recorded, and its metadata
/// lost.
fn refuse_orphaned_data(dir: &Path) -> Result<(), DoneMarkerError> {
    let metadata = dir.join(ZARR_JSON);
    for node in [
        dir.join(DONE.name),
        dir.join(FAILURES.name),
        dir.to_path_buf(),
    ] {
        let chunks = node.join("c");
        refuse_data_without_metadata(dir, &chunks, &metadata)?;
    }
    Ok(())
}

/// Creates a fresh marker: both arrays, zeroed, then the group's
/// `zarr.json` last, so a kill at any point leaves either no root
/// metadata (the next open starts over) or a complete marker.
pub(super) fn create(dir: &Path, layout: &Layout) -> Result<(), DoneMarkerError> {
    DONE.create(dir, layout, None)?;
    FAILURES.create(dir, layout, None)?;
    publish_metadata(dir, &group_metadata(&layout.hash))
}
