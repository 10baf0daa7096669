//! The text `status` prints: a table per task, the failed blocks with
//! their errors and logs, the workers of the last run and, with a driver
//! running, its live view. Long lists are cut (`--json` has everything).

use super::{LastRun, LiveStatus, RunState, RunStatus, TaskStatus, WorkerEnd, WorkerStatus};
use crate::inspect::cost_summary::Unit;
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

/// Failed blocks, workers and blocks in flight shown per list.
const LIST_LIMIT: usize = 10;

pub(super) fn render(status: &RunStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run dir   {} (pipeline {:?}, {})",
        status.run_dir.display(),
        status.pipeline,
        status.pipeline_file.display()
    );
    let _ = writeln!(out, "state     {}", state(status));
    if let Some(run) = &status.last_run {
        let _ = writeln!(out, "last run  {}", last_run(run, status.running));
    }
    out.push('\n');
    tasks_table(&mut out, &status.tasks);
    if let Some(run) = &status.last_run {
        waiting(&mut out, &run.workers);
    }
    for task in &status.tasks {
        failed_blocks(&mut out, task);
    }
    for task in &status.tasks {
        costs(&mut out, task);
    }
    if let Some(run) = &status.last_run {
        workers(&mut out, &run.workers);
    }
    if let Some(live) = &status.live {
        live_view(&mut out, live);
    }
    for warning in &status.warnings {
        let _ = writeln!(out, "\nwarning: {warning}");
    }
    out
}

fn state(status: &RunStatus) -> String {
    let (word, code) = match status.state {
        RunState::Finished => ("finished: every block is done", 0),
        RunState::Failed => ("failed: some blocks failed for good", 1),
        RunState::Incomplete => ("incomplete: blocks remain, none failed", 3),
    };
    let running = if status.running {
        ", driver running"
    } else {
        ""
    };
    format!("{word}{running} (exit {code})")
}

fn last_run(run: &LastRun, running: bool) -> String {
    let retry = if run.retry_failed {
        " --retry-failed"
    } else {
        ""
    };
    let end = match (&run.finished, running) {
        // `completed` is false when the run was stopped (Ctrl-C, SIGTERM)
        // before reaching its end: it did not finish, it was interrupted.
        (Some(end), _) if end.completed => format!("finished after {:.1} s", end.seconds),
        (Some(end), _) => format!("interrupted after {:.1} s", end.seconds),
        (None, true) => "running".to_string(),
        (None, false) => "stopped without finishing (driver killed or crashed?)".to_string(),
    };
    format!(
        "{}{retry} run started {}, {end}",
        run.mode,
        timestamp(run.started)
    )
}

/// Unix seconds as `2026-11-29T10:50:12Z`.
fn timestamp(unix_seconds: f64) -> String {
    match Duration::try_from_secs_f64(unix_seconds) {
        Ok(since_epoch) => humantime::format_rfc3339_seconds(UNIX_EPOCH + since_epoch).to_string(),
        Err(_) => format!("at {unix_seconds}"),
    }
}

fn tasks_table(out: &mut String, tasks: &[TaskStatus]) {
    let _ = writeln!(
        out,
        "{:<16} {:>8} {:>8} {:>7} {:>8} {:>9}",
        "task", "blocks", "done", "failed", "orphaned", "remaining"
    );
    for t in tasks {
        let _ = writeln!(
            out,
            "{:<16} {:>8} {:>8} {:>7} {:>8} {:>9}",
            t.id, t.total, t.done, t.failed, t.orphaned, t.remaining
        );
    }
    for t in tasks {
        if t.skipped > 0 {
            let skipped = t.skipped;
            let _ = writeln!(out, "task {:?}: {skipped} blocks skipped (skip_mask)", t.id);
        }
        if let Some(why) = &t.abandoned {
            let _ = writeln!(out, "task {:?} was abandoned: {why}", t.id);
        }
    }
}

fn failed_blocks(out: &mut String, task: &TaskStatus) {
    if task.failed_blocks.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nfailed blocks of task {:?} ({}):",
        task.id, task.failed
    );
    for block in task.failed_blocks.iter().take(LIST_LIMIT) {
        let worker = block
            .worker_id
            .map_or_else(String::new, |w| format!(" on worker {w}"));
        // A traceback's later lines stay under their block.
        let error = block.error.trim_end().replace('\n', "\n    ");
        let _ = writeln!(
            out,
            "  block {} ({} attempts, last{worker}): {error}",
            block.block_id, block.attempts
        );
        match (&block.log, block.log_line) {
            (Some(log), Some(line)) => {
                let shown = log.display();
                let _ = writeln!(out, "    log: {shown} (this run's part from line {line})");
            }
            (Some(log), None) => {
                let _ = writeln!(out, "    log: {}", log.display());
            }
            (None, _) => {}
        }
    }
    more(out, task.failed_blocks.len());
}

