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

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

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
    /// Running workers by worker id; each child leads its process group.
    running: BTreeMap<u64, Child>,
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
            ended: Vec::new(),
            grace,
        }
    }

    /// Records how a cancelled worker ended and, unless it had already
    /// exited by itself, sends its group SIGTERM and returns it to wait for.
    fn terminate(&mut self, worker_id: u64, mut child: Child) -> Option<Child> {
        if let Some(end) = end_of(&mut child) {
            self.ended.push((worker_id, job_id(&child), end));
            return None;
        }
        signal_group(&child, Signal::SIGTERM);
        self.ended
            .push((worker_id, job_id(&child), JobEnd::Cancelled));
        Some(child)
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
        let child = spawn(request)?;
        let job = job_id(&child);
        let (task, worker) = (&request.task_id, request.worker_id);
        tracing::debug!(%task, worker, pid = %job, "started local worker");
        self.running.insert(request.worker_id, child);
        Ok(job)
    }

    fn poll_ended(&mut self) -> Vec<(u64, JobId, JobEnd)> {
        let mut ended = std::mem::take(&mut self.ended);
        self.running
            .retain(|&worker_id, child| match end_of(child) {
                Some(end) => {
                    ended.push((worker_id, job_id(child), end));
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
        wait_for_exit(&mut stopping, self.grace);
        kill_and_reap(stopping);
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

/// `<log_dir>/worker-<id>.out` and `.err`, opened for appending (the log
/// directory is created with its parents).
fn open_logs(log_dir: &Path, worker_id: u64) -> Result<(File, File), LaunchError> {
    std::fs::create_dir_all(log_dir).map_err(|source| LaunchError::Log {
        path: log_dir.to_path_buf(),
        source,
    })?;
    let open = |extension: &str| {
        let path = log_file(log_dir, worker_id, extension);
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| LaunchError::Log { path, source })
    };
    Ok((open("out")?, open("err")?))
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

fn job_id(child: &Child) -> JobId {
    JobId(child.id().to_string())
}

/// The process group a child leads (its pid, thanks to `process_group(0)`).
fn group_of(child: &Child) -> Pid {
    Pid::from_raw(child.id() as i32)
}

/// Signals a worker's whole group. ESRCH only means nobody is left in it.
fn signal_group(child: &Child, signal: Signal) {
    if let Err(error) = killpg(group_of(child), signal) {
        tracing::debug!(pid = child.id(), %signal, %error, "cannot signal process group");
    }
}

/// How the worker ended, or `None` while it runs; never blocks. Once the
/// leader has exited, the rest of its group is killed (the zombie leader
/// still holds the group id), then the leader is reaped.
fn end_of(child: &mut Child) -> Option<JobEnd> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(group_of(child)), flags) {
        Ok(WaitStatus::StillAlive) => return None,
        Ok(_) => signal_group(child, Signal::SIGKILL),
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

fn end_from_status(status: ExitStatus) -> JobEnd {
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
fn wait_for_exit(children: &mut Vec<Child>, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        children.retain_mut(|child| end_of(child).is_none());
        if children.is_empty() || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(EXIT_POLL);
    }
}

/// SIGKILLs the groups of workers that outlived the grace period and reaps
/// them; one stuck in the kernel past [`REAP_AFTER_KILL`] is left to the
/// system with a warning.
fn kill_and_reap(mut children: Vec<Child>) {
    for child in &children {
        signal_group(child, Signal::SIGKILL);
    }
    wait_for_exit(&mut children, REAP_AFTER_KILL);
    for child in &children {
        tracing::warn!(
            pid = child.id(),
            "worker did not die from SIGKILL; left unreaped"
        );
    }
}

#[cfg(test)]
mod tests;
