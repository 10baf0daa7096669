//! A task's skip mask (`skip_mask`, as in daisy 2.0.0): one byte per block
//! of the task's [`MarkerGrid`], nonzero meaning "do not run this block".
//! Large volumes are mostly empty; their background blocks are masked.
//!
//! A masked block is never handed out and never counted as failed: it is
//! *skipped*, like a block done by an earlier run, and the blocks that
//! depend on it treat it as done (daisy 2.0.0 made the same choice: "
//! skipped and release their downstream dependencies"). The alternative,
//! orphaning what depends on a masked block, would make a mask of one
//! task silently empty the tasks after it near every masked region.
//! Masked blocks are not marked done either, so a mask changed between
//! runs takes effect on resume.
//!
//! The mask is a Zarr array (v2 or v3) read whole at load, see [`zarr`].

mod zarr;

use daisy_core::marker_grid::MarkerGrid;
use daisy_core::{Block, TaskSpec};
use std::path::{Path, PathBuf};

/// Why a mask cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MaskError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error("its shape {found:?} is not the task's block grid {grid:?} (one byte per block)")]
    Shape { found: Vec<u64>, grid: Vec<u64> },
}

/// A loaded mask.
#[derive(Clone, PartialEq, Eq)]
pub struct SkipMask {
    path: PathBuf,
    grid: MarkerGrid,
    cells: Vec<u8>,
    masked: u64,
}

impl SkipMask {
    /// Reads the Zarr array at `path`, whose shape must be `spec`'s block
    /// grid.
    pub fn load(path: &Path, spec: &TaskSpec) -> Result<Self, MaskError> {
        let grid = MarkerGrid::of(spec);
        let (shape, cells) = zarr::read_bytes(path)?;
        if shape != grid.shape() {
            let grid = grid.shape().to_vec();
            return Err(MaskError::Shape { found: shape, grid });
        }
        Ok(Self::new(path, grid, cells))
    }

    fn new(path: &Path, grid: MarkerGrid, cells: Vec<u8>) -> Self {
        let masked = cells.iter().filter(|&&c| c != 0).count() as u64;
        Self {
            path: path.to_path_buf(),
            grid,
            cells,
            masked,
        }
    }

    /// Whether `block` is masked (a block outside the grid is not).
    pub fn is_masked(&self, block: &Block) -> bool {
        (self.grid.index_of(block)).is_some_and(|i| self.cells[i] != 0)
    }

    /// How many blocks the mask removes.
    pub fn masked(&self) -> u64 {
        self.masked
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl std::fmt::Debug for SkipMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipMask")
            .field("path", &self.path)
            .field("grid", &self.grid.shape())
            .field("masked", &self.masked)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use daisy_core::{Coordinate, Roi, Scheduler};

    /// A 2-D task of 3 x 4 blocks of 10 x 10.
    fn spec() -> TaskSpec {
        let roi = |offset: [i64; 2], shape: [i64; 2]| {
            Roi::new(Coordinate::from(&offset[..]), Coordinate::from(&shape[..]))
        };
        TaskSpec::new(
            "t",
            roi([0, 0], [30, 40]),
            roi([0, 0], [10, 10]),
            roi([0, 0], [10, 10]),
        )
    }

    #[test]
    fn a_masked_block_is_found_by_its_grid_cell() {
        let spec = spec();
        let mut cells = vec![0u8; 12];
        cells[4 + 2] = 1; // row 1, column 2
        let mask = SkipMask::new(Path::new("m"), MarkerGrid::of(&spec), cells);
        let graph = std::sync::Arc::new(daisy_core::DependencyGraph::new(vec![spec]).unwrap());
        let mut scheduler = Scheduler::new(graph);
        let task = daisy_core::TaskIdx(0);
        let mut masked = Vec::new();
        while let Some(block) = scheduler.acquire(task, &mut |_| false) {
            if mask.is_masked(&block) {
                masked.push(block.write_roi.offset().iter().collect::<Vec<_>>());
            }
        }
        assert_eq!(masked, [vec![10, 20]]);
        assert_eq!(mask.masked(), 1);
    }
}
