//! `TaskSpec`: what the scheduler needs to know about one task.
//!
//! Only the scheduling half of a task lives here (geometry, conflicts,
//! retries, upstream tasks). Commands, resources and launch settings are
//! the driver's business and stay in its pipeline file model.

use crate::block::TaskIdx;
use crate::roi::Roi;
use crate::write_grid::WriteGrid;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

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

/// Default cap on the delay before a failed block is retried, so that
/// exponential backoff never parks a block for longer than this.
pub const DEFAULT_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(600);

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
    /// Delay before a failed block's first retry, doubled for each further
    /// retry, so that transient failures against a shared resource do not
    /// retry in a storm. `None` retries at once.
    pub retry_backoff: Option<Duration>,
    /// Cap on the doubled delay of `retry_backoff`.
    pub retry_backoff_max: Duration,
    /// Tasks whose output this task reads, as positions in the pipeline.
    pub upstream: Vec<TaskIdx>,
    /// Chunked arrays the blocks write into: two blocks writing into one
    /// shard (or chunk) are never in flight at once.
    pub writes: Vec<WriteGrid>,
}

impl TaskSpec {
    /// A task with daisy's defaults: valid fit, conflicts on, 2 retries
    /// without backoff, no upstream tasks.
    pub fn new(id: &str, total_roi: Roi, read_roi: Roi, write_roi: Roi) -> Self {
        Self {
            id: id.to_string(),
            total_roi,
            read_roi,
            write_roi,
            fit: Fit::Valid,
            read_write_conflict: true,
            max_retries: DEFAULT_MAX_RETRIES,
            retry_backoff: None,
            retry_backoff_max: DEFAULT_RETRY_BACKOFF_MAX,
            upstream: Vec::new(),
            writes: Vec::new(),
        }
    }
}

impl TaskSpec {
    /// How long a failed block waits before retry number `attempt` (from
    /// 1): `retry_backoff * 2^(attempt - 1)`, capped at
    /// `retry_backoff_max`; `None` without backoff.
    pub fn retry_delay(&self, attempt: u32) -> Option<Duration> {
        let backoff = self.retry_backoff?;
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        Some(backoff.saturating_mul(factor).min(self.retry_backoff_max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_up_to_the_cap() {
        let roi = Roi::from_slices(&[0], &[1]);
        let mut spec = TaskSpec::new("t", roi, roi, roi);
        assert_eq!(spec.retry_delay(1), None);
        spec.retry_backoff = Some(Duration::from_secs(1));
        spec.retry_backoff_max = Duration::from_secs(5);
        let delays: Vec<_> = (1..=4).filter_map(|a| spec.retry_delay(a)).collect();
        let secs = |s| Duration::from_secs(s);
        assert_eq!(delays, [secs(1), secs(2), secs(4), secs(5)]);
        assert_eq!(spec.retry_delay(100), Some(secs(5)), "no overflow");
    }
}
