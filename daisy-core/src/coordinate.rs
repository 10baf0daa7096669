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

/// A point or extent with up to [`MAX_DIMS`] i64 components.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Coordinate {
    dims: u8,
    values: [i64; MAX_DIMS],
}

impl Coordinate {
    /// A coordinate from its components.
    ///
    /// # Panics
    /// If there are more than [`MAX_DIMS`] components; the pipeline file
    /// validation refuses such input before it gets here.
    pub fn new(values: &[i64]) -> Self {
        assert!(
            values.len() <= MAX_DIMS,
            "at most {MAX_DIMS} dimensions are supported, got {}",
            values.len()
        );
        let mut inline = [0; MAX_DIMS];
        inline[..values.len()].copy_from_slice(values);
        Self {
            dims: values.len() as u8,
            values: inline,
        }
    }

    /// All components equal to `value`.
    pub fn splat(dims: usize, value: i64) -> Self {
        Self::new(&vec![value; dims])
    }

    pub fn zeros(dims: usize) -> Self {
        Self::splat(dims, 0)
    }

    pub fn dims(&self) -> usize {
        self.dims as usize
    }

    pub fn as_slice(&self) -> &[i64] {
        &self.values[..self.dims()]
    }

    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        self.as_slice().iter().copied()
    }

    /// Component-wise combination of two coordinates of equal dimension.
    pub fn zip_with(&self, other: &Self, f: impl Fn(i64, i64) -> i64) -> Self {
        debug_assert_eq!(self.dims, other.dims, "dimension mismatch");
        let mut out = *self;
        for d in 0..self.dims() {
            out.values[d] = f(self.values[d], other.values[d]);
        }
        out
    }

    /// Component-wise transform.
    pub fn map(&self, f: impl Fn(i64) -> i64) -> Self {
        let mut out = *self;
        for d in 0..self.dims() {
            out.values[d] = f(self.values[d]);
        }
        out
    }

    pub fn max(&self, other: &Self) -> Self {
        self.zip_with(other, i64::max)
    }

    pub fn min(&self, other: &Self) -> Self {
        self.zip_with(other, i64::min)
    }

    /// Component-wise ceiling division.
    pub fn div_ceil(&self, other: &Self) -> Self {
        self.zip_with(other, |a, b| -(-a).floor_div(b))
    }

    /// Product of the components (the volume of an extent).
    pub fn product(&self) -> i64 {
        self.iter().product()
    }

    /// True if every component satisfies `f`.
    pub fn all(&self, f: impl Fn(i64) -> bool) -> bool {
        self.iter().all(f)
    }

    /// Sets component `d`.
    pub fn set(&mut self, d: usize, value: i64) {
        assert!(d < self.dims(), "dimension {d} out of range");
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
    fn floor_div(self, divisor: i64) -> i64 {
        let q = self / divisor;
        if (self % divisor != 0) && ((self < 0) != (divisor < 0)) {
            q - 1
        } else {
            q
        }
    }

    fn floor_mod(self, divisor: i64) -> i64 {
        self - divisor * self.floor_div(divisor)
    }
}

impl Index<usize> for Coordinate {
    type Output = i64;
    fn index(&self, d: usize) -> &i64 {
        &self.as_slice()[d]
    }
}

impl From<&[i64]> for Coordinate {
    fn from(values: &[i64]) -> Self {
        Self::new(values)
    }
}

impl<const N: usize> From<[i64; N]> for Coordinate {
    fn from(values: [i64; N]) -> Self {
        Self::new(&values)
    }
}

macro_rules! componentwise {
    ($trait:ident, $method:ident, $op:expr) => {
        impl $trait for Coordinate {
            type Output = Coordinate;
            fn $method(self, rhs: Coordinate) -> Coordinate {
                self.zip_with(&rhs, $op)
            }
        }
        impl $trait<i64> for Coordinate {
            type Output = Coordinate;
            fn $method(self, rhs: i64) -> Coordinate {
                self.map(|a| $op(a, rhs))
            }
        }
    };
}

componentwise!(Add, add, |a: i64, b: i64| a + b);
componentwise!(Sub, sub, |a: i64, b: i64| a - b);
componentwise!(Mul, mul, |a: i64, b: i64| a * b);
componentwise!(Div, div, |a: i64, b: i64| a.floor_div(b));
componentwise!(Rem, rem, |a: i64, b: i64| a.floor_mod(b));

impl Neg for Coordinate {
    type Output = Coordinate;
    fn neg(self) -> Coordinate {
        self.map(|a| -a)
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
