//! Per-task done markers: which blocks finished (and how often each
//! failed), kept on disk so a re-run resumes instead of starting over.
//!
//! A marker is a directory (the caller picks it, normally
//! `<run-dir>/done/<task id>/`) laid out exactly as daisy 2.0.0, as
//! released on PyPI, lays out a task's tracking directory, so runs resume
//! across both and progress can be opened with any Zarr reader and viewed
//! as a volume:
//!
//! ```text
//! <dir>/zarr.json             Zarr v3 group, attributes.daisy_task_hash
//! <dir>/done/zarr.json        uint8 array of the block grid's shape
//! <dir>/done/c/0/…/0          its only chunk: one byte per block, 1 = done
//! <dir>/failures/zarr.json    uint32 array of the same shape
//! <dir>/failures/c/0/…/0      failed attempts per block, little-endian
//! <dir>/wall_seconds/…         what each block cost (tasks tracking
//!  … gpu_mem_bytes/…           resources; see [`costs`])
//! ```
//!
//! The submodules: [`layout`] (grid index of a block), [`hash`] (the task
//! hash), [`zarr`] (the metadata documents), [`array`] and [`chunk`] (the
//! two arrays and their files), [`group`] (the root, and what else a
//! marker directory can hold), [`legacy`] (this project's earlier layout,
//! read as it is and migrated in place by a run).
//!
//! This module owns the file format, the layout check (the task hash) and
//! crash safety. Deciding when to mark (only on success), when to flush
//! and when to reset is the driver's business. One process at a time owns
//! a marker: nothing here locks against a second writer.
//!
//! # Crash safety
//! A `kill -9` at any moment leaves a readable marker and loses no block
//! whose [`DoneMarker::mark_done`] returned: creation writes each array's
//! chunk before its `zarr.json` and publishes the group's `zarr.json`
//! last, each by an atomic rename, and marking is one positioned write,
//! which sits in the kernel page cache (and thus survives the process)
//! once the call returns. Surviving a power loss additionally needs
//! [`DoneMarker::flush`]. A node whose `zarr.json` is gone but whose chunk
//! holds data is an error naming the way to start over, never "0 done".

mod array;
mod chunk;
pub mod costs;
mod error;
mod group;
mod hash;
mod layout;
mod legacy;
mod zarr;

pub use error::DoneMarkerError;
pub use hash::task_hash;

use array::{COSTS, DONE, FAILURES};
use chunk::Chunk;
use costs::{CostArrays, CostTable, StoredCost};
use daisy_core::{Block, TaskSpec};
use error::io_error;
use group::Stored;
use layout::Layout;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Removes the marker at `dir` so the task starts over; `Ok` if there is
/// none. Because this is a recursive delete of a computed path, it refuses
/// a directory holding anything a marker (of either layout, with daisy
/// 2.0.0's resource arrays) never holds.
pub fn reset(dir: &Path) -> Result<(), DoneMarkerError> {
    let entries = match fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        entries => entries.map_err(io_error(dir))?,
    };
    let known = [
        zarr::ZARR_JSON,
        zarr::ZARR_JSON_TMP,
        "c",
        DONE.name,
        FAILURES.name,
    ];
    for entry in entries {
        let name = entry.map_err(io_error(dir))?.file_name();
        let name = name.to_string_lossy();
        let costs = COSTS.iter().map(|array| array.name);
        if !known.into_iter().chain(costs).any(|k| name == k) {
            return Err(DoneMarkerError::NotAMarker {
                dir: dir.to_path_buf(),
                name: name.into_owned(),
            });
        }
    }
    fs::remove_dir_all(dir).map_err(io_error(dir))
}

