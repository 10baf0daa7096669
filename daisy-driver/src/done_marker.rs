//! Per-task done markers: which blocks finished, kept on disk so a re-run
//! resumes instead of starting over.
//!
//! A marker is a directory (the caller picks it, normally
//! `<run-dir>/done/<task id>/`) holding a Zarr v3 `uint8` array laid out
//! exactly as daisy 2.0 writes it, so runs resume across both and progress
//! can be opened with any Zarr reader and viewed as a volume:
//!
//! ```text
//! <dir>/zarr.json    array metadata, attributes.daisy_task_hash
//! <dir>/c/0/…/0      the only chunk: one byte per block, 1 = done
//! ```
//!
//! Terms: a block's *grid index* is `(block write offset - total_roi
//! offset) / task write shape` (floor division, per dimension), and the
//! array's shape (the *grid shape*) is `ceil(total_roi shape / write
//! shape)`. A block is *addressable* if its grid index lies inside the grid
//! shape; its byte is then at the row-major position of that index. Other
//! blocks are never reported done and marking them does nothing.
//!
//! This module owns the file format, the layout check (the task hash) and
//! crash safety. Deciding when to mark (only on success), when to flush
//! and when to reset is the driver's business. One process at a time owns
//! a marker: nothing here locks against a second writer.
//!
//! # Crash safety
//! A `kill -9` at any moment leaves a readable marker and loses no block
//! whose [`DoneMarker::mark_done`] returned: creation writes the chunk
//! first and publishes `zarr.json` last by an atomic rename, and marking
//! is one positioned write, which sits in the kernel page cache (and thus
//! survives the process) once the call returns. Surviving a power loss
//! additionally needs [`DoneMarker::flush`].

use daisy_core::geometry::geometry_problems;
use daisy_core::{Block, Coordinate, Fit, Roi, TaskSpec};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The array metadata file, as the Zarr v3 spec names it.
const ZARR_JSON: &str = "zarr.json";

/// Where `zarr.json` is written before the rename publishes it. A dot
/// file, so Zarr readers ignore a leftover one; the next creation
/// overwrites it.
const ZARR_JSON_TMP: &str = ".zarr.json.tmp";

/// Metadata fields that decide how the chunk's bytes are read; a stored
/// marker must agree on all of them, or its bytes mean something else.
const LAYOUT_FIELDS: [&str; 6] = [
    "zarr_format",
    "node_type",
    "data_type",
    "shape",
    "chunk_grid",
    "chunk_key_encoding",
];

/// Why a done marker could not be opened, checked or written.
#[derive(Debug, thiserror::Error)]
pub enum DoneMarkerError {
    /// The file system refused an operation; the cause is the source.
    #[error("done marker i/o failed on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The stored marker belongs to other ROIs or another fit: its bytes
    /// would skip the wrong blocks, so it is refused, never reused.
    #[error(
        "done marker {dir} was written for a different task layout \
         (stored hash {stored}, expected {expected}); to start this task \
         over, remove it: rm -rf {dir}"
    )]
    LayoutMismatch {
        dir: PathBuf,
        stored: String,
        expected: String,
    },
    /// A marker file exists but is not what this layout needs.
    #[error("done marker file {path} is invalid: {reason}")]
    Invalid { path: PathBuf, reason: String },
    /// Blocks are marked done but `zarr.json` is gone: the bytes cannot be
    /// trusted to mean this layout, and starting over would silently
    /// rerun them, so neither happens without the user.
    #[error(
        "done marker {dir} has blocks marked done in {chunk} but no zarr.json \
         (deleted or lost?); restore {dir}/zarr.json, or to start this task \
         over, remove it: rm -rf {dir}"
    )]
    MetadataMissing { dir: PathBuf, chunk: PathBuf },
    /// The task's ROIs admit no block grid (the pipeline validation
    /// normally catches this first).
    #[error("done marker {dir} for task {task:?}: {reason}")]
    Geometry {
        dir: PathBuf,
        task: String,
        reason: String,
    },
    /// [`DoneMarker::mark_done`] on a marker from
    /// [`DoneMarker::open_existing`], which never writes.
    #[error("done marker {dir} was opened read-only and cannot be marked")]
    ReadOnly { dir: PathBuf },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> DoneMarkerError + '_ {
    move |source| DoneMarkerError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn invalid(path: &Path, reason: impl Into<String>) -> DoneMarkerError {
    DoneMarkerError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The layout hash stored in `attributes.daisy_task_hash`: lowercase hex
/// SHA-256 over the task's ROIs and fit, bit-exact with daisy 2.0, so a
/// marker written by either is recognised by both. Anything that moves
/// blocks to other bytes changes it; the task id does not.
pub fn task_hash(spec: &TaskSpec) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"daisy-done-marker:v1\n");
    let rois = [
        ("total", &spec.total_roi),
        ("read", &spec.read_roi),
        ("write", &spec.write_roi),
    ];
    for (label, roi) in rois {
        hash_roi(&mut hasher, label, roi);
    }
    hasher.update(b"fit=");
    hasher.update(fit_name(spec.fit));
    format!("{:x}", hasher.finalize())
}

