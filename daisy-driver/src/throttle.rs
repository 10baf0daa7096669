//! Bounds how often one kind of trouble is logged: the first few
//! occurrences of each window are said in full, the rest are counted and
//! said as one number once the window is over. So a flood of refused
//! connections or a full disk is reported, with its extent, without
//! writing a line per occurrence.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Throttle {
    window: Duration,
    /// Occurrences said in full per window.
    per_window: u32,
    /// When the current window began; none before the first occurrence.
    began: Option<Instant>,
    said: u32,
    /// Occurrences of the current window not said yet.
    unsaid: u64,
    /// Every occurrence so far.
    total: u64,
}

impl Throttle {
    pub fn new(window: Duration, per_window: u32) -> Self {
        Self {
            window,
            per_window,
            began: None,
            said: 0,
            unsaid: 0,
            total: 0,
        }
    }

    /// Counts an occurrence at `now`; true if it is to be said in full.
    pub fn admit(&mut self, now: Instant) -> bool {
        self.total += 1;
        if self.unsaid == 0 && self.window_over(now) {
            self.begin(now);
        }
        if self.said < self.per_window {
            self.said += 1;
            true
        } else {
            self.unsaid += 1;
            false
        }
    }

    /// The occurrences not said in full, once their window is over by
    /// `now` (a new window begins then).
    pub fn take_unsaid(&mut self, now: Instant) -> Option<u64> {
        if self.unsaid == 0 || !self.window_over(now) {
            return None;
        }
        self.begin(now);
        Some(std::mem::take(&mut self.unsaid))
    }

    /// Every occurrence so far, said or not.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    fn window_over(&self, now: Instant) -> bool {
        self.began
            .is_none_or(|began| now.duration_since(began) >= self.window)
    }

    fn begin(&mut self, now: Instant) {
        self.began = Some(now);
        self.said = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(10);

    #[test]
    fn the_first_few_of_a_window_are_said_the_rest_counted_once_it_is_over() {
        let mut throttle = Throttle::new(WINDOW, 2);
        let start = Instant::now();
        let said: Vec<bool> = (0..5).map(|_| throttle.admit(start)).collect();
        assert_eq!(said, [true, true, false, false, false]);
        assert_eq!(
            throttle.take_unsaid(start + WINDOW / 2),
            None,
            "not over yet"
        );
        assert_eq!(throttle.take_unsaid(start + WINDOW), Some(3));
        assert_eq!(throttle.take_unsaid(start + WINDOW * 3), None, "said once");
        assert_eq!(throttle.total(), 5);
    }

    #[test]
    fn a_new_window_says_the_first_few_again() {
        let mut throttle = Throttle::new(WINDOW, 1);
        let start = Instant::now();
        assert!(throttle.admit(start));
        assert!(!throttle.admit(start));
        // Until the count is said, the window goes on.
        assert!(!throttle.admit(start + WINDOW * 2));
        assert_eq!(throttle.take_unsaid(start + WINDOW * 2), Some(2));
        assert!(throttle.admit(start + WINDOW * 2));
        assert!(throttle.admit(start + WINDOW * 4));
        assert_eq!(throttle.take_unsaid(start + WINDOW * 5), None);
    }
}
