//! `daisy-driver run`: a pipeline run one block at a time on this
//! machine, with each task's own command.
//!
//! Every block goes through the same steps a distributed run will use:
//! skip it if its done marker is set, run the user's code, set the done
//! marker, then report it (events, scheduler). The marker is set before the
//! success is reported anywhere, so a driver killed at any moment never
//! loses a block it reported done; a block killed mid-way runs again.

use crate::pipeline::{Pipeline, TaskConfig, UserCommand};
use crate::run::output::summary::{RunEnd, RunSummary, TaskSummary};
use crate::run::retry::OnlyBlocks;
use crate::run_dir::events::Event;
use crate::run_dir::outcome_recorder::{Attempt, OutcomeRecorder};
use crate::run_dir::RunDir;
use anyhow::Context;
use daisy_core::protocol::BlockCost;
use daisy_core::protocol::WireBlock;
use daisy_core::scheduler::Released;
use daisy_core::serial::{self, BlockRunner, SerialEnd, Step};
use daisy_core::{Block, BlockOutcome, Scheduler, TaskIdx};
use daisy_worker::cost::WorkerMeter;
use daisy_worker::embedded::{self, BlockControl, EmbeddedCode, Metered, Unwatched};
use daisy_worker::user_code::{BlockCommand, BlockFailure, BlockLog, Finished, WorkerCommand};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The worker id in-process code is given in a serial run: there is one
/// worker, the driver itself.
const SERIAL_WORKER_ID: u64 = 0;

/// Runs `pipeline`, resuming from the done markers in `run_dir`; only
/// the blocks in `only` if given (`--retry-failed`); a progress line every
/// `progress_every` if given.
pub fn run(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    only: Option<&OnlyBlocks>,
    progress_every: Option<Duration>,
) -> anyhow::Result<RunSummary> {
    let started = Instant::now();
    std::fs::create_dir_all(run_dir.path())
        .with_context(|| format!("creating the run directory {}", run_dir.path().display()))?;
    let mut runner = SerialRunner::open(pipeline, run_dir, only.is_some(), progress_every)?;
    let mut scheduler = crate::run::retry::scheduler(pipeline, only);
    let end = serial::run(&mut scheduler, &mut runner);
    runner.finish(&scheduler, started.elapsed())?;
    if let Some(error) = runner.fatal.take() {
        return Err(error);
    }
    Ok(RunSummary {
        tasks: task_summaries(
            pipeline,
            run_dir,
            &scheduler,
            started.elapsed().as_secs_f64(),
        ),
        seconds: started.elapsed().as_secs_f64(),
        events: run_dir.events(),
        failed_attempts: runner.attempts_failed,
        failed_event_writes: runner.recorder.failed_event_writes(),
        end: match end {
            SerialEnd::Finished => RunEnd::Finished,
            SerialEnd::Stalled => RunEnd::Stalled,
            SerialEnd::Stopped => RunEnd::Interrupted,
        },
    })
}

fn task_summaries(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    scheduler: &Scheduler,
    seconds: f64,
) -> Vec<TaskSummary> {
    (0..pipeline.tasks.len())
        .map(|i| {
            let id = pipeline.tasks[i].spec.id.clone();
            TaskSummary {
                counters: scheduler.counters(TaskIdx(i as u32)),
                logs: run_dir.task_logs(&id),
                id,
                workers: Default::default(),
                restarts: 0,
                seconds,
                abandoned: None,
                last_error: None,
            }
        })
        .collect()
}

/// How one task's user code runs.
enum UserCode {
    PerBlock(BlockCommand),
    /// Started on the first block, restarted if it dies.
    Worker(Option<WorkerCommand>),
    /// A function of the interpreter this driver is embedded in (the
    /// Python package's serial run), called in this process; measured if
    /// the task tracks resources.
    Embedded(Box<dyn EmbeddedCode>, Option<Mutex<(WorkerMeter, usize)>>),
}

struct TaskRunner<'a> {
    config: &'a TaskConfig,
    code: UserCode,
    log: BlockLog,
}

