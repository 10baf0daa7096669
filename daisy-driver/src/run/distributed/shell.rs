//! The shell around the [`Core`]: it feeds the core inputs with the time
//! they happened and carries out its commands, in order, on the real
//! things: connections' outboxes, the launcher thread, the done markers
//! and the event log. It holds no rule of its own beyond one: once a
//! done marker cannot be written the run ends, and nothing that could
//! depend on that block is carried out.

use super::core::{Command, Core, CoreSettings, Input};
use super::RunOptions;
use crate::pipeline::{LauncherKind, Pipeline, UserCommand};
use crate::run::distributed::connection::{ConnEvent, ConnId, Outbox, PeerEvent};
use crate::run::launching;
use crate::run::launching::thread::{LauncherEvent, LauncherThread};
use crate::run::output::progress::Progress;
use crate::run::output::summary::{RunEnd, RunSummary};
use crate::run::slots::SlotId;
use crate::run_dir::outcome_recorder::Attempt;
use crate::run_dir::outcome_recorder::OutcomeRecorder;
use crate::run_dir::{user_logs, RunDir};
use daisy_core::context::{WorkerContext, CONTEXT_ENV};
use daisy_core::id_hash::IdMap;
use daisy_core::printable::printable;
use daisy_core::protocol::frame::Payload;
use daisy_core::protocol::outgoing::blocks_payload;
use daisy_core::protocol::Welcome;
use daisy_core::{Block, TaskIdx};
use daisy_worker::user_code::StderrTail;
use launchers::WorkerRequest;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

pub struct Shell {
    core: Core,
    pipeline: Arc<Pipeline>,
    run_dir: RunDir,
    options: RunOptions,
    /// What launched workers are told to connect to.
    context: WorkerContext,
    outboxes: IdMap<ConnId, Outbox>,
    /// Connections waiting for the answer to their Hello.
    replies: IdMap<ConnId, oneshot::Sender<Result<Welcome, String>>>,
    launcher: LauncherThread,
    recorder: OutcomeRecorder,
    progress: Progress,
    /// When the run started, as the headers of its parts of the workers'
    /// logs say (see [`crate::run_dir::user_logs`]).
    started: std::time::SystemTime,
    /// An error that ends the run (a done marker that cannot be written).
    fatal: Option<anyhow::Error>,
    /// Empty buffers kept between inputs, so that carrying out commands
    /// allocates nothing.
    spare: Vec<Command>,
    spare_marks: Vec<(Block, Attempt)>,
}

impl Shell {
    pub fn open(
        pipeline: Arc<Pipeline>,
        run_dir: &RunDir,
        options: &RunOptions,
        launcher: LauncherThread,
        context: WorkerContext,
    ) -> anyhow::Result<Self> {
        let retry_failed = options.only_blocks.is_some();
        let recorder = OutcomeRecorder::open(&pipeline, run_dir, "distributed", retry_failed)?;
        let scheduler = crate::run::retry::scheduler(&pipeline, options.only_blocks.as_ref());
        let settings = CoreSettings {
            heartbeat_interval: options.heartbeat_interval,
            heartbeat_misses: options.heartbeat_misses,
        };
        let core = Core::new(pipeline.clone(), scheduler, settings, Instant::now());
        let totals: Vec<(&str, u64)> = (core.progress().iter())
            .map(|t| (t.id, t.counters.total))
            .collect();
        Ok(Self {
            progress: Progress::new(&totals, options.progress_every),
            core,
            pipeline,
            run_dir: run_dir.clone(),
            options: options.clone(),
            context,
            outboxes: IdMap::default(),
            replies: IdMap::default(),
            launcher,
            recorder,
            started: std::time::SystemTime::now(),
            fatal: None,
            spare: Vec::new(),
            spare_marks: Vec::new(),
        })
    }

    /// `Some` once the run is over.
    pub fn end(&self) -> Option<RunEnd> {
        match self.fatal {
            Some(_) => Some(RunEnd::Interrupted),
            None => self.core.end(),
        }
    }

    pub fn has_connections(&self) -> bool {
        self.core.has_connections()
    }

