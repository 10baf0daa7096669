//! A run's `events.jsonl` as the run loops write it, and what it says
//! when the file cannot be written: a run goes on when its event log
//! fails (the done markers are what must not), but never silently. The
//! first failures of each window are logged as warnings with the count so
//! far, the rest as one count when the window is over (a full disk fails
//! every line).

use crate::run_dir::events::{Event, EventLog};
use crate::throttle::Throttle;
use std::time::{Duration, Instant};

/// How often write failures are summed up, and how many are told in full
/// before that.
const WINDOW: Duration = Duration::from_secs(30);
const TOLD_PER_WINDOW: u32 = 3;

pub struct EventRecorder {
    log: EventLog,
    failures: Throttle,
}

impl EventRecorder {
    pub fn new(log: EventLog) -> Self {
        Self {
            log,
            failures: Throttle::new(WINDOW, TOLD_PER_WINDOW),
        }
    }

    /// Writes one event at once (after any buffered ones).
    pub fn record(&mut self, event: &Event) {
        let written = self.log.record(event);
        self.check(written);
    }

    /// Buffers one event that happened at `time` (Unix seconds).
    pub fn record_buffered_at(&mut self, time: f64, event: &Event) {
        let written = self.log.record_buffered_at(time, event);
        self.check(written);
    }

    /// Writes the buffered events, and sums up the failures of a window
    /// that is over.
    pub fn flush(&mut self) {
        let written = self.log.flush();
        self.check(written);
        if let Some(count) = self.failures.take_unsaid(Instant::now()) {
            tracing::warn!(
                "{count} more writes to {} failed in the last {:?} ({} so far)",
                self.log.path().display(),
                self.failures.window(),
                self.failures.total()
            );
        }
    }

    /// How many writes failed in this run.
    pub fn failed_writes(&self) -> u64 {
        self.failures.total()
    }

    fn check(&mut self, written: std::io::Result<()>) {
        let Err(error) = written else {
            return;
        };
        if self.failures.admit(Instant::now()) {
            tracing::warn!(
                "cannot write to {}: {error} ({} failed writes so far; the run goes on)",
                self.log.path().display(),
                self.failures.total()
            );
        }
    }
}
