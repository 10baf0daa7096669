//! What every cluster backend (sbatch, bsub, slurmrestd) sets the same
//! way: how often it asks for job states (and how it spaces them out after
//! failures), how it retries a failing submission or cancellation, and
//! whether dropping it cancels its jobs.

use std::time::{Duration, Instant};

/// How often the driver should poll the scheduler: often enough to notice
/// a failed start within a minute, rarely enough not to load it.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(30);

/// Pauses between attempts of a transiently failing submission or
/// cancellation.
pub const DEFAULT_RETRY_DELAYS: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// The longest pause between status polls after repeated failures.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pacing {
    pub poll_interval: Duration,
    /// Pauses between attempts of a transiently failing call (one attempt
    /// more than pauses).
    pub retry_delays: Vec<Duration>,
    pub cancel_on_drop: bool,
}

impl Default for Pacing {
    fn default() -> Self {
        Self {
            poll_interval: DEFAULT_POLL_INTERVAL,
            retry_delays: DEFAULT_RETRY_DELAYS.to_vec(),
            cancel_on_drop: true,
        }
    }
}

/// The builder methods of a backend's [`Pacing`].
pub trait Paced: Sized {
    fn pacing_mut(&mut self) -> &mut Pacing;

    /// Polls every `interval` instead of [`DEFAULT_POLL_INTERVAL`].
    fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.pacing_mut().poll_interval = interval;
        self
    }

    /// Pauses between attempts of transiently failing submissions and
    /// cancellations (one attempt more than pauses); tests use short ones.
    fn with_retry_delays(mut self, delays: Vec<Duration>) -> Self {
        self.pacing_mut().retry_delays = delays;
        self
    }

    /// Whether dropping the launcher cancels the jobs still queued or
    /// running (default yes); `false` leaves them to finish on their own.
    fn with_cancel_on_drop(mut self, cancel: bool) -> Self {
        self.pacing_mut().cancel_on_drop = cancel;
        self
    }
}

/// Spacing of status polls after failures: a job is never declared dead
/// because the scheduler was busy, and a busy scheduler is not asked
/// again at once.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Backoff {
    pub(crate) failures: u32,
    resume_at: Option<Instant>,
}

impl Backoff {
    pub(crate) fn waiting(&self) -> bool {
        self.waiting_at(Instant::now())
    }

    /// Whether the pause after the last failure lasts past `now`.
    pub(crate) fn waiting_at(&self, now: Instant) -> bool {
        self.resume_at.is_some_and(|at| now < at)
    }

    /// When the next attempt is due, if a failure made one wait.
    pub(crate) fn resume_at(&self) -> Option<Instant> {
        self.resume_at
    }

    /// After the n-th failure in a row, waits `interval * 2^(n-1)` (capped
    /// at [`MAX_BACKOFF`]) before the next attempt.
    pub(crate) fn failed(&mut self, interval: Duration) {
        self.failed_at(Instant::now(), interval);
    }

    /// [`Backoff::failed`] at a given time, so that tests need no sleep.
    pub(crate) fn failed_at(&mut self, now: Instant, interval: Duration) {
        self.failures += 1;
        let factor = 1u32 << (self.failures - 1).min(16);
        let pause = interval.saturating_mul(factor).min(MAX_BACKOFF);
        self.resume_at = Some(now + pause);
    }
}
