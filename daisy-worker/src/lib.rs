//! daisy-worker: connects to a driver and runs user code on blocks.
//! (How the crates fit together: docs/architecture.md.)
//!
//! # Layout
//! - [`client`]: one connection to the driver ([`Client`]): handshake,
//!   heartbeats, acquire and release; usable in process by Rust programs.
//! - [`runtime`]: the worker's main loop ([`run`]): take a block, run the
//!   task's code on it, report, until the driver has no more work or the
//!   worker is asked to stop.
//! - `runner`: the task's code as the Welcome gives it, ready to run
//!   blocks (a block command, or a worker command restarted if it dies).
//! - [`user_code`]: the two ways user code runs: a block command started
//!   once per block, or a long-running worker command fed JSON lines.
//! - [`cost`]: what a block cost (CPU, memory, IO, GPU), for tasks that
//!   track resources.
//! - [`embedded`]: user code that is a function of an interpreter
//!   embedding this crate (the Python package), called in process.
//! - `drain`: when the worker stops starting blocks (a stop signal, the
//!   job's walltime); `job_end`: when the job's walltime ends.
//! - `pinning`: binding the worker to the cores the driver gave it.
//! - [`cli`]: the `daisy-worker` command line (context, exit codes).
//!
//! The serial `daisy-driver run` uses [`user_code`] in process.
mod batch_size;
pub mod cli;
pub mod client;
pub mod cost;
mod drain;
pub mod embedded;
mod job_end;
mod pinning;
mod runner;
pub mod runtime;
pub mod user_code;

/// Verbosity when RUST_LOG is unset: a worker's own messages, others'
/// warnings (its stderr is a log file of the run).
pub const DEFAULT_LOG: &str = "warn,daisy_worker=info,daisy_core=info";

/// The driver's verbosity when RUST_LOG is unset: warnings and errors (a
/// refused connection, an event log that cannot be written, a worker that
/// did not start), never silence.
pub const DRIVER_LOG: &str = "warn";

/// Log lines on stderr, `default` unless RUST_LOG says otherwise, in
/// colour on a terminal only (a launched process's stderr is a file).
/// The first call in a process wins; later ones change nothing.
pub fn init_logging(default: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

pub use client::{Acquired, Client, ClientError, ConnectError, ConnectOpts};
pub use pinning::PIN_ENV;
pub use runtime::{run, RunConfig, RunError, Stopped};

#[cfg(test)]
mod test_env;
/// The fake driver of the tests, shared with tests/cli.rs.
#[cfg(test)]
#[path = "../tests/peer/mod.rs"]
mod test_peer;
