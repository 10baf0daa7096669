//! The page: its static files, and the HTML of its live part drawn from
//! the status (the report's views below it come from
//! [`crate::inspect::report::body`]).

use crate::inspect::human::human_seconds;
use crate::inspect::report::Escaped;
use crate::inspect::status::{RunStatus, WorkerEnd, WorkerStatus};
use crate::inspect::task_status::TaskStatus;
use std::fmt::Write as _;

/// The page's frame; its script fills it.
pub const INDEX: &str = include_str!("assets/index.html");
pub const SCRIPT: &str = include_str!("assets/dashboard.js");
/// The dashboard's own rules, after the report's stylesheet.
pub const STYLE: &str = include_str!("assets/dashboard.css");

/// Most worker rows drawn; the rest are counted (all of them are in
/// `/api/status`). Those not ended cleanly come first.
const WORKER_ROWS: usize = 200;

/// What one snapshot puts on the page.
#[derive(Debug)]
pub struct Parts {
    pub title: String,
    pub pipeline: String,
    /// The headline, the tasks and the workers.
    pub live: String,
    /// The report's views.
    pub report: String,
}

impl Parts {
    pub fn of(drawn: &anyhow::Result<(RunStatus, String)>, over: bool) -> Self {
        let (status, report) = match drawn {
            Ok(drawn) => drawn,
            Err(error) => {
                return Self {
                    title: "daisy: no status".into(),
                    pipeline: String::new(),
                    live: problem("no status", error),
                    report: String::new(),
                }
            }
        };
        let state = state_name(status, over);
        let (done, total) = done_of(&status.tasks);
        let percent = match total {
            0 => 100.0,
            total => 100.0 * done as f64 / total as f64,
        };
        Self {
            title: format!("daisy: {} ({state}, {percent:.0}%)", status.pipeline),
            pipeline: status.pipeline.clone(),
            live: live(status, state),
            report: report.clone(),
        }
    }
}

fn problem(what: &str, error: &anyhow::Error) -> String {
    format!(
        "<p class=\"warning\">{what}: {}</p>",
        Escaped(&format!("{error:#}"))
    )
}

/// `running` while a driver answers, else the state the exit code tells.
fn state_name(status: &RunStatus, over: bool) -> &'static str {
    match (status.running && !over, status.state) {
        (true, _) => "running",
        (false, crate::inspect::status::RunState::Finished) => "finished",
        (false, crate::inspect::status::RunState::Failed) => "failed",
        (false, crate::inspect::status::RunState::Incomplete) => "incomplete",
    }
}

/// Blocks done or skipped, and blocks, over every task.
fn done_of(tasks: &[TaskStatus]) -> (u64, u64) {
    tasks.iter().fold((0, 0), |(done, total), task| {
        (done + task.done + task.skipped, total + task.total)
    })
}

/// The headline, one row per task, one per worker.
fn live(status: &RunStatus, state: &str) -> String {
    let mut html = String::with_capacity(8 * 1024);
    let (done, total) = done_of(&status.tasks);
    let _ = write!(
        html,
        "<p id=\"headline\"><span id=\"run-state\" class=\"state state-{state}\">{state}</span> \
         <span id=\"done\">{done}</span> of <span id=\"total\">{total}</span> blocks done"
    );
    if let Some(live) = &status.live {
        let _ = write!(
            html,
            " &middot; <span id=\"rate\">{:.1}</span> blocks/s &middot; running for {}",
            live.blocks_per_s,
            human_seconds(live.seconds)
        );
        if let Some(eta) = live.eta_s {
            let _ = write!(html, " &middot; about {} to go", human_seconds(eta));
        }
    }
    html.push_str("</p>");
    for warning in &status.warnings {
        let _ = write!(html, "<p class=\"warning\">{}</p>", Escaped(warning));
    }
    tasks(&mut html, status);
    if let Some(run) = &status.last_run {
        workers(&mut html, &run.workers);
    }
    html
}

