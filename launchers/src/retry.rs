//! Retrying a scheduler call (sbatch, bkill, `POST /job/submit`...) that
//! failed for a passing reason, for every cluster backend.
//!
//! Each backend says what one failed call means as a [`CallError`]:
//! *transient* (the controller is busy, restarting or unreachable, the
//! call timed out: the same call may succeed in a moment) or *permanent*
//! (a refusal: invalid partition, unknown job, missing program: trying
//! again cannot help). [`retrying`] repeats transient failures after each
//! of the pacing's retry delays and gives up at once on a permanent one.

use std::fmt;
use std::time::Duration;

/// Why a call failed, by whether trying it again can help. A permanent
/// failure keeps the backend's own reason (`R`), because callers act on
/// it (a program that could not be started, SLURM's error numbers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CallError<R> {
    /// Passing trouble, with the scheduler's message.
    Transient(String),
    /// A refusal, in the backend's terms.
    Permanent(R),
}

impl<R: fmt::Display> fmt::Display for CallError<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Transient(message) => f.write_str(message),
            CallError::Permanent(reason) => reason.fmt(f),
        }
    }
}

/// Calls `call` until it succeeds or fails permanently, pausing for each
/// of `delays` in turn after a transient failure (so one try more than
/// pauses); the last failure when they run out. Every try counts in
/// `count`; `what` names the call in the log ("sbatch", "bkill").
pub(crate) fn retrying<T, R>(
    delays: &[Duration],
    count: &mut u64,
    what: &str,
    mut call: impl FnMut() -> Result<T, CallError<R>>,
) -> Result<T, CallError<R>> {
    let mut delays = delays.iter();
    loop {
        *count += 1;
        match (call(), delays.next()) {
            (Err(CallError::Transient(message)), Some(delay)) => {
                tracing::warn!(what, %message, retry_in = ?delay, "transient scheduler failure; retrying");
                std::thread::sleep(*delay);
            }
            (result, _) => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_PAUSES: [Duration; 4] = [Duration::ZERO; 4];

    #[test]
    fn transient_failures_are_retried_until_success() {
        let (mut count, mut tries) = (0, 0);
        let result: Result<_, CallError<()>> = retrying(&NO_PAUSES, &mut count, "test", || {
            tries += 1;
            match tries {
                1 | 2 => Err(CallError::Transient("LSF is down. Please wait ...".into())),
                _ => Ok(tries),
            }
        });
        assert_eq!((result, count), (Ok(3), 3));
    }

    #[test]
    fn a_refusal_is_not_retried() {
        let mut count = 0;
        let result: Result<(), _> = retrying(&NO_PAUSES, &mut count, "test", || {
            Err(CallError::Permanent("Invalid partition name specified"))
        });
        assert_eq!(count, 1);
        assert_eq!(
            result,
            Err(CallError::Permanent("Invalid partition name specified"))
        );
    }

    #[test]
    fn trouble_outlasting_the_pauses_is_the_last_transient_failure() {
        let mut count = 0;
        let result: Result<(), CallError<()>> =
            retrying(&NO_PAUSES[..2], &mut count, "test", || {
                Err(CallError::Transient("Socket timed out".into()))
            });
        assert_eq!(count, 3, "one try and a retry after each pause");
        assert_eq!(result, Err(CallError::Transient("Socket timed out".into())));
    }
}
