//! A `worker_function`: called once, with no argument, on the worker's
//! main thread (lent by [`crate::main_thread`], as daisy 1.x and 2.0 call
//! it there; in a serial run, whose caller's thread feeds it, on a Python
//! thread of its own); it loops over `daisy_rs.Client().acquire_block()`,
//! which takes blocks from a [`Feed`] that daisy-worker's batches fill
//! from a thread of the runtime's.
//!
//! This is the worker command of daisy-worker moved into the process:
//! blocks are fed `1 + prefetch` ahead of their releases, a function that
//! returns or raises while it holds blocks fails them (with its
//! traceback); one that raised is started again for the next block, one
//! that returned made the worker's decision to leave (a daisy 1.x spawn
//! function whose child exited with status 0): the worker drains,
//! telling the driver it chose to (the driver's rule on replacing it is
//! in its core's `staffing`), and when the
//! worker finishes the feed ends, so `acquire_block()` yields `None` and
//! the function returns. A function that ends before it ever asks for a
//! block (its model does not load) cannot serve the task: the worker says
//! so and leaves, rather than fail every block with the same traceback.

use crate::process_function::roi;
use daisy_core::protocol::{TaskCode, WireBlock};
use daisy_worker::embedded::{BlockControl, EmbeddedCode, EmbeddedRan};
use daisy_worker::user_code::{BlockFailure, Finished};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvError, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a worker whose function returned leaves (`WorkerFunction::returned`).
const RETURNED: &str = "the worker function returned while its task had blocks left: \
                        the worker leaves, as a daisy 1.x worker whose process exits with status 0";

/// How long the function gets to return once its feed ended.
const FINISH_GRACE: Duration = Duration::from_secs(5);

/// How often a wait on Python's main thread runs the handlers of the
/// signals that arrived meanwhile (Python runs them only when its main
/// thread asks): the feeding wait of a serial run, where Ctrl-C becomes a
/// `KeyboardInterrupt`, and a worker function's wait for its next block,
/// where a handler of the user's runs (and what it raises reaches the
/// function, as from a daisy 1.x `acquire_block()`).
const SIGNAL_POLL: Duration = crate::main_thread::SIGNAL_POLL;

/// What the function's thread tells the worker.
enum Report {
    /// How a block went: run, found done by the check, or failed (why).
    Released {
        block_id: u64,
        outcome: Result<Finished, String>,
    },
    /// A block taken for a client that was gone before it got it: it did
    /// not run, and goes back to the driver unfailed.
    HandedBack { block_id: u64 },
    /// The function returned (`error` is `None`) or raised; `asked`: it
    /// had asked for a block by then.
    Ended { error: Option<String>, asked: bool },
}

/// The blocks of one run of a worker function, as its `Client`s see them
/// (the function's own, and those of the processes it starts, through
/// `daisy_rs._relay`).
#[pyclass(module = "daisy_rs._native")]
pub struct Feed {
    #[pyo3(get)]
    task_id: String,
    /// The worker's id, which the processes the function starts are told.
    #[pyo3(get)]
    worker_id: u64,
    /// `None` ends the feed.
    blocks: Arc<Mutex<Receiver<Option<WireBlock>>>>,
    /// The feed ran out: every later ask gets `None` at once (several
    /// clients may be waiting, and one `None` ends only one wait).
    exhausted: AtomicBool,
    /// Clients in other processes (the relay's): each may hold a block
    /// while it asks for the next, so each widens the window fed ahead.
    clients: Arc<AtomicUsize>,
    reports: Sender<Report>,
    /// The function asked for a block: it got past its set-up.
    asked: AtomicBool,
}

