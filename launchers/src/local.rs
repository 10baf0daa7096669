//! The local backend: each worker is a child process of the driver, in a
//! process group of its own.
//!
//! The group is the local "job": the worker and whatever user processes it
//! starts. Cancelling sends SIGTERM to the whole group (the worker drains),
//! waits a grace period for all cancelled groups together, then SIGKILLs
//! what is left and reaps the workers, so no zombie or orphan remains. When
//! a worker leader exits, by itself or cancelled, the rest of its group is
//! killed before the leader is reaped: like SLURM ending a job's steps with
//! the job, and race-free, because the unreaped leader keeps the group id
//! from being reused. Being in its own group also keeps a terminal's Ctrl-C
//! away from workers: the driver decides when they stop, and dropping the
//! launcher stops them all.
//!
//! Every end is reported once by `poll_ended`: a worker the driver cancels
//! as `Cancelled`, unless it had already ended by itself when `cancel`
//! looked, in which case as it ended.
//!
//! Python workers may instead be forked by a fork server ([`fork_server`]):
//! the same group, logs and ends, but the server is their parent, so it
//! reaps them and reports how they ended.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

mod fork_server;

pub use fork_server::ForkServer;

use crate::template;
use crate::{JobEnd, JobId, LaunchError, Launcher, WorkerRequest};

/// How long cancelled workers get between SIGTERM and SIGKILL: enough for
/// a worker to hand back its blocks and disconnect politely.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// How often `cancel` checks whether its workers have exited.
const EXIT_POLL: Duration = Duration::from_millis(10);

/// How long `cancel` waits for SIGKILLed workers to be reapable. Only a
/// process stuck in the kernel (a hung network filesystem) takes longer;
/// it is then left to the system rather than blocking the driver.
const REAP_AFTER_KILL: Duration = Duration::from_millis(500);

/// Starts workers as local processes; see the module doc.
pub struct LocalLauncher {
    /// Running workers by worker id; each leads its process group.
    running: BTreeMap<u64, WorkerProcess>,
    /// Forks the Python workers it serves (see [`fork_server`]).
    fork_server: Option<ForkServer>,
    /// Ends recorded by `cancel`, handed out by the next `poll_ended`.
    ended: Vec<(u64, JobId, JobEnd)>,
    /// Time between SIGTERM and SIGKILL when cancelling.
    grace: Duration,
}

impl LocalLauncher {
    /// A launcher with the [`DEFAULT_GRACE`] period.
    pub fn new() -> Self {
        Self::with_grace(DEFAULT_GRACE)
    }

    /// A launcher whose `cancel` waits `grace` between SIGTERM and SIGKILL.
    pub fn with_grace(grace: Duration) -> Self {
        Self {
            running: BTreeMap::new(),
            fork_server: None,
            ended: Vec::new(),
            grace,
        }
    }

    /// This launcher, with the Python workers `server` (if any) serves
    /// forked by it rather than started as fresh interpreters.
    pub fn with_fork_server_if(mut self, server: Option<ForkServer>) -> Self {
        self.fork_server = server;
        self
    }

    /// Records how a cancelled worker ended and, unless it had already
    /// exited by itself, sends its group SIGTERM and returns it to wait for.
    fn terminate(&mut self, worker_id: u64, mut worker: WorkerProcess) -> Option<WorkerProcess> {
        if let Some(end) = worker.end(&mut self.fork_server) {
            self.ended.push((worker_id, worker.job_id(), end));
            return None;
        }
        worker.signal_group(Signal::SIGTERM);
        self.ended
            .push((worker_id, worker.job_id(), JobEnd::Cancelled));
        Some(worker)
    }

    /// Forks the worker if the fork server serves it, else spawns it.
    fn start_process(&mut self, request: &WorkerRequest) -> Result<WorkerProcess, LaunchError> {
        if let Some(server) = self.fork_server.as_mut().filter(|s| s.serves(request)) {
            let logs = log_files(&request.log_dir, request.worker_id)?;
            match server.start(request, [&logs[0], &logs[1]]) {
                Ok(pid) => return Ok(WorkerProcess::Forked(pid)),
                Err(error) => tracing::debug!(%error, "not forked: spawning the worker"),
            }
        }
        spawn(request).map(WorkerProcess::Spawned)
    }
}

impl Default for LocalLauncher {
    fn default() -> Self {
        Self::new()
    }
}