    pub fn on_conn_event(&mut self, event: ConnEvent) {
        let input = match event {
            ConnEvent::Hello {
                conn,
                hello,
                outbox,
                reply,
            } => {
                self.outboxes.insert(conn, outbox);
                self.replies.insert(conn, reply);
                Input::Hello { conn, hello }
            }
            ConnEvent::Peer(event) => {
                match &event {
                    PeerEvent::Closed { conn, .. } => drop(self.outboxes.remove(conn)),
                    PeerEvent::Message { conn, .. } => {
                        if let Some(outbox) = self.outboxes.get(conn) {
                            outbox.request_taken();
                        }
                    }
                    PeerEvent::Refused { .. } => {}
                }
                Input::Peer(event)
            }
        };
        self.handle(input);
    }

    pub fn on_launcher_event(&mut self, event: LauncherEvent) {
        self.handle(Input::Launcher(event));
    }

    /// Time passed: the core's timers, then the progress output and the
    /// buffered events.
    pub fn on_tick(&mut self) {
        self.handle(Input::Tick);
        self.progress.update(&self.core.progress());
        self.recorder.flush();
    }

    /// True while blocks done before are being skipped, a turn at a time.
    pub fn is_catching_up(&self) -> bool {
        self.core.is_catching_up()
    }

    /// Another turn of skipping blocks done before.
    pub fn on_catch_up(&mut self) {
        self.handle(Input::CatchUp);
    }

    /// Tells every connection to stop.
    pub fn shutdown_all(&mut self, reason: &str) {
        self.core.shutdown_all(reason);
        self.carry_out_commands();
    }

    fn handle(&mut self, input: Input) {
        let (recorder, pipeline) = (&self.recorder, &self.pipeline);
        let skipped = |block: &_| recorder.is_done(block) || pipeline.is_masked(block);
        self.core.handle(Instant::now(), input, &skipped);
        self.carry_out_commands();
    }

    /// Carries out the core's commands in order; the marks of a run of
    /// `MarkDone`s (a release's blocks) are written together, before the
    /// command after them.
    fn carry_out_commands(&mut self) {
        let mut commands = std::mem::take(&mut self.spare);
        self.core.take_commands(&mut commands);
        let mut marks = std::mem::take(&mut self.spare_marks);
        for command in commands.drain(..) {
            match command {
                Command::MarkDone { block, attempt } => {
                    marks.push((self.core.block(block), attempt))
                }
                command => {
                    self.mark_done(&mut marks);
                    self.carry_out(command);
                }
            }
        }
        self.mark_done(&mut marks);
        (self.spare, self.spare_marks) = (commands, marks);
    }

    fn mark_done(&mut self, marks: &mut Vec<(Block, Attempt)>) {
        if marks.is_empty() || self.fatal.is_some() {
            return marks.clear();
        }
        if let Err(error) = self.recorder.done_many(marks) {
            let first = marks[0].0.id.spatial;
            let what = format!(
                "recording {} blocks as done (from block {first})",
                marks.len()
            );
            self.fatal = Some(anyhow::Error::new(error).context(what));
        }
        marks.clear();
    }

    fn carry_out(&mut self, command: Command) {
        if self.fatal.is_some() && !harmless_after_a_lost_mark(&command) {
            return;
        }
        match command {
            Command::Answer { conn, answer } => self.answer(conn, answer),
            Command::Send { conn, message } => {
                if let Some(outbox) = self.outboxes.get(&conn) {
                    outbox.send(message);
                }
            }
            Command::SendBlocks { conn, task, blocks } => {
                if let Some(outbox) = self.outboxes.get(&conn) {
                    let task_id = &self.pipeline.tasks[task.index()].spec.id;
                    outbox.send_payload(Payload(blocks_payload(task_id, blocks.iter())));
                }
            }
            Command::StartWorkers { task, slots } => {
                self.start_log_parts(task, &slots);
                let requests = slots.iter().map(|&s| self.worker_request(task, s));
                self.launcher.start(requests.collect());
            }
            Command::CancelJobs(slots) => self.launcher.cancel(slots),
            Command::WorkersLeft(slots) => self.launcher.left(slots),
            Command::MarkDone { block, attempt } => {
                let block = self.core.block(block);
                self.mark_done(&mut vec![(block, attempt)])
            }
            Command::RecordFailure {
                block,
                attempt,
                mut error,
                released,
                stderr_of,
            } => {
                let block = self.core.block(block);
                if let Some(slot) = stderr_of {
                    self.add_stderr_tail(&mut error, block.id.task, slot);
                }
                self.recorder.failed(&block, attempt, &error, &released)
            }
            Command::Record(event) => self.recorder.record(&event),
        }
    }

