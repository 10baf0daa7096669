//! Random task geometry for the property tests: each test file picks its
//! own bounds (small ones where a test runs whole pipelines).

use daisy_core::{Coordinate, Fit, Roi, TaskSpec};
use proptest::prelude::*;

/// Per dimension: (total extent, read extent, write begin, write extent),
/// with write extents up to `max_write`, context up to `max_context` and
/// totals up to `max_total` blocks' worth.
pub fn dimension(
    max_write: i64,
    max_context: i64,
    max_total: i64,
) -> impl Strategy<Value = (i64, i64, i64, i64)> {
    (1i64..=max_write, 1i64..=max_context).prop_flat_map(move |(write, context)| {
        let read = write + context;
        (Just(read), 0..=context, Just(write), 1..=max_total)
            .prop_map(|(read, begin, write, total)| (total + read, read, begin, write))
    })
}

pub fn fit() -> impl Strategy<Value = Fit> {
    prop_oneof![Just(Fit::Valid), Just(Fit::Overhang), Just(Fit::Shrink)]
}

/// A task named "random" with the regions of `dims` (see [`dimension`]),
/// its total region's offset at `origin` in every dimension.
pub fn spec(dims: &[(i64, i64, i64, i64)], origin: i64, fit: Fit, conflict: bool) -> TaskSpec {
    let pick = |f: fn(&(i64, i64, i64, i64)) -> i64| {
        Coordinate::new(&dims.iter().map(f).collect::<Vec<_>>())
    };
    let zero = Coordinate::zeros(dims.len());
    TaskSpec {
        fit,
        read_write_conflict: conflict,
        ..TaskSpec::new(
            "random",
            Roi::new(zero + origin, pick(|d| d.0)),
            Roi::new(zero, pick(|d| d.1)),
            Roi::new(pick(|d| d.2), pick(|d| d.3)),
        )
    }
}