fn tasks(html: &mut String, status: &RunStatus) {
    html.push_str(
        "<h2>Tasks</h2><table id=\"tasks\"><tr><th>task</th><th>progress</th><th>done</th>\
         <th>skipped</th><th>failed</th><th>orphaned</th><th>remaining</th><th>blocks/s</th>\
         <th>workers</th></tr>",
    );
    for task in &status.tasks {
        let live = (status.live.iter())
            .flat_map(|live| &live.tasks)
            .find(|t| t.task_id == task.id);
        let rate = live.map_or("-".into(), |t| format!("{:.1}", t.blocks_per_s));
        let connected = live.map_or("-".into(), |t| t.workers_connected.to_string());
        let share = |n: u64| match task.total {
            0 => 0.0,
            total => 100.0 * n as f64 / total as f64,
        };
        let _ = write!(
            html,
            "<tr data-task=\"{id}\"><td>{id}</td><td><div class=\"bar\" title=\"{done} done, \
             {skipped} skipped, {failed} failed, {orphaned} orphaned of {total}\">\
             <div class=\"done\" style=\"width:{:.2}%\"></div>\
             <div class=\"skipped\" style=\"width:{:.2}%\"></div>\
             <div class=\"failed\" style=\"width:{:.2}%\"></div>\
             <div class=\"orphaned\" style=\"width:{:.2}%\"></div></div></td>\
             <td>{done} of {total}</td><td>{skipped}</td><td>{failed}</td><td>{orphaned}</td>\
             <td>{remaining}</td><td>{rate}</td><td>{connected}</td></tr>",
            share(task.done),
            share(task.skipped),
            share(task.failed),
            share(task.orphaned),
            id = Escaped(&task.id),
            done = task.done,
            skipped = task.skipped,
            failed = task.failed,
            orphaned = task.orphaned,
            total = task.total,
            remaining = task.remaining,
        );
        if let Some(why) = &task.abandoned {
            let _ = write!(
                html,
                "<tr><td></td><td class=\"warning\" colspan=\"8\">abandoned: {}</td></tr>",
                Escaped(why)
            );
        }
    }
    html.push_str("</table>");
}

/// Why a worker ended, or what its submission waits for.
fn why(worker: &WorkerStatus) -> String {
    match (&worker.why, worker.waits_for()) {
        (Some(why), _) => why.clone(),
        (None, Some(whose)) => format!("waits for {whose}"),
        (None, None) => String::new(),
    }
}

fn workers(html: &mut String, workers: &[WorkerStatus]) {
    let mut counts: Vec<(WorkerEnd, usize)> = Vec::new();
    for worker in workers {
        match counts.iter_mut().find(|(end, _)| *end == worker.end) {
            Some((_, n)) => *n += 1,
            None => counts.push((worker.end, 1)),
        }
    }
    let counted: Vec<String> = (counts.iter())
        .map(|(end, n)| format!("{n} {}", end.describe()))
        .collect();
    let _ = write!(
        html,
        "<h2>Workers</h2><p class=\"facts\">{} workers: {}</p>",
        workers.len(),
        counted.join(", ")
    );
    html.push_str(
        "<table id=\"workers\"><tr><th>task</th><th>worker</th><th>job</th><th>host</th>\
         <th>pid</th><th>state</th><th>why</th></tr>",
    );
    let mut shown: Vec<&WorkerStatus> = workers.iter().collect();
    shown.sort_by_key(|w| (w.end == WorkerEnd::Clean, w.worker_id));
    for w in shown.iter().take(WORKER_ROWS) {
        let state = serde_json::to_value(w.end).ok();
        let class = state.as_ref().and_then(|s| s.as_str()).unwrap_or("unknown");
        let job = match (&w.job, w.by_hand) {
            (Some(job), _) => job.as_str(),
            (None, true) => "(by hand)",
            (None, false) => "-",
        };
        let _ = write!(
            html,
            "<tr class=\"worker worker-{class}\" data-worker=\"{id}\" data-state=\"{class}\">\
             <td>{task}</td><td class=\"number\">{id}</td><td>{job}</td><td>{host}</td>\
             <td class=\"number\">{pid}</td><td>{state}</td><td>{why}</td></tr>",
            id = w.worker_id,
            task = Escaped(&w.task),
            job = Escaped(job),
            host = Escaped(w.host.as_deref().unwrap_or("-")),
            pid = w.pid.map_or("-".into(), |pid| pid.to_string()),
            state = w.end.describe(),
            why = Escaped(&why(w)),
        );
    }
    html.push_str("</table>");
    if workers.len() > WORKER_ROWS {
        let _ = write!(
            html,
            "<p class=\"hint\">and {} more workers (all of them are in /api/status)</p>",
            workers.len() - WORKER_ROWS
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(worker_id: u64, waiting_for: Option<&str>) -> WorkerStatus {
        WorkerStatus {
            task: "predict".into(),
            worker_id,
            job: None,
            host: None,
            pid: None,
            by_hand: false,
            end: WorkerEnd::Queued,
            why: None,
            waiting_for: waiting_for.map(str::to_owned),
        }
    }

    #[test]
    fn a_worker_whose_submission_waits_says_for_what() {
        let mut html = String::new();
        let shown = [
            queued(0, Some("QOSMaxSubmitJobPerUserLimit")),
            queued(1, Some(launchers::MAX_JOBS)),
            queued(2, None),
        ];
        workers(&mut html, &shown);
        let rows: Vec<&str> = html.split("<tr class=").skip(1).collect();
        assert_eq!(rows.len(), 3, "{html}");
        assert!(
            rows[0].contains("<td>waits for a site limit (QOSMaxSubmitJobPerUserLimit)</td>"),
            "{}",
            rows[0]
        );
        assert!(
            rows[1].contains("<td>waits for the task&#39;s max_jobs</td>"),
            "{}",
            rows[1]
        );
        assert!(rows[2].contains("<td></td></tr>"), "{}", rows[2]);
    }
}
