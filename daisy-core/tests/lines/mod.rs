//! One-dimensional tasks of unit blocks, for the tests of the scheduler's
//! rules: block ids are positions, and block k of a downstream task reads
//! exactly what block k of its upstream task writes.

use daisy_core::{Roi, TaskIdx, TaskSpec};

/// A task of `blocks` unit blocks without read/write conflicts.
pub fn line(id: &str, blocks: i64, upstream: Vec<TaskIdx>) -> TaskSpec {
    TaskSpec {
        upstream,
        read_write_conflict: false,
        ..TaskSpec::new(
            id,
            Roi::from_slices(&[0], &[blocks]),
            Roi::from_slices(&[0], &[1]),
            Roi::from_slices(&[0], &[1]),
        )
    }
}