#[pymethods]
impl Feed {
    /// The next block as `(task_id, block_id, read, write)`, waiting for
    /// it with the interpreter detached; `None` once the worker is done.
    /// On the main thread the wait runs the Python handlers of signals
    /// that arrive; what one raises ends the wait.
    fn next_block<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.asked.store(true, Ordering::Relaxed);
        let next = loop {
            match py.detach(|| self.wait_next(SIGNAL_POLL)) {
                Some(next) => break next,
                None => py.check_signals()?,
            }
        };
        let Some(block) = next else {
            return Ok(None);
        };
        let read = roi(py, &block.read_roi)?;
        let write = roi(py, &block.write_roi)?;
        let fields = (self.task_id.as_str(), block.block_id, read, write);
        Ok(Some(fields.into_pyobject(py)?))
    }

    /// Reports a block: `error` is `None` for success.
    fn release(&self, block_id: u64, error: Option<String>) {
        let outcome = error.map_or(Ok(Finished::Ran), Err);
        let _ = self.reports.send(Report::Released { block_id, outcome });
    }

    /// Reports a block the task's check function calls done: it did not
    /// run, and counts as skipped.
    fn found_done(&self, block_id: u64) {
        let outcome = Ok(Finished::FoundDone);
        let _ = self.reports.send(Report::Released { block_id, outcome });
    }

    /// Gives back a block taken for a client that was gone before it got
    /// it: the block did not run.
    fn hand_back(&self, block_id: u64) {
        let _ = self.reports.send(Report::HandedBack { block_id });
    }

    /// How many clients in other processes the relay serves now.
    fn set_clients(&self, clients: usize) {
        self.clients.store(clients, Ordering::Relaxed);
    }

    /// Called by the function's thread as it ends.
    fn ended(&self, error: Option<String>) {
        let asked = self.asked.load(Ordering::Relaxed);
        let _ = self.reports.send(Report::Ended { error, asked });
    }
}

impl Feed {
    /// The next block, or `Some(None)` once the feed ended; `None` if
    /// nothing came within `patience`.
    fn wait_next(&self, patience: Duration) -> Option<Option<WireBlock>> {
        let blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if self.exhausted.load(Ordering::Relaxed) {
            return Some(None);
        }
        let next = match blocks.recv_timeout(patience) {
            Ok(next) => next,
            Err(RecvTimeoutError::Timeout) => return None,
            Err(RecvTimeoutError::Disconnected) => None,
        };
        // Under the lock: a client waiting behind this one must see it.
        self.exhausted.store(next.is_none(), Ordering::Relaxed);
        Some(next)
    }
}

/// A running function: its feed's sending end and where it runs.
struct Running {
    blocks: Sender<Option<WireBlock>>,
    /// The relay's clients: see [`Feed::clients`].
    clients: Arc<AtomicUsize>,
    /// The feed's end: blocks still in it when the function ends were
    /// never handed to it.
    untaken: Arc<Mutex<Receiver<Option<WireBlock>>>>,
    reports: Receiver<Report>,
    runs: RunsOn,
}

/// Where a worker function runs, to wait for its return.
enum RunsOn {
    /// The worker's main thread: disconnects when the function returned.
    MainThread(Receiver<()>),
    /// A serial run's Python thread (`threading.Thread`).
    Thread(Py<PyAny>),
}

impl RunsOn {
    /// Waits at most `grace` for the function to return; whether it did.
    fn returned_within(self, grace: Duration) -> PyResult<bool> {
        match self {
            Self::MainThread(ended) => Ok(matches!(
                ended.recv_timeout(grace),
                Err(RecvTimeoutError::Disconnected)
            )),
            Self::Thread(thread) => Python::attach(|py| {
                let thread = thread.bind(py);
                thread.call_method1("join", (grace.as_secs_f64(),))?;
                Ok(!thread.call_method0("is_alive")?.extract::<bool>()?)
            }),
        }
    }
}

pub struct WorkerFunction {
    task_id: String,
    worker_id: u64,
    function: Py<PyAny>,
    /// The task's check_function (or None), asked by `Client` per block.
    check: Py<PyAny>,
    /// Blocks fed ahead of their releases: 1 + prefetch.
    depth: usize,
    running: Option<Running>,
    interrupted: bool,
    /// The function ended before it asked for a block: it cannot serve.
    unable: Option<String>,
    /// The function returned after it had asked for blocks: the worker's
    /// decision to leave (a daisy 1.x spawn function whose child exited
    /// with status 0), so it is not started again.
    returned: Option<String>,
}