fn hash_roi(hasher: &mut Sha256, label: &str, roi: &Roi) {
    hasher.update(label.as_bytes());
    hasher.update(b":offset=");
    hash_coordinate(hasher, &roi.offset());
    hasher.update(b";shape=");
    hash_coordinate(hasher, &roi.shape());
    hasher.update(b";");
}

fn hash_coordinate(hasher: &mut Sha256, coordinate: &Coordinate) {
    for value in coordinate.iter() {
        hasher.update(value.to_le_bytes());
        hasher.update(b",");
    }
}

/// The fit as daisy 2.0 hashes it (its `Debug` name), spelled out so that
/// renaming a variant here cannot silently change every hash.
fn fit_name(fit: Fit) -> &'static [u8] {
    match fit {
        Fit::Valid => b"Valid",
        Fit::Overhang => b"Overhang",
        Fit::Shrink => b"Shrink",
    }
}

/// Removes the marker at `dir` so the task starts over; `Ok` if there is
/// none. Because this is a recursive delete of a computed path, it refuses
/// a directory holding anything a marker never holds.
pub fn reset(dir: &Path) -> Result<(), DoneMarkerError> {
    let entries = match fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        entries => entries.map_err(io_error(dir))?,
    };
    for entry in entries {
        let name = entry.map_err(io_error(dir))?.file_name();
        if ![ZARR_JSON, ZARR_JSON_TMP, "c"]
            .iter()
            .any(|known| name == *known)
        {
            let reason = format!("holds {name:?}, so it is not a done marker; not removing it");
            return Err(invalid(dir, reason));
        }
    }
    fs::remove_dir_all(dir).map_err(io_error(dir))
}

/// What a task's geometry means for its marker, derived once from the
/// spec so lookups do no more than a subtraction and a division.
struct Layout {
    total_offset: Coordinate,
    /// The task's write shape: shrink-fit border blocks have smaller
    /// write regions, but their grid index is still counted in full steps.
    write_shape: Coordinate,
    grid: Vec<u64>,
    /// Bytes in the chunk: the product of `grid`.
    len: usize,
    hash: String,
}

impl Layout {
    fn of(dir: &Path, spec: &TaskSpec) -> Result<Self, DoneMarkerError> {
        let geometry = |reason| DoneMarkerError::Geometry {
            dir: dir.to_path_buf(),
            task: spec.id.clone(),
            reason,
        };
        let problems: Vec<String> = geometry_problems(spec)
            .iter()
            .map(|p| format!("{} {}", p.field, p.message))
            .collect();
        if !problems.is_empty() {
            return Err(geometry(problems.join("; ")));
        }
        let shape = spec.total_roi.shape().div_ceil(&spec.write_roi.shape());
        let grid: Vec<u64> = shape.iter().map(|n| n as u64).collect();
        let len = grid
            .iter()
            .try_fold(1usize, |len, &n| len.checked_mul(usize::try_from(n).ok()?))
            .ok_or_else(|| geometry(format!("block grid {grid:?} is too large to address")))?;
        Ok(Self {
            total_offset: spec.total_roi.offset(),
            write_shape: spec.write_roi.shape(),
            grid,
            len,
            hash: task_hash(spec),
        })
    }

    /// The byte of `block`: the row-major position of its grid index, or
    /// `None` if the block is not addressable.
    fn index_of(&self, block: &Block) -> Option<usize> {
        let offset = block.write_roi.offset();
        if offset.dims() != self.grid.len() {
            return None;
        }
        let grid_index = (offset - self.total_offset) / self.write_shape;
        let mut position = 0u64;
        for (i, &n) in grid_index.iter().zip(&self.grid) {
            let i = u64::try_from(i).ok().filter(|&i| i < n)?;
            position = position * n + i;
        }
        usize::try_from(position).ok()
    }

    /// `<dir>/c/0/…/0` minus the last component: Zarr v3's default chunk
    /// key, with "/", for the one chunk at grid position 0.
    fn chunk_dir(&self, dir: &Path) -> PathBuf {
        let mut path = dir.join("c");
        path.extend(self.grid.iter().skip(1).map(|_| "0"));
        path
    }

    fn chunk_path(&self, dir: &Path) -> PathBuf {
        self.chunk_dir(dir).join("0")
    }

    /// `zarr.json` as daisy 2.0 writes it. Keys are listed in sorted
    /// order, the order serde_json's default map (and thus daisy 2.0's
    /// file) has, so the file is the same whichever map serde_json uses.
    fn metadata(&self) -> Value {
        json!({
            "attributes": { "daisy_task_hash": self.hash },
            "chunk_grid": {
                "configuration": { "chunk_shape": self.grid },
                "name": "regular"
            },
            "chunk_key_encoding": {
                "configuration": { "separator": "/" },
                "name": "default"
            },
            "codecs": [{ "name": "bytes" }],
            "data_type": "uint8",
            "fill_value": 0,
            "node_type": "array",
            "shape": self.grid,
            "storage_transformers": [],
            "zarr_format": 3
        })
    }

