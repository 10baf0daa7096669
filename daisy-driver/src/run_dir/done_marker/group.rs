//! The marker's root: a Zarr v3 group whose attributes hold the task
//! hash, as daisy 2.0.0 writes it, or one of the other things a marker
//! directory can hold (nothing yet, this project's earlier layout).

use super::array::{refuse_data_without_metadata, DONE, FAILURES};
use super::error::{invalid, DoneMarkerError};
use super::layout::Layout;
use super::legacy;
use super::zarr::{
    group_metadata, publish_staged, read_metadata, stage_metadata, sync_dir, sync_file, ZARR_JSON,
    ZARR_JSON_TMP,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

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
/// `zarr.json` last, so a kill or a power loss at any point leaves either
/// no root metadata (the next open starts over) or a complete marker.
///
/// In three rounds, each durable before the next starts: the chunks and
/// the staged `zarr.json` files; the arrays' `zarr.json` renamed into
/// place; the group's. Eight syncs, where syncing every file and
/// directory as it was written took sixteen (on ext4 each costs a disk
/// flush, 1-8 ms here: most of a small run's start-up). The chunks'
/// directory entries and the marker's own entry in its parent
/// ([`unsynced_entries`]) are synced on a thread of their own, which the
/// first flush of marks waits for: the first time they matter. Until
/// then a power loss can lose a chunk whole, which reads as zeros (the
/// state it was created in) and is created again on open.
pub(super) fn create(dir: &Path, layout: &Layout) -> Result<(), DoneMarkerError> {
    let arrays = [&DONE, &FAILURES];
    let staged = (arrays.iter())
        .map(|array| array.stage_zeroed(dir, layout))
        .collect::<Result<Vec<_>, _>>()?;
    let group = stage_metadata(dir, &group_metadata(&layout.hash))?;
    for (array, (chunk, metadata)) in arrays.iter().zip(&staged) {
        chunk.sync_contents()?;
        sync_file(metadata, &array.staged_path(dir))?;
    }
    sync_file(&group, &dir.join(ZARR_JSON_TMP))?;
    let nodes = (arrays.iter())
        .map(|array| array.publish_staged(dir))
        .collect::<Result<Vec<_>, _>>()?;
    for node in &nodes {
        sync_dir(node)?;
    }
    publish_staged(dir)?;
    sync_dir(dir)
}

/// The directories whose entries [`create`] left unsynced: those between
/// each array and its chunk, and the marker's parent (for its entry).
pub(super) fn unsynced_entries(dir: &Path, layout: &Layout) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for array in [&DONE, &FAILURES] {
        let node = dir.join(array.name);
        let chunk = array.chunk_path(dir, layout);
        let below_node = chunk.ancestors().skip(1).take_while(|d| *d != node);
        found.extend(below_node.map(Path::to_path_buf));
    }
    found.push(dir.join(".."));
    found
}
