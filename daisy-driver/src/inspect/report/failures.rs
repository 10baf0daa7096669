//! The failed blocks as a table: which block (its id and the region it
//! writes), how many attempts, the last line of the last error, and
//! where the whole of it is. The done-marker pictures show where they
//! are; this says why.

use super::svg::Escaped;
use super::TaskNumbers;
use std::fmt::Write as _;

/// Rows shown; the rest are counted (`status --json` lists them all).
pub const MOST_ROWS: usize = 200;

/// The table of every task's failed blocks, or `None` if none failed.
pub fn to_html(tasks: &[TaskNumbers]) -> Option<String> {
    let failed = tasks.iter().flat_map(|task| {
        let id = &task.status.id;
        task.status
            .failed_blocks
            .iter()
            .map(move |block| (id, block))
    });
    let total: usize = tasks.iter().map(|t| t.status.failed_blocks.len()).sum();
    if total == 0 {
        return None;
    }
    let mut html = String::from(
        "<table class=\"failures\"><tr><th>task</th><th>block</th><th>writes</th>\
         <th>attempts</th><th>last error</th><th>log</th></tr>",
    );
    for (task, block) in failed.take(MOST_ROWS) {
        let region = block.write_roi.as_ref().map_or(String::new(), |roi| {
            format!("offset {:?}, shape {:?}", roi.offset, roi.shape)
        });
        let log = block
            .log
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string());
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"error\">{}</td><td>{}</td></tr>",
            Escaped(task),
            block.block_id,
            Escaped(&region),
            block.attempts,
            Escaped(last_line(&block.error)),
            Escaped(&log),
        );
    }
    html.push_str("</table>");
    if total > MOST_ROWS {
        let _ = write!(
            html,
            "<p class=\"hint\">and {} more: daisy-driver status --json lists every one</p>",
            total - MOST_ROWS
        );
    }
    Some(html)
}

/// The line of an error that says what went wrong: a traceback ends with
/// the exception, a shell with its message.
fn last_line(error: &str) -> &str {
    error
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or(error)
        .trim()
}

#[cfg(test)]
mod tests {
    use super::last_line;

    #[test]
    fn the_last_line_of_a_traceback_is_its_exception() {
        let error =
            "Traceback (most recent call last):\n  File \"x.py\", line 3\nValueError: bad\n\n";
        assert_eq!(last_line(error), "ValueError: bad");
        assert_eq!(last_line("exit status 3"), "exit status 3");
    }
}
