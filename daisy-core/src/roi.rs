//! `Roi`: a half-open box `[offset, offset + shape)` in voxel space.
//!
//! The region of interest is the unit everything else is phrased in: a
//! task's total region, one block's read and write regions, the sub-region
//! whose blocks a downstream task needs. An ROI with a zero (or negative)
//! extent in any dimension is empty.

use crate::coordinate::Coordinate;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A half-open n-dimensional box.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Roi {
    offset: Coordinate,
    shape: Coordinate,
}

/// How [`Roi::snap_to_grid`] moves the ROI's faces onto grid lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapMode {
    /// Outwards: the result contains the ROI.
    Grow,
    /// Inwards: the result is contained in the ROI.
    Shrink,
    /// Each face to its nearest grid line (ties go outwards).
    Closest,
}

impl Roi {
    /// # Panics
    /// If `offset` and `shape` differ in dimension.
    #[inline]
    pub fn new(offset: Coordinate, shape: Coordinate) -> Self {
        if offset.dims() != shape.dims() {
            dimension_mismatch(offset, shape);
        }
        Self { offset, shape }
    }

    /// Moves the ROI to begin at `offset`, in place: the graph builds
    /// blocks where they lie. Only checked in debug builds: reading the
    /// shape back would wait for the block's copy to land.
    #[inline]
    pub(crate) fn set_offset(&mut self, offset: Coordinate) {
        debug_assert_eq!(offset.dims(), self.shape.dims(), "dimension mismatch");
        self.offset = offset;
    }

    /// Sets component `d` of the offset, in place (see [`Self::set_offset`]).
    #[inline(always)]
    pub(crate) fn set_offset_at(&mut self, d: usize, value: i64) {
        self.offset.set_in_place(d, value);
    }

    /// Shorthand for tests and examples: `Roi::from_slices(&[0, 0], &[10, 10])`.
    pub fn from_slices(offset: &[i64], shape: &[i64]) -> Self {
        Self::new(Coordinate::new(offset), Coordinate::new(shape))
    }

    /// The ROI spanning `[begin, end)`.
    #[inline]
    pub fn from_bounds(begin: Coordinate, end: Coordinate) -> Self {
        Self::new(begin, end - begin)
    }

    #[inline]
    pub fn offset(&self) -> Coordinate {
        self.offset
    }

    #[inline]
    pub fn shape(&self) -> Coordinate {
        self.shape
    }

    /// The offset and the shape, borrowed (the wire's encoder writes
    /// them without copying the coordinates).
    #[inline]
    pub fn as_slices(&self) -> [&[i64]; 2] {
        [self.offset.as_slice(), self.shape.as_slice()]
    }

    #[inline]
    pub fn begin(&self) -> Coordinate {
        self.offset
    }

    /// One past the last voxel in every dimension.
    #[inline]
    pub fn end(&self) -> Coordinate {
        self.offset + self.shape
    }

    #[inline]
    pub fn dims(&self) -> usize {
        self.offset.dims()
    }

    /// Number of voxels (0 for an empty ROI).
    pub fn size(&self) -> i64 {
        if self.is_empty() {
            0
        } else {
            self.shape.product()
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.shape.all(|s| s > 0)
    }

    /// Moves the begin by `-amount_neg` and the end by `+amount_pos`.
    #[inline]
    pub fn grow(&self, amount_neg: Coordinate, amount_pos: Coordinate) -> Self {
        Self::new(
            self.offset - amount_neg,
            self.shape + amount_neg + amount_pos,
        )
    }

    #[inline]
    pub fn shift(&self, by: Coordinate) -> Self {
        Self::new(self.offset + by, self.shape)
    }

    /// The overlap of two ROIs; empty (shape clamped to 0) when they do
    /// not overlap, with its begin at the larger of the two begins.
    #[inline]
    pub fn intersect(&self, other: &Self) -> Self {
        let begin = self.begin().max(&other.begin());
        let end = self.end().min(&other.end());
        Self::new(begin, (end - begin).map(|s| s.max(0)))
    }

    #[inline]
    pub fn intersects(&self, other: &Self) -> bool {
        !self.intersect(other).is_empty()
    }

    /// True if `other` lies inside this ROI. An empty ROI is contained
    /// in any ROI whose closure holds its begin.
    #[inline]
    pub fn contains_roi(&self, other: &Self) -> bool {
        if other.is_empty() {
            return self.contains_point_or_end(&other.begin());
        }
        self.contains_point(&other.begin()) && self.contains_point_or_end(&other.end())
    }

    /// True if the voxel at `point` lies inside this ROI.
    #[inline]
    pub fn contains_point(&self, point: &Coordinate) -> bool {
        let (begin, end) = (self.begin(), self.end());
        (0..self.dims()).all(|d| begin[d] <= point[d] && point[d] < end[d])
    }

    #[inline]
    fn contains_point_or_end(&self, point: &Coordinate) -> bool {
        let (begin, end) = (self.begin(), self.end());
        (0..self.dims()).all(|d| begin[d] <= point[d] && point[d] <= end[d])
    }

    /// Moves each face onto the grid of spacing `grid` (anchored at 0).
    pub fn snap_to_grid(&self, grid: Coordinate, mode: SnapMode) -> Self {
        let (begin, end) = (self.begin(), self.end());
        let (begin, end) = match mode {
            SnapMode::Grow => ((begin / grid) * grid, end.div_ceil(&grid) * grid),
            SnapMode::Shrink => (begin.div_ceil(&grid) * grid, (end / grid) * grid),
            SnapMode::Closest => (
                nearest_grid_line(begin, grid, false),
                nearest_grid_line(end, grid, true),
            ),
        };
        Self::from_bounds(begin, end)
    }
}

/// The panic of [`Roi::new`], out of line: a panic message that borrowed
/// the coordinates in place would pin them to memory, and the graph's hot
/// path would copy every block it builds (half the graph benchmark).
#[cold]
#[inline(never)]
fn dimension_mismatch(offset: Coordinate, shape: Coordinate) -> ! {
    panic!("roi offset {offset} and shape {shape} differ in dimension")
}

/// The grid line nearest to each component; a tie goes down for a begin
/// and up for an end, so a ROI never shrinks on a tie.
fn nearest_grid_line(point: Coordinate, grid: Coordinate, tie_up: bool) -> Coordinate {
    point.zip_with(&grid, |p, g| {
        let below = p.div_euclid(g) * g;
        let twice_rest = 2 * (p - below);
        if twice_rest > g || (twice_rest == g && tie_up) {
            below + g
        } else {
            below
        }
    })
}

impl fmt::Display for Roi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The words of the pipeline file, so messages read like the input.
        write!(f, "{{offset {}, shape {}}}", self.offset, self.shape)
    }
}