    /// Checks a stored `zarr.json`: the hash first, because a layout
    /// change is the likely cause and its error says what to do; then the
    /// fields that decide how the chunk's bytes are read.
    fn verify(&self, dir: &Path, stored: &Value) -> Result<(), DoneMarkerError> {
        let path = dir.join(ZARR_JSON);
        let stored_hash = stored
            .pointer("/attributes/daisy_task_hash")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(&path, "no attributes.daisy_task_hash: not a done marker"))?;
        if stored_hash != self.hash {
            return Err(DoneMarkerError::LayoutMismatch {
                dir: dir.to_path_buf(),
                stored: stored_hash.to_string(),
                expected: self.hash.clone(),
            });
        }
        let expected = self.metadata();
        for field in LAYOUT_FIELDS {
            if stored.get(field) != expected.get(field) {
                let found = stored.get(field).map_or("missing".into(), Value::to_string);
                let reason = format!("{field} is {found}, expected {}", expected[field]);
                return Err(invalid(&path, reason));
            }
        }
        verify_codecs(&path, stored)
    }
}

/// Only the `bytes` codec keeps one byte per block at its own offset; its
/// configuration (endianness) does not matter for `uint8`.
fn verify_codecs(path: &Path, stored: &Value) -> Result<(), DoneMarkerError> {
    let names: Option<Vec<&str>> = stored["codecs"].as_array().map(|codecs| {
        codecs
            .iter()
            .map(|c| c["name"].as_str().unwrap_or("?"))
            .collect()
    });
    match names.as_deref() {
        Some(["bytes"]) => Ok(()),
        _ => Err(invalid(
            path,
            format!("codecs are {}, expected only bytes", stored["codecs"]),
        )),
    }
}

/// The stored `zarr.json`, or `None` if there is none: the marker is
/// absent, or its creation was killed before publishing it.
fn read_metadata(dir: &Path) -> Result<Option<Value>, DoneMarkerError> {
    let path = dir.join(ZARR_JSON);
    let text = match fs::read(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        text => text.map_err(io_error(&path))?,
    };
    let value = serde_json::from_slice(&text).map_err(|e| invalid(&path, e.to_string()))?;
    Ok(Some(value))
}

/// With no `zarr.json`, the marker is absent or its creation was killed
/// before publishing it, which leaves only zeroed chunks. A chunk under
/// `<dir>/c` with a nonzero byte means the metadata was lost after blocks
/// were done: an error, never a silent start from zero.
fn refuse_done_bytes_without_metadata(dir: &Path) -> Result<(), DoneMarkerError> {
    match chunk_with_done_bytes(&dir.join("c"))? {
        Some(chunk) => Err(DoneMarkerError::MetadataMissing {
            dir: dir.to_path_buf(),
            chunk,
        }),
        None => Ok(()),
    }
}

/// The first file below `path` (or `path` itself) holding a nonzero
/// byte, whatever the chunk layout; `None` if there is none.
fn chunk_with_done_bytes(path: &Path) -> Result<Option<PathBuf>, DoneMarkerError> {
    let meta = match fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        meta => meta.map_err(io_error(path))?,
    };
    if meta.is_file() {
        let bytes = fs::read(path).map_err(io_error(path))?;
        return Ok(bytes.iter().any(|&b| b != 0).then(|| path.to_path_buf()));
    }
    for entry in fs::read_dir(path).map_err(io_error(path))? {
        let entry = entry.map_err(io_error(path))?;
        if let Some(found) = chunk_with_done_bytes(&entry.path())? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// Opens the chunk and reads it whole, checking it has one byte per block.
fn load_chunk(
    path: &Path,
    layout: &Layout,
    write: bool,
) -> Result<(File, Vec<u8>), DoneMarkerError> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
        .map_err(io_error(path))?;
    let mut bytes = Vec::with_capacity(layout.len);
    file.read_to_end(&mut bytes).map_err(io_error(path))?;
    if bytes.len() != layout.len {
        let reason = format!(
            "chunk has {} bytes, expected {} (one per block of grid {:?})",
            bytes.len(),
            layout.len,
            layout.grid
        );
        return Err(invalid(path, reason));
    }
    Ok((file, bytes))
}

/// Creates a fresh marker: the zeroed chunk first, durable with its
/// directory entries, and `zarr.json` last. A kill at any point leaves
/// either no `zarr.json` (the next open starts over) or a complete marker.
fn create(dir: &Path, layout: &Layout) -> Result<File, DoneMarkerError> {
    let chunk_dir = layout.chunk_dir(dir);
    fs::create_dir_all(&chunk_dir).map_err(io_error(&chunk_dir))?;
    let path = layout.chunk_path(dir);
    let chunk = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(io_error(&path))?;
    chunk.set_len(layout.len as u64).map_err(io_error(&path))?;
    chunk.sync_all().map_err(io_error(&path))?;
    sync_dirs(&chunk_dir, dir)?;
    publish_metadata(dir, &layout.metadata())?;
    Ok(chunk)
}

