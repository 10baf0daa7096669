//! `Block`: one unit of work, and its `BlockId`.
//!
//! A block reads `read_roi` and writes `write_roi`. Its id is the pair
//! (task, spatial id) where the spatial id is the generalised Cantor
//! number of the block's grid index, exactly as in daisy 1.x/2.0, so ids
//! (and the done markers keyed by them) agree across implementations.

use crate::coordinate::Coordinate;
use crate::roi::Roi;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A task's position in its pipeline: a compact stand-in for the task's
/// string id inside the scheduler, where block ids are hashed millions of
/// times. The pipeline maps it back to the id users wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskIdx(pub u32);

impl TaskIdx {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Identifies a block across the whole pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlockId {
    pub task: TaskIdx,
    pub spatial: u64,
}

impl fmt::Display for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.task.0, self.spatial)
    }
}

/// One unit of work: what it reads, what it writes, and who it is.
/// Equality is by value; two blocks with the same id always carry the
/// same ROIs because ROIs are a function of the id within a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Block {
    pub id: BlockId,
    pub read_roi: Roi,
    pub write_roi: Roi,
}

impl Block {
    /// A block whose id is derived from where `write_roi` sits in
    /// `total_roi` (the task's total READ region).
    #[inline]
    pub fn new(task: TaskIdx, total_roi: &Roi, read_roi: Roi, write_roi: Roi) -> Self {
        let index = (write_roi.offset() - total_roi.offset()) / write_roi.shape();
        Self {
            id: BlockId {
                task,
                spatial: cantor_number(&index),
            },
            read_roi,
            write_roi,
        }
    }
}

/// The generalised Cantor number of a grid index (funlib's
/// `cantor_number`): `c([x]) = x`, `c([x1..xn]) = C(s+n-1, n) + c([x1..x(n-1)])`
/// with `s = Σx`. Negative components count as 0 (blocks left of the
/// grid origin only occur transiently, before fit filtering drops them).
/// Wrapping arithmetic: ids stay unique up to ~2^40 blocks per axis and
/// never panic beyond.
#[inline]
pub fn cantor_number(index: &Coordinate) -> u64 {
    cantor_number_of(index.as_slice())
}

/// [`cantor_number`] of an index given by its components; inlined, so
/// that an index of known length unrolls.
#[inline(always)]
pub(crate) fn cantor_number_of(index: &[i64]) -> u64 {
    small_cantor_number(index).unwrap_or_else(|| wide_cantor_number(index))
}

/// [`cantor_number`] in u64 with constant divisors, for the graph's hot
/// path; `None` when an intermediate value would not fit, where
/// [`wide_cantor_number`] takes over. Where it answers, the answer is the
/// wide one: every term is exact, and the sum of terms wraps the same way
/// in u64 as the u128 sum truncated to u64.
#[inline(always)]
fn small_cantor_number(index: &[i64]) -> Option<u64> {
    let mut id: u64 = 0;
    let mut sum: u64 = 0;
    for (n, &x) in index.iter().enumerate() {
        let x = x.max(0) as u64;
        sum = sum.checked_add(x)?;
        let term = match n {
            0 => x,
            1 => small_simplex_volume::<2>(sum)?,
            2 => small_simplex_volume::<3>(sum)?,
            3 => small_simplex_volume::<4>(sum)?,
            4 => small_simplex_volume::<5>(sum)?,
            5 => small_simplex_volume::<6>(sum)?,
            6 => small_simplex_volume::<7>(sum)?,
            7 => small_simplex_volume::<8>(sum)?,
            _ => return None,
        };
        id = id.wrapping_add(term);
    }
    Some(id)
}

/// [`simplex_volume`] for `DIMS` known at compile time, so the loop
/// unrolls and its divisions become multiplications; `None` on overflow.
#[inline(always)]
fn small_simplex_volume<const DIMS: u64>(edge: u64) -> Option<u64> {
    let mut volume: u64 = 1;
    for d in 0..DIMS {
        volume = volume.checked_mul(edge.checked_add(d)?)? / (d + 1);
    }
    Some(if edge == 0 { 0 } else { volume })
}

/// [`cantor_number`] in wrapping u128 arithmetic, for any index.
fn wide_cantor_number(index: &[i64]) -> u64 {
    let mut id: u128 = 0;
    let mut sum: u128 = 0;
    for (n, &x) in index.iter().enumerate() {
        sum = sum.wrapping_add(x.max(0) as u128);
        id = id.wrapping_add(if n == 0 {
            x.max(0) as u128
        } else {
            simplex_volume(n as u128 + 1, sum)
        });
    }
    id as u64
}

/// `C(edge + dims - 1, dims)`: the number of grid points with coordinate
/// sum below `edge` in `dims` dimensions.
fn simplex_volume(dims: u128, edge: u128) -> u128 {
    let mut volume: u128 = 1;
    for d in 0..dims {
        volume = volume.wrapping_mul(edge.wrapping_add(d)) / (d + 1);
    }
    if edge == 0 {
        0
    } else {
        volume
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinate::MAX_DIMS;

    #[test]
    fn cantor_numbers_match_funlib() {
        let c = |v: &[i64]| cantor_number(&Coordinate::new(v));
        assert_eq!(c(&[0]), 0);
        assert_eq!(c(&[7]), 7);
        assert_eq!(c(&[2, 2]), 12);
        assert_eq!(c(&[2, 4]), 23);
        assert_eq!(c(&[4, 2]), 25);
        assert_eq!(c(&[4, 4]), 40);
        assert_eq!(c(&[0, 0, 0]), 0);
        assert_eq!(c(&[1, 0, 0]), 3);
        assert_eq!(c(&[0, 0, 1]), 1);
        assert_eq!(c(&[-3, 2]), c(&[0, 2]));
    }

    #[test]
    fn cantor_numbers_are_a_bijection_on_a_small_grid() {
        for dims in 1..=4usize {
            let side = 6i64;
            let count = side.pow(dims as u32);
            let mut seen = std::collections::HashSet::new();
            for i in 0..count {
                let mut rest = i;
                let index: Vec<i64> = (0..dims)
                    .map(|_| {
                        let v = rest % side;
                        rest /= side;
                        v
                    })
                    .collect();
                assert!(seen.insert(cantor_number(&Coordinate::new(&index))));
            }
        }
    }

    #[test]
    fn small_cantor_numbers_agree_with_wide_ones() {
        let edges = [0, 1, 2, 7, 1000, 1 << 20, 1 << 31, 1 << 40, i64::MAX];
        for dims in 1..=MAX_DIMS {
            for &a in &edges {
                for &b in &edges {
                    let index: Vec<i64> =
                        (0..dims).map(|d| if d % 2 == 0 { a } else { b }).collect();
                    if let Some(small) = small_cantor_number(&index) {
                        assert_eq!(small, wide_cantor_number(&index), "{index:?}");
                    }
                    let wide = wide_cantor_number(&index);
                    assert_eq!(cantor_number(&Coordinate::new(&index)), wide, "{index:?}");
                }
            }
        }
    }

    #[test]
    fn block_id_comes_from_the_write_offset_in_the_total_roi() {
        let total = Roi::from_slices(&[0, 0], &[6, 6]);
        let block = Block::new(
            TaskIdx(3),
            &total,
            Roi::from_slices(&[1, 1], &[3, 3]),
            Roi::from_slices(&[2, 2], &[1, 1]),
        );
        assert_eq!(
            block.id,
            BlockId {
                task: TaskIdx(3),
                spatial: 12
            }
        );
    }
}
