//! The arrays in a marker's group, as daisy 2.0.0 names and types them:
//! `done` (uint8, 1 = the block finished), `failures` (uint32, failed
//! attempts of the block, never reset) and, for tasks tracking resources,
//! what each block cost ([`COSTS`]). All have the block grid's shape.

use super::chunk::{file_with_data, Chunk};
use super::error::DoneMarkerError;
use super::layout::Layout;
use super::zarr::{
    array_metadata, chunk_path, publish_metadata, publish_staged, read_metadata, stage_metadata,
    verify_array, Dtype, ZARR_JSON, ZARR_JSON_TMP,
};
use std::fs::File;
use std::path::{Path, PathBuf};

pub(super) struct ArrayDef {
    pub name: &'static str,
    dtype: Dtype,
}

pub(super) const DONE: ArrayDef = ArrayDef {
    name: "done",
    dtype: Dtype::U8,
};

pub(super) const FAILURES: ArrayDef = ArrayDef {
    name: "failures",
    dtype: Dtype::U32,
};

/// The arrays of what each block cost, written for tasks that track
/// resources, named and typed as daisy 2.0.0 writes them with
/// `resource_tracking=True` (see [`super::costs`]), in this order.
pub(super) const COSTS: [ArrayDef; 7] = [
    float("wall_seconds"),
    float("cpu_seconds"),
    unsigned("peak_rss_bytes"),
    unsigned("io_read_bytes"),
    unsigned("io_write_bytes"),
    float("gpu_util_pct"),
    unsigned("gpu_mem_bytes"),
];

const fn float(name: &'static str) -> ArrayDef {
    ArrayDef {
        name,
        dtype: Dtype::F32,
    }
}

const fn unsigned(name: &'static str) -> ArrayDef {
    ArrayDef {
        name,
        dtype: Dtype::U64,
    }
}

impl ArrayDef {
    fn node(&self, dir: &Path) -> PathBuf {
        dir.join(self.name)
    }

    /// Bytes per element.
    pub fn width(&self) -> usize {
        self.dtype.width()
    }

    /// Bytes in the chunk.
    pub fn len(&self, layout: &Layout) -> usize {
        layout.cells * self.dtype.width()
    }

    pub fn chunk_path(&self, dir: &Path, layout: &Layout) -> PathBuf {
        chunk_path(&self.node(dir), layout.grid.len())
    }

    /// Creates the array in the group at `dir` holding `bytes` (zeros if
    /// `None`): the chunk first, `zarr.json` last, so a kill in between
    /// leaves no metadata over a half-made chunk.
    pub fn create(
        &self,
        dir: &Path,
        layout: &Layout,
        bytes: Option<&[u8]>,
    ) -> Result<Chunk, DoneMarkerError> {
        let zeros;
        let bytes = match bytes {
            Some(bytes) => bytes,
            None => {
                zeros = vec![0; self.len(layout)];
                &zeros
            }
        };
        let chunk = Chunk::create(dir, &self.chunk_path(dir, layout), bytes)?;
        let metadata = array_metadata(&layout.grid, self.dtype);
        publish_metadata(&self.node(dir), &metadata)?;
        Ok(chunk)
    }

    /// Writes the array in the group at `dir`, zeroed, with its
    /// `zarr.json` staged, none of it synced yet: the chunk, and the staged
    /// file (see [`super::group::create`]).
    pub fn stage_zeroed(
        &self,
        dir: &Path,
        layout: &Layout,
    ) -> Result<(Chunk, File), DoneMarkerError> {
        let chunk = Chunk::write_new(
            dir,
            &self.chunk_path(dir, layout),
            &vec![0; self.len(layout)],
        )?;
        let metadata = array_metadata(&layout.grid, self.dtype);
        Ok((chunk, stage_metadata(&self.node(dir), &metadata)?))
    }

    /// Where [`Self::stage_zeroed`] staged the `zarr.json`.
    pub fn staged_path(&self, dir: &Path) -> PathBuf {
        self.node(dir).join(ZARR_JSON_TMP)
    }

    /// Renames the `zarr.json` [`Self::stage_zeroed`] staged into place;
    /// durable once the node is synced.
    pub fn publish_staged(&self, dir: &Path) -> Result<PathBuf, DoneMarkerError> {
        publish_staged(&self.node(dir))?;
        Ok(self.node(dir))
    }

    /// Opens the array in the group at `dir`, checking its metadata. One
    /// without metadata is an error if its chunk holds data (it cannot be
    /// trusted, nor silently zeroed); otherwise it is created when
    /// writing, as daisy 2.0.0 does, and reads as zeros when not.
    pub fn open(&self, dir: &Path, layout: &Layout, write: bool) -> Result<Chunk, DoneMarkerError> {
        let node = self.node(dir);
        let path = self.chunk_path(dir, layout);
        match read_metadata(dir, &node)? {
            Some(stored) => {
                let metadata = node.join(ZARR_JSON);
                verify_array(dir, &metadata, &stored, &layout.grid, self.dtype)?;
                let chunk = Chunk::open(dir, &path, self.len(layout), write)?;
                match write && !chunk.exists() {
                    true => Chunk::create(dir, &path, &vec![0; self.len(layout)]),
                    false => Ok(chunk),
                }
            }
            None => {
                refuse_data_without_metadata(dir, &node.join("c"), &node.join(ZARR_JSON))?;
                match write {
                    true => self.create(dir, layout, None),
                    false => Ok(Chunk::absent(&path)),
                }
            }
        }
    }
}

/// A node whose `zarr.json` (at `metadata`) is gone but whose chunks
/// under `chunks` hold data is an error with the way out, never zeroes.
pub(super) fn refuse_data_without_metadata(
    dir: &Path,
    chunks: &Path,
    metadata: &Path,
) -> Result<(), DoneMarkerError> {
    match file_with_data(chunks)? {
        Some(chunk) => Err(DoneMarkerError::MetadataMissing {
            dir: dir.to_path_buf(),
            chunk,
            metadata: metadata.to_path_buf(),
        }),
        None => Ok(()),
    }
}