impl WorkerFunction {
    pub fn new(
        task_id: &str,
        worker_id: u64,
        function: Py<PyAny>,
        check: Py<PyAny>,
        code: &TaskCode,
    ) -> Self {
        Self {
            task_id: task_id.to_string(),
            worker_id,
            function,
            check,
            depth: 1 + code.prefetch as usize,
            running: None,
            interrupted: false,
            unable: None,
            returned: None,
        }
    }

    /// Starts the function again; what a run before it found no longer
    /// holds.
    fn restart(&mut self) -> PyResult<Running> {
        self.unable = None;
        self.returned = None;
        self.start()
    }

    fn start(&self) -> PyResult<Running> {
        let (blocks_tx, blocks_rx) = channel();
        let blocks_rx = Arc::new(Mutex::new(blocks_rx));
        let clients = Arc::new(AtomicUsize::new(0));
        let (reports_tx, reports_rx) = channel();
        let feed = Feed {
            task_id: self.task_id.clone(),
            worker_id: self.worker_id,
            blocks: Arc::clone(&blocks_rx),
            exhausted: AtomicBool::new(false),
            clients: Arc::clone(&clients),
            reports: reports_tx,
            asked: AtomicBool::new(false),
        };
        let (function, check) =
            Python::attach(|py| (self.function.clone_ref(py), self.check.clone_ref(py)));
        let runs = if crate::main_thread::lent_elsewhere() {
            let run = move |py: Python<'_>| run_on_this_thread(py, function, check, feed);
            RunsOn::MainThread(crate::main_thread::start(Box::new(run)))
        } else {
            RunsOn::Thread(Python::attach(|py| -> PyResult<Py<PyAny>> {
                let helpers = py.import("daisy_rs._code")?;
                let start = helpers.getattr("start_worker_function")?;
                Ok(start.call1((function, check, feed))?.unbind())
            })?)
        };
        Ok(Running {
            blocks: blocks_tx,
            clients,
            untaken: blocks_rx,
            reports: reports_rx,
            runs,
        })
    }

    /// Takes in how feeding went; whether the rest of the batch is fed on
    /// (to the function started again).
    fn on_fed(&mut self, fed: Fed) -> bool {
        self.interrupted = matches!(fed, Fed::Interrupted);
        match fed {
            Fed::Released | Fed::Interrupted => false,
            Fed::Ended { stopped, returned } => {
                self.running = None;
                if returned {
                    self.returned = Some(RETURNED.to_string());
                }
                !stopped && !returned
            }
            Fed::Unable { why } => {
                self.running = None;
                self.unable = Some(why);
                false
            }
        }
    }

    /// The running function, started (again) if it is not.
    fn running(&mut self) -> Result<&mut Running, BlockFailure> {
        let running = match self.running.take() {
            Some(running) => running,
            None => self.restart().map_err(|error| {
                let why = Python::attach(|py| crate::functions::describe(py, &error));
                BlockFailure::new(format!("cannot start the worker function: {why}"))
            })?,
        };
        Ok(self.running.insert(running))
    }
}

impl EmbeddedCode for WorkerFunction {
    fn run_batch(
        &mut self,
        blocks: Vec<WireBlock>,
        control: &dyn BlockControl,
    ) -> Vec<EmbeddedRan> {
        let mut todo = VecDeque::from(blocks);
        let mut done = Vec::with_capacity(todo.len());
        let depth = self.depth;
        while !todo.is_empty() {
            let fed = match self.running() {
                Ok(running) => feed_ahead(running, &mut todo, depth, control, &mut done),
                Err(failure) => {
                    let failed = todo
                        .drain(..)
                        .map(|b| failed(b.block_id, &failure, Instant::now()));
                    done.extend(failed);
                    break;
                }
            };
            if !self.on_fed(fed) {
                break;
            }
        }
        done
    }

    fn interrupted(&self) -> bool {
        self.interrupted
    }

    fn cannot_serve(&self) -> Option<String> {
        self.unable.clone()
    }

    fn ended_by_choice(&self) -> Option<String> {
        self.returned.clone()
    }

    fn finish(&mut self) {
        crate::signals::ignore_from_now();
        let Some(running) = self.running.take() else {
            return;
        };
        let _ = running.blocks.send(None);
        match running.runs.returned_within(FINISH_GRACE) {
            Ok(true) => tracing::debug!("the worker function returned"),
            Ok(false) => tracing::warn!("the worker function did not return after its feed ended"),
            Err(error) => tracing::warn!("cannot wait for the worker function: {error}"),
        }
    }
}

