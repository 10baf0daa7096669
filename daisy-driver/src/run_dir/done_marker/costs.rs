//! What each block cost, kept in the marker's group beside `done`: seven
//! arrays of the block grid's shape, one element per block, in daisy
//! 2.0.0's names and types ([`COSTS`]: float32 seconds and percent,
//! uint64 bytes), so either reads the other's. A run that tracks no
//! resources never creates them; one that does creates them with its
//! first costed block and keeps what earlier runs stored (a resumed block
//! is not run again, so its cost stays).
//!
//! A cell is *measured* when its `wall_seconds` is positive: the arrays
//! start as zeros, and a stored wall time is never below the smallest
//! positive float. `gpu_util_pct` is NaN for a measured block without
//! a GPU, as in daisy 2.0.0.

use super::array::COSTS;
use super::chunk::Chunk;
use super::error::DoneMarkerError;
use super::layout::Layout;
use daisy_core::protocol::BlockCost;
use std::path::Path;

/// Indices into [`COSTS`].
const WALL: usize = 0;
const CPU: usize = 1;
const RSS: usize = 2;
const READ: usize = 3;
const WRITTEN: usize = 4;
const GPU_UTIL: usize = 5;
const GPU_MEM: usize = 6;

/// One block's figures as they are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StoredCost {
    pub wall_seconds: f32,
    pub cpu_seconds: f32,
    pub peak_rss_bytes: u64,
    pub io_read_bytes: u64,
    pub io_write_bytes: u64,
    /// `None` without a GPU.
    pub gpu_util_pct: Option<f32>,
    pub gpu_mem_bytes: u64,
}

impl StoredCost {
    /// The figures of a block that ran `seconds` and cost `cost`.
    pub fn new(seconds: f64, cost: &BlockCost) -> Self {
        Self {
            wall_seconds: (seconds as f32).max(f32::MIN_POSITIVE),
            cpu_seconds: cost.cpu_seconds as f32,
            peak_rss_bytes: cost.peak_rss_bytes,
            io_read_bytes: cost.io_read_bytes,
            io_write_bytes: cost.io_write_bytes,
            gpu_util_pct: cost.gpu_util_pct,
            gpu_mem_bytes: cost.gpu_mem_bytes.unwrap_or(0),
        }
    }

    /// Each array's element for this block, little-endian.
    fn elements(&self) -> [Vec<u8>; 7] {
        let float = |x: f32| x.to_le_bytes().to_vec();
        let unsigned = |x: u64| x.to_le_bytes().to_vec();
        [
            float(self.wall_seconds),
            float(self.cpu_seconds),
            unsigned(self.peak_rss_bytes),
            unsigned(self.io_read_bytes),
            unsigned(self.io_write_bytes),
            float(self.gpu_util_pct.unwrap_or(f32::NAN)),
            unsigned(self.gpu_mem_bytes),
        ]
    }
}

/// The cost arrays of a writable marker: created on first use; once they
/// cannot be opened (another program's arrays of another type), left
/// alone for the rest of the run, so the error is reported once.
pub(super) enum CostArrays {
    Unopened,
    Open(Vec<Chunk>),
    Refused,
}

impl CostArrays {
    /// Stores `costs` (cell, figures), one write per array and run of
    /// neighbouring cells.
    pub fn write(
        &mut self,
        dir: &Path,
        layout: &Layout,
        costs: &mut [(usize, StoredCost)],
    ) -> Result<(), DoneMarkerError> {
        if costs.is_empty() {
            return Ok(());
        }
        if let Self::Unopened = self {
            // Refused unless the next line opens them: the error is returned once.
            *self = Self::Refused;
            *self = Self::Open(open_all(dir, layout, true)?);
        }
        let Self::Open(chunks) = self else {
            return Ok(());
        };
        costs.sort_unstable_by_key(|(cell, _)| *cell);
        for run in costs.chunk_by(|a, b| a.0 + 1 == b.0) {
            let elements: Vec<[Vec<u8>; 7]> = run.iter().map(|(_, c)| c.elements()).collect();
            for (array, chunk) in chunks.iter().enumerate() {
                let bytes: Vec<u8> = elements.iter().flat_map(|e| e[array].clone()).collect();
                chunk.write_at(&bytes, run[0].0 * COSTS[array].width())?;
            }
        }
        Ok(())
    }
}

fn open_all(dir: &Path, layout: &Layout, write: bool) -> Result<Vec<Chunk>, DoneMarkerError> {
    COSTS.iter().map(|a| a.open(dir, layout, write)).collect()
}

/// Every block's stored figures, read whole for status and reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CostTable {
    columns: Vec<Vec<u8>>,
}

impl CostTable {
    /// The measured blocks of `marker`'s table, by block id.
    pub fn measured_blocks(&self, marker: &super::DoneMarker) -> Vec<(u64, StoredCost)> {
        (0..self.cells())
            .filter_map(|cell| Some((marker.block_id_of(cell), self.get(cell)?)))
            .collect()
    }

    /// The arrays of the marker at `dir`, or `None` if it has none.
    pub(super) fn read(dir: &Path, layout: &Layout) -> Result<Option<Self>, DoneMarkerError> {
        let chunks = open_all(dir, layout, false)?;
        if !chunks[WALL].exists() {
            return Ok(None);
        }
        let len = |array: usize| layout.cells * COSTS[array].width();
        let columns = (chunks.iter().enumerate()).map(|(i, chunk)| chunk.read_all(len(i)));
        Ok(Some(Self {
            columns: columns.collect::<Result<_, _>>()?,
        }))
    }

    /// Cells in the grid.
    pub fn cells(&self) -> usize {
        self.columns[WALL].len() / 4
    }

    /// The figures of the block at `cell`, if it was measured.
    pub fn get(&self, cell: usize) -> Option<StoredCost> {
        let wall = self.float(WALL, cell);
        (wall > 0.0).then(|| {
            let util = self.float(GPU_UTIL, cell);
            StoredCost {
                wall_seconds: wall,
                cpu_seconds: self.float(CPU, cell),
                peak_rss_bytes: self.unsigned(RSS, cell),
                io_read_bytes: self.unsigned(READ, cell),
                io_write_bytes: self.unsigned(WRITTEN, cell),
                gpu_util_pct: (!util.is_nan()).then_some(util),
                gpu_mem_bytes: self.unsigned(GPU_MEM, cell),
            }
        })
    }

    fn float(&self, array: usize, cell: usize) -> f32 {
        let bytes = &self.columns[array][cell * 4..cell * 4 + 4];
        f32::from_le_bytes(bytes.try_into().expect("4 bytes"))
    }

    fn unsigned(&self, array: usize, cell: usize) -> u64 {
        let bytes = &self.columns[array][cell * 8..cell * 8 + 8];
        u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
    }
}