impl<'a> TaskRunner<'a> {
    fn open(config: &'a TaskConfig, run_dir: &RunDir) -> anyhow::Result<Self> {
        let id = &config.spec.id;
        let code = match &config.command {
            UserCommand::PerBlock(argv) => UserCode::PerBlock(
                BlockCommand::new(argv, config.env.clone(), config.timeout)
                    .with_context(|| format!("task {id:?}: block_command"))?
                    .with_resource_tracking(config.resource_tracking),
            ),
            UserCommand::Worker(_) => UserCode::Worker(None),
            UserCommand::Function { .. } => UserCode::Embedded(
                embedded::code_for(id, SERIAL_WORKER_ID, &config.task_code())
                    .map_err(|reason| anyhow::anyhow!("task {id:?}: {reason}"))?,
                config.resource_tracking.then(embedded::own_meter),
            ),
        };
        Ok(Self {
            config,
            code,
            log: BlockLog::in_dir(&run_dir.task_logs(id), "serial"),
        })
    }

    /// Runs `block`, with what it cost if the task tracks resources;
    /// `None` if the embedding interpreter was interrupted (Ctrl-C) and
    /// the block did not run.
    fn run_block(
        &mut self,
        block: &WireBlock,
    ) -> Option<(Result<Finished, BlockFailure>, Option<BlockCost>)> {
        let config = self.config;
        Some(match &mut self.code {
            UserCode::Embedded(code, meter) => {
                let metered = meter.as_ref().map(|meter| Metered::new(&Unwatched, meter));
                let control: &dyn BlockControl = match &metered {
                    Some(metered) => metered,
                    None => &Unwatched,
                };
                let mut ran = code.run_batch(vec![block.clone()], control).pop();
                if ran.is_none() && code.ended_by_choice().is_some() && !code.interrupted() {
                    // A worker function returned before it took the block
                    // (it leaves, in a worker): the serial run's one
                    // worker is its task's last, which is started again.
                    ran = code.run_batch(vec![block.clone()], control).pop();
                }
                if let Some(reason) = code.cannot_serve() {
                    return Some((Err(BlockFailure::new(reason)), None));
                }
                let cost = metered.and_then(|m| m.take(block.block_id));
                return ran
                    .filter(|_| !code.interrupted())
                    .map(|ran| (ran.outcome, cost));
            }
            UserCode::PerBlock(command) => {
                let (outcome, cost) = command.run_costed(block, &self.log);
                (outcome.map(|()| Finished::Ran), cost)
            }
            UserCode::Worker(process) => {
                if !process.as_mut().is_some_and(WorkerCommand::is_running) {
                    match start_worker_command(config, &self.log) {
                        Ok(started) => *process = Some(started),
                        Err(failure) => return Some((Err(failure), None)),
                    }
                }
                let process = process.as_mut().expect("started above");
                let outcome = process.run(block, config.timeout);
                (outcome, process.take_cost(block.block_id))
            }
        })
    }
}

/// Starts a task's worker command (it serves blocks until stdin closes).
fn start_worker_command(
    config: &TaskConfig,
    log: &BlockLog,
) -> Result<WorkerCommand, BlockFailure> {
    let UserCommand::Worker(argv) = &config.command else {
        unreachable!("only worker-command tasks start a worker command");
    };
    WorkerCommand::start(&config.spec.id, argv, &config.env, log)
        .map(|process| process.with_resource_tracking(config.resource_tracking))
        .map_err(|e| BlockFailure::new(e.to_string()))
}

/// Runs each block with its task's code and records what happened.
struct SerialRunner<'a> {
    tasks: Vec<TaskRunner<'a>>,
    recorder: OutcomeRecorder,
    /// An error that must end the run (a done marker that cannot be written).
    fatal: Option<anyhow::Error>,
    /// Why the block just processed failed, until its release is known.
    last_failure: Option<String>,
    /// How long the block just processed ran.
    last_seconds: f64,
    /// What else it cost, if its task tracks resources.
    last_cost: Option<BlockCost>,
    blocks_run: u64,
    attempts_failed: u64,
    progress_every: Option<Duration>,
    last_progress: Instant,
}

impl<'a> SerialRunner<'a> {
    fn open(
        pipeline: &'a Pipeline,
        run_dir: &RunDir,
        retry_failed: bool,
        progress_every: Option<Duration>,
    ) -> anyhow::Result<Self> {
        let tasks = pipeline
            .tasks
            .iter()
            .map(|config| TaskRunner::open(config, run_dir))
            .collect::<anyhow::Result<_>>()?;
        let recorder = OutcomeRecorder::open(pipeline, run_dir, "serial", retry_failed)?;
        Ok(Self {
            tasks,
            recorder,
            fatal: None,
            last_failure: None,
            last_seconds: 0.0,
            last_cost: None,
            blocks_run: 0,
            attempts_failed: 0,
            progress_every,
            last_progress: Instant::now(),
        })
    }

