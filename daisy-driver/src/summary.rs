//! The execution summary printed at the end of a run, and the exit status
//! it implies.

use daisy_core::TaskCounters;
use std::fmt::Write as _;
use std::path::PathBuf;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Every block completed, failed or was orphaned.
    Finished,
    /// Blocks remain that can never become ready (a bug).
    Stalled,
    /// Stopped by Ctrl-C or SIGTERM; a re-run resumes.
    Interrupted,
}

/// The columns of the execution summary, in order (the run report's table
/// has the same).
pub const COLUMNS: [&str; 10] = [
    "task",
    "blocks",
    "completed",
    "skipped",
    "failed",
    "orphaned",
    "workers",
    "restarts",
    "time",
    "blocks/s",
];

#[derive(Debug)]
pub struct RunSummary {
    pub tasks: Vec<TaskSummary>,
    pub seconds: f64,
    pub events: PathBuf,
    pub end: RunEnd,
}

#[derive(Debug)]
pub struct TaskSummary {
    pub id: String,
    pub counters: TaskCounters,
    pub logs: PathBuf,
    pub workers_started: u32,
    /// Unclean worker exits (failed starts, lost workers).
    pub restarts: u32,
    /// Seconds from the start of the run until the task was done.
    pub seconds: f64,
    /// Why the task was abandoned, if it was.
    pub abandoned: Option<String>,
    /// The error of the last block that failed.
    pub last_error: Option<String>,
}

impl RunSummary {
    /// True if every block of every task completed.
    pub fn all_completed(&self) -> bool {
        self.end == RunEnd::Finished
            && self
                .tasks
                .iter()
                .all(|t| t.counters.completed == t.counters.total)
    }

    /// Blocks a `--retry-failed` run left for a later plain run.
    pub fn blocks_left(&self) -> u64 {
        self.tasks.iter().map(|t| t.counters.left).sum()
    }

    /// 0 if every block completed, 130 if interrupted, 3 if the only
    /// blocks not completed are those a `--retry-failed` run left (as
    /// `status` says "incomplete"), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        let nothing_failed = self
            .tasks
            .iter()
            .all(|t| t.counters.completed + t.counters.left == t.counters.total);
        match (self.end, self.all_completed()) {
            (RunEnd::Interrupted, _) => 130,
            (_, true) => 0,
            (RunEnd::Finished, false) if nothing_failed => 3,
            (_, false) => 1,
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let [task, blocks, completed, skipped, failed, orphaned, workers, restarts, time, rate] =
            COLUMNS;
        let _ = writeln!(
            out,
            "{task:<16} {blocks:>8} {completed:>9} {skipped:>8} {failed:>7} {orphaned:>8} \
             {workers:>7} {restarts:>8} {time:>8} {rate:>9}",
        );
        for task in &self.tasks {
            task.render_row(&mut out);
        }
        let run: u64 = self.tasks.iter().map(TaskSummary::blocks_run).sum();
        let rate = run as f64 / self.seconds.max(1e-9);
        let _ = writeln!(
            out,
            "{run} blocks run in {:.1} s ({rate:.0} blocks/s); events in {}",
            self.seconds,
            self.events.display()
        );
        self.render_problems(&mut out);
        out
    }

    fn render_problems(&self, out: &mut String) {
        for task in &self.tasks {
            if let Some(why) = &task.abandoned {
                let _ = writeln!(out, "task {:?} was abandoned: {why}", task.id);
            }
            if let Some(error) = &task.last_error {
                let _ = writeln!(out, "task {:?}: last failure: {error}", task.id);
            }
            if task.counters.left > 0 {
                let _ = writeln!(
                    out,
                    "task {:?}: {} blocks left for a later run without --retry-failed (they did not fail last time)",
                    task.id, task.counters.left
                );
            }
            if task.counters.failed > 0 || task.restarts > 0 {
                let _ = writeln!(
                    out,
                    "task {:?} had failures; its logs are in {}",
                    task.id,
                    task.logs.display()
                );
            }
        }
        match self.end {
            RunEnd::Stalled => {
                let _ = writeln!(out, "the run stalled: blocks remain that can never become ready (a bug; please report it)");
            }
            RunEnd::Interrupted => {
                let _ = writeln!(out, "interrupted: run the same command again to resume");
            }
            RunEnd::Finished => {}
        }
    }
}

impl TaskSummary {
    fn blocks_run(&self) -> u64 {
        self.counters.completed - self.counters.skipped
    }

    fn render_row(&self, out: &mut String) {
        let c = &self.counters;
        let rate = self.blocks_run() as f64 / self.seconds.max(1e-9);
        let _ = writeln!(
            out,
            "{:<16} {:>8} {:>9} {:>8} {:>7} {:>8} {:>7} {:>8} {:>7.1}s {:>9.0}",
            self.id,
            c.total,
            c.completed,
            c.skipped,
            c.failed,
            c.orphaned,
            self.workers_started,
            self.restarts,
            self.seconds,
            rate
        );
    }
}
