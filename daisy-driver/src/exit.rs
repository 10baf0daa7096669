//! How the driver ends: its exit statuses and its error line, the
//! contract with whoever started it (a shell, a batch system, `daisy_rs`
//! in Python). Defined once here: the `daisy-driver` binary, the Python
//! module's entry points and its driver thread all end through
//! [`status_of`], and Python reads the statuses from the native module
//! instead of declaring them again.

/// Every block of every task is done.
pub const SUCCESS: u8 = 0;
/// Some blocks failed for good or are orphaned.
pub const FAILED: u8 = 1;
/// An error before or outside the run: a usage or pipeline error, a run
/// directory another driver holds, a port in use, a launcher missing.
pub const ERROR: u8 = 2;
/// Blocks remain and none failed: running, stopped, or left by a
/// `--retry-failed` run.
pub const INCOMPLETE: u8 = 3;
/// Every block is done, but the event log could not be written in full.
pub const EVENTS_LOST: u8 = 4;
/// The driver panicked (Rust's status for a process that panics).
pub const PANICKED: u8 = 101;
/// The run was stopped by Ctrl-C or SIGTERM (128 + SIGINT, as shells say).
pub const INTERRUPTED: u8 = 130;

/// The status a command of the driver ends with: its own, or [`ERROR`]
/// after the error line on stderr.
pub fn status_of(result: anyhow::Result<u8>) -> u8 {
    result.unwrap_or_else(|error| {
        eprintln!("daisy-driver: error: {error:#}");
        ERROR
    })
}