    /// Adds the end of the stderr log a launcher wrote for worker `slot`
    /// of `task` (a local worker's `worker-<id>.err`), if there is one.
    fn add_stderr_tail(&self, error: &mut String, task: TaskIdx, slot: SlotId) {
        let task_id = &self.pipeline.tasks[task.index()].spec.id;
        let log = (self.run_dir.task_logs(task_id)).join(format!("worker-{}.err", slot.0));
        if !log.exists() {
            return;
        }
        match user_logs::without_headers(&StderrTail::of_file(&log).read()) {
            tail if tail.is_empty() => error.push_str("; its stderr was empty"),
            tail => {
                error.push_str("; stderr tail: ");
                error.push_str(&printable(&tail));
            }
        }
    }

    fn answer(&mut self, conn: ConnId, answer: Result<Welcome, String>) {
        if answer.is_err() {
            self.outboxes.remove(&conn);
        }
        if let Some(reply) = self.replies.remove(&conn) {
            let _ = reply.send(answer);
        }
    }

    /// Marks where this run's part of each log the workers in `slots`
    /// will append to starts: their user code's (a command's own files)
    /// and, for local processes, the worker's own stdout and stderr
    /// (where a Python function's traceback goes).
    fn start_log_parts(&self, task: TaskIdx, slots: &[SlotId]) {
        let config = &self.pipeline.tasks[task.index()];
        let command = !matches!(config.command, UserCommand::Function { .. });
        let local = config.launcher.kind == LauncherKind::Local;
        let logs = self.run_dir.task_logs(&config.spec.id);
        for slot in slots {
            let id = slot.0;
            let user = [
                format!("worker-{id}-user.err"),
                format!("worker-{id}-user.out"),
            ];
            let own = [format!("worker-{id}.err"), format!("worker-{id}.out")];
            let names: Vec<String> = [(command, user), (local, own)]
                .into_iter()
                .filter_map(|(written, names)| written.then_some(names))
                .flatten()
                .collect();
            let header = user_logs::RunHeader {
                pipeline: &self.pipeline.name,
                started: self.started,
                task: &config.spec.id,
                worker_id: id,
            };
            user_logs::start_parts(&logs, &names, &header);
        }
    }

    fn worker_request(&self, task: TaskIdx, slot: SlotId) -> WorkerRequest {
        let config = &self.pipeline.tasks[task.index()];
        let context = WorkerContext {
            task_id: Some(config.spec.id.clone()),
            worker_id: Some(slot.0),
            ..self.context.clone()
        };
        launching::worker_request(
            config,
            slot.0,
            &self.core.share_of(slot),
            &self.run_dir,
            &self.options.worker_program,
            &self.options.worker_args,
            vec![(CONTEXT_ENV.to_string(), context.to_json())],
        )
    }

    /// Ends launched jobs (unless told to leave them), flushes done
    /// markers, records the end. Jobs ended here were cancelled by us, so
    /// they are not failed starts.
    pub fn finish(mut self, end: RunEnd, started: Instant) -> anyhow::Result<RunSummary> {
        self.launcher.finish(self.options.leave_jobs);
        self.recorder.flush_markers()?;
        let now = Instant::now();
        self.core.close(now);
        self.carry_out_commands();
        self.progress.update(&self.core.progress());
        self.progress.finish();
        let seconds = now.duration_since(started).as_secs_f64();
        self.recorder
            .record(&crate::run_dir::events::Event::RunFinished {
                completed: end == RunEnd::Finished,
                seconds,
            });
        if let Some(error) = self.fatal.take() {
            return Err(error);
        }
        self.recorder.flush();
        let summary = self.core.summary(end, now, &self.run_dir);
        Ok(RunSummary {
            failed_event_writes: self.recorder.failed_event_writes(),
            ..summary
        })
    }
}

/// After a done marker could not be written, the run ends: peers are
/// still answered and told to stop, and events recorded, but no block
/// goes out, none is marked and no worker is started.
fn harmless_after_a_lost_mark(command: &Command) -> bool {
    match command {
        Command::Answer { .. }
        | Command::Send { .. }
        | Command::CancelJobs(_)
        | Command::WorkersLeft(_)
        | Command::Record(_) => true,
        Command::SendBlocks { .. }
        | Command::StartWorkers { .. }
        | Command::MarkDone { .. }
        | Command::RecordFailure { .. } => false,
    }
}