/// The done marker of one task, open for lookups and (unless opened with
/// [`DoneMarker::open_existing`]) for marking and counting failures.
pub struct DoneMarker {
    dir: PathBuf,
    layout: Layout,
    done_chunk: Chunk,
    failures: Chunk,
    costs: CostArrays,
    writable: bool,
    /// A copy of the `done` chunk, so `is_done` costs no syscall. It
    /// stays equal to the file because this marker is its only writer.
    done: Vec<u8>,
    /// Nonzero bytes in `done`, counted as they are set.
    count: u64,
    /// The syncs of directory entries a creation left (see
    /// [`group::create`]), which the first [`Self::flush`] waits for.
    entry_syncs: Mutex<EntrySyncs>,
}

/// The directory syncs [`group::create`] leaves until marks depend on
/// them: on a thread of their own, so that they cost the run nothing
/// (each is a disk flush); the first flush of marks waits for them.
enum EntrySyncs {
    Done,
    Running(std::thread::JoinHandle<Result<(), DoneMarkerError>>),
}

impl EntrySyncs {
    /// Syncs `dirs` on a thread; here, if no thread can be started.
    fn start(dirs: Vec<PathBuf>) -> Result<Self, DoneMarkerError> {
        let sync_all = |dirs: &[PathBuf]| dirs.iter().try_for_each(|d| zarr::sync_dir(d));
        let thread = std::thread::Builder::new()
            .name("daisy-marker-sync".into())
            .spawn({
                let dirs = dirs.clone();
                move || sync_all(&dirs)
            });
        match thread {
            Ok(handle) => Ok(EntrySyncs::Running(handle)),
            Err(_) => sync_all(&dirs).map(|()| EntrySyncs::Done),
        }
    }

    /// Waits for the syncs; `dir` (the marker) names a thread that panicked.
    fn finish(self, dir: &Path) -> Result<(), DoneMarkerError> {
        match self {
            EntrySyncs::Done => Ok(()),
            EntrySyncs::Running(handle) => handle.join().unwrap_or_else(|_| {
                let panicked = io::Error::other("the thread syncing its directories panicked");
                Err(io_error(dir)(panicked))
            }),
        }
    }
}

/// A done chunk holds 0 (not done) or 1 (done) per block, as daisy 2.0
/// writes it; any other byte means the file was damaged (a disk error,
/// something else writing there), and taking it for "done" would skip
/// blocks that never ran.
fn check_done_bytes(dir: &Path, chunk: &Path, done: &[u8]) -> Result<(), DoneMarkerError> {
    let Some(cell) = done.iter().position(|&b| b > 1) else {
        return Ok(());
    };
    let damaged = done.iter().filter(|&&b| b > 1).count();
    Err(error::invalid(
        dir,
        chunk,
        format!(
            "it is damaged: cell {cell} holds byte {:#04x}, and {damaged} cells in all \
             hold neither 0 (not done) nor 1 (done), so which blocks are done cannot \
             be trusted (`daisy-driver reset` of the pipeline clears it too)",
            done[cell]
        ),
    ))
}

impl DoneMarker {
    /// Opens the marker at `dir` for `spec`, creating it (and `dir`) if
    /// absent, finishing a creation that was killed half-way, and
    /// migrating one of this project's earlier layout. Refuses a marker
    /// written for another layout.
    pub fn open(dir: &Path, spec: &TaskSpec) -> Result<Self, DoneMarkerError> {
        let layout = Layout::of(dir, spec)?;
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let created = match group::inspect(dir, &layout)? {
            Stored::Absent => group::create(dir, &layout).map(|()| true)?,
            Stored::Group => legacy::remove_chunks(dir).map(|()| false)?,
            Stored::Legacy(done) => legacy::migrate(dir, &layout, &done).map(|()| false)?,
        };
        let done_chunk = DONE.open(dir, &layout, true)?;
        let failures = FAILURES.open(dir, &layout, true)?;
        let done = done_chunk.read_all(layout.cells)?;
        check_done_bytes(dir, &DONE.chunk_path(dir, &layout), &done)?;
        let entries = match created {
            true => EntrySyncs::start(group::unsynced_entries(dir, &layout))?,
            false => EntrySyncs::Done,
        };
        let marker = Self::new(dir, layout, done_chunk, failures, done, true);
        *marker.entry_syncs.lock().unwrap_or_else(|e| e.into_inner()) = entries;
        Ok(marker)
    }

