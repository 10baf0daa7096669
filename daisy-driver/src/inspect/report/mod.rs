//! `daisy-driver report RUN_DIR`: a run drawn from its run directory, for
//! finished, crashed and running runs alike.
//!
//! It reads `events.jsonl` (the last run in it, streamed through
//! [`crate::run_dir::events::history`], never held whole), the recorded pipeline (`pipeline.json`, for
//! the task geometry) and the done markers (block states as `status`
//! finds them, [`crate::run_dir::run_state`]), and
//! draws: a timeline of the workers, blocks per second per task, block run
//! times, the execution summary, and a slice of each task's done markers.
//! Output is a self-contained HTML page (inline SVG and CSS, nothing
//! fetched), one SVG figure, or that figure as PNG (rendered by a headless
//! Chromium). Every chart aggregates (merged bars, bins, downsampled
//! cells), so a run of millions of blocks gives a page of a few MB at most.
//!
//! # Layout
//! - [`model`]: the run's events summed up, and worker rows of block
//!   bars.
//! - [`svg`]: SVG primitives and shared colours.
//! - [`timeline`], [`charts`], [`slice`], [`table`]: the pictures and the
//!   summary table.
//! - [`html`], [`figure`]: the page and the single-SVG figure.
//! - [`png`]: the figure rendered to PNG by headless Chromium.

mod charts;
mod costs;
mod failures;
mod figure;
mod html;
mod model;
mod png;
mod run_choice;
mod slice;
mod svg;
mod table;
mod timeline;

pub use png::{headless_args, PngError};
pub use svg::Escaped;

use crate::inspect::task_status::TaskStatus;
use crate::pipeline::Pipeline;
use crate::run::embedding::python_for_workers;
use crate::run_dir::events::history::{Following, HistoryError, RunHistory};
use crate::run_dir::run_state::{BlockStates, RunEvents};
use crate::run_dir::RunDir;
use model::{Builder, RunModel};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};
use svg::Chart;
use table::SummaryRow;

/// What `report` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// A self-contained page: open it in any browser, offline.
    Html,
    /// One SVG picture of everything (for a lab notebook, a slide).
    Svg,
    /// That picture as PNG, rendered by headless Chromium (found on PATH,
    /// or set DAISY_CHROMIUM).
    Png,
    /// The numbers behind the pictures, per task: block counts and, for
    /// tasks that tracked resources, what blocks cost (summary and
    /// distributions).
    Json,
}

impl ReportFormat {
    pub fn extension(self) -> &'static str {
        match self {
            ReportFormat::Html => "html",
            ReportFormat::Svg => "svg",
            ReportFormat::Png => "png",
            ReportFormat::Json => "json",
        }
    }
}

/// Why no report could be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("run directory {0} does not exist")]
    NoRunDir(PathBuf),
    #[error("{0} does not exist: no run has used this run directory yet")]
    NoEvents(PathBuf),
    #[error("there is no run {asked}: this run directory holds {runs} (--run 1 to --run {runs})")]
    NoSuchRun { asked: usize, runs: usize },
    #[error(transparent)]
    Read(HistoryError),
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Png(#[from] PngError),
}

/// What was written, and what the user should know about it.
#[derive(Debug)]
pub struct Written {
    pub path: PathBuf,
    /// Things the report could not show, and corrupt lines skipped.
    pub warnings: Vec<String>,
}

/// Writes the report of a run in `run_dir` to `output` as `format`: run
/// number `run` (from 1), else the last that ran a block.
pub fn write(
    run_dir: &RunDir,
    format: ReportFormat,
    output: &Path,
    run: Option<usize>,
) -> Result<Written, ReportError> {
    let drawings = draw(run_dir, run)?;
    let write_file = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|source| ReportError::Write {
            path: path.to_path_buf(),
            source,
        })
    };
    match format {
        ReportFormat::Html => write_file(output, &html::page(&drawings))?,
        ReportFormat::Svg => write_file(output, &figure::figure(&drawings).svg)?,
        ReportFormat::Png => png::render_svg(&figure::figure(&drawings), output)?,
        ReportFormat::Json => write_file(output, &json(&drawings))?,
    }
    Ok(Written {
        path: output.to_path_buf(),
        warnings: drawings.warnings,
    })
}

/// The report page of `run_dir`, as `report` writes it.
pub fn page(run_dir: &RunDir) -> Result<String, ReportError> {
    Ok(html::page(&draw(run_dir, None)?))
}

pub use html::STYLE;

/// Everything the report shows, drawn once for any output format.
struct Drawings {
    title: String,
    /// Short facts about the run, one line each.
    facts: Vec<String>,
    warnings: Vec<String>,
    table: Vec<SummaryRow>,
    timeline: Chart,
    throughput: Chart,
    histograms: Vec<Chart>,
    slices: Vec<Chart>,
    /// What blocks cost (tasks that tracked resources).
    costs: Vec<Chart>,
    /// Each task's numbers, for `--format json`.
    tasks: Vec<TaskNumbers>,
}

