//! The per-block timeout of in-process code: a thread that notices a block
//! running past the task's `timeout` and tells the runtime which one, so
//! that the worker can report it and end (the only way to stop a call
//! into an interpreter).

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The running blocks and when each must be done by.
#[derive(Default)]
struct Deadlines {
    running: BTreeMap<u64, Instant>,
    /// The runner is gone: the thread ends.
    closed: bool,
}

/// Watches the blocks of one worker's in-process code.
pub struct Watchdog {
    timeout: Duration,
    state: Arc<(Mutex<Deadlines>, Condvar)>,
}

impl Watchdog {
    /// A watchdog for blocks of at most `timeout`, and the receiver that
    /// gets the first block found past it; fails only if no thread can be
    /// started.
    pub fn start(timeout: Duration) -> std::io::Result<(Self, oneshot::Receiver<u64>)> {
        let (overdue_tx, overdue_rx) = oneshot::channel();
        let state = Arc::new((Mutex::new(Deadlines::default()), Condvar::new()));
        let watched = Arc::clone(&state);
        std::thread::Builder::new()
            .name("daisy-block-watchdog".into())
            .spawn(move || watch(&watched, overdue_tx))?;
        Ok((Self { timeout, state }, overdue_rx))
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Block `block_id` starts now.
    pub fn started(&self, block_id: u64) {
        let deadline = Instant::now() + self.timeout;
        self.update(|d| {
            d.running.insert(block_id, deadline);
        });
    }

    /// Block `block_id` ended.
    pub fn finished(&self, block_id: u64) {
        self.update(|d| {
            d.running.remove(&block_id);
        });
    }

    fn update(&self, change: impl FnOnce(&mut Deadlines)) {
        let (lock, wake) = &*self.state;
        change(&mut lock.lock().unwrap_or_else(PoisonError::into_inner));
        wake.notify_one();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.update(|d| d.closed = true);
    }
}

/// Sleeps until the earliest deadline (or a change), and sends the block
/// that passed it.
fn watch(state: &(Mutex<Deadlines>, Condvar), overdue: oneshot::Sender<u64>) {
    let (lock, wake) = state;
    let mut deadlines = lock.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if deadlines.closed {
            return;
        }
        let earliest = deadlines.running.iter().min_by_key(|(_, at)| **at);
        let Some((&block_id, &at)) = earliest else {
            deadlines = wake.wait(deadlines).unwrap_or_else(PoisonError::into_inner);
            continue;
        };
        let now = Instant::now();
        if now >= at {
            let _ = overdue.send(block_id);
            return;
        }
        deadlines = wake
            .wait_timeout(deadlines, at - now)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_block_past_its_timeout_is_named_and_a_finished_one_is_not() {
        let (watchdog, overdue) = Watchdog::start(Duration::from_millis(50)).unwrap();
        watchdog.started(1);
        watchdog.finished(1);
        watchdog.started(2);
        let late = tokio::time::timeout(Duration::from_secs(60), overdue).await;
        assert_eq!(late.expect("the watchdog fired").ok(), Some(2));
    }
}