    /// Reads the marker at `dir` (of either layout) without creating or
    /// changing anything, for dry runs and status: `Ok(None)` if there is
    /// none. The result answers lookups but refuses writes.
    pub fn open_existing(dir: &Path, spec: &TaskSpec) -> Result<Option<Self>, DoneMarkerError> {
        let layout = Layout::of(dir, spec)?;
        let (done_chunk, failures) = match group::inspect(dir, &layout)? {
            Stored::Absent => return Ok(None),
            Stored::Group => (
                DONE.open(dir, &layout, false)?,
                FAILURES.open(dir, &layout, false)?,
            ),
            Stored::Legacy(done) => {
                let marker = Self::legacy(dir, layout, done);
                return Ok(Some(marker));
            }
        };
        let done = done_chunk.read_all(layout.cells)?;
        check_done_bytes(dir, &DONE.chunk_path(dir, &layout), &done)?;
        Ok(Some(Self::new(
            dir, layout, done_chunk, failures, done, false,
        )))
    }

    /// A read-only view of an earlier-layout marker: it has no failure
    /// counts, and its chunk was read whole already.
    fn legacy(dir: &Path, layout: Layout, done: Vec<u8>) -> Self {
        let done_chunk = Chunk::absent(&DONE.chunk_path(dir, &layout));
        let failures = Chunk::absent(&FAILURES.chunk_path(dir, &layout));
        Self::new(dir, layout, done_chunk, failures, done, false)
    }

    fn new(
        dir: &Path,
        layout: Layout,
        done_chunk: Chunk,
        failures: Chunk,
        done: Vec<u8>,
        writable: bool,
    ) -> Self {
        let count = done.iter().filter(|&&b| b != 0).count() as u64;
        Self {
            dir: dir.to_path_buf(),
            layout,
            done_chunk,
            failures,
            costs: CostArrays::Unopened,
            writable,
            done,
            count,
            entry_syncs: Mutex::new(EntrySyncs::Done),
        }
    }

    /// True if `block` is addressable and marked (its byte is 1; other
    /// bytes than 0 and 1 were refused when the marker was opened).
    pub fn is_done(&self, block: &Block) -> bool {
        self.layout
            .index_of(block)
            .is_some_and(|i| self.done[i] != 0)
    }

    /// Records that `block` finished. Once this returns, a kill of the
    /// process cannot lose the mark (see [`DoneMarker::flush`] for power
    /// loss). Marking a block that is not addressable does nothing.
    pub fn mark_done(&mut self, block: &Block) -> Result<(), DoneMarkerError> {
        self.mark_done_many([block])
    }

