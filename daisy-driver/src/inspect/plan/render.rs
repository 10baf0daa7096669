//! The plan as text: the pipeline, each task, the allocation phase by
//! phase, the submissions, then every problem (last, so none scrolls
//! away). Job scripts are long, so only `--scripts` prints them, after
//! everything else, each under a header naming its task and workers.

use super::allocation::{Phase, TaskState, WorkerIds};
use super::scripts::Submission;
use super::{Plan, TaskPlan, WritePlan};
use crate::counted::counted;
use crate::pipeline::LauncherKind;
use daisy_core::protocol::WireRoi;
use std::collections::BTreeMap;
use std::fmt::Write as _;

impl Plan {
    /// The human-readable plan; `show_scripts` adds the job scripts (or
    /// local command lines) of each task's first submission.
    pub fn render(&self, show_scripts: bool) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "pipeline {:?} ({})",
            self.pipeline,
            self.file.display()
        );
        let _ = writeln!(out, "run dir  {}", self.run_dir.display());
        let _ = writeln!(out, "budget   {}", render_map(&self.resources));
        let _ = writeln!(out, "launcher {}", kind_name(self.launcher));
        for task in &self.tasks {
            out.push('\n');
            task.render(&mut out);
        }
        self.render_phases(&mut out);
        self.render_submissions(&mut out, show_scripts);
        if show_scripts {
            for submission in &self.submissions {
                self.render_script(&mut out, submission);
            }
        }
        for check in &self.checks {
            let verdict = match check.accepted {
                Some(true) => "accepted",
                Some(false) => "refused",
                None => "not checked",
            };
            let _ = writeln!(
                out,
                "\ncheck: task {:?}, {}: {verdict}",
                check.task, check.how
            );
            for line in check.says.lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        for warning in &self.warnings {
            let _ = writeln!(out, "\nwarning: {warning}");
        }
        for problem in &self.problems {
            let _ = writeln!(out, "\nproblem: {problem}");
        }
        out
    }

    fn render_phases(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\nallocation (the driver's rules, every block taking as long; see the user guide)"
        );
        if self.phases.is_empty() {
            let _ = writeln!(
                out,
                "  nothing to run: every block is done, no worker would start"
            );
            return;
        }
        let width = self.tasks.iter().map(|t| t.id.len()).max().unwrap_or(0);
        for (number, phase) in self.phases.iter().enumerate() {
            render_phase(out, number + 1, phase, width);
        }
    }

    fn render_submissions(&self, out: &mut String, show_scripts: bool) {
        if self.submissions.is_empty() {
            return;
        }
        let hint = match show_scripts {
            true => "",
            false => "; --scripts prints them",
        };
        let _ = writeln!(out, "\nfirst submission of each task{hint}");
        for submission in &self.submissions {
            let what = match &submission.script_path {
                Some(path) => format!(
                    "{} script {}",
                    kind_name(submission.launcher),
                    path.display()
                ),
                None => counted(submission.commands.len() as u64, "local process"),
            };
            let _ = writeln!(
                out,
                "  task {:?}, {} (phase {}): {what}",
                submission.task,
                workers(submission.first_worker, submission.last_worker),
                submission.phase
            );
        }
    }

    fn render_script(&self, out: &mut String, submission: &Submission) {
        let (task, workers) = (
            &submission.task,
            workers(submission.first_worker, submission.last_worker),
        );
        match (&submission.script_path, &submission.script) {
            (Some(path), Some(script)) => {
                let _ = writeln!(
                    out,
                    "\n--- {} script for task {task:?} ({workers}), kept as {} ---",
                    kind_name(submission.launcher),
                    path.display()
                );
                out.push_str(script);
            }
            _ => {
                let _ = writeln!(
                    out,
                    "\n--- command lines for task {task:?} ({workers}), run in the driver's \
                     working directory with DAISY_CONTEXT set ---"
                );
                for command in &submission.commands {
                    let _ = writeln!(out, "{command}");
                }
            }
        }
    }
}

/// One phase, task ids padded to `width`.
fn render_phase(out: &mut String, number: usize, phase: &Phase, width: usize) {
    let when = match phase.after.is_empty() {
        true => "at start".to_string(),
        false if phase.after.len() == 1 => format!("after {} is done", phase.after[0]),
        false => format!("after {} are done", phase.after.join(", ")),
    };
    let _ = writeln!(
        out,
        "  phase {number}, {when} (budget in use {})",
        render_map(&phase.budget_used)
    );
    for task in &phase.tasks {
        let _ = writeln!(
            out,
            "    {:width$}  {}; {} left",
            task.id,
            state(&task.state),
            counted(task.blocks_left, "block")
        );
    }
}

