//! The execution summary printed at the end of a run, and the exit status
//! it implies.

use crate::counted::counted;
use crate::exit;
use crate::run::slots::WorkerCount;
use daisy_core::printable::printable;
use daisy_core::TaskCounters;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Every block completed, failed or was orphaned.
    Finished,
    /// Blocks remain that can never become ready (a bug).
    Stalled,
    /// Stopped by Ctrl-C or SIGTERM; what a re-run does is [`ReRun`]'s.
    Interrupted,
}

/// What running the same command again does with the blocks this run
/// finished, so that a stopped run never promises a resume it will not
/// give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReRun {
    /// Skips them: the run resumes.
    Resumes,
    /// The command has `--fresh`, so it starts over again; without
    /// `--fresh` it resumes (this run's done markers are kept).
    ResumesWithoutFresh,
    /// Done tracking is off (`run_blockwise` without `tracking_path`, a
    /// tracking base directory or `run_dir`, as daisy 2.0): every run
    /// starts over.
    StartsOver,
}

/// How a Python program turns done tracking on, said where a run without
/// it stops.
const TURN_TRACKING_ON: &str = "to resume instead, turn done tracking on: \
    Task(tracking_path=...), daisy.set_tracking_basedir(...) or run_blockwise(run_dir=...)";

impl ReRun {
    /// Said when a stop signal arrives, in `daisy-driver: stopping (…)`.
    pub fn stopping_note(self) -> &'static str {
        match self {
            ReRun::Resumes => "a re-run resumes",
            ReRun::ResumesWithoutFresh => "a re-run without --fresh resumes",
            ReRun::StartsOver => "done tracking is off: a re-run starts over",
        }
    }

    /// The summary's last line for an interrupted run.
    fn interrupted_line(self) -> String {
        match self {
            ReRun::Resumes => "interrupted: run the same command again to resume".into(),
            ReRun::ResumesWithoutFresh => "interrupted: run the command again without --fresh \
                to resume (with --fresh it starts over)"
                .into(),
            ReRun::StartsOver => format!(
                "interrupted: done tracking is off, so running again starts over; {TURN_TRACKING_ON}"
            ),
        }
    }
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

/// Said under the table when blocks were skipped, since `completed`
/// counts them too (so that `completed` = `blocks` means all done).
pub const SKIPPED_LEGEND: &str =
    "(completed includes skipped: blocks done by an earlier run, masked by a skip_mask, or found done by the task's check)";

#[derive(Debug)]
pub struct RunSummary {
    pub tasks: Vec<TaskSummary>,
    pub seconds: f64,
    pub events: PathBuf,
    pub end: RunEnd,
    /// Attempts that failed in this run, retried or not.
    pub failed_attempts: u64,
    /// Writes to `events` that failed (a full disk): the run's record
    /// is incomplete.
    pub failed_event_writes: u64,
}

