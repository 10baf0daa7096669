//! What every cluster backend (sbatch, bsub, slurmrestd) sets the same
//! way: how often it asks for job states, how it retries a failing
//! submission or cancellation, and whether dropping it cancels its jobs.

use crate::{DEFAULT_POLL_INTERVAL, DEFAULT_RETRY_DELAYS};
use std::time::Duration;

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
