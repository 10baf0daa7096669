//! How many blocks the worker asks for per `AcquireBlocks`.
//!
//! A task gives a fixed `batch_size`, or 0 for "auto": then the worker
//! sizes its batches from how long its blocks take, so that one batch runs
//! for about [`AUTO_TARGET`]. Blocks of a few microseconds (a Python
//! no-op) then travel hundreds to a message, and blocks of seconds one at
//! a time, as if unbatched, without the user choosing.
//!
//! Growth is at most doubling per batch, judged by the slowest block of
//! the last batch, and a slow batch shrinks the size at once: a worker
//! whose blocks turn slow (a volume's empty border, then tissue) holds at
//! most about `AUTO_TARGET / fast block time` of them, never more than
//! [`MAX_AUTO_BATCH`].

use std::time::Duration;

/// How long one automatic batch should take.
pub const AUTO_TARGET: Duration = Duration::from_millis(10);

/// The largest automatic batch.
pub const MAX_AUTO_BATCH: u32 = 256;

/// The blocks to ask for next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchSize {
    Fixed(u32),
    /// `floor`: a worker command's `1 + prefetch`, never asked below.
    Auto {
        next: u32,
        floor: u32,
    },
}

impl BatchSize {
    /// `configured` as the task gives it (0 = auto), at least `floor`
    /// (a worker command's `1 + prefetch`).
    pub fn new(configured: u32, floor: u32) -> Self {
        match configured {
            0 => Self::Auto {
                next: floor.max(1),
                floor: floor.max(1),
            },
            n => Self::Fixed(n.max(floor).max(1)),
        }
    }

    pub fn next(&self) -> u32 {
        match self {
            Self::Fixed(n) => *n,
            Self::Auto { next, .. } => *next,
        }
    }

    /// Adapts an automatic size to the slowest block of the last batch.
    pub fn observe(&mut self, slowest: Option<Duration>) {
        let (Self::Auto { next, floor }, Some(slowest)) = (&mut *self, slowest) else {
            return;
        };
        let fits = AUTO_TARGET.as_secs_f64() / slowest.as_secs_f64().max(1e-9);
        let fits = fits.clamp(1.0, f64::from(MAX_AUTO_BATCH)) as u32;
        *next = fits.min(next.saturating_mul(2)).max(*floor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(mut size: BatchSize, slowest: &[u64]) -> u32 {
        for micros in slowest {
            size.observe(Some(Duration::from_micros(*micros)));
        }
        size.next()
    }

    #[test]
    fn a_fixed_size_stays_and_respects_the_floor() {
        assert_eq!(after(BatchSize::new(8, 1), &[1, 1, 1]), 8);
        assert_eq!(after(BatchSize::new(2, 4), &[1]), 4);
    }

    #[test]
    fn auto_starts_small_and_doubles_while_blocks_are_fast() {
        let size = BatchSize::new(0, 1);
        assert_eq!(size.next(), 1);
        assert_eq!(after(size.clone(), &[5]), 2);
        assert_eq!(after(size.clone(), &[5, 5, 5]), 8);
        assert_eq!(after(size, &[5; 20]), MAX_AUTO_BATCH);
    }

    #[test]
    fn auto_shrinks_at_once_when_blocks_turn_slow() {
        let fast = after(BatchSize::new(0, 1), &[5; 20]);
        assert_eq!(fast, MAX_AUTO_BATCH);
        let mut size = BatchSize::Auto {
            next: fast,
            floor: 1,
        };
        size.observe(Some(Duration::from_millis(2)));
        assert_eq!(size.next(), 5);
        size.observe(Some(Duration::from_secs(3)));
        assert_eq!(size.next(), 1);
    }

    #[test]
    fn auto_keeps_a_worker_commands_floor_and_ignores_empty_batches() {
        let mut size = BatchSize::new(0, 3);
        size.observe(None);
        assert_eq!(size.next(), 3);
    }
}
