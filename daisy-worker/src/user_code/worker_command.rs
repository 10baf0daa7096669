//! A worker command: the user's long-running program, fed one JSON line
//! per block on its stdin, answering one result line per block on its
//! stdout. It loads its model once, which is why it exists.
//!
//! Its stdout carries results and anything else it prints (progress bars,
//! library chatter): a line that is a [`BlockResult`] object for the block
//! it was sent is the answer, every other line goes to the stdout log. Its
//! stderr goes straight to the stderr log. Closing its stdin means no more
//! work (DESIGN.md, "Workers and user code").
//!
//! Its pipes are non-blocking ([`Pipes`]): waiting for an answer can time
//! out, and blocks can be written ahead (prefetch) without the two pipes
//! deadlocking, with no thread in between. The relay is one async fn,
//! [`WorkerCommand::run_ahead_in`]: with [`Wait::Async`] it waits on the
//! caller's tokio runtime (the worker's, so a block costs no thread hop);
//! the synchronous [`WorkerCommand::run_ahead`] runs it on the calling
//! thread, blocking in `poll(2)`. Stopping the process (a timeout, its death) waits for it,
//! so in async mode that happens on a blocking thread.

use super::exit_watch::ExitWatch;
use super::group::{self, describe, GroupChild, SpawnError, Waited};
use super::pipes::{run_blocking, Filled, Pipes, Wait};
use super::{BlockFailure, BlockLog, Finished, LogError, OpenLog, StderrTail, DEFAULT_GRACE};
use crate::cost::WorkerMeter;
use daisy_core::protocol::{BlockCost, BlockResult, WireBlock};
use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{self, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// A worker command that cannot be started; the task cannot run on this
/// worker until the pipeline or the node is fixed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the worker command is empty")]
    Empty,
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
}

/// A running worker command, fed blocks one at a time or, with
/// [`Self::run_ahead`], several ahead of their answers.
///
/// Dropping it kills its process group and reaps it.
#[derive(Debug)]
pub struct WorkerCommand {
    /// Shared with a blocking thread while it stops the process.
    child: Arc<Mutex<GroupChild>>,
    pipes: Pipes,
    /// Where stdout lines that are not results go.
    stdout_log: File,
    tail: StderrTail,
    /// Between SIGTERM (or closing stdin) and SIGKILL.
    grace: Duration,
    /// Set when the process is gone or killed: why it can't take blocks.
    gone: Option<String>,
    /// What each block cost, if the task tracks resources.
    meter: WorkerMeter,
    /// Spares asking the kernel whether the process runs, on the runtime.
    exit_watch: ExitWatch,
    _keeper: Keeper,
}