impl fmt::Debug for Roi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roi(offset: &[i64], shape: &[i64]) -> Roi {
        Roi::from_slices(offset, shape)
    }

    #[test]
    fn grow_moves_both_faces() {
        let r = roi(&[10, 10], &[5, 5]).grow([1, 2].into(), [3, 4].into());
        assert_eq!(r, roi(&[9, 8], &[9, 11]));
        let shrunk = r.grow([-1, -2].into(), [-3, -4].into());
        assert_eq!(shrunk, roi(&[10, 10], &[5, 5]));
    }

    #[test]
    fn intersect_and_intersects() {
        let a = roi(&[0, 0], &[10, 10]);
        let b = roi(&[5, -5], &[10, 10]);
        assert_eq!(a.intersect(&b), roi(&[5, 0], &[5, 5]));
        assert!(a.intersects(&b));
        let far = roi(&[20, 20], &[1, 1]);
        assert!(!a.intersects(&far));
        assert!(a.intersect(&far).is_empty());
        let touching = roi(&[10, 0], &[1, 1]);
        assert!(
            !a.intersects(&touching),
            "half-open: touching is not overlapping"
        );
    }

    #[test]
    fn containment_is_half_open() {
        let a = roi(&[0], &[10]);
        assert!(a.contains_point(&[0].into()));
        assert!(a.contains_point(&[9].into()));
        assert!(!a.contains_point(&[10].into()));
        assert!(!a.contains_point(&[-1].into()));
        assert!(a.contains_roi(&roi(&[0], &[10])));
        assert!(a.contains_roi(&roi(&[3], &[7])));
        assert!(!a.contains_roi(&roi(&[3], &[8])));
        assert!(a.contains_roi(&roi(&[10], &[0])));
        assert!(!a.contains_roi(&roi(&[11], &[0])));
    }

    #[test]
    fn empty_and_size() {
        assert!(roi(&[0, 0], &[0, 5]).is_empty());
        assert!(roi(&[0, 0], &[3, -1]).is_empty());
        assert_eq!(roi(&[0, 0], &[3, -1]).size(), 0);
        assert_eq!(roi(&[0, 0], &[3, 4]).size(), 12);
    }

    #[test]
    fn shift_keeps_shape() {
        assert_eq!(
            roi(&[1, 2], &[3, 4]).shift([-1, 1].into()),
            roi(&[0, 3], &[3, 4])
        );
    }

    #[test]
    fn snap_to_grid_in_every_mode() {
        let r = roi(&[-7, 3], &[13, 12]); // [-7, 6) x [3, 15)
        let grid = Coordinate::from([5, 5]);
        assert_eq!(
            r.snap_to_grid(grid, SnapMode::Grow),
            roi(&[-10, 0], &[20, 15])
        );
        assert_eq!(
            r.snap_to_grid(grid, SnapMode::Shrink),
            roi(&[-5, 5], &[10, 10])
        );
        assert_eq!(
            r.snap_to_grid(grid, SnapMode::Closest),
            roi(&[-5, 5], &[10, 10])
        );
        let tie = roi(&[5], &[10]); // [5, 15) on a grid of 10: ties go outwards
        assert_eq!(
            tie.snap_to_grid([10].into(), SnapMode::Closest),
            roi(&[0], &[20])
        );
    }
}
