//! `Coordinate`: a point or extent in n-dimensional voxel space.
//!
//! Coordinates are i64 per dimension and stored inline (no heap), because
//! the dependency graph creates millions of them per second; `Copy` keeps
//! the block arithmetic allocation-free. Division is floor division and
//! `%` is Python's modulo (the sign follows the divisor), as in daisy, so
//! block grids behave the same left of the origin as right of it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::ops::{Add, Div, Index, Mul, Neg, Rem, Sub};

/// The most dimensions a coordinate can have. Volumes in the field have
/// 2 to 5 (t, c, z, y, x); 8 leaves room without costing much.
pub const MAX_DIMS: usize = 8;

/// The largest coordinate magnitude a task's regions may use (2^40, a
/// trillion voxels per axis): beyond any volume imaged, and small enough
/// that block arithmetic (ends, contexts, strides) cannot overflow i64.
pub const MAX_COORDINATE: u64 = 1 << 40;

/// `USED_SLOTS[n][d]` is all ones for `d < n`, else 0.
const USED_SLOTS: [[i64; MAX_DIMS]; MAX_DIMS + 1] = {
    let mut masks = [[0; MAX_DIMS]; MAX_DIMS + 1];
    let mut n = 0;
    while n <= MAX_DIMS {
        let mut d = 0;
        while d < n {
            masks[n][d] = -1;
            d += 1;
        }
        n += 1;
    }
    masks
};

/// A point or extent with up to [`MAX_DIMS`] i64 components.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Coordinate {
    /// A full word, not a byte: coordinates are copied as words, and a
    /// word read of a just-written byte stalls on store forwarding (a
    /// third of the graph benchmark's time when this was a `u8`).
    dims: usize,
    values: [i64; MAX_DIMS],
}

impl Coordinate {
    /// A coordinate from its components.
    ///
    /// # Panics
    /// If there are more than [`MAX_DIMS`] components; the pipeline file
    /// validation refuses such input before it gets here.
    #[inline]
    pub fn new(values: &[i64]) -> Self {
        assert!(
            values.len() <= MAX_DIMS,
            "at most {MAX_DIMS} dimensions are supported, got {}",
            values.len()
        );
        let mut inline = [0; MAX_DIMS];
        inline[..values.len()].copy_from_slice(values);
        Self {
            dims: values.len(),
            values: inline,
        }
    }

    /// All components equal to `value`.
    #[inline]
    pub fn splat(dims: usize, value: i64) -> Self {
        Self::new(&[value; MAX_DIMS][..dims])
    }

    #[inline]
    pub fn zeros(dims: usize) -> Self {
        Self::splat(dims, 0)
    }

    #[inline]
    pub fn dims(&self) -> usize {
        self.dims
    }

    #[inline]
    pub fn as_slice(&self) -> &[i64] {
        &self.values[..self.dims()]
    }

    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        self.as_slice().iter().copied()
    }

    /// Component-wise combination of two coordinates of equal dimension.
    // `always`: a plain hint leaves it a call in the graph's hot path
    // (block ids, levels), which costs a fifth of the graph benchmark.
    #[inline(always)]
    pub fn zip_with(&self, other: &Self, f: impl Fn(i64, i64) -> i64) -> Self {
        debug_assert_eq!(self.dims, other.dims, "dimension mismatch");
        let mut out = *self;
        for d in 0..self.dims() {
            out.values[d] = f(self.values[d], other.values[d]);
        }
        out
    }

    /// Component-wise transform.
    #[inline]
    pub fn map(&self, f: impl Fn(i64) -> i64) -> Self {
        let mut out = *self;
        for d in 0..self.dims() {
            out.values[d] = f(self.values[d]);
        }
        out
    }

    /// `f(self[d], rhs[d])` for every one of the `MAX_DIMS` slots at once,
    /// for operators with `f(0, 0) == 0`: slots past `dims` hold 0 in both
    /// (every constructor zeroes them), so they stay 0.
    ///
    /// On the graph's hot path: a loop of fixed length without branches
    /// or masks becomes a few vector instructions whose results are stored
    /// whole; `zip_with`'s loop over `0..dims` goes through memory slot by
    /// slot, and a copy of a coordinate stored slot by slot stalls on store
    /// forwarding (`cargo bench -p daisy-core --bench graph`).
    #[inline(always)]
    fn lanewise(&self, rhs: &[i64; MAX_DIMS], f: impl Fn(i64, i64) -> i64) -> Self {
        let mut values = [0; MAX_DIMS];
        for d in 0..MAX_DIMS {
            values[d] = f(self.values[d], rhs[d]);
        }
        Self {
            dims: self.dims,
            values,
        }
    }

    /// `rhs` in the used slots of `self`, 0 past them.
    #[inline(always)]
    fn broadcast(&self, rhs: i64) -> [i64; MAX_DIMS] {
        let mask = &USED_SLOTS[self.dims()];
        std::array::from_fn(|d| rhs & mask[d])
    }

    #[inline]
    pub fn max(&self, other: &Self) -> Self {
        debug_assert_eq!(self.dims, other.dims, "dimension mismatch");
        self.lanewise(&other.values, i64::max)
    }

    #[inline]
    pub fn min(&self, other: &Self) -> Self {
        debug_assert_eq!(self.dims, other.dims, "dimension mismatch");
        self.lanewise(&other.values, i64::min)
    }

    /// Component-wise ceiling division.
    #[inline]
    pub fn div_ceil(&self, other: &Self) -> Self {
        self.zip_with(other, |a, b| -(-a).floor_div(b))
    }

    /// Product of the components (the volume of an extent).
    #[inline]
    pub fn product(&self) -> i64 {
        self.iter().product()
    }

    /// True if every component satisfies `f`.
    #[inline]
    pub fn all(&self, f: impl Fn(i64) -> bool) -> bool {
        self.iter().all(f)
    }

    /// Sets component `d`.
    #[inline]
    pub fn set(&mut self, d: usize, value: i64) {
        assert!(d < self.dims(), "dimension {d} out of range");
        self.values[d] = value;
    }

    /// [`Self::set`], checked in debug builds only: the check reads the
    /// dimension count, and in a block just copied into place that read
    /// waits for the copy to land (a third of the graph's neighbour
    /// lookups).
    #[inline(always)]
    pub(crate) fn set_in_place(&mut self, d: usize, value: i64) {
        debug_assert!(d < self.dims(), "dimension {d} out of range");
        self.values[d] = value;
    }
}