#[derive(Debug)]
pub struct TaskSummary {
    pub id: String,
    pub counters: TaskCounters,
    pub logs: PathBuf,
    /// Workers that connected, by kind.
    pub workers: WorkerCount,
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
    /// `status` says "incomplete"), 4 if every block completed but the
    /// event log could not be written in full, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        let nothing_failed = self
            .tasks
            .iter()
            .all(|t| t.counters.completed + t.counters.left == t.counters.total);
        match (self.end, self.all_completed()) {
            (RunEnd::Interrupted, _) => exit::INTERRUPTED,
            (_, true) if self.failed_event_writes > 0 => exit::EVENTS_LOST,
            (_, true) => exit::SUCCESS,
            (RunEnd::Finished, false) if nothing_failed => exit::INCOMPLETE,
            (_, false) => exit::FAILED,
        }
    }

    /// The summary as text, control characters escaped (it quotes the
    /// last block error, a user process's stderr); `re_run` says what an
    /// interrupted run's re-run does.
    pub fn render(&self, re_run: ReRun) -> String {
        printable(&self.render_raw(re_run)).into_owned()
    }

    fn render_raw(&self, re_run: ReRun) -> String {
        let mut out = String::new();
        let [task, blocks, completed, skipped, failed, orphaned, workers, restarts, time, rate] =
            COLUMNS;
        let _ = writeln!(
            out,
            "{task:<16} {blocks:>8} {completed:>9} {skipped:>8} {failed:>7} {orphaned:>8} \
             {workers:>12} {restarts:>8} {time:>8} {rate:>9}",
        );
        for task in &self.tasks {
            task.render_row(&mut out);
        }
        if self.tasks.iter().any(|t| t.counters.skipped > 0) {
            let _ = writeln!(out, "{SKIPPED_LEGEND}");
        }
        let run: u64 = self.tasks.iter().map(TaskSummary::blocks_run).sum();
        let rate = run as f64 / self.seconds.max(1e-9);
        let failed = match self.failed_attempts {
            0 => String::new(),
            n => format!(" and {} failed", counted(n, "attempt")),
        };
        let _ = writeln!(
            out,
            "{} run{failed} in {:.1} s ({rate:.0} blocks/s); events in {}",
            counted(run, "block"),
            self.seconds,
            self.events.display()
        );
        self.render_problems(&mut out, re_run);
        if self.failed_event_writes > 0 {
            let _ = writeln!(
                out,
                "{} to {} failed (a full disk?): this run's record there is incomplete, \
                 so status and report may undercount it; the done markers, which a re-run \
                 trusts, are complete",
                counted(self.failed_event_writes, "write"),
                self.events.display()
            );
        }
        out
    }

    fn render_problems(&self, out: &mut String, re_run: ReRun) {
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
                    "task {:?}: {} left for a later run without --retry-failed (they did not fail last time)",
                    task.id, counted(task.counters.left, "block")
                );
            }
            task.render_failures(out);
        }
        match self.end {
            RunEnd::Stalled => {
                let _ = writeln!(out, "the run stalled: blocks remain that can never become ready (a bug; please report it)");
            }
            RunEnd::Interrupted => {
                let _ = writeln!(out, "{}", re_run.interrupted_line());
            }
            RunEnd::Finished => {}
        }
    }
}

impl TaskSummary {
    /// What went wrong (failed blocks, unclean worker exits), pointing at
    /// the task's logs only if a worker wrote any (a worker that never
    /// started leaves the directory missing, or its files empty).
    fn render_failures(&self, out: &mut String) {
        let mut what = Vec::new();
        if self.counters.failed > 0 {
            what.push(format!("{} failed", counted(self.counters.failed, "block")));
        }
        if self.restarts > 0 {
            what.push(format!(
                "{} ended uncleanly (lost, or failed to start)",
                counted(self.restarts, "worker")
            ));
        }
        if what.is_empty() {
            return;
        }
        let logs = match has_logs(&self.logs) {
            true => format!("; its logs are in {}", self.logs.display()),
            false => "; no worker of it wrote a log (see the events)".to_string(),
        };
        let _ = writeln!(out, "task {:?}: {}{logs}", self.id, what.join(", "));
    }

    fn blocks_run(&self) -> u64 {
        self.counters.completed - self.counters.skipped
    }

    fn render_row(&self, out: &mut String) {
        let c = &self.counters;
        let rate = self.blocks_run() as f64 / self.seconds.max(1e-9);
        let _ = writeln!(
            out,
            "{:<16} {:>8} {:>9} {:>8} {:>7} {:>8} {:>12} {:>8} {:>7.1}s {:>9.0}",
            self.id,
            c.total,
            c.completed,
            c.skipped,
            c.failed,
            c.orphaned,
            self.workers.to_string(),
            self.restarts,
            self.seconds,
            rate
        );
    }
}

