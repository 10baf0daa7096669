//! A user process in its own process group, started so that it dies with
//! the worker, and stopped so that nothing it started outlives it.
//!
//! Killing only the process we spawned would leave a shell's children or a
//! Python multiprocessing pool running (and writing) after a timeout, so
//! every signal goes to the group. The group leader is only reaped after
//! the last signal: while it is a zombie its pid, which is the group id,
//! cannot be reused, so the signal cannot reach an unrelated group.

use super::exit_watch;
use super::spawn::{self, Environment};
use super::watcher::{self, Slot, Watcher};
use super::{StderrTail, DEFAULT_GRACE, SECRET_ENV};
use crate::cost::{self, Usage};
use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::{getpid, getppid, Pid};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// How often a deadline wait checks whether the process has exited,
/// where no pidfd tells it (and [`end_all`]).
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Groups spawned and not reaped yet: what [`end_all`] stops when the
/// worker must exit without waiting for the threads that own them (the
/// driver is lost). A group id is only removed after its leader is reaped,
/// under this lock, so `end_all` can never signal a reused id.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn live_groups() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    LIVE_GROUPS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Stops every user process group still running: SIGTERM, then SIGKILL
/// to what is left after `grace`. The watchdog's last act before the
/// worker exits, so a lost driver leaves no user process behind (a
/// block's grandchildren included, which PR_SET_PDEATHSIG does not reach).
pub fn end_all(grace: Duration) {
    let groups: Vec<i32> = live_groups().iter().copied().collect();
    for group in &groups {
        let _ = killpg(Pid::from_raw(*group), Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && groups.iter().any(|g| live_groups().contains(g)) {
        thread::sleep(POLL_INTERVAL);
    }
    let live = live_groups();
    for group in groups.iter().filter(|g| live.contains(g)) {
        let _ = killpg(Pid::from_raw(*group), Signal::SIGKILL);
    }
}

/// The user's program could not be started (not found, not executable).
#[derive(Debug, thiserror::Error)]
#[error("cannot start {program:?}: {cause}")]
pub struct SpawnError {
    pub program: String,
    pub cause: io::Error,
}

/// A command for user code: the worker's environment without its secret,
/// plus `env`; stdin null; a new process group. [`GroupChild::spawn`]
/// adds the rest (see [`die_with_parent`], `watcher`).
pub(super) fn user_command(
    program: &str,
    args: &[impl AsRef<str>],
    env: &BTreeMap<String, String>,
) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args.iter().map(AsRef::as_ref))
        .env_remove(SECRET_ENV)
        .envs(env);
    cmd.stdin(Stdio::null()).process_group(0);
    cmd
}

