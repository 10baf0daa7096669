//! `TaskSpec`: what the scheduler needs to know about one task.
//!
//! Only the scheduling half of a task lives here (geometry, conflicts,
//! retries, upstream tasks). Commands, resources and launch settings are
//! the driver's business and stay in its pipeline file model.

use crate::block::TaskIdx;
use crate::roi::Roi;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How blocks at the border of the total region are treated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fit {
    /// Only blocks whose write region lies wholly inside the total write
    /// region; the border that does not fill a block stays unprocessed.
    #[default]
    Valid,
    /// Every block whose write region begins inside the total write
    /// region, even if it sticks out.
    Overhang,
    /// As overhang, then cut the block's regions down to the totals.
    Shrink,
}

impl fmt::Display for Fit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fit::Valid => "valid",
            Fit::Overhang => "overhang",
            Fit::Shrink => "shrink",
        })
    }
}

/// Default number of retries of a failed block (daisy's default).
pub const DEFAULT_MAX_RETRIES: u32 = 2;

/// The scheduling view of one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSpec {
    /// The id users wrote, e.g. `"predict"`.
    pub id: String,
    /// The total READ region of the task.
    pub total_roi: Roi,
    /// The read region of one block, relative (its offset is usually 0).
    pub read_roi: Roi,
    /// The write region of one block, relative to the same origin as
    /// `read_roi`; it must lie inside `read_roi`.
    pub write_roi: Roi,
    pub fit: Fit,
    /// When true, blocks whose read regions overlap another block's write
    /// region never run at the same time (they are put in levels).
    pub read_write_conflict: bool,
    /// How often a failed block is tried again before it fails for good.
    pub max_retries: u32,
    /// Tasks whose output this task reads, as positions in the pipeline.
    pub upstream: Vec<TaskIdx>,
}

impl TaskSpec {
    /// A task with daisy's defaults: valid fit, conflicts on, 2 retries,
    /// no upstream tasks.
    pub fn new(id: &str, total_roi: Roi, read_roi: Roi, write_roi: Roi) -> Self {
        Self {
            id: id.to_string(),
            total_roi,
            read_roi,
            write_roi,
            fit: Fit::Valid,
            read_write_conflict: true,
            max_retries: DEFAULT_MAX_RETRIES,
            upstream: Vec::new(),
        }
    }
}