impl WorkerCommand {
    /// Starts `argv` with the user's `env` plus `DAISY_TASK_ID`, its stderr
    /// appended to `log.stderr`, stray stdout lines to `log.stdout`.
    pub fn start(
        task_id: &str,
        argv: &[impl AsRef<str>],
        env: &BTreeMap<String, String>,
        log: &BlockLog,
    ) -> Result<Self, StartError> {
        let (program, args) = argv.split_first().ok_or(StartError::Empty)?;
        let OpenLog {
            stdout,
            stderr,
            tail,
        } = log.open()?;
        let mut cmd = group::user_command(program.as_ref(), args, env);
        cmd.env("DAISY_TASK_ID", task_id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let (mut child, keeper) = spawn_kept(cmd)?;
        let pipes = match (child.take_stdin(), child.take_stdout()) {
            (Some(stdin), Some(stdout)) => Pipes::new(stdin, stdout),
            _ => Err(io::Error::other("no pipes to the process")),
        };
        let pipes = pipes.map_err(|cause| SpawnError {
            program: program.as_ref().to_string(),
            cause,
        })?;
        Ok(Self {
            child: Arc::new(Mutex::new(child)),
            pipes,
            stdout_log: stdout,
            tail,
            grace: DEFAULT_GRACE,
            gone: None,
            meter: WorkerMeter::default(),
            exit_watch: ExitWatch::default(),
            _keeper: keeper,
        })
    }

    /// Replaces [`DEFAULT_GRACE`].
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Measures what each block cost ([`crate::cost::WorkerMeter`]).
    pub fn with_resource_tracking(mut self, on: bool) -> Self {
        if on {
            // The process leads its own group (`user_command`).
            let pid = lock(&self.child).pid();
            self.meter = WorkerMeter::tracking(pid, pid as i32);
        }
        self
    }

    /// Starts measuring anew: what the process does from now on is the
    /// next answered block's.
    pub fn begin_costs(&mut self) {
        self.meter.begin();
    }

    /// What block `block_id` cost, once answered, if tracked.
    pub fn take_cost(&mut self, block_id: u64) -> Option<BlockCost> {
        self.meter.take(block_id)
    }

    /// Whether the process is still there to take blocks.
    pub fn is_running(&mut self) -> bool {
        self.ensure_running().is_ok()
    }

    /// Sends `block` and waits for its result, at most `timeout`. Past the
    /// timeout, or if the process exits first, it is gone: start another.
    pub fn run(
        &mut self,
        block: &WireBlock,
        timeout: Option<Duration>,
    ) -> Result<Finished, BlockFailure> {
        self.ensure_running()?;
        self.begin_costs();
        let mut todo = VecDeque::from([block.clone()]);
        let mut outcomes = self.run_ahead(&mut todo, 1, timeout, &|| true);
        outcomes
            .pop()
            .map_or(Ok(Finished::Ran), |(_, outcome)| outcome)
    }

    /// Runs the blocks of `todo` keeping up to `depth` of them written to
    /// stdin ahead of their answers, so the process can read the next
    /// block while it computes this one. Answers may come in any order.
    /// Each wait for an answer may last `timeout`.
    ///
    /// Returns an outcome per block written; if the process dies, every
    /// written block still unanswered fails and the blocks never written
    /// stay in `todo` (for a fresh process: they were not its fault).
    /// A block is written only while `may_feed` says so (the worker is
    /// not draining); the rest stay in `todo`.
    pub fn run_ahead(
        &mut self,
        todo: &mut VecDeque<WireBlock>,
        depth: usize,
        timeout: Option<Duration>,
        may_feed: &dyn Fn() -> bool,
    ) -> Vec<Outcome> {
        run_blocking(self.run_ahead_in(todo, depth, timeout, may_feed, Wait::Blocking))
    }

    /// [`Self::run_ahead`], waiting for the pipes as `wait` says: with
    /// [`Wait::Async`] it must be awaited on a tokio runtime.
    pub async fn run_ahead_in<F: Fn() -> bool + ?Sized>(
        &mut self,
        todo: &mut VecDeque<WireBlock>,
        depth: usize,
        timeout: Option<Duration>,
        may_feed: &F,
        wait: Wait,
    ) -> Vec<Outcome> {
        if wait == Wait::Async {
            self.exit_watch.watch(lock(&self.child).pid());
        }
        let mut outcomes = Vec::new();
        let mut sent = Vec::new();
        while self.gone.is_none() {
            if let Err(failure) = self.feed(todo, &mut sent, depth, may_feed, wait).await {
                outcomes.extend(sent.drain(..).map(|id| (id, Err(failure.clone()))));
                break;
            }
            if sent.is_empty() {
                break;
            }
            self.next_answer(&mut sent, &mut outcomes, timeout, wait)
                .await;
        }
        outcomes
    }

    /// Writes blocks of `todo` until `depth` are unanswered; the error is
    /// the failure of those in `sent` if the process stopped reading.
    async fn feed<F: Fn() -> bool + ?Sized>(
        &mut self,
        todo: &mut VecDeque<WireBlock>,
        sent: &mut Vec<u64>,
        depth: usize,
        may_feed: &F,
        wait: Wait,
    ) -> Result<(), BlockFailure> {
        let first = sent.len();
        while sent.len() < depth.max(1) && may_feed() {
            let Some(block) = todo.pop_front() else {
                break;
            };
            sent.push(block.block_id);
            self.pipes.queue_line(&block);
        }
        // All in one write: a block written ahead costs no system call.
        match (sent.get(first), self.pipes.flush()) {
            (Some(&block_id), Err(e)) => {
                tracing::debug!("cannot write to the worker command: {e}");
                Err(self.on_exit(block_id, wait).await)
            }
            _ => Ok(()),
        }
    }

    /// Waits for the next answer to one of `sent`, takes it out and adds
    /// its outcome to `outcomes` (no vector per answer); if the process
    /// ends or times out instead, all of `sent` fail.
    async fn next_answer(
        &mut self,
        sent: &mut Vec<u64>,
        outcomes: &mut Vec<Outcome>,
        timeout: Option<Duration>,
        wait: Wait,
    ) {
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        loop {
            let failure = match self.next_line(deadline, wait).await {
                Next::Line(line) => match self.on_line(&line, sent) {
                    Some(result) => {
                        self.meter.answered(result.block_id);
                        sent.retain(|&id| id != result.block_id);
                        return outcomes.push((result.block_id, outcome(result)));
                    }
                    None => continue,
                },
                Next::Eof => self.on_exit(sent[0], wait).await,
                Next::TimedOut => self.on_timeout(timeout.unwrap_or_default(), wait).await,
            };
            return outcomes.extend(sent.drain(..).map(|id| (id, Err(failure.clone()))));
        }
    }

    /// Closes stdin (no more work), gives the process the grace period to
    /// exit, then kills its group. Returns how it ended, also if it had
    /// already ended.
    pub fn finish(mut self) -> io::Result<ExitStatus> {
        self.pipes.close_stdin();
        let status = lock(&self.child).stop(self.grace);
        self.drain_lines();
        status
    }

    /// Fails, saying why, once the process can no longer take blocks.
    fn ensure_running(&mut self) -> Result<(), BlockFailure> {
        if self.gone.is_none() {
            self.gone = self.poll_exit();
        }
        match &self.gone {
            None => Ok(()),
            Some(why) => Err(BlockFailure::new(format!(
                "worker command is not running ({why})"
            ))),
        }
    }

    /// Why the process can no longer take blocks, if it has exited.
    fn poll_exit(&mut self) -> Option<String> {
        if self.exit_watch.surely_running() {
            return None;
        }
        match lock(&self.child).wait_for(Some(Duration::ZERO)) {
            Ok(Waited::TimedOut(_)) => None,
            Ok(Waited::Exited(status)) => Some(format!("ended: {}", describe(status))),
            Err(e) => Some(format!("cannot wait for it: {e}")),
        }
    }

    /// The next stdout line, waiting at most until the deadline; a read
    /// error is logged and taken for the end of stdout.
    async fn next_line(&mut self, deadline: Option<Instant>, wait: Wait) -> Next {
        loop {
            if let Some(line) = self.pipes.take_line() {
                return Next::Line(line);
            }
            match self.pipes.fill(wait, deadline).await {
                Ok(Filled::Data) => {}
                Ok(Filled::Eof) => return self.pipes.take_rest().map_or(Next::Eof, Next::Line),
                Ok(Filled::TimedOut) => return Next::TimedOut,
                Err(e) => {
                    tracing::warn!("cannot read the worker command's stdout: {e}");
                    return Next::Eof;
                }
            }
        }
    }

    /// The result, if `line` answers one of `expected`; other lines are
    /// logged.
    fn on_line(&mut self, line: &str, expected: &[u64]) -> Option<BlockResult> {
        let Some(result) = BlockResult::from_json_line(line) else {
            if let Err(e) = writeln!(self.stdout_log, "{line}") {
                tracing::warn!("cannot write to the worker command's stdout log: {e}");
            }
            return None;
        };
        if !expected.contains(&result.block_id) {
            tracing::warn!(
                block_id = result.block_id,
                ?expected,
                "worker command answered for a block it was not running; ignored"
            );
            return None;
        }
        Some(result)
    }

    /// Stdout ended before an answer: the process exited (or closed its
    /// stdout, which is as good as exiting).
    async fn on_exit(&mut self, block_id: u64, wait: Wait) -> BlockFailure {
        let grace = self.grace;
        let status = self.off_thread(wait, move |child| child.stop(grace)).await;
        let how = match &status {
            Ok(status) => describe(*status),
            Err(e) => format!("unknown status ({e})"),
        };
        self.gone = Some(format!("ended: {how}"));
        let what = format!("worker command ended before answering block {block_id}: {how}");
        let failure = BlockFailure::with_tail(&what, &self.tail);
        match status {
            Ok(status) => failure.ended_with(status),
            Err(_) => failure,
        }
    }

    async fn on_timeout(&mut self, timeout: Duration, wait: Wait) -> BlockFailure {
        self.gone = Some(format!("killed: a block timed out after {timeout:?}"));
        let (grace, tail) = (self.grace, self.tail.clone());
        let stop = move |child: &mut GroupChild| group::on_timeout(child, timeout, grace, &tail);
        self.off_thread(wait, stop).await
    }

    /// Runs `f` on the process: here when blocking is allowed, else on a
    /// blocking thread (it may wait out the grace period).
    async fn off_thread<R: Send + 'static>(
        &self,
        wait: Wait,
        f: impl FnOnce(&mut GroupChild) -> R + Send + 'static,
    ) -> R {
        let child = Arc::clone(&self.child);
        let run = move || f(&mut lock(&child));
        if wait == Wait::Blocking {
            return run();
        }
        match tokio::task::spawn_blocking(run).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // The runtime shuts down: nobody waits for this any more.
            Err(_) => std::future::pending().await,
        }
    }

    /// Logs what the process printed before it ended; bounded by the grace
    /// period in case something outside its group still holds its stdout.
    fn drain_lines(&mut self) {
        let deadline = Instant::now() + self.grace;
        while let Next::Line(line) = run_blocking(self.next_line(Some(deadline), Wait::Blocking)) {
            self.on_line(&line, &[]);
        }
    }
}

