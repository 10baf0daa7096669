//! Blocks per second *now*, for live status: completions counted per
//! second over the last [`WINDOW_S`] seconds, so the pace shown follows
//! a run that speeds up or slows down instead of averaging over hours.
//! Fixed memory, one addition per completion.

use std::time::Instant;

/// How far back "now" reaches.
pub const WINDOW_S: u64 = 30;

/// Completions in the last [`WINDOW_S`] seconds.
#[derive(Clone, Debug)]
pub struct RecentRate {
    start: Instant,
    /// Per second of the window, `(second since start, completions)`;
    /// the second `s` lives at `s % WINDOW_S`, a stale entry is reused.
    seconds: [(u64, u32); WINDOW_S as usize],
}

impl RecentRate {
    pub fn new(start: Instant) -> Self {
        Self {
            start,
            seconds: [(u64::MAX, 0); WINDOW_S as usize],
        }
    }

    /// One completion at `now`.
    pub fn record(&mut self, now: Instant) {
        let second = self.second(now);
        let entry = &mut self.seconds[(second % WINDOW_S) as usize];
        if entry.0 != second {
            *entry = (second, 0);
        }
        entry.1 += 1;
    }

    /// Completions per second over the window ending at `now` (shorter
    /// while the run is younger than the window).
    pub fn per_second(&self, now: Instant) -> f64 {
        let second = self.second(now);
        let from = (second + 1).saturating_sub(WINDOW_S);
        let count: u64 = self
            .seconds
            .iter()
            .filter(|(s, _)| (from..=second).contains(s))
            .map(|(_, n)| u64::from(*n))
            .sum();
        let span = now.duration_since(self.start).as_secs_f64() - from as f64;
        if span <= 0.0 {
            return 0.0;
        }
        count as f64 / span
    }

    fn second(&self, now: Instant) -> u64 {
        now.duration_since(self.start).as_secs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_rate_covers_only_the_last_window() {
        let start = Instant::now();
        let at = |s: f64| start + Duration::from_secs_f64(s);
        let mut rate = RecentRate::new(start);
        assert_eq!(rate.per_second(at(5.0)), 0.0);
        for i in 0..20 {
            rate.record(at(0.5 + i as f64 * 0.5)); // 2 per second for 10 s
        }
        assert!((rate.per_second(at(10.0)) - 2.0).abs() < 0.11);
        // Long after: the old completions fell out of the window.
        assert_eq!(rate.per_second(at(100.0)), 0.0);
        rate.record(at(100.2));
        // The window is seconds 72..=101, 29 s of which have passed.
        let now = rate.per_second(at(101.0));
        assert!((now - 1.0 / 29.0).abs() < 1e-9, "{now}");
    }
}
