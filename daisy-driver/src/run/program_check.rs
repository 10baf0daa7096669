//! Whether each task's program, and the worker program, can start, checked
//! before a run starts anything: a program that does not exist (`pyhton3`,
//! `./segg.sh`) would otherwise fail every try of every block, and a
//! `--worker-bin` that does not exist every worker start.
//!
//! Workers of a task whose launcher is local (and a `--serial` run) start
//! the program on this machine, in this directory, so a program that does not resolve
//! here is a problem. Cluster workers run on compute nodes, whose PATH and
//! file systems may differ: there the same finding is only a warning, and
//! each worker checks again where it runs (refusing with `cannot_serve`).

use crate::pipeline::{LauncherKind, Pipeline, TaskConfig, UserCommand};
use daisy_core::template::CommandTemplate;
use daisy_worker::user_code::check_program;
use std::collections::BTreeMap;
use std::path::Path;

/// What a program that cannot start here means for a run.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProgramFindings {
    /// Programs that will not start: the run must not start.
    pub problems: Vec<String>,
    /// Programs that do not start here but may where workers run.
    pub warnings: Vec<String>,
}

/// Checks every task's program, and `worker` (the program workers run),
/// as workers started from `dir` would find them; `worker` is `None` for a
/// `--serial` run, which starts the tasks' programs here whatever the
/// launcher.
pub fn check_programs(pipeline: &Pipeline, dir: &Path, worker: Option<&Path>) -> ProgramFindings {
    let mut findings = ProgramFindings::default();
    let serial = worker.is_none();
    let runs_here = |task: &TaskConfig| serial || task.launcher.kind == LauncherKind::Local;
    let mut uses_the_worker = (pipeline.tasks.iter()).filter(|t| t.worker_program.is_none());
    let worker_here = uses_the_worker.any(runs_here);
    let worker = worker.and_then(|worker| worker_problem(worker, dir));
    findings.add(worker, worker_here);
    for task in &pipeline.tasks {
        let own_worker = task.worker_program.as_ref();
        let own_worker = own_worker.and_then(|argv| worker_program_problem(task, argv, dir));
        for finding in own_worker.into_iter().chain(program_problem(task, dir)) {
            findings.add(Some(finding), runs_here(task));
        }
    }
    findings
}

impl ProgramFindings {
    /// A program that does not start here is a problem if it would run
    /// here, and a warning if it runs where a cluster's jobs run.
    fn add(&mut self, finding: Option<String>, here: bool) {
        let Some(finding) = finding else {
            return;
        };
        match here {
            true => self.problems.push(finding),
            false => self.warnings.push(format!(
                "{finding} here (it may exist only on the compute nodes)"
            )),
        }
    }
}

/// `--worker-bin = "/opt/daisy-worker": program "/opt/daisy-worker" does
/// not exist (looked for /opt/daisy-worker)`, if it does not start.
fn worker_problem(worker: &Path, dir: &Path) -> Option<String> {
    let program = worker.to_string_lossy();
    let error = check_program(&program, dir, &BTreeMap::new()).err()?;
    Some(format!(
        "the worker program (--worker-bin, DAISY_WORKER_BIN) {program:?}: {error}"
    ))
}

/// `task "seg": worker_program = ["/venv/bin/python", ..]: program ..`,
/// if the program the launcher starts for the task does not start.
fn worker_program_problem(task: &TaskConfig, argv: &[String], dir: &Path) -> Option<String> {
    let error = check_program(argv.first()?, dir, &BTreeMap::new()).err()?;
    Some(format!(
        "task {:?}: worker_program = {argv:?}: {error}",
        task.spec.id
    ))
}

/// `task "seg": block_command = ["./segg.sh"]: program "./segg.sh" does
/// not exist (looked for /work/./segg.sh)`, if it does not start; a
/// function starts no program of its own.
fn program_problem(task: &TaskConfig, dir: &Path) -> Option<String> {
    let (field, argv, program) = match &task.command {
        UserCommand::Worker(argv) => ("command", argv, argv.first().cloned()),
        UserCommand::PerBlock(argv) => {
            let command = CommandTemplate::parse(argv).ok()?;
            ("block_command", argv, command.program().map(str::to_owned))
        }
        UserCommand::Function { .. } => return None,
    };
    let error = check_program(&program?, dir, &task.env).err()?;
    Some(format!(
        "task {:?}: {field} = {argv:?}: {error}",
        task.spec.id
    ))
}