/// A block's id and how it went.
pub type Outcome = (u64, Result<Finished, BlockFailure>);

/// What waiting for a stdout line gave.
enum Next {
    Line(String),
    /// Stdout closed: the process exited.
    Eof,
    /// No line before the deadline.
    TimedOut,
}

fn outcome(result: BlockResult) -> Result<Finished, BlockFailure> {
    match (result.ok, result.error) {
        (true, _) if result.skipped => Ok(Finished::FoundDone),
        (true, _) => Ok(Finished::Ran),
        (false, Some(error)) => Err(BlockFailure::new(error)),
        (false, None) => Err(BlockFailure::new(
            "worker command reported a failure without an error",
        )),
    }
}

fn lock(child: &Mutex<GroupChild>) -> MutexGuard<'_, GroupChild> {
    child.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps the thread that started the process alive as long as the
/// process is used: PR_SET_PDEATHSIG fires when the *thread* that spawned
/// a child ends, and the caller's thread may be a short-lived blocking
/// thread of the async runtime.
#[derive(Debug)]
struct Keeper {
    _alive: Sender<()>,
}

/// Starts `cmd` on a thread that then waits until the [`Keeper`] is dropped.
fn spawn_kept(mut cmd: Command) -> Result<(GroupChild, Keeper), SpawnError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let (started_tx, started_rx) = mpsc::channel();
    let (keep_tx, keep_rx) = mpsc::channel::<()>();
    let keeper = move || {
        let spawned = GroupChild::spawn(&mut cmd);
        let ok = spawned.is_ok();
        if started_tx.send(spawned).is_ok() && ok {
            let _ = keep_rx.recv();
        }
    };
    let thread_error = |cause| SpawnError {
        program: program.clone(),
        cause,
    };
    thread::Builder::new()
        .name("worker-command".into())
        .spawn(keeper)
        .map_err(thread_error)?;
    let started = started_rx
        .recv()
        .map_err(|_| thread_error(io::Error::other("the starting thread ended")))?;
    Ok((started?, Keeper { _alive: keep_tx }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user_code::test_util::{block, is_gone, read_pid};
    use std::fs;
    use std::path::Path;

    /// Answers ok for even block ids and an error for odd ones, printing
    /// junk around each answer.
    const EVEN_OK: &str = r#"
import json, os, sys
print("hello from", os.environ["DAISY_TASK_ID"], os.environ["FOO"])
for line in sys.stdin:
    block = json.loads(line)
    i = block["block_id"]
    print("working on", i, block["write_roi"]["offset"])
    print(json.dumps({"note": "not a result"}))
    print("[1, true]")
    if i % 2 == 0:
        print(json.dumps({"block_id": i, "ok": True}))
    else:
        print(json.dumps({"block_id": i, "ok": False, "error": f"odd block {i}"}))
    print("stderr line", i, file=sys.stderr)
"#;

    /// Unbuffered (-u), so each print reaches us at once.
    fn python(script: &str) -> Vec<String> {
        ["python3", "-u", "-c", script].map(String::from).to_vec()
    }

    /// With the default grace: a process that exits by itself (its stdin
    /// closed) gets all of it, however loaded the machine is.
    fn start(dir: &Path, script: &str) -> WorkerCommand {
        let env = BTreeMap::from([("FOO".to_string(), "bar".to_string())]);
        let log = BlockLog::in_dir(&dir.join("logs"), "worker");
        WorkerCommand::start("predict", &python(script), &env, &log).unwrap()
    }

    /// For a process that ignores SIGTERM and its stdin closing: it is
    /// killed when the grace ends, so a short one only saves time.
    const SHORT_GRACE: Duration = Duration::from_millis(200);

    fn read_log(dir: &Path, suffix: &str) -> String {
        fs::read_to_string(dir.join("logs").join(format!("worker.{suffix}"))).unwrap()
    }

    const PATIENCE: Option<Duration> = Some(Duration::from_secs(30));

    #[test]
    fn answers_become_results_and_other_lines_go_to_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut worker = start(dir.path(), EVEN_OK);
        assert_eq!(worker.run(&block(2), PATIENCE), Ok(Finished::Ran));
        assert_eq!(
            worker.run(&block(3), PATIENCE).unwrap_err().message,
            "odd block 3"
        );
        assert!(worker.finish().unwrap().success());
        let out = read_log(dir.path(), "out");
        let expected = "hello from predict bar\nworking on 2 [8, 72, 136]\n{\"note\": \"not a result\"}\n[1, true]\n";
        assert!(out.starts_with(expected), "{out}");
        assert!(
            out.contains("working on 3") && !out.contains("\"ok\""),
            "{out}"
        );
        assert_eq!(
            read_log(dir.path(), "err"),
            "stderr line 2\nstderr line 3\n"
        );
    }

    #[test]
    fn a_block_the_command_says_it_skipped_is_found_done() {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"
import json, sys
for line in sys.stdin:
    i = json.loads(line)["block_id"]
    print(json.dumps({"block_id": i, "ok": True, "skipped": i == 1}))
"#;
        let mut worker = start(dir.path(), script);
        assert_eq!(worker.run(&block(1), PATIENCE), Ok(Finished::FoundDone));
        assert_eq!(worker.run(&block(2), PATIENCE), Ok(Finished::Ran));
    }

    #[test]
    fn a_tracked_worker_command_costs_each_block_what_changed_while_it_ran() {
        let dir = tempfile::tempdir().unwrap();
        // Block 1 holds 40 MB and writes 1 MB; block 2 does neither.
        let script = r#"
import json, sys
for line in sys.stdin:
    i = json.loads(line)["block_id"]
    if i == 1:
        data = b"x" * 40_000_000
        sys.stderr.write("y" * 1_000_000)
        del data
    print(json.dumps({"block_id": i, "ok": True}))
"#;
        let mut worker = start(dir.path(), script).with_resource_tracking(true);
        assert_eq!(worker.run(&block(1), PATIENCE), Ok(Finished::Ran));
        assert_eq!(worker.run(&block(2), PATIENCE), Ok(Finished::Ran));
        let (first, second) = (worker.take_cost(1).unwrap(), worker.take_cost(2).unwrap());
        assert!(first.peak_rss_bytes >= 40_000_000, "{first:?}");
        assert!(first.io_write_bytes >= 1_000_000, "{first:?}");
        assert!(
            second.peak_rss_bytes < 40_000_000,
            "its own peak: {second:?}"
        );
        assert!(second.io_write_bytes < 1_000_000, "{second:?}");
        assert_eq!(worker.take_cost(1), None, "taken once");
        let mut untracked = start(dir.path(), script);
        assert_eq!(untracked.run(&block(2), PATIENCE), Ok(Finished::Ran));
        assert_eq!(untracked.take_cost(2), None);
    }

    #[test]
    fn a_result_for_another_block_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"
import json, sys
for line in sys.stdin:
    i = json.loads(line)["block_id"]
    print(json.dumps({"block_id": i + 100, "ok": False, "error": "wrong block"}))
    print(json.dumps({"block_id": i, "ok": True}))
"#;
        let mut worker = start(dir.path(), script);
        assert_eq!(worker.run(&block(1), PATIENCE), Ok(Finished::Ran));
        assert_eq!(worker.run(&block(2), PATIENCE), Ok(Finished::Ran));
    }

    #[test]
    fn blocks_written_ahead_may_be_answered_out_of_order() {
        let dir = tempfile::tempdir().unwrap();
        // Reads two blocks before answering either, newest first: only
        // possible if the second was written ahead.
        let script = r#"
import json, sys
while True:
    pair = [sys.stdin.readline() for _ in range(2)]
    if not pair[0]:
        break
    for line in reversed([l for l in pair if l]):
        print(json.dumps({"block_id": json.loads(line)["block_id"], "ok": True}))
"#;
        let mut worker = start(dir.path(), script);
        let mut todo: VecDeque<WireBlock> = (1..=4).map(block).collect();
        let outcomes = worker.run_ahead(&mut todo, 2, PATIENCE, &|| true);
        let ids: Vec<u64> = outcomes.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [2, 1, 4, 3]);
        assert!(outcomes.iter().all(|(_, outcome)| outcome.is_ok()));
        assert!(todo.is_empty());
    }

    #[test]
    fn a_death_fails_the_blocks_written_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let script = "import sys; sys.stdin.readline(); sys.stdin.readline(); sys.exit(3)";
        let mut worker = start(dir.path(), script);
        let mut todo: VecDeque<WireBlock> = (1..=5).map(block).collect();
        let outcomes = worker.run_ahead(&mut todo, 2, PATIENCE, &|| true);
        let failed: Vec<u64> = outcomes.iter().map(|(id, _)| *id).collect();
        assert_eq!(failed, [1, 2]);
        assert!(outcomes.iter().all(|(_, outcome)| outcome.is_err()));
        assert_eq!(todo.len(), 3, "blocks never written are kept");
    }

    #[test]
    fn a_worker_command_that_exits_fails_the_block_with_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"