/// Runs the function on the calling thread (the worker's main thread)
/// until it returns; `daisy_rs._code.run_worker_function` reports how it
/// ended through `feed`.
fn run_on_this_thread(py: Python<'_>, function: Py<PyAny>, check: Py<PyAny>, feed: Feed) {
    let ran = py
        .import("daisy_rs._code")
        .and_then(|helpers| helpers.getattr("run_worker_function"))
        .and_then(|run| run.call1((function, check, feed)));
    if let Err(error) = ran {
        let why = crate::functions::describe(py, &error);
        tracing::error!("cannot run the worker function: {why}");
    }
}

/// How feeding a batch ended.
enum Fed {
    /// Every block fed was released and no more are to be fed: the batch
    /// ran out, or `control` stopped it.
    Released,
    /// The function ended, failing the blocks it held. `stopped`: `control`
    /// stopped the batch; if not, the rest goes to the function started
    /// again, unless it `returned` (rather than raised): then the worker
    /// leaves, its decision as a daisy 1.x worker's exit with status 0 is.
    Ended { stopped: bool, returned: bool },
    /// Ctrl-C: the blocks fed and not released did not run.
    Interrupted,
    /// The function ended before it asked for a block: why it cannot
    /// serve (the blocks fed did not run).
    Unable { why: String },
}

impl Fed {
    fn unable(error: Option<String>) -> Self {
        let why = match error {
            Some(error) => format!("the worker function raised before it took a block: {error}"),
            None => "the worker function returned before it took a block".to_string(),
        };
        Self::Unable { why }
    }
}

/// Feeds `todo` to the function `depth` ahead while `control` lets blocks
/// start, collecting its releases into `done`, until every fed block is
/// released.
fn feed_ahead(
    running: &Running,
    todo: &mut VecDeque<WireBlock>,
    depth: usize,
    control: &dyn BlockControl,
    done: &mut Vec<EmbeddedRan>,
) -> Fed {
    if let Some(ended) = ended_between_batches(&running.reports) {
        return ended;
    }
    let mut feeding = Feeding {
        running,
        control,
        done,
        held: BTreeMap::new(),
        stopped: false,
    };
    loop {
        feeding.fill(todo, depth);
        if feeding.held.is_empty() {
            return Fed::Released;
        }
        let report = match next_report(&running.reports) {
            Ok(report) => report,
            Err(Interrupted) => return Fed::Interrupted,
        };
        if let Some(ended) = feeding.on_report(report) {
            return ended;
        }
    }
}

/// A function that ended between batches held nothing: another is
/// started, unless it never got as far as asking for a block. Any other
/// report is dropped.
fn ended_between_batches(reports: &Receiver<Report>) -> Option<Fed> {
    match reports.try_recv() {
        Ok(Report::Ended {
            error,
            asked: false,
        }) => Some(Fed::unable(error)),
        Ok(Report::Ended { asked: true, error }) => Some(Fed::Ended {
            stopped: false,
            returned: error.is_none(),
        }),
        _ => None,
    }
}

/// One batch being fed to a running function.
struct Feeding<'a> {
    running: &'a Running,
    control: &'a dyn BlockControl,
    done: &'a mut Vec<EmbeddedRan>,
    /// The blocks fed and not yet released, and when each was fed.
    held: BTreeMap<u64, Instant>,
    /// `control` refused a block: no more are fed.
    stopped: bool,
}

