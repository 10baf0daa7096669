//! Text from user processes and from peers, made safe to print: a block's
//! stderr may hold terminal escapes (colours, cursor moves, a clear
//! screen), and a worker may send any string. Control characters other
//! than newline and tab are written as `\x1b` or `\u{9b}`, so the text
//! reads as it was sent and cannot drive the terminal, the status output
//! or a report.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every control character except `\n` and `\t` escaped;
/// borrowed when there is none.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !needs_escape(c) => out.push(c),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_but_newlines_and_tabs_kept() {
        assert!(matches!(printable("plain\ttext\n"), Cow::Borrowed(_)));
        assert_eq!(
            printable("\x1b[31mred\x1b[0m\r\x07\x7f\u{9b}2J é"),
            "\\x1b[31mred\\x1b[0m\\x0d\\x07\\x7f\\u{9b}2J é"
        );
    }
}