/// A task in `report --format json`.
#[derive(Debug, serde::Serialize)]
struct TaskNumbers {
    #[serde(flatten)]
    status: TaskStatus,
    /// Per measure, blocks per bin (tasks that tracked resources).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cost_distributions: Vec<costs::Distribution>,
}

fn json(drawings: &Drawings) -> String {
    let report = serde_json::json!({
        "title": drawings.title,
        "facts": drawings.facts,
        "warnings": drawings.warnings,
        "tasks": drawings.tasks,
    });
    format!("{report:#}\n")
}

fn draw(run_dir: &RunDir, run: Option<usize>) -> Result<Drawings, ReportError> {
    let events = events_file(run_dir)?;
    let choice = run_choice::choose(&events, run)?;
    let mut pipeline_error = None;
    let pipeline = run_dir
        .load_recorded_pipeline(&python_for_workers())
        .map_err(|error| pipeline_error = Some(format!("no done-marker pictures: {error:#}")))
        .ok();
    let task_order = task_order(pipeline.as_ref());
    let new_run = || Builder::new(&task_order);
    let history = RunHistory::read_run(&events, Some(choice.number).filter(|&n| n > 0), new_run)
        .map_err(ReportError::Read)?;
    let mut warnings = lines_skipped(&history);
    warnings.extend(pipeline_error);
    let model = (history.last_run.unwrap_or_else(new_run)).finish(choice.number.saturating_sub(1));
    Ok(drawings(
        run_dir,
        pipeline.as_ref(),
        model,
        &choice,
        warnings,
    ))
}

/// The tasks in the pipeline's order, when it is known.
fn task_order(pipeline: Option<&Pipeline>) -> Vec<String> {
    (pipeline.iter())
        .flat_map(|p| p.tasks.iter().map(|t| t.spec.id.clone()))
        .collect()
}

/// Everything drawn of `model`, the run `choice` names, with the done
/// markers' state now.
fn drawings(
    run_dir: &RunDir,
    pipeline: Option<&Pipeline>,
    model: RunModel,
    choice: &run_choice::RunChoice,
    mut warnings: Vec<String>,
) -> Drawings {
    let (tasks, slices, costs) = match pipeline {
        Some(pipeline) => done_markers(pipeline, run_dir, &model.run, &mut warnings),
        None => Default::default(),
    };
    let statuses: Vec<&TaskStatus> = tasks.iter().map(|t| &t.status).collect();
    let table = table::rows(&model, &statuses);
    Drawings {
        title: format!("daisy run report: {}", model.pipeline()),
        facts: facts(&model, &table, run_dir, choice),
        table,
        timeline: timeline::render(&model),
        throughput: charts::render_throughput(&model),
        histograms: charts::render_histograms(&model),
        slices,
        costs,
        tasks,
        warnings,
    }
}

/// The report of the run going on in a run directory, kept up to date as
/// its `events.jsonl` grows: each [`LiveReport::update`] reads only the
/// lines written since the last, so drawing it every second costs what
/// the new events and the done markers cost, not the whole history. It
/// shows the last run, whatever it has run so far.
pub struct LiveReport {
    following: Following<Builder>,
    task_order: Vec<String>,
}

impl LiveReport {
    pub fn new(run_dir: &RunDir, pipeline: &Pipeline) -> Self {
        Self {
            following: Following::new(&run_dir.events()),
            task_order: task_order(Some(pipeline)),
        }
    }

    /// Reads what the run recorded since the last update.
    pub fn update(&mut self) -> Result<(), ReportError> {
        let task_order = &self.task_order;
        (self.following)
            .catch_up(|| Builder::new(task_order))
            .map_err(ReportError::Read)
    }

    /// The last run's events summed up, as `status` reads them; `None`
    /// before the run recorded its start.
    pub fn run_events(&self) -> Option<&RunEvents> {
        self.following.history.last_run.as_ref().map(Builder::run)
    }

    /// The report's views of the last run as HTML (the page's body), and
    /// each task's status as `status` finds it, from one reading of the
    /// done markers; with what both would warn of.
    pub fn draw(
        &self,
        run_dir: &RunDir,
        pipeline: &Pipeline,
    ) -> (String, Vec<TaskStatus>, Vec<String>) {
        let history = &self.following.history;
        let builder = (history.last_run.clone()).unwrap_or_else(|| Builder::new(&self.task_order));
        let runs = history.runs;
        let model = builder.finish(runs.saturating_sub(1));
        let last = run_choice::RunChoice {
            number: runs,
            runs,
            why: run_choice::Why::Last,
        };
        let warnings = lines_skipped(history);
        let drawings = drawings(run_dir, Some(pipeline), model, &last, warnings);
        let body = html::body(&drawings);
        let tasks = drawings.tasks.into_iter().map(|task| task.status).collect();
        (body, tasks, drawings.warnings)
    }
}