impl Feeding<'_> {
    /// Feeds blocks from `todo` until the function holds `depth` of them
    /// (and one more per relay client past the first), the batch runs out,
    /// or `control` stops it.
    fn fill(&mut self, todo: &mut VecDeque<WireBlock>, depth: usize) {
        let clients = self.running.clients.load(Ordering::Relaxed);
        while self.held.len() < depth + clients.saturating_sub(1) && !self.stopped {
            let Some(block) = todo.front() else { break };
            if !self.control.start(block.block_id) {
                self.stopped = true;
                break;
            }
            let block = todo.pop_front().expect("not empty");
            self.held.insert(block.block_id, Instant::now());
            if self.running.blocks.send(Some(block)).is_err() {
                break;
            }
        }
    }

    /// Takes in one report of the function's; how feeding ended, if the
    /// function did.
    fn on_report(&mut self, report: Result<Report, RecvError>) -> Option<Fed> {
        match report {
            Ok(Report::Released { block_id, outcome }) => self.on_released(block_id, outcome),
            Ok(Report::HandedBack { block_id }) => {
                if self.held.remove(&block_id).is_some() {
                    self.control.finished(block_id);
                }
            }
            Ok(Report::Ended {
                error,
                asked: false,
            }) => {
                self.held.keys().for_each(|id| self.control.finished(*id));
                return Some(Fed::unable(error));
            }
            Ok(Report::Ended { error, .. }) => {
                hand_back_untaken(&self.running.untaken, &mut self.held, self.control);
                return Some(self.ended(error));
            }
            Err(RecvError) => return Some(self.ended(Some("its thread vanished".into()))),
        }
        None
    }

    fn on_released(&mut self, block_id: u64, outcome: Result<Finished, String>) {
        let Some(started) = self.held.remove(&block_id) else {
            tracing::warn!(
                block_id,
                "the worker function released a block it was not given"
            );
            return;
        };
        self.control.finished(block_id);
        let outcome = outcome.map_err(BlockFailure::new);
        let took = started.elapsed();
        self.done.push(EmbeddedRan {
            block_id,
            outcome,
            took,
        });
    }

    /// The function ended while it held blocks: they fail.
    fn ended(&mut self, error: Option<String>) -> Fed {
        let held = std::mem::take(&mut self.held);
        let returned = error.is_none();
        end_fed(held, error, self.control, self.done);
        Fed::Ended {
            stopped: self.stopped,
            returned,
        }
    }
}

/// The interpreter raised from a signal handler (Ctrl-C) while the
/// worker waited for its function.
struct Interrupted;

/// The function's next report, or `Interrupted` if a signal handler of
/// the interpreter raised first (only on Python's main thread: a serial
/// run; elsewhere nothing is raised and this only waits).
fn next_report(reports: &Receiver<Report>) -> Result<Result<Report, RecvError>, Interrupted> {
    loop {
        match reports.recv_timeout(SIGNAL_POLL) {
            Ok(report) => return Ok(Ok(report)),
            Err(RecvTimeoutError::Disconnected) => return Ok(Err(RecvError)),
            Err(RecvTimeoutError::Timeout) => {
                if Python::attach(|py| py.check_signals()).is_err() {
                    return Err(Interrupted);
                }
            }
        }
    }
}

/// Takes the blocks the function was fed but never asked for out of
/// `fed`: they did not run, so they go back to the driver unfailed. A
/// client still waiting on the feed holds its lock, and then the feed is
/// empty: there is nothing to take.
fn hand_back_untaken(
    untaken: &Mutex<Receiver<Option<WireBlock>>>,
    fed: &mut BTreeMap<u64, Instant>,
    control: &dyn BlockControl,
) {
    let Ok(untaken) = untaken.try_lock() else {
        return;
    };
    while let Ok(Some(block)) = untaken.try_recv() {
        if fed.remove(&block.block_id).is_some() {
            control.finished(block.block_id);
        }
    }
}

/// Fails the blocks a function held when it ended.
fn end_fed(
    fed: BTreeMap<u64, Instant>,
    error: Option<String>,
    control: &dyn BlockControl,
    done: &mut Vec<EmbeddedRan>,
) {
    let why = match error {
        Some(error) => format!("the worker function raised while it held this block: {error}"),
        None => "the worker function returned while it held this block".to_string(),
    };
    tracing::warn!("{why}");
    let failure = BlockFailure::new(why);
    for (id, started) in fed {
        control.finished(id);
        done.push(failed(id, &failure, started));
    }
}

fn failed(block_id: u64, failure: &BlockFailure, started: Instant) -> EmbeddedRan {
    EmbeddedRan {
        block_id,
        outcome: Err(failure.clone()),
        took: started.elapsed(),
    }
}
