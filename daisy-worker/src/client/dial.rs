//! Reaching the driver: a worker's batch job may start before its driver
//! listens (or while it restarts), so unreachable addresses are retried
//! (and so is a driver too busy to take the connection, see [`Backoff`]),
//! all of them in order, with exponential backoff and jitter (so that a
//! thousand workers started together do not knock in lockstep), until the
//! connect timeout. An address that cannot be parsed is not retried.

use super::ConnectError;
use rand::Rng;
use std::io;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};

/// The first pause between rounds over all addresses; it doubles ...
const FIRST_DELAY: Duration = Duration::from_millis(100);
/// ... up to this.
const MAX_DELAY: Duration = Duration::from_secs(5);
/// One attempt gives up after this: a SYN to a host that does not answer
/// can hang for minutes, and the other addresses deserve their turn.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected stream (TCP_NODELAY on) and the address that answered.
pub(super) async fn dial(
    addresses: &[String],
    within: Duration,
) -> Result<(TcpStream, String), ConnectError> {
    if addresses.is_empty() {
        return Err(ConnectError::NoAddress);
    }
    let deadline = Instant::now() + within;
    let mut backoff = Backoff::until(deadline);
    let mut last_error = String::new();
    for round in 0.. {
        if let Some(found) = try_each(addresses, deadline, &mut last_error).await? {
            return Ok(found);
        }
        if round == 0 {
            tracing::info!("the driver is not reachable yet ({last_error}); retrying");
        }
        if !backoff.pause().await {
            break;
        }
    }
    Err(ConnectError::Unreachable {
        addresses: addresses.join(", "),
        timeout: within,
        last_error,
    })
}

/// The pauses between attempts: doubling from [`FIRST_DELAY`] up to
/// [`MAX_DELAY`], jittered, until a deadline.
pub(super) struct Backoff {
    delay: Duration,
    deadline: Instant,
}

impl Backoff {
    pub(super) fn until(deadline: Instant) -> Self {
        Self {
            delay: FIRST_DELAY,
            deadline,
        }
    }

    /// Sleeps before the next attempt; false if the deadline has passed.
    pub(super) async fn pause(&mut self) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        sleep(jitter(self.delay).min(left)).await;
        self.delay = (self.delay * 2).min(MAX_DELAY);
        true
    }
}

/// One round over all addresses; `None` if none answered.
async fn try_each(
    addresses: &[String],
    deadline: Instant,
    last_error: &mut String,
) -> Result<Option<(TcpStream, String)>, ConnectError> {
    for address in addresses {
        match attempt(address, deadline).await {
            Ok(stream) => return Ok(Some((stream, address.clone()))),
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                return Err(ConnectError::BadAddress {
                    address: address.clone(),
                    reason: e.to_string(),
                });
            }
            Err(e) => {
                tracing::debug!(%address, "cannot connect: {e}");
                *last_error = format!("{address}: {e}");
            }
        }
    }
    Ok(None)
}

async fn attempt(address: &str, deadline: Instant) -> io::Result<TcpStream> {
    let left = deadline.saturating_duration_since(Instant::now());
    let limit = ATTEMPT_TIMEOUT.min(left).max(FIRST_DELAY);
    let stream = timeout(limit, TcpStream::connect(address))
        .await
        .map_err(|_| {
            io::Error::new(io::ErrorKind::TimedOut, format!("no answer in {limit:?}"))
        })??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Between half of `delay` and all of it.
fn jitter(delay: Duration) -> Duration {
    rand::thread_rng().gen_range(delay / 2..=delay)
}