fn state(state: &TaskState) -> String {
    match state {
        TaskState::Running {
            workers,
            started,
            more_later_up_to,
        } => {
            let plural = if *workers == 1 { "worker" } else { "workers" };
            let mut text = format!("{workers} {plural}");
            if let Some(WorkerIds { first, last }) = started {
                text += &format!(", starts {}", self::workers(*first, *last));
            }
            if let Some(up_to) = more_later_up_to {
                text +=
                    &format!(" (up to {up_to} as later levels become ready, budget permitting)");
            }
            text
        }
        TaskState::WaitsForUpstream { upstream } => format!("waits for {}", upstream.join(", ")),
        TaskState::WaitsForBudget => "waits for the budget".to_string(),
        TaskState::ByHand => "workers started by hand (max_workers = 0)".to_string(),
    }
}

/// "worker 3" or "workers 3-5".
fn workers(first: u64, last: u64) -> String {
    match first == last {
        true => format!("worker {first}"),
        false => format!("workers {first}-{last}"),
    }
}

impl TaskPlan {
    /// How its workers fill cluster jobs, when one job runs several:
    /// ", 2 workers per job (job steps): 4 workers in 2 jobs".
    fn jobs(&self) -> String {
        let per_job = self.workers_per_job;
        if per_job < 2 {
            return String::new();
        }
        let jobs = self.workers.div_ceil(per_job);
        format!(
            ", {per_job} workers per job (job steps): {} in {}",
            counted(self.workers, "worker"),
            counted(jobs, "job")
        )
    }

    fn render(&self, out: &mut String) {
        let upstream = match self.upstream.is_empty() {
            true => "none".to_string(),
            false => self.upstream.join(", "),
        };
        let conflict = if self.read_write_conflict {
            "on"
        } else {
            "off"
        };
        let _ = writeln!(out, "task {:?} (upstream: {upstream})", self.id);
        let _ = writeln!(
            out,
            "  total roi    {} (writes {})",
            roi(&self.total_roi),
            roi(&self.total_write_roi)
        );
        let _ = writeln!(
            out,
            "  block        read {} write {}, fit {}, read/write conflict {conflict}",
            roi(&self.read_roi),
            roi(&self.write_roi),
            self.fit
        );
        let levels = if self.levels == 1 { "level" } else { "levels" };
        let _ = writeln!(
            out,
            "  blocks       {} in {} {levels}, {} roots (ready when nothing is done)",
            self.blocks, self.levels, self.root_blocks
        );
        let masked = match self.masked_blocks {
            0 => String::new(),
            n => format!(", {n} masked (skip_mask)"),
        };
        let _ = writeln!(
            out,
            "  done         {} done{masked}, {} to run",
            self.done_blocks, self.remaining_blocks
        );
        let _ = writeln!(
            out,
            "  launcher     {}{}",
            kind_name(self.launcher),
            self.jobs()
        );
        let _ = writeln!(
            out,
            "  workers      {} (max_workers {}, requires {})",
            self.workers,
            self.max_workers,
            render_map(&self.requires)
        );
        let _ = writeln!(
            out,
            "  batches      {} per request, prefetch {}",
            counted(self.batch_size, "block"),
            self.prefetch
        );
        if self.resource_tracking {
            let _ = writeln!(out, "  costs        measured per block (resource_tracking)");
        }
        for write in &self.writes {
            write.render(out);
        }
        let _ = writeln!(
            out,
            "  command      {} command: {}",
            self.command_kind,
            self.command.join(" ")
        );
    }
}

impl WritePlan {
    /// Two lines: the array's grids, then what the blocks do to them.
    fn render(&self, out: &mut String) {
        let (cell, grid) = match &self.shard {
            Some(shard) => (
                "shard",
                format!("chunks {:?} in shards {shard:?}", self.chunk),
            ),
            None => ("chunk", format!("chunks {:?}, unsharded", self.chunk)),
        };
        let _ = writeln!(out, "  writes       {}: {grid}", self.array);
        let per_block = match self.shards_per_block {
            Some(shards) => format!(
                "{} and {} per block",
                counted(self.chunks_per_block, "chunk"),
                counted(shards, "shard")
            ),
            None => format!("{} per block", counted(self.chunks_per_block, "chunk")),
        };
        let _ = writeln!(
            out,
            "               {per_block}, up to {} per {cell}; {} written: at most {} at once",
            counted(self.blocks_per_lock, "block"),
            counted(self.locks_written, cell),
            counted(self.locks_written, "block"),
        );
        if self.blocks_sharing_chunks > 0 {
            let _ = writeln!(
                out,
                "               {} write parts of shared chunks: one at a time per chunk \
                 (share_chunks)",
                counted(self.blocks_sharing_chunks, "block"),
            );
        }
    }
}

fn roi(roi: &WireRoi) -> String {
    let join = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    format!(
        "{{offset [{}], shape [{}]}}",
        join(&roi.offset),
        join(&roi.shape)
    )
}

fn render_map(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "{}".to_string();
    }
    let items: Vec<String> = map.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", items.join(", "))
}

/// A launcher kind as pipeline files spell it (`sbatch`).
fn kind_name(kind: LauncherKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|name| name.as_str().map(str::to_owned))
        .unwrap_or_default()
}