/// Per measure the median, 95th percentile and maximum (with its block),
/// then the slowest blocks.
fn costs(out: &mut String, task: &TaskStatus) {
    let Some(costs) = &task.costs else {
        return;
    };
    let _ = writeln!(
        out,
        "\nwhat blocks of task {:?} cost ({} measured):",
        task.id, costs.measured
    );
    let _ = writeln!(
        out,
        "  {:<16} {:>10} {:>10} {:>10}  max in block",
        "measure", "median", "p95", "max"
    );
    for m in &costs.measures {
        let _ = writeln!(
            out,
            "  {:<16} {:>10} {:>10} {:>10}  {}",
            m.measure,
            m.unit.show(m.median),
            m.unit.show(m.p95),
            m.unit.show(m.max),
            m.max_block_id
        );
    }
    let slowest: Vec<String> = (costs.slowest.iter())
        .map(|b| format!("{} ({})", b.block_id, Unit::Seconds.show(b.wall_seconds)))
        .collect();
    let _ = writeln!(out, "  slowest blocks: {}", slowest.join(", "));
}

fn more(out: &mut String, len: usize) {
    if len > LIST_LIMIT {
        let _ = writeln!(
            out,
            "  ... and {} more (--json lists all)",
            len - LIST_LIMIT
        );
    }
}

/// One line per task and limit whose workers' submissions wait: the run
/// is not stuck, the launcher submits them when the limit allows.
fn waiting(out: &mut String, workers: &[WorkerStatus]) {
    let mut waiting: std::collections::BTreeMap<(&str, String), usize> = Default::default();
    for worker in workers {
        if let Some(whose) = worker.waits_for() {
            *waiting.entry((&worker.task, whose)).or_default() += 1;
        }
    }
    for ((task, whose), count) in waiting {
        let _ = writeln!(
            out,
            "task {task:?}: {count} worker(s) wait for {whose}; they are submitted when it allows"
        );
    }
}

fn workers(out: &mut String, workers: &[WorkerStatus]) {
    if workers.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nworkers of the last run ({}):", workers.len());
    let _ = writeln!(
        out,
        "  {:<16} {:>6} {:<12} {:<16} {:>8}  end",
        "task", "worker", "job", "host", "pid"
    );
    // Those that did not end cleanly first: they are what one looks for.
    let mut sorted: Vec<&WorkerStatus> = workers.iter().collect();
    sorted.sort_by_key(|w| (w.end == WorkerEnd::Clean, w.worker_id));
    for w in sorted.iter().take(LIST_LIMIT) {
        let end = match (&w.end, &w.why) {
            (WorkerEnd::Clean, _) | (_, None) => w.end.describe().to_string(),
            (end, Some(why)) => format!("{}: {why}", end.describe()),
        };
        let job = match (&w.job, w.by_hand) {
            (Some(job), _) => job.clone(),
            (None, true) => "(by hand)".to_string(),
            (None, false) => "-".to_string(),
        };
        let _ = writeln!(
            out,
            "  {:<16} {:>6} {:<12} {:<16} {:>8}  {end}",
            w.task,
            w.worker_id,
            job,
            w.host.as_deref().unwrap_or("-"),
            w.pid.map_or("-".to_string(), |p| p.to_string()),
        );
    }
    more(out, workers.len());
}

fn live_view(out: &mut String, live: &LiveStatus) {
    let eta = live
        .eta_s
        .map_or("unknown".to_string(), |s| format!("{s:.0} s"));
    let _ = writeln!(
        out,
        "\nlive: running for {:.0} s, {:.1} blocks/s now, ETA {eta}",
        live.seconds, live.blocks_per_s
    );
    let _ = writeln!(
        out,
        "  {:<16} {:>6} {:>8} {:>9} {:>9} {:>4} {:>4} {:>9}",
        "task", "ready", "running", "submitted", "connected", "idle", "lost", "blocks/s"
    );
    for t in &live.tasks {
        let _ = writeln!(
            out,
            "  {:<16} {:>6} {:>8} {:>9} {:>9} {:>4} {:>4} {:>9.1}",
            t.task_id,
            t.counters.ready,
            t.counters.processing,
            t.workers.submitted,
            t.workers.connected,
            t.workers.idle,
            t.workers.lost + t.workers.failed_starts,
            t.blocks_per_s
        );
    }
    for t in live.tasks.iter().filter(|t| !t.in_flight.is_empty()) {
        let _ = writeln!(out, "  in flight in {:?}, oldest first:", t.task_id);
        for block in t.in_flight.iter().take(LIST_LIMIT) {
            let _ = writeln!(
                out,
                "    block {} on worker {} for {:.1} s",
                block.block_id, block.worker_id, block.seconds
            );
        }
        more(out, t.in_flight.len());
    }
}