/// Floor division and Python-style modulo on i64 (the sign of the result of
/// `%` follows the divisor, unlike Rust's `%` and `rem_euclid`).
pub trait FloorDiv {
    fn floor_div(self, divisor: i64) -> i64;
    fn floor_mod(self, divisor: i64) -> i64;
}

impl FloorDiv for i64 {
    #[inline]
    fn floor_div(self, divisor: i64) -> i64 {
        let q = self / divisor;
        if (self % divisor != 0) && ((self < 0) != (divisor < 0)) {
            q - 1
        } else {
            q
        }
    }

    #[inline]
    fn floor_mod(self, divisor: i64) -> i64 {
        self - divisor * self.floor_div(divisor)
    }
}

impl Index<usize> for Coordinate {
    type Output = i64;
    #[inline]
    fn index(&self, d: usize) -> &i64 {
        &self.as_slice()[d]
    }
}

impl From<&[i64]> for Coordinate {
    #[inline]
    fn from(values: &[i64]) -> Self {
        Self::new(values)
    }
}

impl<const N: usize> From<[i64; N]> for Coordinate {
    #[inline]
    fn from(values: [i64; N]) -> Self {
        Self::new(&values)
    }
}

/// Operators that map (0, 0) to 0 work on all slots at once
/// (`lanewise`); division and modulo only on the used ones, as slots past
/// `dims` would divide by zero.
macro_rules! componentwise {
    ($trait:ident, $method:ident, $op:expr, lanewise) => {
        impl $trait for Coordinate {
            type Output = Coordinate;
            #[inline]
            fn $method(self, rhs: Coordinate) -> Coordinate {
                debug_assert_eq!(self.dims, rhs.dims, "dimension mismatch");
                self.lanewise(&rhs.values, $op)
            }
        }
        impl $trait<i64> for Coordinate {
            type Output = Coordinate;
            #[inline]
            fn $method(self, rhs: i64) -> Coordinate {
                self.lanewise(&self.broadcast(rhs), $op)
            }
        }
    };
    ($trait:ident, $method:ident, $op:expr) => {
        impl $trait for Coordinate {
            type Output = Coordinate;
            #[inline]
            fn $method(self, rhs: Coordinate) -> Coordinate {
                self.zip_with(&rhs, $op)
            }
        }
        impl $trait<i64> for Coordinate {
            type Output = Coordinate;
            #[inline]
            fn $method(self, rhs: i64) -> Coordinate {
                self.map(|a| $op(a, rhs))
            }
        }
    };
}

componentwise!(Add, add, |a: i64, b: i64| a + b, lanewise);
componentwise!(Sub, sub, |a: i64, b: i64| a - b, lanewise);
componentwise!(Mul, mul, |a: i64, b: i64| a * b, lanewise);
componentwise!(Div, div, |a: i64, b: i64| a.floor_div(b));
componentwise!(Rem, rem, |a: i64, b: i64| a.floor_mod(b));

impl Neg for Coordinate {
    type Output = Coordinate;
    #[inline]
    fn neg(self) -> Coordinate {
        self.lanewise(&[0; MAX_DIMS], |a, _| -a)
    }
}

impl fmt::Debug for Coordinate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Coordinate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, v) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{v}")?;
        }
        f.write_str("]")
    }
}

impl Serialize for Coordinate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Coordinate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let values = Vec::<i64>::deserialize(d)?;
        if values.len() > MAX_DIMS {
            return Err(serde::de::Error::custom(format!(
                "{} dimensions given, at most {MAX_DIMS} are supported",
                values.len()
            )));
        }
        Ok(Self::new(&values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_division_rounds_towards_negative_infinity() {
        assert_eq!(7i64.floor_div(2), 3);
        assert_eq!((-7i64).floor_div(2), -4);
        assert_eq!(7i64.floor_div(-2), -4);
        assert_eq!((-7i64).floor_div(-2), 3);
        assert_eq!((-6i64).floor_div(3), -2);
    }

    #[test]
    fn modulo_takes_the_sign_of_the_divisor() {
        assert_eq!(7i64.floor_mod(3), 1);
        assert_eq!((-7i64).floor_mod(3), 2);
        assert_eq!(7i64.floor_mod(-3), -2);
        assert_eq!((-7i64).floor_mod(-3), -1);
    }

    #[test]
    fn componentwise_arithmetic() {
        let a = Coordinate::from([-3, 4, 10]);
        let b = Coordinate::from([2, 3, 5]);
        assert_eq!(a + b, Coordinate::from([-1, 7, 15]));
        assert_eq!(a - b, Coordinate::from([-5, 1, 5]));
        assert_eq!(a / b, Coordinate::from([-2, 1, 2]));
        assert_eq!(a % b, Coordinate::from([1, 1, 0]));
        assert_eq!(a.div_ceil(&b), Coordinate::from([-1, 2, 2]));
        assert_eq!(-a, Coordinate::from([3, -4, -10]));
        assert_eq!(a.max(&b), Coordinate::from([2, 4, 10]));
        assert_eq!(b.product(), 30);
    }
}