/// True if `dir` holds a log file with something in it besides the
/// headers the driver writes before it starts a worker.
fn has_logs(dir: &Path) -> bool {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    entries
        .filter(|entry| {
            entry
                .metadata()
                .is_ok_and(|meta| meta.is_file() && meta.len() > 0)
        })
        .any(|entry| crate::run_dir::user_logs::has_output(&entry.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(task: TaskSummary) -> RunSummary {
        RunSummary {
            failed_attempts: 0,
            failed_event_writes: 0,
            tasks: vec![task],
            seconds: 2.0,
            events: PathBuf::from("run/events.jsonl"),
            end: RunEnd::Finished,
        }
    }

    fn task(counters: TaskCounters, logs: PathBuf) -> TaskSummary {
        TaskSummary {
            id: "seg".into(),
            counters,
            logs,
            workers: WorkerCount::default(),
            restarts: 0,
            seconds: 2.0,
            abandoned: None,
            last_error: None,
        }
    }

    #[test]
    fn a_run_whose_blocks_only_failed_says_how_many_attempts_failed() {
        let counters = TaskCounters {
            total: 1,
            failed: 1,
            ..Default::default()
        };
        let rerun = RunSummary {
            failed_attempts: 3,
            ..summary(task(counters, PathBuf::from("logs")))
        };
        let text = rerun.render(ReRun::Resumes);
        assert!(
            text.contains("0 blocks run and 3 attempts failed in 2.0 s"),
            "{text}"
        );
        let one = RunSummary {
            failed_attempts: 0,
            ..summary(task(
                TaskCounters {
                    completed: 1,
                    ..counters
                },
                PathBuf::from("logs"),
            ))
        };
        assert!(
            one.render(ReRun::Resumes).contains("1 block run in 2.0 s"),
            "{}",
            one.render(ReRun::Resumes)
        );
    }

    #[test]
    fn lost_workers_are_named_and_only_existing_logs_pointed_at() {
        let counters = TaskCounters {
            total: 4,
            completed: 4,
            ..Default::default()
        };
        let lost = TaskSummary {
            restarts: 2,
            ..task(counters, PathBuf::from("/nonexistent/logs/seg"))
        };
        let text = summary(lost).render(ReRun::Resumes);
        assert!(
            text.contains(
                "task \"seg\": 2 workers ended uncleanly (lost, or failed to start); \
                 no worker of it wrote a log (see the events)"
            ),
            "{text}"
        );
        assert!(
            !text.contains("had failures") && !text.contains("/nonexistent"),
            "{text}"
        );
        let logs = tempfile::tempdir().unwrap();
        std::fs::write(logs.path().join("worker-1.err"), "").unwrap();
        let text = summary(TaskSummary {
            restarts: 1,
            ..task(counters, logs.path().to_path_buf())
        })
        .render(ReRun::Resumes);
        assert!(
            text.contains("no worker of it wrote a log"),
            "empty files: {text}"
        );
        std::fs::write(logs.path().join("worker-1.err"), "Traceback").unwrap();
        let failed = TaskSummary {
            counters: TaskCounters {
                failed: 1,
                completed: 3,
                ..counters
            },
            ..task(counters, logs.path().to_path_buf())
        };
        let text = summary(failed).render(ReRun::Resumes);
        let expected = format!(
            "task \"seg\": 1 block failed; its logs are in {}",
            logs.path().display()
        );
        assert!(text.contains(&expected), "{text}");
    }

    #[test]
    fn skipped_blocks_and_hand_started_workers_are_said() {
        let counters = TaskCounters {
            total: 4,
            completed: 4,
            skipped: 3,
            ..Default::default()
        };
        let by_hand = TaskSummary {
            workers: WorkerCount {
                launched: 1,
                by_hand: 2,
            },
            ..task(counters, PathBuf::from("logs"))
        };
        let text = summary(by_hand).render(ReRun::Resumes);
        let row = text.lines().nth(1).unwrap();
        assert!(row.contains(" 1+2 by hand "), "{row}");
        assert!(text.contains(SKIPPED_LEGEND), "{text}");
        let none_skipped = TaskCounters {
            skipped: 0,
            ..counters
        };
        let text = summary(task(none_skipped, PathBuf::from("logs"))).render(ReRun::Resumes);
        assert!(!text.contains(SKIPPED_LEGEND), "{text}");
    }

    #[test]
    fn an_interrupted_run_says_what_a_re_run_does_with_its_blocks() {
        let interrupted = RunSummary {
            end: RunEnd::Interrupted,
            ..summary(task(TaskCounters::default(), PathBuf::from("logs")))
        };
        let last_line = |re_run| {
            interrupted
                .render(re_run)
                .lines()
                .last()
                .unwrap()
                .to_string()
        };
        assert_eq!(
            last_line(ReRun::Resumes),
            "interrupted: run the same command again to resume"
        );
        let fresh = last_line(ReRun::ResumesWithoutFresh);
        assert!(fresh.contains("without --fresh to resume"), "{fresh}");
        let untracked = last_line(ReRun::StartsOver);
        assert!(
            untracked.contains("running again starts over")
                && untracked.contains("tracking_path")
                && untracked.contains("set_tracking_basedir")
                && untracked.contains("run_dir")
                && !untracked.contains("again to resume"),
            "{untracked}"
        );
    }
}
