//! `Divisor`: floor division of coordinates by a fixed positive
//! coordinate, by multiplication.
//!
//! Finding a block's grid cell and level divides its position by the
//! write shape and the level spacing, once per dimension each: a dozen
//! hardware divisions per `upstream` call, a fifth of the graph
//! benchmark's time. The divisors are fixed per task, so each becomes a
//! multiplication by a precomputed reciprocal (Granlund and Montgomery's
//! method, in its simplest form), exact where the numerator is small
//! enough; anything else takes the division.

use crate::coordinate::{Coordinate, FloorDiv, MAX_DIMS};

/// One positive divisor per dimension, with its reciprocal.
#[derive(Clone, Copy, Debug)]
pub struct Divisor {
    divisor: Coordinate,
    /// `ceil(2^64 / d)` per dimension.
    reciprocal: [u128; MAX_DIMS],
    /// Numerators in `0..=limit` divide exactly by multiplication.
    limit: [i64; MAX_DIMS],
}

impl Divisor {
    /// # Panics
    /// If a component of `divisor` is not positive (grid shapes and
    /// strides are, once the geometry is checked).
    pub fn new(divisor: Coordinate) -> Self {
        assert!(divisor.all(|d| d > 0), "divisor {divisor} is not positive");
        let mut reciprocal = [0; MAX_DIMS];
        let mut limit = [0; MAX_DIMS];
        for (slot, d) in divisor.iter().enumerate() {
            let d = d as u128;
            reciprocal[slot] = (1u128 << 64).div_ceil(d);
            // With n * d < 2^64, the reciprocal's rounding error (below
            // n / 2^64) stays below 1 / d: the quotient is exact.
            limit[slot] = (u64::MAX as u128 / d).min(i64::MAX as u128) as i64;
        }
        Self {
            divisor,
            reciprocal,
            limit,
        }
    }

    /// The divisor.
    pub fn get(&self) -> Coordinate {
        self.divisor
    }

    /// Floor quotient and Python-style remainder (the sign of the
    /// divisor, so never negative), as `/` and `%` on coordinates give.
    #[inline(always)]
    pub fn div_rem(&self, n: Coordinate) -> (Coordinate, Coordinate) {
        let (mut quotient, mut remainder) = (n, n);
        for d in 0..n.dims() {
            let q = self.quotient(d, n[d]);
            quotient.set(d, q);
            remainder.set(d, n[d] - q * self.divisor[d]);
        }
        (quotient, remainder)
    }

    #[inline(always)]
    fn quotient(&self, d: usize, n: i64) -> i64 {
        if (0..=self.limit[d]).contains(&n) {
            ((n as u128 * self.reciprocal[d]) >> 64) as i64
        } else {
            n.floor_div(self.divisor[d])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotients_and_remainders_match_floor_division() {
        let divisors = [1, 2, 3, 7, 10, 1 << 20, (1 << 40) - 1, 1 << 40, i64::MAX];
        let numerators = [
            0,
            1,
            9,
            10,
            11,
            -1,
            -10,
            -11,
            (1 << 44) + 3,
            (1 << 63) / 3,
            i64::MAX,
            -(1 << 44) - 5,
        ];
        for &d in &divisors {
            let divisor = Divisor::new(Coordinate::from([d, 3]));
            for &n in &numerators {
                let n = Coordinate::from([n, n / 2]);
                let expected = (n / divisor.get(), n % divisor.get());
                assert_eq!(divisor.div_rem(n), expected, "{n} / {}", divisor.get());
            }
        }
    }

    #[test]
    fn every_small_numerator_divides_exactly() {
        for d in 1..=64i64 {
            let divisor = Divisor::new(Coordinate::from([d]));
            for n in 0..5000i64 {
                let (q, r) = divisor.div_rem(Coordinate::from([n]));
                assert_eq!((q[0], r[0]), (n / d, n % d), "{n} / {d}");
            }
        }
    }
}
