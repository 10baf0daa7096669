//! `--reset TASK`: start tasks over by deleting their done markers, and
//! those of every task downstream of them (their blocks were computed
//! from what is about to be redone). Deleting work is not undoable, so
//! the markers to delete are listed first and confirmed: on a terminal by
//! a prompt, otherwise only with `--yes`.

use crate::counted::counted;
use crate::pipeline::Pipeline;
use crate::run_dir::done_marker::{self, DoneMarker};
use crate::run_dir::RunDir;
use anyhow::{bail, Context as _};
use daisy_core::TaskIdx;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

/// One done marker a reset deletes.
#[derive(Debug)]
pub struct MarkerToDelete {
    pub task: String,
    pub dir: PathBuf,
    pub done_blocks: u64,
}

/// The markers of `tasks` and of their downstream tasks, transitively,
/// in pipeline order; markers that do not exist are not listed.
pub fn markers_to_delete(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    tasks: &[String],
) -> anyhow::Result<Vec<MarkerToDelete>> {
    let graph = pipeline.graph();
    let mut chosen = vec![false; graph.num_tasks()];
    let mut to_visit = Vec::new();
    for id in tasks {
        let Some(task) = graph.task_index(id) else {
            let known: Vec<&str> = pipeline.tasks.iter().map(|t| t.spec.id.as_str()).collect();
            bail!(
                "cannot reset task {id:?}: the pipeline has no such task (tasks: {})",
                known.join(", ")
            );
        };
        to_visit.push(task);
    }
    while let Some(task) = to_visit.pop() {
        if !std::mem::replace(&mut chosen[task.index()], true) {
            to_visit.extend_from_slice(graph.downstream_tasks(task));
        }
    }
    let mut markers = Vec::new();
    for (i, config) in pipeline.tasks.iter().enumerate() {
        let dir = run_dir.done_marker(&config.spec.id);
        if !chosen[TaskIdx(i as u32).index()] || !dir.exists() {
            continue;
        }
        // A marker of another layout is deleted all the same: starting
        // the task over is what such a marker needs.
        let done_blocks = DoneMarker::open_existing(&dir, &config.spec)
            .ok()
            .flatten()
            .map_or(0, |m| m.count_done());
        markers.push(MarkerToDelete {
            task: config.spec.id.clone(),
            dir,
            done_blocks,
        });
    }
    Ok(markers)
}

/// Lists the markers on stderr and asks (or takes `yes` for an answer);
/// fails if the answer is no or cannot be asked. Deletes nothing.
pub fn confirm(markers: &[MarkerToDelete], yes: bool) -> anyhow::Result<()> {
    if markers.is_empty() {
        eprintln!("daisy-driver: reset: no done markers to delete");
        return Ok(());
    }
    eprintln!("daisy-driver: reset deletes these done markers:");
    for m in markers {
        eprintln!(
            "  task {:?}: {} ({} done)",
            m.task,
            m.dir.display(),
            counted(m.done_blocks, "block")
        );
    }
    match yes {
        true => Ok(()),
        false => ask(),
    }
}

/// Deletes confirmed markers (with the run directory locked).
pub fn delete(markers: &[MarkerToDelete]) -> anyhow::Result<()> {
    if markers.is_empty() {
        return Ok(());
    }
    for m in markers {
        done_marker::reset(&m.dir).with_context(|| format!("resetting task {:?}", m.task))?;
    }
    Ok(())
}

/// Says on stderr that `markers` were deleted, if there were any.
pub fn announce_deleted(markers: &[MarkerToDelete]) {
    if !markers.is_empty() {
        let blocks: u64 = markers.iter().map(|m| m.done_blocks).sum();
        eprintln!(
            "daisy-driver: reset: cleared {} of {}",
            counted(blocks, "done block"),
            counted(markers.len() as u64, "task")
        );
    }
}

fn ask() -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        bail!("not deleting done markers without --yes (stdin is not a terminal to ask on)");
    }
    eprint!("delete them? [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if !matches!(answer.trim(), "y" | "Y" | "yes") {
        bail!("reset cancelled; nothing was deleted");
    }
    Ok(())
}
