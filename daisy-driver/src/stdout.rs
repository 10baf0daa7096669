//! What the driver prints for people, written so that a stdout that went
//! away (a closed terminal, `| head`, a full disk behind a redirect) never
//! ends a run: `println!` panics on a failed write, and a run must not
//! die of its progress lines.

use std::fmt::Arguments;
use std::io::Write;

/// Writes `text` to stdout, ignoring a failure.
pub fn print(text: Arguments) {
    let _ = std::io::stdout().lock().write_fmt(text);
}

/// [`print`] and a newline.
pub fn print_line(text: Arguments) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_fmt(text)
        .and_then(|()| stdout.write_all(b"\n"));
}
