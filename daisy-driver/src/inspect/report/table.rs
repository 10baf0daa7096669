//! The execution summary as a table, with the columns `daisy-driver run`
//! prints at its end, rebuilt from what the run directory holds: a
//! finished task's final counters (`task_done`), else the block counts
//! `status` finds from the done markers, else what the events alone say.

use super::model::RunModel;
use super::svg::Escaped;
use crate::inspect::task_status::TaskStatus;
use crate::run_dir::run_state::TaskEvents;
use std::fmt::Write as _;

/// One task's row; `None` where the run directory does not tell.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryRow {
    pub task: String,
    pub blocks: Option<u64>,
    pub completed: Option<u64>,
    pub skipped: Option<u64>,
    pub failed: u64,
    pub orphaned: Option<u64>,
    pub workers: u32,
    pub restarts: u32,
    /// Until the task was done, else until the last event.
    pub seconds: f64,
    pub done: bool,
    /// Blocks run in this run per second.
    pub rate: f64,
}

/// The execution summary's columns, as `run` prints them.
pub const HEADERS: [&str; 10] = crate::run::output::summary::COLUMNS;

/// The rows of `model`'s tasks; `statuses` (found by task id) fill in
/// what unfinished tasks' events lack.
pub fn rows(model: &RunModel, statuses: &[&TaskStatus]) -> Vec<SummaryRow> {
    (model.run.tasks.iter().enumerate())
        .map(|(index, task)| {
            let status = statuses.iter().find(|s| s.id == task.id).copied();
            row(model, (index, task), status)
        })
        .collect()
}

fn row(
    model: &RunModel,
    (index, task): (usize, &TaskEvents),
    status: Option<&TaskStatus>,
) -> SummaryRow {
    let seconds = task.done_at.unwrap_or(model.run.span);
    let mut row = SummaryRow {
        task: task.id.clone(),
        blocks: None,
        completed: Some(task.blocks_done),
        skipped: None,
        failed: task.failed_for_good,
        orphaned: None,
        workers: model.workers_of(index),
        restarts: model.restarts_of(index),
        seconds,
        done: task.done_at.is_some(),
        rate: task.blocks_done as f64 / seconds.max(1e-9),
    };
    if let Some(c) = task.counters {
        row.blocks = Some(c.total);
        row.completed = Some(c.completed);
        row.skipped = Some(c.skipped);
        row.failed = c.failed;
        row.orphaned = Some(c.orphaned);
    } else if let Some(status) = status {
        row.blocks = Some(status.total);
        row.completed = Some(status.done);
        row.failed = status.failed;
        row.orphaned = Some(status.orphaned);
    }
    row
}

impl SummaryRow {
    /// The cells as text, in [`HEADERS`] order.
    pub fn cells(&self) -> [String; 10] {
        let maybe = |n: Option<u64>| n.map_or_else(|| "–".to_string(), |n| n.to_string());
        let time = if self.done {
            format!("{:.1} s", self.seconds)
        } else {
            format!("{:.1} s, not done", self.seconds)
        };
        [
            self.task.clone(),
            maybe(self.blocks),
            maybe(self.completed),
            maybe(self.skipped),
            self.failed.to_string(),
            maybe(self.orphaned),
            self.workers.to_string(),
            self.restarts.to_string(),
            time,
            format!("{:.1}", self.rate),
        ]
    }
}

/// The rows as an HTML `<table>`, with the summary's note under it when
/// blocks were skipped (`completed` counts them too).
pub fn to_html(rows: &[SummaryRow]) -> String {
    let mut html = String::from("<table class=\"summary\"><thead><tr>");
    for header in HEADERS {
        let _ = write!(html, "<th>{header}</th>");
    }
    html.push_str("</tr></thead><tbody>");
    for row in rows {
        html.push_str("<tr>");
        for cell in row.cells() {
            let _ = write!(html, "<td>{}</td>", Escaped(&cell));
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table>");
    if rows.iter().any(|row| row.skipped.is_some_and(|n| n > 0)) {
        let legend = Escaped(crate::run::output::summary::SKIPPED_LEGEND);
        let _ = write!(html, "<p class=\"legend\">{legend}</p>");
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::report::model::tests::sample_model;

    #[test]
    fn an_unfinished_task_shows_what_the_events_say() {
        let model = sample_model();
        let rows = rows(&model, &[]);
        assert_eq!(
            rows[0].cells(),
            [
                "a",
                "–",
                "2",
                "–",
                "1",
                "–",
                "2",
                "1",
                "9.0 s, not done",
                "0.2"
            ]
            .map(String::from)
        );
        let html = to_html(&rows);
        assert_eq!(html.matches("<tr>").count(), 2);
        assert!(html.contains("<td>9.0 s, not done</td>"));
        assert!(!html.contains("completed includes skipped"), "{html}");
    }

    #[test]
    fn a_finished_task_shows_its_final_counters() {
        let mut model = sample_model();
        model.run.tasks[0].done_at = Some(4.0);
        model.run.tasks[0].counters = Some(daisy_core::TaskCounters {
            total: 10,
            completed: 7,
            skipped: 5,
            failed: 1,
            orphaned: 2,
            ..Default::default()
        });
        let rows = rows(&model, &[]);
        let cells = rows[0].cells();
        assert_eq!(cells[1..6], ["10", "7", "5", "1", "2"].map(String::from));
        assert!(to_html(&rows).contains("(completed includes skipped: "));
        assert_eq!(cells[8..], ["4.0 s", "0.5"].map(String::from));
    }
}