/// The environment of [`GroupChild::spawn_shared`]'s processes: the
/// worker's without its secret and without `per_process` (the names each
/// process gets its own value of), plus the user's `env`.
pub(super) fn user_environment(
    env: &BTreeMap<String, String>,
    per_process: &[&str],
) -> io::Result<Environment> {
    let remove: Vec<&str> = std::iter::once(SECRET_ENV)
        .chain(per_process.iter().copied())
        .collect();
    Environment::new(&remove, env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// What a new user process does before it executes the program: dies
/// with the thread that started it, and tells the watcher about its new
/// group, so no user code runs unannounced. Async-signal-safe, no
/// allocation (it runs between fork and exec, or on the worker's memory).
fn before_exec(parent: Pid, slot: Option<Slot>) -> impl Fn() -> io::Result<()> {
    move || {
        die_with_parent(parent)?;
        // Without a watcher, or with a dead one, the process still runs:
        // PR_SET_PDEATHSIG and the worker's own cleanup remain.
        if let Some(slot) = slot {
            let _ = slot.announce(getpid().as_raw());
        }
        Ok(())
    }
}

/// The watcher's slot for a new group, if there is a watcher.
fn reserve_slot() -> Option<Slot> {
    watcher::get(DEFAULT_GRACE).and_then(Watcher::reserve)
}

/// Asks the kernel for SIGKILL when our parent ends. PR_SET_PDEATHSIG is
/// tied to the parent *thread* (prctl(2)), so callers keep the spawning
/// thread alive for the child's lifetime. If the worker already died
/// between fork and here, the signal would never come: refuse to run.
fn die_with_parent(parent: Pid) -> io::Result<()> {
    prctl::set_pdeathsig(Signal::SIGKILL)?;
    if getppid() != parent {
        return Err(Errno::ESRCH.into());
    }
    Ok(())
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waited {
    Exited(ExitStatus),
    /// Still running after this long.
    TimedOut(Duration),
}

/// A spawned group leader. Dropping it kills the group and reaps the
/// leader, so no error path leaves a process or a zombie behind.
#[derive(Debug)]
pub(super) struct GroupChild {
    /// The leader's pid, which is also the group id (a new group).
    pgid: Pid,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    /// Where the group is announced to the watcher, until withdrawn.
    slot: Option<Slot>,
    /// Set once the leader is reaped.
    status: Option<ExitStatus>,
    /// Whether reaping reads the leader's IO counters too.
    read_io: bool,
    /// What the leader (and what it reaped) used, once it is reaped.
    usage: Option<Usage>,
}

impl GroupChild {
    /// Starts `cmd` (from [`user_command`]) with `std`, which forks: for a
    /// process that needs pipes to the worker (a worker command).
    pub(super) fn spawn(cmd: &mut Command) -> Result<Self, SpawnError> {
        let slot = reserve_slot();
        let before = before_exec(getpid(), slot);
        // SAFETY: `before_exec` is async-signal-safe and does not allocate.
        unsafe { cmd.pre_exec(before) };
        let spawned = cmd.spawn().map_err(|cause| SpawnError {
            program: cmd.get_program().to_string_lossy().into_owned(),
            cause,
        });
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                slot.into_iter().for_each(Slot::release);
                return Err(e);
            }
        };
        let mut group = Self::started(child.id() as i32, slot);
        (group.stdin, group.stdout) = (child.stdin.take(), child.stdout.take());
        Ok(group)
    }

    /// Starts `program` with `args`, `env` and then `extra_env` (from
    /// [`user_environment`]), stdin null and `stdout` and `stderr` as
    /// given, without copying the worker ([`spawn`]): for a block's
    /// process.
    pub(super) fn spawn_shared(
        (program, args): (&str, &[String]),
        (env, extra_env): (&Environment, &[(&str, &str)]),
        (stdout, stderr): (&File, &File),
    ) -> Result<Self, SpawnError> {
        let error = |cause| SpawnError {
            program: program.to_string(),
            cause,
        };
        let stdin = dev_null().map_err(error)?;
        let raised = (above_stdio(stdout), above_stdio(stderr));
        let raised = (raised.0.map_err(error)?, raised.1.map_err(error)?);
        let fd = |raised: &Option<OwnedFd>, file: &File| {
            raised.as_ref().map_or(file.as_raw_fd(), AsRawFd::as_raw_fd)
        };
        let slot = reserve_slot();
        let before = before_exec(getpid(), slot);
        let spec = spawn::Spec {
            program,
            args,
            env,
            extra_env,
            stdio: [
                stdin.as_raw_fd(),
                fd(&raised.0, stdout),
                fd(&raised.1, stderr),
            ],
            before_exec: &before,
        };
        match spawn::spawn(&spec) {
            Ok(pid) => Ok(Self::started(pid, slot)),
            Err(cause) => {
                slot.into_iter().for_each(Slot::release);
                Err(error(cause))
            }
        }
    }

    fn started(pid: i32, slot: Option<Slot>) -> Self {
        let pgid = Pid::from_raw(pid);
        live_groups().insert(pid);
        Self {
            pgid,
            stdin: None,
            stdout: None,
            slot,
            status: None,
            read_io: false,
            usage: None,
        }
    }

    /// Reads the leader's IO counters as it is reaped ([`cost::reap`]).
    pub(super) fn measure_io(&mut self) {
        self.read_io = true;
    }

    /// What the leader used, once it is reaped.
    pub(super) fn usage(&self) -> Option<&Usage> {
        self.usage.as_ref()
    }

    pub(super) fn pid(&self) -> u32 {
        self.pgid.as_raw() as u32
    }

    pub(super) fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    pub(super) fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// Waits for the leader to exit, at most `timeout` (`None`: forever).
    /// Once it has, whatever it left running in its group is killed and
    /// the leader reaped.
    pub(super) fn wait_for(&mut self, timeout: Option<Duration>) -> io::Result<Waited> {
        if self.status.is_none() {
            match timeout {
                // Without WNOHANG this returns once the leader has exited.
                None => _ = self.leader_exited(WaitPidFlag::empty())?,
                Some(timeout) if !self.poll_exit(Instant::now() + timeout)? => {
                    return Ok(Waited::TimedOut(timeout));
                }
                Some(_) => {}
            }
        }
        self.kill().map(Waited::Exited)
    }

    /// Asks the group to stop with SIGTERM, kills it after `grace`.
    pub(super) fn terminate(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        if self.status.is_none() {
            let _ = killpg(self.pgid, Signal::SIGTERM);
        }
        self.stop(grace)
    }

    /// Gives the leader `grace` to exit on its own, then kills the group.
    pub(super) fn stop(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        match self.wait_for(Some(grace))? {
            Waited::Exited(status) => Ok(status),
            Waited::TimedOut(_) => self.kill(),
        }
    }

    /// SIGKILL to the group (everything left of it), then reaps the leader.
    fn kill(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        // ESRCH (nothing left) is the usual, fine outcome.
        let _ = killpg(self.pgid, Signal::SIGKILL);
        // Withdrawn while the unreaped leader still reserves the id: once
        // reaped, the id may lead an unrelated group.
        if let Some(slot) = self.slot.take() {
            slot.release();
        }
        let mut live = live_groups();
        // Reaped here rather than by `Child::wait`, which drops the usage.
        let (status, usage) = cost::reap(self.pgid, self.read_io)?;
        live.remove(&self.pgid.as_raw());
        self.status = Some(status);
        self.usage = Some(usage);
        Ok(status)
    }

    /// Whether the leader exits before `deadline`. Slept in `poll` on its
    /// pidfd, which wakes at the exit; without one (a kernel before 5.3),
    /// in steps of [`POLL_INTERVAL`].
    fn poll_exit(&self, deadline: Instant) -> io::Result<bool> {
        let pidfd = exit_watch::pidfd(self.pid()).ok();
        loop {
            if self.leader_exited(WaitPidFlag::WNOHANG)? {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            match &pidfd {
                Some(pidfd) => wait_readable(pidfd, left),
                None => thread::sleep(left.min(POLL_INTERVAL)),
            }
        }
    }

    /// Whether the leader has exited, leaving it unreaped (WNOWAIT) so the
    /// group id stays reserved for [`Self::kill`].
    fn leader_exited(&self, flags: WaitPidFlag) -> io::Result<bool> {
        let flags = flags | WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
        loop {
            match waitid(Id::Pid(self.pgid), flags) {
                Ok(WaitStatus::StillAlive) => return Ok(false),
                Ok(_) => return Ok(true),
                Err(Errno::EINTR) => {}
                // nix could not name the signal that ended it (a real-time
                // one): it did end.
                Err(Errno::EINVAL) => return Ok(true),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        if let Err(e) = self.kill() {
            tracing::warn!(pid = self.pgid.as_raw(), "cannot reap user process: {e}");
        }
    }
}

/// Sleeps until `fd` is readable or `timeout` has passed (or a signal
/// came: the caller checks again).
fn wait_readable(fd: &OwnedFd, timeout: Duration) {
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // Rounded up, so a wait never ends just before its deadline.
    let millis = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut poll, 1, millis) };
}

/// `/dev/null`, opened once: every block's stdin.
fn dev_null() -> io::Result<BorrowedFd<'static>> {
    static DEV_NULL: OnceLock<File> = OnceLock::new();
    if let Some(file) = DEV_NULL.get() {
        return Ok(file.as_fd());
    }
    let file = File::open("/dev/null")?;
    Ok(DEV_NULL.get_or_init(|| file).as_fd())
}

/// A copy of `file`'s descriptor numbered 3 or more, if it is 0, 1 or 2
/// (a worker started with its stdio closed): the child moves its stdin,
/// stdout and stderr onto 0, 1 and 2 in that order, and must not
/// overwrite one it has yet to move.
fn above_stdio(file: &File) -> io::Result<Option<OwnedFd>> {
    if file.as_raw_fd() > 2 {
        return Ok(None);
    }
    // SAFETY: duplicates a live descriptor; the copy is owned here.
    let raised = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if raised < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nothing else.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(raised) }))
}