import json, sys
print(json.dumps({"block_id": json.loads(sys.stdin.readline())["block_id"], "ok": True}))
sys.stdin.readline()
print("out of memory", file=sys.stderr)
sys.exit(3)
"#;
        let mut worker = start(dir.path(), script);
        assert_eq!(worker.run(&block(1), PATIENCE), Ok(Finished::Ran));
        let failure = worker.run(&block(2), PATIENCE).unwrap_err();
        let expected = "worker command ended before answering block 2: exit status 3; stderr tail: out of memory";
        assert_eq!(failure.message, expected);
        assert!(!worker.is_running());
        let failure = worker.run(&block(4), PATIENCE).unwrap_err();
        assert_eq!(
            failure.message,
            "worker command is not running (ended: exit status 3)"
        );
        assert_eq!(worker.finish().unwrap().code(), Some(3));
    }

    #[test]
    fn a_worker_command_that_already_exited_fails_with_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let mut worker = start(dir.path(), "import sys; sys.exit(5)");
        let failure = worker.run(&block(1), PATIENCE).unwrap_err();
        assert!(failure.message.contains("exit status 5"), "{failure}");
        assert!(!worker.is_running());
    }

    #[test]
    fn a_worker_command_that_times_out_is_killed_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!(
            r#"
import signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen(["sleep", "30"])
print("thinking", file=sys.stderr, flush=True)
open("{}", "w").write(str(child.pid))
sys.stdin.readline()
signal.pause()
"#,
            pid_file.display()
        );
        let mut worker = start(dir.path(), &script).with_grace(SHORT_GRACE);
        // The timeout is for the block, not for Python's start on a busy
        // machine: wait until the script got as far as the block.
        let started = Instant::now();
        while !pid_file.exists() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the script never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let failure = worker
            .run(&block(1), Some(Duration::from_millis(500)))
            .unwrap_err();
        assert_eq!(
            failure.message,
            "timed out after 500ms; stderr tail: thinking"
        );
        assert!(is_gone(read_pid(&pid_file)));
        assert!(!worker.is_running());
        let failure = worker.run(&block(2), PATIENCE).unwrap_err();
        assert!(
            failure
                .message
                .contains("not running (killed: a block timed out after 500ms)"),
            "{failure}"
        );
    }

    /// Runs `future` on a single-threaded runtime, as `daisy-worker` does.
    fn on_one_thread<F: std::future::Future>(future: F) -> F::Output {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(future)
    }

    #[test]
    fn on_the_runtime_blocks_written_ahead_are_answered_past_a_flood_of_output() {
        let dir = tempfile::tempdir().unwrap();
        // 1 MiB of chatter before the first answer: many full reads of the
        // pipe, each of which must leave it marked readable.
        let script = r#"
import json, sys
for line in sys.stdin:
    sys.stdout.write(("x" * 1023 + "\n") * 1024)
    print(json.dumps({"block_id": json.loads(line)["block_id"], "ok": True}), flush=True)
"#;
        let mut worker = start(dir.path(), script);
        let mut todo: VecDeque<WireBlock> = (1..=6).map(block).collect();
        let outcomes =
            on_one_thread(worker.run_ahead_in(&mut todo, 3, PATIENCE, &|| true, Wait::Async));
        let ids: Vec<u64> = outcomes.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6]);
        assert!(outcomes.iter().all(|(_, outcome)| outcome.is_ok()));
        assert!(worker.finish().unwrap().success());
        assert_eq!(read_log(dir.path(), "out").len(), 6 * 1024 * 1024);
    }

    #[test]
    fn on_the_runtime_a_command_that_exits_between_batches_is_found_out() {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"
import json, sys
print(json.dumps({"block_id": json.loads(sys.stdin.readline())["block_id"], "ok": True}))
sys.exit(4)
"#;
        let mut worker = start(dir.path(), script);
        let running = on_one_thread(async {
            let mut todo = VecDeque::from([block(1)]);
            let run = worker.run_ahead_in(&mut todo, 1, PATIENCE, &|| true, Wait::Async);
            assert!(run.await[0].1.is_ok());
            // The exit is learnt by the runtime's reactor (its pidfd),
            // not by asking the kernel: let the runtime turn meanwhile.
            let started = Instant::now();
            while worker.is_running() && started.elapsed() < Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            worker.is_running()
        });
        assert!(!running, "the exit was never noticed");
        let failure = worker.run(&block(2), PATIENCE).unwrap_err();
        assert_eq!(
            failure.message,
            "worker command is not running (ended: exit status 4)"
        );
    }

    #[test]
    fn on_the_runtime_a_timed_out_command_is_stopped_without_holding_up_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let script = format!(
            "import signal, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nopen({:?}, 'w')\nsys.stdin.readline()\nsignal.pause()",
            ready.display().to_string()
        );
        let grace = Duration::from_secs(1);
        let mut worker = start(dir.path(), &script).with_grace(grace);
        // The timeout is for the block, not for Python's start.
        let started = Instant::now();
        while !ready.exists() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the script never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let ticks = std::sync::atomic::AtomicU32::new(0);
        let (outcomes, ()) = on_one_thread(async {
            let tick = async {
                // Ticks on the same thread while the command's grace runs.
                let mut interval = tokio::time::interval(Duration::from_millis(50));
                loop {
                    interval.tick().await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            };
            let timeout = Some(Duration::from_millis(300));
            let mut todo = VecDeque::from([block(1)]);
            let run = worker.run_ahead_in(&mut todo, 1, timeout, &|| true, Wait::Async);
            tokio::select! {
                outcomes = run => (outcomes, ()),
                () = tick => unreachable!("the tick never ends"),
            }
        });
        let failure = outcomes[0].1.as_ref().unwrap_err();
        assert!(
            failure.message.starts_with("timed out after 300ms"),
            "{failure}"
        );
        // The grace second alone is 20 ticks; a blocked thread gets none.
        let ticks = ticks.into_inner();
        assert!(
            ticks >= 15,
            "only {ticks} ticks while the command was stopped"
        );
    }

    #[test]
    fn finish_kills_a_worker_command_that_does_not_exit() {
        let dir = tempfile::tempdir().unwrap();
        let worker = start(dir.path(), "import time; time.sleep(60)").with_grace(SHORT_GRACE);
        let status = worker.finish().unwrap();
        assert_eq!(describe(status), "killed by SIGKILL");
    }

    #[test]
    fn dropping_a_worker_command_kills_it() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!(
            "import os, time\nopen('{}', 'w').write(str(os.getpid()))\ntime.sleep(60)",
            pid_file.display()
        );
        let worker = start(dir.path(), &script);
        let pid = read_pid(&pid_file);
        drop(worker);
        assert!(is_gone(pid));
    }

    #[test]
    fn a_worker_command_outlives_the_thread_that_started_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let mut worker = thread::spawn(move || start(&path, EVEN_OK)).join().unwrap();
        // Give a parent-death signal, if one were (wrongly) sent, time to land.
        thread::sleep(Duration::from_millis(200));
        assert_eq!(worker.run(&block(2), PATIENCE), Ok(Finished::Ran));
    }

    #[test]
    fn a_worker_command_that_cannot_start_names_the_program() {
        let dir = tempfile::tempdir().unwrap();
        let log = BlockLog::in_dir(dir.path(), "worker");
        let err = WorkerCommand::start(
            "predict",
            &["no-such-daisy-program"],
            &BTreeMap::new(),
            &log,
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("cannot start \"no-such-daisy-program\": No such file"),
            "{message}"
        );
        let empty: [&str; 0] = [];
        assert!(matches!(
            WorkerCommand::start("predict", &empty, &BTreeMap::new(), &log),
            Err(StartError::Empty)
        ));
    }
}
