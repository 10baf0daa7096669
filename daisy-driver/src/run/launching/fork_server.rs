//! Which fork server forks a run's local Python workers (launchers'
//! `ForkServer`): the one `run_blockwise` forked from the user's program,
//! whose socket it passed as `--fork-server`; else, for `daisy-driver run`
//! of a pipeline with Python function tasks, a fresh `python -m
//! daisy_rs._fork_server` that imports the tasks' functions once, so that
//! no worker imports them again. `DAISY_FORK_WORKERS=0` turns the fresh
//! one off (a program that passes its own checked the variable first).

use crate::pipeline::{python_worker, LauncherKind, Pipeline, TaskConfig, UserCommand};
use crate::run::launching::LaunchSettings;
use daisy_core::protocol::FunctionCode;
use launchers::ForkServer;
use std::path::Path;

/// The environment variable that turns forking workers off ("0",
/// "false", "no", "off").
pub const FORK_WORKERS_ENV: &str = "DAISY_FORK_WORKERS";

/// The fork server of a run of `pipeline`, if it has one; a server that
/// cannot be had is warned about, and the workers start as fresh
/// interpreters.
pub fn for_run(pipeline: &Pipeline, settings: &LaunchSettings) -> Option<ForkServer> {
    if let Some(fd) = settings.fork_server {
        return ForkServer::connect(fd)
            .inspect_err(|error| tracing::warn!("the fork server does not answer ({error})"))
            .ok();
    }
    if !settings.fork_workers || !enabled_by_environment() {
        return None;
    }
    let forkable: Vec<(&TaskConfig, &str, &FunctionCode)> =
        pipeline.tasks.iter().filter_map(forkable).collect();
    let (_, python, _) = forkable.first()?;
    let served: Vec<_> = forkable.iter().filter(|(_, p, _)| p == python).collect();
    let tasks: Vec<String> = served
        .iter()
        .map(|(task, ..)| task.spec.id.clone())
        .collect();
    let codes: Vec<&FunctionCode> = served.iter().map(|(.., code)| *code).collect();
    let preload = serde_json::to_string(&codes).ok()?;
    ForkServer::spawn(Path::new(python), &tasks, &preload)
        .inspect_err(|error| tracing::warn!("cannot start a fork server with {python} ({error})"))
        .ok()
}

/// A task whose workers a fresh fork server can fork: a Python function
/// run by `PYTHON -m daisy_rs.worker` on this machine; with its `PYTHON`
/// and its function.
fn forkable(task: &TaskConfig) -> Option<(&TaskConfig, &str, &FunctionCode)> {
    let UserCommand::Function { code, .. } = &task.command else {
        return None;
    };
    let python = python_worker::python_of(task.worker_program.as_deref()?)?;
    (task.launcher.kind == LauncherKind::Local).then_some((task, python, code))
}

fn enabled_by_environment() -> bool {
    let value = std::env::var(FORK_WORKERS_ENV).unwrap_or_default();
    !matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "0" | "false" | "no" | "off"
    )
}
