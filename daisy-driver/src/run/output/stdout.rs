//! What the driver prints for people, written so that a stdout that went
//! away (a closed terminal, `| head`, a full disk behind a redirect) never
//! ends a run: `println!` panics on a failed write, and a run must not
//! die of its progress lines. `run --quiet` silences it all at once.

use std::fmt::Arguments;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by `run --quiet`. Process-wide, like stdout itself: the lines to
/// silence come from every part of a run (start-up, retries, progress,
/// summary), and a serial run from Python calls the driver in-process,
/// where a later call may not be quiet.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Whether [`print`] and [`print_line`] write from now on.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Writes `text` to stdout, ignoring a failure.
pub fn print(text: Arguments) {
    if QUIET.load(Ordering::Relaxed) {
        return;
    }
    let _ = std::io::stdout().lock().write_fmt(text);
}

/// [`print`] and a newline.
pub fn print_line(text: Arguments) {
    if QUIET.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_fmt(text)
        .and_then(|()| stdout.write_all(b"\n"));
}
