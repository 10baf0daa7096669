//! When a worker stops starting blocks: once it drains (a signal, or the
//! driver's say), or when its job's walltime is too short for another
//! block. Shared between the runtime and the thread running blocks, which
//! asks before every block, so a batch stops part-way and the rest of it
//! is handed back instead of being killed at the time limit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Time kept free at the end of a job, on top of the longest block seen:
/// for reporting the last results, handing back the rest and closing.
pub const WALLTIME_MARGIN: Duration = Duration::from_secs(10);

/// A block may start only if the job has this many times the longest
/// block seen so far left (plus the margin): block times vary.
const LONGEST_BLOCK_FACTOR: f64 = 1.5;

#[derive(Debug)]
pub struct Drain {
    draining: AtomicBool,
    /// When the job will be ended by its scheduler, if known.
    job_end: Option<Instant>,
    longest_block_ms: AtomicU64,
}

impl Drain {
    pub fn new(job_end: Option<Instant>) -> Self {
        Self {
            draining: AtomicBool::new(false),
            job_end,
            longest_block_ms: AtomicU64::new(0),
        }
    }

    /// No block starts from now on.
    pub fn begin(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Records how long a block ran, for the walltime estimate.
    pub fn observe(&self, block_time: Duration) {
        let ms = u64::try_from(block_time.as_millis()).unwrap_or(u64::MAX);
        self.longest_block_ms.fetch_max(ms, Ordering::Relaxed);
    }

    pub fn may_start_block(&self) -> bool {
        !self.draining.load(Ordering::Relaxed) && self.walltime_too_short().is_none()
    }

    /// When the job's remaining walltime becomes too short for another
    /// block (as long as no longer block is seen), if the job has an end.
    pub fn walltime_deadline(&self) -> Option<Instant> {
        let end = self.job_end?;
        let needed = self.longest_block().mul_f64(LONGEST_BLOCK_FACTOR) + WALLTIME_MARGIN;
        Some(end.checked_sub(needed).unwrap_or_else(Instant::now))
    }

    fn longest_block(&self) -> Duration {
        Duration::from_millis(self.longest_block_ms.load(Ordering::Relaxed))
    }

    /// Why the job's remaining walltime is too short for another block,
    /// if it is.
    pub fn walltime_too_short(&self) -> Option<String> {
        let end = self.job_end?;
        let now = Instant::now();
        let left = end.saturating_duration_since(now);
        let longest = self.longest_block();
        (now >= self.walltime_deadline()?).then(|| {
            format!(
                "the job's walltime ends in {}s, too soon for another block \
                 (the longest took {:.1}s)",
                left.as_secs(),
                longest.as_secs_f64()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_walltime_only_draining_stops_blocks() {
        let drain = Drain::new(None);
        drain.observe(Duration::from_secs(3600));
        assert!(drain.may_start_block());
        drain.begin();
        assert!(!drain.may_start_block());
    }

    #[test]
    fn blocks_stop_when_the_walltime_left_is_shorter_than_the_longest_block() {
        let end = Instant::now() + WALLTIME_MARGIN + Duration::from_secs(60);
        let drain = Drain::new(Some(end));
        assert!(drain.may_start_block());
        drain.observe(Duration::from_secs(20));
        assert!(drain.may_start_block(), "30s needed, about 60s left");
        drain.observe(Duration::from_secs(50));
        let why = drain.walltime_too_short().expect("75s needed");
        assert!(why.contains("the longest took 50.0s"), "{why}");
        assert!(!drain.may_start_block());
    }

    #[test]
    fn a_job_already_past_its_end_starts_nothing() {
        let drain = Drain::new(Some(Instant::now()));
        assert!(drain.walltime_too_short().is_some());
    }
}
