//! slurmdbd learns a job's end a moment after the job leaves squeue's
//! listing (slurmctld hands it the record through a queue of its own), so
//! with accounting a `sacct` asked right away may not know the job yet. A
//! worker that neither sacct nor scontrol know is asked about again at
//! the next polls, and its end is called unknown only once it has stayed
//! unknown for [`ACCOUNTING_LAG`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long slurmdbd may take to know a job that left the queue. It is
/// usually well under a second; a busy database takes longer, and a
/// worker reported a few seconds late costs nothing.
pub(crate) const ACCOUNTING_LAG: Duration = Duration::from_secs(10);

/// Since when each worker that left the queue has been unknown.
#[derive(Debug)]
pub(crate) struct UnknownEnds {
    since: BTreeMap<u64, Instant>,
    grace: Duration,
}

impl Default for UnknownEnds {
    fn default() -> Self {
        Self::with_grace(ACCOUNTING_LAG)
    }
}

impl UnknownEnds {
    pub(crate) fn with_grace(grace: Duration) -> Self {
        Self {
            since: BTreeMap::new(),
            grace,
        }
    }

    /// Whether `worker`, unknown at `now`, has been unknown for the whole
    /// grace (first seen unknown now counts from now).
    pub(crate) fn given_up(&mut self, worker: u64, now: Instant) -> bool {
        let since = *self.since.entry(worker).or_insert(now);
        let given_up = now.saturating_duration_since(since) >= self.grace;
        if given_up {
            self.since.remove(&worker);
        }
        given_up
    }

    /// Forgets the workers `keep` refuses (resolved, cancelled).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        self.since.retain(|worker, _| keep(*worker));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_given_up_only_after_the_grace() {
        let start = Instant::now();
        let mut unknown = UnknownEnds::with_grace(Duration::from_secs(10));
        assert!(!unknown.given_up(3, start));
        assert!(!unknown.given_up(3, start + Duration::from_secs(9)));
        assert!(
            !unknown.given_up(4, start + Duration::from_secs(9)),
            "its own clock"
        );
        assert!(unknown.given_up(3, start + Duration::from_secs(10)));
        assert!(!unknown.given_up(4, start + Duration::from_secs(18)));
        assert!(unknown.given_up(4, start + Duration::from_secs(19)));
    }

    #[test]
    fn a_worker_known_meanwhile_starts_afresh_when_unknown_again() {
        let start = Instant::now();
        let mut unknown = UnknownEnds::with_grace(Duration::from_secs(10));
        assert!(!unknown.given_up(3, start));
        unknown.retain(|worker| worker != 3);
        assert!(!unknown.given_up(3, start + Duration::from_secs(30)));
    }

    #[test]
    fn without_grace_a_worker_is_given_up_at_once() {
        let mut unknown = UnknownEnds::with_grace(Duration::ZERO);
        assert!(unknown.given_up(3, Instant::now()));
    }
}