/// `exit status 3` or `killed by SIGKILL`.
pub(super) fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("killed by {}", signal.as_str()),
            Err(_) => format!("killed by signal {signal}"),
        },
        _ => status.to_string(),
    }
}

/// Whether a signal stopped the process: killed by SIGTERM, SIGINT or
/// SIGKILL, or a shell exiting with 128 plus one of them, as shells do
/// when their child was.
pub(super) fn stopped_by_signal(status: ExitStatus) -> bool {
    const STOPPING: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGKILL];
    let signal = status.signal().or_else(|| {
        status
            .code()
            .filter(|code| *code > 128)
            .map(|code| code - 128)
    });
    signal.is_some_and(|signal| STOPPING.iter().any(|s| *s as i32 == signal))
}

/// The failure for a process that ran into its timeout, after stopping it.
pub(super) fn on_timeout(
    child: &mut GroupChild,
    timeout: Duration,
    grace: Duration,
    tail: &StderrTail,
) -> super::BlockFailure {
    if let Err(e) = child.terminate(grace) {
        tracing::warn!(
            pid = child.pid(),
            "cannot stop user process after its timeout: {e}"
        );
    }
    super::BlockFailure::timed_out(timeout, tail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user_code::test_util::{is_gone, read_pid};

    fn sh(script: &str) -> Command {
        user_command("sh", &["-c", script], &BTreeMap::new())
    }

    #[test]
    fn exit_statuses_are_described() {
        let mut child = GroupChild::spawn(&mut sh("exit 3")).unwrap();
        let status = child.stop(Duration::from_secs(5)).unwrap();
        assert_eq!(describe(status), "exit status 3");
        let mut child = GroupChild::spawn(&mut sh("kill -9 $$")).unwrap();
        let status = child.stop(Duration::from_secs(5)).unwrap();
        assert_eq!(describe(status), "killed by SIGKILL");
        assert!(stopped_by_signal(status));
    }

    #[test]
    fn a_signal_or_a_shells_exit_code_for_one_counts_as_stopped_by_signal() {
        let stopped = |script: &str| {
            let mut child = GroupChild::spawn(&mut sh(script)).unwrap();
            stopped_by_signal(child.stop(Duration::from_secs(5)).unwrap())
        };
        assert!(stopped("kill -TERM $$"));
        assert!(stopped("exit 143"));
        assert!(!stopped("exit 3"));
        assert!(
            !stopped("exit 139"),
            "a segfault is the block's own failure"
        );
    }

    #[test]
    fn dropping_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let child = GroupChild::spawn(&mut sh(&script)).unwrap();
        let leader = child.pid() as i32;
        let grandchild = read_pid(&pid_file);
        drop(child);
        assert!(is_gone(leader) && is_gone(grandchild));
    }
}
