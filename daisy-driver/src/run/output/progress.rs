//! Progress output: a bar per task on a terminal, plain periodic lines
//! when stdout is a file (SLURM output files, CI logs), where bars would
//! turn into megabytes of control characters.

use daisy_core::TaskCounters;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// One task's numbers for a progress update.
pub struct TaskProgress<'a> {
    pub id: &'a str,
    pub counters: TaskCounters,
    pub workers: u32,
}

pub enum Progress {
    /// `--no-progress`, `--quiet`.
    Off,
    Bars {
        bars: Vec<ProgressBar>,
        _group: MultiProgress,
    },
    Lines {
        started: Instant,
        last: Instant,
        every: Duration,
    },
}

impl Progress {
    /// Bars if stdout is a terminal, else a line every `every` (None: no
    /// progress output), for tasks given by id and number of blocks.
    pub fn new(tasks: &[(&str, u64)], every: Option<Duration>) -> Self {
        let Some(every) = every else {
            return Progress::Off;
        };
        if !std::io::stdout().is_terminal() {
            let now = Instant::now();
            return Progress::Lines {
                started: now,
                last: now,
                every,
            };
        }
        let group = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let style = ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> ");
        let bars = (tasks.iter())
            .map(|&(id, total)| group.add(empty_bar(id, total, style.clone())))
            .collect();
        Progress::Bars {
            bars,
            _group: group,
        }
    }

    pub fn update(&mut self, tasks: &[TaskProgress]) {
        match self {
            Progress::Off => {}
            Progress::Bars { bars, .. } => {
                for (bar, task) in bars.iter().zip(tasks) {
                    bar.set_length(task.counters.total);
                    // Resolved blocks, left ones (a --retry-failed run) too,
                    // so a finished task's bar is full.
                    bar.set_position(task.counters.total - task.counters.unresolved());
                    bar.set_message(detail(task));
                }
            }
            Progress::Lines {
                started,
                last,
                every,
            } => {
                if last.elapsed() >= *every {
                    *last = Instant::now();
                    crate::run::output::stdout::print_line(format_args!(
                        "{}",
                        line(started.elapsed(), tasks)
                    ));
                }
            }
        }
    }

    /// Leaves the final state on screen.
    pub fn finish(&mut self) {
        if let Progress::Bars { bars, .. } = self {
            bars.iter().for_each(ProgressBar::abandon);
        }
    }
}

/// A task's bar before the first update: empty, out of all its blocks.
/// (A bar of length 0, as indicatif starts one, is drawn full: `0/0`.)
fn empty_bar(id: &str, total: u64, style: ProgressStyle) -> ProgressBar {
    let bar = ProgressBar::new(total).with_style(style);
    bar.set_prefix(id.to_string());
    bar
}

fn detail(task: &TaskProgress) -> String {
    let c = &task.counters;
    format!(
        "{} failed, {} orphaned, {} running, {} workers",
        c.failed, c.orphaned, c.processing, task.workers
    )
}

/// `[  12s] predict 120/400 (2 failed, ...); relabel 0/81 (...)`
pub fn line(elapsed: Duration, tasks: &[TaskProgress]) -> String {
    let parts: Vec<String> = tasks
        .iter()
        .map(|t| {
            format!(
                "{} {}/{} ({})",
                t.id,
                t.counters.completed,
                t.counters.total,
                detail(t)
            )
        })
        .collect();
    format!("[{:>5}s] {}", elapsed.as_secs(), parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_starts_empty_out_of_the_tasks_blocks() {
        let bar = empty_bar("predict", 400, ProgressStyle::default_bar());
        assert_eq!((bar.position(), bar.length()), (0, Some(400)));
        assert_eq!(bar.prefix(), "predict");
    }

    #[test]
    fn a_status_line_names_every_task() {
        let counters = TaskCounters {
            total: 400,
            completed: 120,
            failed: 2,
            processing: 3,
            ..Default::default()
        };
        let tasks = [
            TaskProgress {
                id: "predict",
                counters,
                workers: 3,
            },
            TaskProgress {
                id: "relabel",
                counters: TaskCounters {
                    total: 81,
                    ..Default::default()
                },
                workers: 0,
            },
        ];
        let text = line(Duration::from_secs(12), &tasks);
        assert_eq!(
            text,
            "[   12s] predict 120/400 (2 failed, 0 orphaned, 3 running, 3 workers); relabel 0/81 (0 failed, 0 orphaned, 0 running, 0 workers)"
        );
    }
}