/// Writes `zarr.json` to a temporary file and renames it into place, so
/// no reader ever sees a half-written one.
fn publish_metadata(dir: &Path, metadata: &Value) -> Result<(), DoneMarkerError> {
    let tmp = dir.join(ZARR_JSON_TMP);
    let mut file = File::create(&tmp).map_err(io_error(&tmp))?;
    file.write_all(format!("{metadata:#}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_error(&tmp))?;
    let path = dir.join(ZARR_JSON);
    fs::rename(&tmp, &path).map_err(io_error(&path))?;
    sync_dir(dir)
}

/// Makes the entries from `leaf` up to `dir`, and `dir`'s own entry in its
/// parent, durable, so a power loss cannot keep `zarr.json` but drop the
/// chunk (or a flushed marker's directory).
fn sync_dirs(leaf: &Path, dir: &Path) -> Result<(), DoneMarkerError> {
    let below_dir = leaf.ancestors().take_while(|d| *d != dir);
    for d in below_dir {
        sync_dir(d)?;
    }
    sync_dir(dir)?;
    sync_dir(&dir.join(".."))
}

fn sync_dir(dir: &Path) -> Result<(), DoneMarkerError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// The done marker of one task, open for lookups and (unless opened with
/// [`DoneMarker::open_existing`]) for marking.
pub struct DoneMarker {
    dir: PathBuf,
    layout: Layout,
    /// The chunk, open for positioned writes; `None` when read-only.
    chunk: Option<File>,
    /// A copy of the chunk, so `is_done` costs no syscall. It stays equal
    /// to the file because this marker is its only writer.
    done: Vec<u8>,
    /// Nonzero bytes in `done`, counted as they are set.
    count: u64,
}

impl DoneMarker {
    /// Opens the marker at `dir` for `spec`, creating it (and `dir`) if
    /// absent and finishing a creation that was killed half-way. Refuses a
    /// marker written for another layout.
    pub fn open(dir: &Path, spec: &TaskSpec) -> Result<Self, DoneMarkerError> {
        let layout = Layout::of(dir, spec)?;
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let (chunk, done) = match read_metadata(dir)? {
            Some(stored) => {
                layout.verify(dir, &stored)?;
                load_chunk(&layout.chunk_path(dir), &layout, true)?
            }
            None => {
                refuse_done_bytes_without_metadata(dir)?;
                (create(dir, &layout)?, vec![0; layout.len])
            }
        };
        Ok(Self::new(dir, layout, Some(chunk), done))
    }

    /// Reads the marker at `dir` without creating or changing anything,
    /// for dry runs and status: `Ok(None)` if there is none. The result
    /// answers lookups but refuses [`DoneMarker::mark_done`].
    pub fn open_existing(dir: &Path, spec: &TaskSpec) -> Result<Option<Self>, DoneMarkerError> {
        let layout = Layout::of(dir, spec)?;
        let Some(stored) = read_metadata(dir)? else {
            refuse_done_bytes_without_metadata(dir)?;
            return Ok(None);
        };
        layout.verify(dir, &stored)?;
        let (_, done) = load_chunk(&layout.chunk_path(dir), &layout, false)?;
        Ok(Some(Self::new(dir, layout, None, done)))
    }

    fn new(dir: &Path, layout: Layout, chunk: Option<File>, done: Vec<u8>) -> Self {
        let count = done.iter().filter(|&&b| b != 0).count() as u64;
        Self {
            dir: dir.to_path_buf(),
            layout,
            chunk,
            done,
            count,
        }
    }

    /// True if `block` is addressable and marked (any nonzero byte, as in
    /// daisy 2.0).
    pub fn is_done(&self, block: &Block) -> bool {
        self.layout
            .index_of(block)
            .is_some_and(|i| self.done[i] != 0)
    }

    /// Records that `block` finished. Once this returns, a kill of the
    /// process cannot lose the mark (see [`DoneMarker::flush`] for power
    /// loss). Marking a block that is not addressable does nothing.
    pub fn mark_done(&mut self, block: &Block) -> Result<(), DoneMarkerError> {
        let Some(chunk) = &self.chunk else {
            return Err(DoneMarkerError::ReadOnly {
                dir: self.dir.clone(),
            });
        };
        let Some(i) = self.layout.index_of(block).filter(|&i| self.done[i] == 0) else {
            return Ok(());
        };
        chunk
            .write_all_at(&[1], i as u64)
            .map_err(|source| DoneMarkerError::Io {
                path: self.layout.chunk_path(&self.dir),
                source,
            })?;
        self.done[i] = 1;
        self.count += 1;
        Ok(())
    }

    /// How many blocks are marked done.
    pub fn count_done(&self) -> u64 {
        self.count
    }

    /// The array's shape: blocks per dimension.
    pub fn grid_shape(&self) -> &[u64] {
        &self.layout.grid
    }

    /// Forces the marks to disk so they survive a power loss too; for
    /// checkpoints and the end of a run. Nothing to do when read-only.
    pub fn flush(&self) -> Result<(), DoneMarkerError> {
        match &self.chunk {
            Some(chunk) => chunk
                .sync_data()
                .map_err(io_error(&self.layout.chunk_path(&self.dir))),
            None => Ok(()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl fmt::Debug for DoneMarker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DoneMarker")
            .field("dir", &self.dir)
            .field("grid_shape", &self.layout.grid)
            .field("count_done", &self.count)
            .field("writable", &self.chunk.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use daisy_core::geometry::{BlockGrid, GridWalk};
    use daisy_core::{BlockId, TaskIdx};
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc;
    use std::time::Duration;

    fn roi(offset: &[i64], shape: &[i64]) -> Roi {
        Roi::from_slices(offset, shape)
    }

    /// A task at the origin whose blocks read and write `block` voxels.
    fn simple_task(total: &[i64], block: &[i64]) -> TaskSpec {
        let zeros = vec![0; total.len()];
        TaskSpec::new(
            "t",
            roi(&zeros, total),
            roi(&zeros, block),
            roi(&zeros, block),
        )
    }

    /// Blocks read 30, write the middle 10, in a total region off the origin.
    fn context_task() -> TaskSpec {
        let mut spec = TaskSpec::new(
            "t",
            roi(&[-8, 0], &[100, 200]),
            roi(&[0, 0], &[30, 30]),
            roi(&[10, 10], &[10, 10]),
        );
        spec.fit = Fit::Shrink;
        spec
    }

    /// The block `index` write shapes away from the first, as the
    /// dependency graph makes it (fit rule applied).
    fn block(spec: &TaskSpec, index: &[i64]) -> Block {
        let k = Coordinate::new(index) * spec.write_roi.shape();
        BlockGrid::new(TaskIdx(0), spec)
            .block_at(k)
            .expect("the fit rule keeps this block")
    }

    fn chunk_bytes(dir: &Path, dims: usize) -> Vec<u8> {
        let mut path = dir.join("c");
        path.extend(std::iter::repeat_n("0", dims));
        fs::read(path).unwrap()
    }

    fn marker_dir() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("done").join("t");
        (tmp, dir)
    }

    /// Marks `marked`, reopens, and checks that exactly those are done.
    fn assert_round_trip(spec: &TaskSpec, marked: &[&[i64]]) {
        let (_tmp, dir) = marker_dir();
        let mut marker = DoneMarker::open(&dir, spec).unwrap();
        for index in marked {
            marker.mark_done(&block(spec, index)).unwrap();
            marker.mark_done(&block(spec, index)).unwrap();
        }
        marker.flush().unwrap();
        drop(marker);
        let marker = DoneMarker::open(&dir, spec).unwrap();
        assert_eq!(marker.count_done(), marked.len() as u64);
        let grid: Vec<i64> = marker.grid_shape().iter().map(|&n| n as i64).collect();
        let dims = grid.len();
        for index in GridWalk::new(Coordinate::zeros(dims), Coordinate::new(&grid)) {
            let expected = marked.contains(&index.as_slice());
            assert_eq!(
                marker.is_done(&block(spec, index.as_slice())),
                expected,
                "{index}"
            );
        }
    }

    #[test]
    fn round_trip_2d_keeps_exactly_the_marked_blocks() {
        assert_round_trip(
            &simple_task(&[40, 30], &[10, 10]),
            &[&[0, 0], &[3, 2], &[1, 2]],
        );
    }

    #[test]
    fn round_trip_3d_keeps_exactly_the_marked_blocks() {
        let spec = simple_task(&[20, 30, 40], &[10, 10, 10]);
        assert_round_trip(&spec, &[&[1, 2, 3], &[0, 1, 0], &[0, 0, 0]]);
    }

    #[test]
    fn byte_position_is_the_row_major_grid_index() {
        let (_tmp, dir) = marker_dir();
        let spec = context_task();
        let mut marker = DoneMarker::open(&dir, &spec).unwrap();
        assert_eq!(marker.grid_shape(), &[10, 20]);
        // Block (2, 5) writes at [2 + 20, 10 + 50] = [22, 60] (the write
        // region starts 10 into the read region, which starts at -8 + 20):
        // grid index ([22, 60] - [-8, 0]) / 10 = (3, 6), byte 3 * 20 + 6.
        let b = block(&spec, &[2, 5]);
        assert_eq!(b.write_roi.offset(), Coordinate::from([22, 60]));
        marker.mark_done(&b).unwrap();
        let bytes = chunk_bytes(&dir, 2);
        assert_eq!(bytes.len(), 200);
        let set: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != 0).collect();
        assert_eq!(set, [66]);
        assert_eq!(bytes[66], 1);
    }

    #[test]
    fn zarr_json_describes_a_single_chunk_uint8_array() {
        let (_tmp, dir) = marker_dir();
        let spec = simple_task(&[40, 30], &[10, 10]);
        DoneMarker::open(&dir, &spec).unwrap();
        let meta: Value =
            serde_json::from_slice(&fs::read(dir.join("zarr.json")).unwrap()).unwrap();
        assert_eq!(meta["zarr_format"], 3);
        assert_eq!(meta["node_type"], "array");
        assert_eq!(meta["shape"], json!([4, 3]));
        assert_eq!(meta["data_type"], "uint8");
        assert_eq!(meta["chunk_grid"]["name"], "regular");
        assert_eq!(
            meta["chunk_grid"]["configuration"]["chunk_shape"],
            json!([4, 3])
        );
        assert_eq!(meta["chunk_key_encoding"]["name"], "default");
        assert_eq!(
            meta["chunk_key_encoding"]["configuration"]["separator"],
            "/"
        );
        assert_eq!(meta["fill_value"], 0);
        assert_eq!(meta["codecs"], json!([{ "name": "bytes" }]));
        assert_eq!(meta["storage_transformers"], json!([]));
        assert_eq!(meta["attributes"]["daisy_task_hash"], task_hash(&spec));
        assert_eq!(chunk_bytes(&dir, 2), vec![0; 12]);
    }

    /// The file daisy 2.0 writes for the same task (serde_json pretty,
    /// keys sorted, trailing newline); produced independently with
    /// `json.dumps(meta, indent=2, sort_keys=True) + "\n"` in Python.
    const DAISY_2_ZARR_JSON: &str = r#"{
  "attributes": {
    "daisy_task_hash": "814dc8d8eac16333ca63d68a3542fe532e09f75fc46b72a880e8dcc2896d7ea1"
  },
  "chunk_grid": {
    "configuration": {
      "chunk_shape": [
        4,
        3
      ]
    },
    "name": "regular"
  },
  "chunk_key_encoding": {
    "configuration": {
      "separator": "/"
    },
    "name": "default"
  },
  "codecs": [
    {
      "name": "bytes"
    }
  ],
  "data_type": "uint8",
  "fill_value": 0,
  "node_type": "array",
  "shape": [
    4,
    3
  ],
  "storage_transformers": [],
  "zarr_format": 3
}
"#;

    #[test]
    fn zarr_json_bytes_match_daisy_2_0() {
        let (_tmp, dir) = marker_dir();
        DoneMarker::open(&dir, &simple_task(&[40, 30], &[10, 10])).unwrap();
        let written = fs::read_to_string(dir.join("zarr.json")).unwrap();
        assert_eq!(written, DAISY_2_ZARR_JSON);
    }

    #[test]
    fn task_hash_matches_python_hashlib() {
        // Computed independently in Python:
        //   m = hashlib.sha256(b"daisy-done-marker:v1\n")
        //   for label, (off, shape) in [("total", ([-8, 0], [100, 200])),
        //           ("read", ([0, 0], [30, 30])), ("write", ([10, 10], [10, 10]))]:
        //       m.update(label.encode() + b":offset="
        //           + b"".join(struct.pack("<q", v) + b"," for v in off)
        //           + b";shape=" + b"".join(struct.pack("<q", v) + b"," for v in shape)
        //           + b";")
        //   m.update(b"fit=Shrink"); m.hexdigest()
        let expected = "462ec7f0471392f5482f120513d516b4297959624d6e27d816f54cadf497cc7b";
        let spec = context_task();
        assert_eq!(task_hash(&spec), expected);
        let renamed = TaskSpec {
            id: "other".into(),
            ..spec.clone()
        };
        assert_eq!(task_hash(&renamed), expected, "the id is not layout");
        let refit = TaskSpec {
            fit: Fit::Overhang,
            ..spec
        };
        assert_ne!(task_hash(&refit), expected);
    }

    #[test]
    fn layout_change_is_refused_with_the_rm_rf_hint() {
        let (_tmp, dir) = marker_dir();
        let spec = simple_task(&[40, 30], &[10, 10]);
        let mut marker = DoneMarker::open(&dir, &spec).unwrap();
        marker.mark_done(&block(&spec, &[1, 1])).unwrap();
        drop(marker);
        let changed = simple_task(&[40, 30], &[5, 5]);
        let err = DoneMarker::open(&dir, &changed).unwrap_err();
        assert!(
            matches!(err, DoneMarkerError::LayoutMismatch { .. }),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("different task layout"), "{message}");
        assert!(message.contains(&task_hash(&spec)), "{message}");
        assert!(message.contains(&task_hash(&changed)), "{message}");
        assert!(
            message.contains(&format!("rm -rf {}", dir.display())),
            "{message}"
        );
        let peek = DoneMarker::open_existing(&dir, &changed).unwrap_err();
        assert!(matches!(peek, DoneMarkerError::LayoutMismatch { .. }));
        let kept = DoneMarker::open(&dir, &spec).unwrap();
        assert!(
            kept.is_done(&block(&spec, &[1, 1])),
            "refusing changes nothing"
        );
    }

    #[test]
    fn garbage_zarr_json_is_invalid_and_named() {
        let (_tmp, dir) = marker_dir();
        let spec = simple_task(&[40, 30], &[10, 10]);
        DoneMarker::open(&dir, &spec).unwrap();
        let path = dir.join("zarr.json");
        fs::write(&path, "{ not json").unwrap();
        for err in [
            DoneMarker::open(&dir, &spec).unwrap_err(),
            DoneMarker::open_existing(&dir, &spec).unwrap_err(),
        ] {
            assert!(matches!(&err, DoneMarkerError::Invalid { path: p, .. } if *p == path));
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
        }
    }

    #[test]
    fn wrong_shape_in_zarr_json_is_invalid() {
        let (_tmp, dir) = marker_dir();
        let spec = simple_task(&[40, 30], &[10, 10]);
        DoneMarker::open(&dir, &spec).unwrap();
        let path = dir.join("zarr.json");
        let text = fs::read_to_string(&path).unwrap();
        let mut meta: Value = serde_json::from_str(&text).unwrap();
        meta["shape"] = json!([5, 3]);
        fs::write(&path, meta.to_string()).unwrap();
        let err = DoneMarker::open(&dir, &spec).unwrap_err();
        assert!(matches!(&err, DoneMarkerError::Invalid { path: p, .. } if *p == path));
        assert!(
            err.to_string().contains("shape is [5,3], expected [4,3]"),
            "{err}"
        );
    }

    #[test]
    fn truncated_chunk_is_invalid_and_named() {
        let (_tmp, dir) = marker_dir();
        let spec = simple_task(&[40, 30], &[10, 10]);
        DoneMarker::open(&dir, &spec).unwrap();
        let chunk = dir.join("c").join("0").join("0");
        File::options()
            .write(true)
            .open(&chunk)
            .unwrap()
            .set_len(5)
            .unwrap();
        let err = DoneMarker::open(&dir, &spec).unwrap_err();
        assert!(matches!(&err, DoneMarkerError::Invalid { path, .. } if *path == chunk));
        assert!(err.to_string().contains("5 bytes, expected 12"), "{err}");
    }

    #[test]
    fn open_existing_on_an_absent_dir_returns_none_and_creates_nothing() {
        let (tmp, dir) = marker_dir();
        let spec = simple_task(&[40, 30], &[10, 10]);
        assert!(DoneMarker::open_existing(&dir, &spec).unwrap().is_none());
        assert!(!tmp.path().join("done").exists());
    }

    #[test]
    fn open_existing_sees_marks_and_refuses_to_mark() {
        let (_tmp, dir) = marker_dir();
        let spec = simple_task(&[40, 30], &[10, 10]);
        let mut marker = DoneMarker::open(&dir, &spec).unwrap();
        marker.mark_done(&block(&spec, &[2, 1])).unwrap();
        let mut peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
        assert!(peek.is_done(&block(&spec, &[2, 1])));
        assert_eq!(peek.count_done(), 1);
        let err = peek.mark_done(&block(&spec, &[0, 0])).unwrap_err();
        assert!(matches!(err, DoneMarkerError::ReadOnly { .. }), "{err:?}");
        peek.flush().unwrap();
        assert_eq!(chunk_bytes(&dir, 2).iter().filter(|&&b| b != 0).count(), 1);
    }

    #[test]
    fn shrink_fit_border_block_counts_in_task_write_shapes() {
        let (_tmp, dir) = marker_dir();
        let mut spec = simple_task(&[25, 30], &[10, 10]);
        spec.fit = Fit::Shrink;
        let mut marker = DoneMarker::open(&dir, &spec).unwrap();
        assert_eq!(marker.grid_shape(), &[3, 3]);
        let border = block(&spec, &[2, 2]);
        assert_eq!(border.write_roi, roi(&[20, 20], &[5, 10]), "shrunk");
        marker.mark_done(&border).unwrap();
        assert!(marker.is_done(&border));
        let mut expected = vec![0; 9];
        expected[2 * 3 + 2] = 1;
        assert_eq!(chunk_bytes(&dir, 2), expected);
    }

    #[test]
    fn blocks_outside_the_grid_are_not_addressable() {
        let (_tmp, dir) = marker_dir();
        let spec = simple_task(&[30, 30], &[10, 10]);
        let mut marker = DoneMarker::open(&dir, &spec).unwrap();
        // Built by hand: the graph never makes these, but a caller may pass them.
        let at = |offset: &[i64]| {
            let r = roi(offset, &vec![10; offset.len()]);
            let id = BlockId {
                task: TaskIdx(0),
                spatial: 0,
            };
            Block {
                id,
                read_roi: r,
                write_roi: r,
            }
        };
        for outside in [
            at(&[-10, 0]),
            at(&[-1, 0]),
            at(&[30, 0]),
            at(&[0, 30]),
            at(&[0, 0, 0]),
        ] {
            assert!(!marker.is_done(&outside));
            marker.mark_done(&outside).unwrap();
            assert!(!marker.is_done(&outside));
        }
        assert_eq!(marker.count_done(), 0);
        assert_eq!(chunk_bytes(&dir, 2), vec![0; 9]);
    }

    #[test]
    fn interrupted_creation_is_redone_from_scratch() {
        let (_tmp, dir) = marker_dir();
        let spec = simple_task(&[40, 30], &[10, 10]);
        drop(DoneMarker::open(&dir, &spec).unwrap());
        // As if killed after the (zeroed) chunk was written, before the
        // rename.
        fs::remove_file(dir.join("zarr.json")).unwrap();
        fs::write(dir.join(ZARR_JSON_TMP), "{ half").unwrap();
        assert!(DoneMarker::open_existing(&dir, &spec).unwrap().is_none());
        let marker = DoneMarker::open(&dir, &spec).unwrap();
        assert_eq!(marker.count_done(), 0);
        assert_eq!(chunk_bytes(&dir, 2), vec![0; 12]);
        assert!(!dir.join(ZARR_JSON_TMP).exists());
        assert_eq!(
            fs::read_to_string(dir.join("zarr.json")).unwrap(),
            DAISY_2_ZARR_JSON
        );
    }

    #[test]
    fn done_bytes_without_zarr_json_are_refused_with_the_rm_rf_hint() {
        let (_tmp, dir) = marker_dir();
        let spec = simple_task(&[40, 30], &[10, 10]);
        let mut marker = DoneMarker::open(&dir, &spec).unwrap();
        marker.mark_done(&block(&spec, &[0, 1])).unwrap();
        drop(marker);
        fs::remove_file(dir.join("zarr.json")).unwrap();
        for err in [
            DoneMarker::open_existing(&dir, &spec).unwrap_err(),
            DoneMarker::open(&dir, &spec).unwrap_err(),
        ] {
            assert!(
                matches!(&err, DoneMarkerError::MetadataMissing { .. }),
                "{err:?}"
            );
            let message = err.to_string();
            assert!(
                message.contains(&format!("rm -rf {}", dir.display())),
                "{message}"
            );
        }
        assert_eq!(
            chunk_bytes(&dir, 2).iter().filter(|&&b| b != 0).count(),
            1,
            "the done byte is kept"
        );
    }

    #[test]
    fn reset_removes_a_marker_and_nothing_else() {
        let (tmp, dir) = marker_dir();
        reset(&dir).unwrap();
        DoneMarker::open(&dir, &simple_task(&[40, 30], &[10, 10])).unwrap();
        reset(&dir).unwrap();
        assert!(!dir.exists());
        let not_a_marker = tmp.path().join("done");
        fs::write(not_a_marker.join("notes.txt"), "keep").unwrap();
        let err = reset(&not_a_marker).unwrap_err();
        assert!(matches!(err, DoneMarkerError::Invalid { .. }), "{err:?}");
        assert!(not_a_marker.join("notes.txt").exists());
    }

    #[test]
    fn impossible_geometry_is_an_error_and_creates_nothing() {
        let (tmp, dir) = marker_dir();
        let spec = simple_task(&[40, 30], &[0, 10]);
        let err = DoneMarker::open(&dir, &spec).unwrap_err();
        assert!(matches!(err, DoneMarkerError::Geometry { .. }), "{err:?}");
        assert!(err.to_string().contains("must be positive"), "{err}");
        assert!(!tmp.path().join("done").exists());
    }

    /// Set (to the marker dir) in the child that `kill_9_loses_no_returned_mark`
    /// starts: it turns `crash_child_marks_until_killed` into the child.
    const CRASH_CHILD_ENV: &str = "DAISY_DONE_MARKER_CRASH_CHILD";

    /// A million blocks, so the child is killed long before it runs out.
    fn crash_task() -> TaskSpec {
        simple_task(&[1000, 1000], &[1, 1])
    }

    /// Not a test by itself: without `CRASH_CHILD_ENV` it returns at once;
    /// with it, it marks blocks and reports each one after `mark_done`
    /// returns, until killed.
    #[test]
    fn crash_child_marks_until_killed() {
        let Some(dir) = std::env::var_os(CRASH_CHILD_ENV) else {
            return;
        };
        let spec = crash_task();
        let mut marker = DoneMarker::open(Path::new(&dir), &spec).unwrap();
        for k in GridWalk::new(Coordinate::zeros(2), Coordinate::from([1000, 1000])) {
            marker.mark_done(&block(&spec, k.as_slice())).unwrap();
            println!("marked {} {}", k[0], k[1]);
        }
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Kills (SIGKILL) and reaps the child however the test ends, so a
    /// failed assert leaves no process behind.
    struct KillOnDrop(Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Runs this test binary as the crash child, writing to `dir`.
    fn spawn_crash_child(dir: &Path) -> KillOnDrop {
        let (_, module) = module_path!().split_once("::").unwrap();
        let name = format!("{module}::crash_child_marks_until_killed");
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(CRASH_CHILD_ENV, dir)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        KillOnDrop(child)
    }

    /// The first `n` grid indices the child reports, waiting at most a
    /// minute for each.
    fn reported_marks(child: &mut Child, n: usize) -> Vec<[i64; 2]> {
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut marks = Vec::new();
        while marks.len() < n {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| {
                    panic!("child stopped reporting after {} marks: {e}", marks.len())
                });
            if let Some(rest) = line.strip_prefix("marked ") {
                let (i, j) = rest.split_once(' ').unwrap();
                marks.push([i.parse().unwrap(), j.parse().unwrap()]);
            }
        }
        marks
    }

    #[test]
    fn kill_9_loses_no_returned_mark() {
        let (_tmp, dir) = marker_dir();
        let mut child = spawn_crash_child(&dir);
        let marks = reported_marks(&mut child.0, 2000);
        drop(child);
        let spec = crash_task();
        let marker = DoneMarker::open(&dir, &spec).unwrap();
        for index in &marks {
            assert!(marker.is_done(&block(&spec, index)), "{index:?} lost");
        }
        assert!(marker.count_done() >= marks.len() as u64);
    }
}
