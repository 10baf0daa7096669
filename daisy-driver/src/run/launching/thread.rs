//! The launcher on a thread of its own.
//!
//! Launcher calls block: `sbatch` and `squeue` take from milliseconds to
//! the better part of a minute when slurmctld is busy, and `cancel` waits
//! out a grace period. The run loop must never wait for them, so the
//! launcher lives on this thread: the run loop sends commands and goes on,
//! results come back as events on a channel the run loop selects on, and
//! job states are polled here every `poll_interval`.

use crate::run::slots::SlotId;
use launchers::{JobEnd, JobId, LaunchError, Launcher, WorkerRequest};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// What the launcher thread reports.
#[derive(Debug)]
pub enum LauncherEvent {
    /// The outcome of a `start`, one entry per requested worker.
    Started(Vec<(SlotId, Result<JobId, LaunchError>)>),
    /// Jobs that ended (worker, job, how).
    Ended(Vec<(SlotId, JobId, JobEnd)>),
}

enum Command {
    Start(Vec<WorkerRequest>),
    Cancel(Vec<SlotId>),
    Left(Vec<SlotId>),
    /// End the thread, cancelling every job still running unless told to
    /// leave them.
    Finish {
        leave_jobs: bool,
    },
}

/// The run loop's handle on the launcher thread.
pub struct LauncherThread {
    commands: mpsc::Sender<Command>,
    /// Taken by `finish`; a thread never finished ends (cancelling every
    /// job) when `commands` is dropped.
    thread: Option<JoinHandle<()>>,
}

impl LauncherThread {
    /// Starts the thread; fails only if the system has no thread to give
    /// (a process limit), which ends the run before it starts.
    pub fn spawn(
        launcher: Box<dyn Launcher>,
        events: UnboundedSender<LauncherEvent>,
    ) -> std::io::Result<Self> {
        let (commands, inbox) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("launcher".into())
            .spawn(move || serve(launcher, inbox, events))?;
        Ok(Self {
            commands,
            thread: Some(thread),
        })
    }

    /// Starts workers of one task (consecutive worker ids: one job array).
    pub fn start(&self, requests: Vec<WorkerRequest>) {
        let _ = self.commands.send(Command::Start(requests));
    }

    /// Ends the jobs of these workers.
    pub fn cancel(&self, workers: Vec<SlotId>) {
        let _ = self.commands.send(Command::Cancel(workers));
    }

    /// These workers' connections ended; their jobs may run on.
    pub fn left(&self, workers: Vec<SlotId>) {
        let _ = self.commands.send(Command::Left(workers));
    }

    /// Ends every job still running (unless `leave_jobs`), reports the
    /// last job ends, and waits for the thread.
    pub fn finish(&mut self, leave_jobs: bool) {
        let _ = self.commands.send(Command::Finish { leave_jobs });
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the launcher thread panicked");
            }
        }
    }
}

fn serve(
    mut launcher: Box<dyn Launcher>,
    inbox: mpsc::Receiver<Command>,
    events: UnboundedSender<LauncherEvent>,
) {
    let mut next_poll = Instant::now() + launcher.poll_interval();
    loop {
        let wait = next_poll.saturating_duration_since(Instant::now());
        match inbox.recv_timeout(wait) {
            Ok(Command::Start(requests)) => start(launcher.as_mut(), &requests, &events),
            Ok(Command::Cancel(slots)) => launcher.cancel(&worker_ids(&slots)),
            Ok(Command::Left(slots)) => {
                launcher.left(&worker_ids(&slots));
                // How the worker died may be known sooner than planned.
                next_poll = next_poll.min(Instant::now() + launcher.poll_interval());
            }
            Ok(Command::Finish { leave_jobs: true }) => return,
            Ok(Command::Finish { leave_jobs: false })
            | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                poll(launcher.as_mut(), &events);
                next_poll = Instant::now() + launcher.poll_interval();
            }
        }
    }
    launcher.cancel_all();
    poll(launcher.as_mut(), &events);
}

fn worker_ids(slots: &[SlotId]) -> Vec<u64> {
    slots.iter().map(|slot| slot.0).collect()
}

fn start(
    launcher: &mut dyn Launcher,
    requests: &[WorkerRequest],
    events: &UnboundedSender<LauncherEvent>,
) {
    let results = launcher.start_many(requests);
    let started = requests
        .iter()
        .map(|r| SlotId(r.worker_id))
        .zip(results)
        .collect();
    let _ = events.send(LauncherEvent::Started(started));
}

/// Submissions that waited for a limit and were tried again, then job
/// ends.
fn poll(launcher: &mut dyn Launcher, events: &UnboundedSender<LauncherEvent>) {
    let ended: Vec<_> = (launcher.poll_ended().into_iter())
        .map(|(id, job, end)| (SlotId(id), job, end))
        .collect();
    let started: Vec<_> = (launcher.poll_started().into_iter())
        .map(|(id, result)| (SlotId(id), result))
        .collect();
    if !started.is_empty() {
        let _ = events.send(LauncherEvent::Started(started));
    }
    if !ended.is_empty() {
        let _ = events.send(LauncherEvent::Ended(ended));
    }
}