    fn task_id(&self, block: &Block) -> &str {
        &self.tasks[block.id.task.index()].config.spec.id
    }

    /// Marks the block done, then reports it; a marker that cannot be
    /// written stops the run (continuing would lose the work).
    fn on_success(&mut self, block: &Block, finished: Finished) -> Step {
        let outcome = match finished {
            Finished::Ran => BlockOutcome::Success,
            Finished::FoundDone => BlockOutcome::Skipped,
        };
        match self.record_success(block) {
            Ok(()) => Step::Continue(outcome),
            Err(error) => {
                let context = format!("recording block {} as done", block.id.spatial);
                self.fatal = Some(error.context(context));
                Step::Stop
            }
        }
    }

    /// Blocks run one at a time, so each line is written at once (for a
    /// `status` run alongside), not buffered as in distributed runs.
    fn record_success(&mut self, block: &Block) -> anyhow::Result<()> {
        self.recorder.done(block, self.last_attempt())?;
        self.recorder.flush();
        Ok(())
    }

    fn last_attempt(&self) -> Attempt {
        Attempt {
            worker_id: None,
            seconds: Some(self.last_seconds),
            cost: self.last_cost,
        }
    }

    /// A plain progress line every few seconds (terminal progress bars
    /// come with the distributed run).
    fn maybe_print_progress(&mut self) {
        let due = |every| self.last_progress.elapsed() >= every;
        if !self.progress_every.is_some_and(due) {
            return;
        }
        self.last_progress = Instant::now();
        crate::run::output::stdout::print_line(format_args!(
            "progress: {} blocks run, {} attempts failed",
            self.blocks_run, self.attempts_failed
        ));
    }

    /// Ends the run: done markers synced to disk, worker commands told to
    /// finish, the outcome recorded.
    fn finish(&mut self, scheduler: &Scheduler, elapsed: Duration) -> anyhow::Result<()> {
        self.recorder.flush_markers()?;
        for (i, task) in self.tasks.iter_mut().enumerate() {
            match std::mem::replace(&mut task.code, UserCode::Worker(None)) {
                UserCode::Worker(Some(process)) => drop(process.finish()),
                UserCode::Embedded(mut code, _) => code.finish(),
                _ => {}
            }
            let counters = scheduler.counters(TaskIdx(i as u32));
            self.recorder.record(&Event::TaskDone {
                task: task.config.spec.id.as_str().into(),
                counters,
            });
        }
        // As in distributed runs: the run reached its end (failed and
        // orphaned blocks included), rather than being interrupted.
        self.recorder.record(&Event::RunFinished {
            completed: scheduler.is_done(),
            seconds: elapsed.as_secs_f64(),
        });
        Ok(())
    }
}

impl BlockRunner for SerialRunner<'_> {
    fn is_done(&mut self, block: &Block) -> bool {
        let config = self.tasks[block.id.task.index()].config;
        self.recorder.is_done(block) || config.is_masked(block)
    }

    fn process(&mut self, block: &Block) -> Step {
        self.blocks_run += 1;
        self.maybe_print_progress();
        let wire = WireBlock::new(self.task_id(block), block);
        let started = Instant::now();
        let Some((ran, cost)) = self.tasks[block.id.task.index()].run_block(&wire) else {
            return Step::Stop;
        };
        self.last_seconds = started.elapsed().as_secs_f64();
        self.last_cost = cost;
        let failure = match ran {
            Ok(finished) => return self.on_success(block, finished),
            Err(failure) => failure,
        };
        self.attempts_failed += 1;
        self.last_failure = Some(failure.message);
        Step::Continue(BlockOutcome::Failure)
    }

    fn released(&mut self, block: &Block, released: &Released) {
        let Some(error) = self.last_failure.take() else {
            return;
        };
        if let Released::FailedForGood { orphaned } = released {
            tracing::warn!(
                "task {:?}: block {}: {error} (failed for good, {} blocks orphaned)",
                self.task_id(block),
                block.id.spatial,
                orphaned.len()
            );
        }
        let attempt = self.last_attempt();
        self.recorder.failed(block, attempt, &error, released);
    }
}