/// The run directory's `events.jsonl`, which must exist.
fn events_file(run_dir: &RunDir) -> Result<PathBuf, ReportError> {
    if !run_dir.path().is_dir() {
        return Err(ReportError::NoRunDir(run_dir.path().to_path_buf()));
    }
    let events = run_dir.events();
    if !events.exists() {
        return Err(ReportError::NoEvents(events));
    }
    Ok(events)
}

/// Each task's block counts and done-marker picture, as `status` finds
/// them, and the pictures of what its blocks cost; none (and a warning)
/// if the markers cannot be read.
fn done_markers(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    run: &RunEvents,
    warnings: &mut Vec<String>,
) -> (Vec<TaskNumbers>, Vec<Chart>, Vec<Chart>) {
    let mut states = match BlockStates::read(pipeline, run_dir, run) {
        Ok(states) => states,
        Err(error) => {
            warnings.push(format!("no done-marker pictures: {error:#}"));
            return Default::default();
        }
    };
    states.read_costs();
    warnings.extend(states.warnings().iter().cloned());
    let (mut tasks, mut slices, mut costs) = (Vec::new(), Vec::new(), Vec::new());
    for task in states.graph().task_indices() {
        let status = TaskStatus::of(&states, run_dir, task);
        slices.push(slice::render(&states, &status, task));
        let cost_distributions = costs::distributions(&states, task);
        costs.extend(costs::render(&states, task, &cost_distributions));
        tasks.push(TaskNumbers {
            status,
            cost_distributions,
        });
    }
    (tasks, slices, costs)
}

/// Most skipped lines named one by one; a badly damaged file gets a count.
const SKIPPED_LINES_NAMED: usize = 5;

fn lines_skipped<R>(history: &RunHistory<R>) -> Vec<String> {
    let mut warnings = history.warnings();
    let skipped = history.bad_lines.len() + history.more_bad_lines;
    if skipped > SKIPPED_LINES_NAMED {
        warnings.truncate(SKIPPED_LINES_NAMED);
        let more = skipped - SKIPPED_LINES_NAMED;
        warnings.push(format!("... and {more} more lines that are not events"));
    }
    warnings
}

fn facts(
    model: &RunModel,
    table: &[SummaryRow],
    run_dir: &RunDir,
    choice: &run_choice::RunChoice,
) -> Vec<String> {
    let started = Duration::try_from_secs_f64(model.run.started())
        .map(|since| humantime::format_rfc3339_seconds(UNIX_EPOCH + since).to_string())
        .unwrap_or_else(|_| "at an unknown time".to_string());
    let failed: u64 = table.iter().map(|row| row.failed).sum();
    let orphaned: u64 = table.iter().filter_map(|row| row.orphaned).sum();
    // Blocks a --retry-failed run did not try, for a later plain run.
    let left: u64 = model
        .run
        .tasks
        .iter()
        .filter_map(|task| task.counters)
        .map(|counters| counters.left)
        .sum();
    let state = match model.run.finished.as_ref().map(|end| end.completed) {
        Some(true) if failed + orphaned + left == 0 => {
            "finished, every block completed".to_string()
        }
        Some(true) if left > 0 => format!(
            "finished; {failed} blocks failed, {orphaned} orphaned, {left} left for a run \
             without --retry-failed"
        ),
        Some(true) => format!("finished; {failed} blocks failed, {orphaned} orphaned"),
        Some(false) => "stopped before every block was processed (interrupted)".to_string(),
        None => "no run_finished event: still running, or the driver crashed".to_string(),
    };
    let mut facts = vec![
        format!("run directory {}", run_dir.path().display()),
        format!(
            "started {started}, {} of events; {state}",
            crate::inspect::human::human_seconds(model.run.span)
        ),
        format!("{} workers", model.workers.len()),
    ];
    facts.extend(choice.fact());
    facts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::run_state::{RunEnding, TaskEvents};
    use daisy_core::TaskCounters;

    #[test]
    fn a_retry_run_that_left_blocks_says_so() {
        let counters = TaskCounters {
            total: 10,
            completed: 4,
            left: 6,
            ..TaskCounters::default()
        };
        let run = RunEvents {
            finished: Some(RunEnding {
                completed: true,
                seconds: 0.0,
            }),
            tasks: vec![TaskEvents {
                id: "t".into(),
                counters: Some(counters),
                ..TaskEvents::default()
            }],
            ..RunEvents::default()
        };
        let model = RunModel {
            run,
            ..RunModel::default()
        };
        let run_dir = RunDir::at(Path::new("run"));
        let only = run_choice::RunChoice {
            number: 1,
            runs: 1,
            why: run_choice::Why::Last,
        };
        let facts = facts(&model, &[], &run_dir, &only).join("\n");
        assert!(
            facts.contains(
                "finished; 0 blocks failed, 0 orphaned, 6 left for a run without --retry-failed"
            ),
            "{facts}"
        );
    }
}
