//! What the driver says when it starts serving: where it listens, and
//! for each task the command that starts one of its workers by hand
//! (also written to `worker_commands.txt` in the run directory).

use super::RunOptions;
use crate::pipeline::{Pipeline, TaskConfig};
use crate::run::launching;
use crate::run_dir::RunDir;
use daisy_core::context::WorkerContext;
use std::path::Path;

/// Prints where the driver listens and how to start workers by hand.
pub fn announce(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    options: &RunOptions,
    context: &WorkerContext,
) {
    crate::run::output::stdout::print_line(format_args!(
        "daisy-driver: serving {:?} on {}{}",
        pipeline.name,
        context.addresses.join(", "),
        reach_note(&context.addresses)
    ));
    let hand_command = |task| hand_command(task, run_dir, options);
    let lines: Vec<String> = pipeline.tasks.iter().map(hand_command).collect();
    let _ = std::fs::write(run_dir.worker_commands(), lines.join("\n") + "\n");
    for task in pipeline.tasks.iter().filter(|t| t.max_workers == 0) {
        crate::run::output::stdout::print_line(format_args!(
            "task {:?} takes workers started by hand: {}",
            task.spec.id,
            hand_command(task)
        ));
    }
}

/// Said after the addresses when only this machine can reach them, so
/// that a worker started elsewhere by hand is not left to time out.
fn reach_note(addresses: &[String]) -> &'static str {
    let loopback = |address: &String| {
        (address.parse::<std::net::SocketAddr>()).is_ok_and(|a| a.ip().is_loopback())
    };
    match addresses.iter().all(loopback) {
        true => {
            " (loopback only: every worker of this run starts on this machine; \
                 --listen 0.0.0.0:0 lets workers on other machines join)"
        }
        false => "",
    }
}

/// The worker program launched workers of `task` run (a Python task's
/// own), a path made absolute, so the line works as printed
/// (daisy-worker need not be on PATH).
fn hand_command(task: &TaskConfig, run_dir: &RunDir, options: &RunOptions) -> String {
    let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let (program, args) =
        launching::task_worker_program(task, &options.worker_program, &options.worker_args);
    // A bare name (`python3`) is looked up on PATH, as the launcher does.
    let program = match program.components().count() {
        1 => program.to_path_buf(),
        _ => absolute(program),
    };
    let context = absolute(&run_dir.context_file());
    let task_id = task.spec.id.as_str();
    let args = args.iter().map(String::as_str);
    std::iter::once(program.to_string_lossy().as_ref())
        .chain(args)
        .chain([
            "--context-file",
            &context.to_string_lossy(),
            "--task",
            task_id,
        ])
        .map(launchers::shell_quote)
        .collect::<Vec<_>>()
        .join(" ")
}