impl Launcher for LocalLauncher {
    fn name(&self) -> &'static str {
        "local"
    }

    fn start(&mut self, request: &WorkerRequest) -> Result<JobId, LaunchError> {
        if self.running.contains_key(&request.worker_id) {
            return Err(LaunchError::WorkerIdInUse {
                task_id: request.task_id.clone(),
                worker_id: request.worker_id,
            });
        }
        let process = self.start_process(request)?;
        let job = process.job_id();
        let (task, worker) = (&request.task_id, request.worker_id);
        let forked = matches!(process, WorkerProcess::Forked(_));
        tracing::debug!(%task, worker, pid = %job, forked, "started local worker");
        self.running.insert(request.worker_id, process);
        Ok(job)
    }

    fn poll_ended(&mut self) -> Vec<(u64, JobId, JobEnd)> {
        let mut ended = std::mem::take(&mut self.ended);
        let forks = &mut self.fork_server;
        self.running
            .retain(|&worker_id, worker| match worker.end(forks) {
                Some(end) => {
                    ended.push((worker_id, worker.job_id(), end));
                    false
                }
                None => true,
            });
        ended
    }

    fn cancel(&mut self, worker_ids: &[u64]) {
        let mut stopping = Vec::new();
        for worker_id in worker_ids {
            if let Some(child) = self.running.remove(worker_id) {
                stopping.extend(self.terminate(*worker_id, child));
            }
        }
        wait_for_exit(&mut stopping, self.grace, &mut self.fork_server);
        kill_and_reap(stopping, &mut self.fork_server);
    }

    fn cancel_all(&mut self) {
        let worker_ids: Vec<u64> = self.running.keys().copied().collect();
        self.cancel(&worker_ids);
    }
}

/// Dropping the launcher cancels every worker, so a driver that returns or
/// unwinds never leaves workers behind.
impl Drop for LocalLauncher {
    fn drop(&mut self) {
        self.cancel_all();
    }
}

/// Spawns the worker in its own process group, logs appended to its files.
fn spawn(request: &WorkerRequest) -> Result<Child, LaunchError> {
    let (stdout, stderr) = open_logs(&request.log_dir, request.worker_id)?;
    Command::new(&request.program)
        .args(&request.args)
        .envs(request.env.iter().map(|(name, value)| (name, value)))
        .current_dir(&request.working_dir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .map_err(|source| LaunchError::Spawn {
            program: request.program.clone(),
            working_dir: request.working_dir.clone(),
            source,
        })
}

/// `<log_dir>/worker-<id>.out` and `.err`, opened for appending.
fn open_logs(log_dir: &Path, worker_id: u64) -> Result<(File, File), LaunchError> {
    let open = |path: PathBuf| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| LaunchError::Log { path, source })
    };
    let [out, err] = log_files(log_dir, worker_id)?;
    Ok((open(out)?, open(err)?))
}

/// `<log_dir>/worker-<id>.out` and `.err`, the log directory created with
/// its parents.
fn log_files(log_dir: &Path, worker_id: u64) -> Result<[PathBuf; 2], LaunchError> {
    std::fs::create_dir_all(log_dir).map_err(|source| LaunchError::Log {
        path: log_dir.to_path_buf(),
        source,
    })?;
    Ok(["out", "err"].map(|extension| log_file(log_dir, worker_id, extension)))
}

/// `<log_dir>/worker-<id>.<extension>`.
fn log_file(log_dir: &Path, worker_id: u64, extension: &str) -> PathBuf {
    log_dir.join(format!("worker-{worker_id}.{extension}"))
}

/// What `start` runs for `request`, as one shell line for people to read
/// (`daisy-driver plan`): the variables `env` adds (the GPUs and thread
/// counts a worker is given), the worker command and where its output
/// goes. It runs in `working_dir`, not shown; nor is `DAISY_CONTEXT`,
/// which holds the run token.
pub fn command_line(request: &WorkerRequest) -> String {
    let log = |extension| {
        let path = log_file(&request.log_dir, request.worker_id, extension);
        template::shell_quote(&path.display().to_string())
    };
    let shown = request
        .env
        .iter()
        .filter(|(name, _)| name != TOKEN_VARIABLE);
    let assignments: String = shown
        .map(|(name, value)| format!("{name}={} ", template::shell_quote(value)))
        .collect();
    format!(
        "{assignments}{} >> {} 2>> {}",
        template::worker_command(request),
        log("out"),
        log("err")
    )
}

/// The variable of a request's `env` that holds the run's secret token.
const TOKEN_VARIABLE: &str = "DAISY_CONTEXT";