    /// [`DoneMarker::mark_done`] for several blocks, with one write per
    /// run of neighbouring cells rather than one per block: the blocks of
    /// a batch mostly lie side by side.
    pub fn mark_done_many<'b>(
        &mut self,
        blocks: impl IntoIterator<Item = &'b Block>,
    ) -> Result<(), DoneMarkerError> {
        self.check_writable()?;
        let mut cells: Vec<usize> = (blocks.into_iter())
            .filter_map(|block| self.layout.index_of(block))
            .filter(|&i| self.done[i] == 0)
            .collect();
        cells.sort_unstable();
        cells.dedup();
        for run in cells.chunk_by(|a, b| a + 1 == *b) {
            let (first, len) = (run[0], run.len());
            self.done_chunk.write_at(&vec![1; len], first)?;
            self.done[first..first + len].fill(1);
            self.count += len as u64;
        }
        Ok(())
    }

    /// Stores what `costs`' blocks cost, one write per array and run of
    /// neighbouring cells; creates the cost arrays the first time, keeps
    /// what they hold. Blocks that are not addressable are left out.
    pub fn record_costs<'b>(
        &mut self,
        costs: impl IntoIterator<Item = (&'b Block, StoredCost)>,
    ) -> Result<(), DoneMarkerError> {
        self.check_writable()?;
        let mut cells: Vec<(usize, StoredCost)> = (costs.into_iter())
            .filter_map(|(block, cost)| Some((self.layout.index_of(block)?, cost)))
            .collect();
        self.costs.write(&self.dir, &self.layout, &mut cells)
    }

    /// Every block's stored cost, or `None` if the task never tracked
    /// resources.
    pub fn read_costs(&self) -> Result<Option<CostTable>, DoneMarkerError> {
        CostTable::read(&self.dir, &self.layout)
    }

    /// The cell of `block` in the arrays, if it is addressable.
    pub fn cell_of(&self, block: &Block) -> Option<usize> {
        self.layout.index_of(block)
    }

    /// The spatial id of the block at `cell` of the arrays.
    pub fn block_id_of(&self, cell: usize) -> u64 {
        self.layout.block_id_of(cell)
    }

    /// Whether the block at `cell` is marked done.
    pub fn is_cell_done(&self, cell: usize) -> bool {
        self.done.get(cell).is_some_and(|&b| b != 0)
    }

    /// Counts one failed attempt of `block` (saturating), as daisy 2.0.0
    /// does for every failed attempt, retried or not. A block that is not
    /// addressable is not counted.
    pub fn note_failure(&mut self, block: &Block) -> Result<(), DoneMarkerError> {
        self.check_writable()?;
        let Some(i) = self.layout.index_of(block) else {
            return Ok(());
        };
        let failures = self.read_failures(i)?.saturating_add(1);
        self.failures.write_at(&failures.to_le_bytes(), i * 4)
    }

    /// [`DoneMarker::note_failure`] for the driver: the counts are for
    /// the user's diagnosis, not for resuming, so one that cannot be
    /// written is a warning, never the end of a run.
    pub fn count_failed_attempt(&mut self, block: &Block) {
        if let Err(error) = self.note_failure(block) {
            let error = anyhow::Error::new(error);
            let block = block.id.spatial;
            tracing::warn!("cannot count a failed attempt of block {block}: {error:#}");
        }
    }

    /// The failed attempts recorded for `block`: 0 if none, or if it is
    /// not addressable.
    pub fn failure_count(&self, block: &Block) -> Result<u32, DoneMarkerError> {
        match self.layout.index_of(block) {
            Some(i) => self.read_failures(i),
            None => Ok(0),
        }
    }

    fn read_failures(&self, i: usize) -> Result<u32, DoneMarkerError> {
        let mut bytes = [0; 4];
        self.failures.read_at(&mut bytes, i * 4)?;
        Ok(u32::from_le_bytes(bytes))
    }

    fn check_writable(&self) -> Result<(), DoneMarkerError> {
        match self.writable {
            true => Ok(()),
            false => Err(DoneMarkerError::ReadOnly {
                dir: self.dir.clone(),
            }),
        }
    }

    /// How many blocks are marked done.
    pub fn count_done(&self) -> u64 {
        self.count
    }

    /// The arrays' shape: blocks per dimension.
    pub fn grid_shape(&self) -> &[u64] {
        &self.layout.grid
    }

    /// Forces the marks and counts to disk so they survive a power loss
    /// too; for checkpoints and the end of a run. Nothing to do when
    /// read-only.
    pub fn flush(&self) -> Result<(), DoneMarkerError> {
        let mut entries = self.entry_syncs.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *entries, EntrySyncs::Done).finish(&self.dir)?;
        self.done_chunk.sync()?;
        self.failures.sync()
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
            .field("writable", &self.writable)
            .finish()
    }
}

#[cfg(test)]
mod tests;