/// A worker's process: spawned by the launcher, or forked by its fork
/// server (whose child it is, so only the server can wait for it).
enum WorkerProcess {
    Spawned(Child),
    Forked(u32),
}

impl WorkerProcess {
    fn pid(&self) -> u32 {
        match self {
            WorkerProcess::Spawned(child) => child.id(),
            WorkerProcess::Forked(pid) => *pid,
        }
    }

    fn job_id(&self) -> JobId {
        JobId(self.pid().to_string())
    }

    /// Signals the worker's whole group (it leads it: its pid is the
    /// group's id). ESRCH only means nobody is left in it.
    fn signal_group(&self, signal: Signal) {
        let group = Pid::from_raw(self.pid() as i32);
        if let Err(error) = killpg(group, signal) {
            tracing::debug!(pid = self.pid(), %signal, %error, "cannot signal process group");
        }
    }

    /// How the worker ended, or `None` while it runs; never blocks.
    fn end(&mut self, forks: &mut Option<ForkServer>) -> Option<JobEnd> {
        match self {
            WorkerProcess::Spawned(child) => end_of(child),
            WorkerProcess::Forked(pid) => match forks {
                Some(server) => server.end_of(*pid),
                None => Some(JobEnd::Failed {
                    reason: format!("pid {pid} was forked by a fork server this launcher lost"),
                }),
            },
        }
    }
}

/// How the worker ended, or `None` while it runs; never blocks. Once the
/// leader has exited, the rest of its group is killed (the zombie leader
/// still holds the group id), then the leader is reaped.
fn end_of(child: &mut Child) -> Option<JobEnd> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    let pid = Pid::from_raw(child.id() as i32);
    match waitid(Id::Pid(pid), flags) {
        Ok(WaitStatus::StillAlive) => return None,
        Ok(_) => {
            if let Err(error) = killpg(pid, Signal::SIGKILL) {
                tracing::debug!(%pid, %error, "cannot kill the rest of the group");
            }
        }
        Err(error) => return Some(lost(child, error)),
    }
    match child.try_wait() {
        Ok(Some(status)) => Some(end_from_status(status)),
        Ok(None) => None,
        Err(error) => Some(lost(child, error)),
    }
}

/// The end of a worker the OS no longer lets us wait for (someone else
/// reaped it, or SIGCHLD is ignored).
fn lost(child: &Child, error: impl std::fmt::Display) -> JobEnd {
    JobEnd::Failed {
        reason: format!("cannot wait for pid {}: {error}", child.id()),
    }
}

pub(crate) fn end_from_status(status: ExitStatus) -> JobEnd {
    if let Some(code) = status.code() {
        return JobEnd::Exited { code };
    }
    match status.signal() {
        Some(number) => JobEnd::Signalled {
            signal: signal_name(number),
        },
        None => JobEnd::Failed {
            reason: status.to_string(),
        },
    }
}

/// "SIGKILL" for 9; the number for a signal nix does not know.
fn signal_name(number: i32) -> String {
    Signal::try_from(number)
        .map(|signal| signal.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {number}"))
}

/// Reaps the workers that exit within `timeout`, all checked together;
/// those still running stay in `children`.
fn wait_for_exit(
    children: &mut Vec<WorkerProcess>,
    timeout: Duration,
    forks: &mut Option<ForkServer>,
) {
    let deadline = Instant::now() + timeout;
    loop {
        children.retain_mut(|child| child.end(forks).is_none());
        let now = Instant::now();
        if children.is_empty() || now >= deadline {
            return;
        }
        let pause = EXIT_POLL.min(deadline - now);
        let all_forked = (children.iter()).all(|child| matches!(child, WorkerProcess::Forked(_)));
        match forks.as_ref().filter(|_| all_forked) {
            // Their ends come as the server's messages: woken by the first.
            Some(server) => server.wait_for_news(pause),
            None => std::thread::sleep(pause),
        }
    }
}

/// SIGKILLs the groups of workers that outlived the grace period and reaps
/// them; one stuck in the kernel past [`REAP_AFTER_KILL`] is left to the
/// system with a warning.
fn kill_and_reap(mut children: Vec<WorkerProcess>, forks: &mut Option<ForkServer>) {
    for child in &children {
        child.signal_group(Signal::SIGKILL);
    }
    wait_for_exit(&mut children, REAP_AFTER_KILL, forks);
    for child in &children {
        tracing::warn!(
            pid = child.pid(),
            "worker did not die from SIGKILL; left unreaped"
        );
    }
}

#[cfg(test)]
mod tests;
