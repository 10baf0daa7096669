//! Running SLURM's commands: finding them on PATH once, running one with
//! a timeout (a SLURM client retries for up to a minute when slurmctld is
//! unreachable) and telling transient failures from permanent ones (the
//! retrying is `retry.rs`'s).
//!
//! Nothing here knows what the commands mean; the launcher does.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::retry::CallError;
use crate::LaunchError;

/// The SLURM commands the launcher uses, in the order they are looked for.
pub const COMMANDS: [&str; 5] = ["sbatch", "squeue", "sacct", "scontrol", "scancel"];

/// What SLURM prints when a failure is worth retrying: the controller is
/// busy, restarting or unreachable. Matched case-insensitively anywhere in
/// stderr; anything else is permanent.
const TRANSIENT: &[&str] = &[
    "socket timed out",
    "unable to contact slurm controller",
    "slurmctld not responding",
    "resource temporarily unavailable",
    "zero bytes were transmitted",
    "eagain",
    "temporarily unable to accept job",
    "communication connection failure",
    "connection refused",
    "connection reset by peer",
    "transport endpoint is not connected",
];

/// The absolute paths of the SLURM commands.
#[derive(Clone, Debug)]
pub struct SlurmCommands {
    pub sbatch: PathBuf,
    pub squeue: PathBuf,
    pub sacct: PathBuf,
    pub scontrol: PathBuf,
    pub scancel: PathBuf,
    /// Starts a worker inside a running job; without it, a worker that
    /// died in a job of several is replaced by a new job.
    pub srun: Option<PathBuf>,
}

impl SlurmCommands {
    /// Finds every command on `path` (the value of PATH); the error names
    /// all that are missing and the PATH searched.
    pub fn find(path: Option<OsString>) -> Result<Self, LaunchError> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let find = |name: &str| which::which_in(name, path.as_ref(), &cwd).ok();
        let found: Vec<Option<PathBuf>> = COMMANDS.iter().map(|name| find(name)).collect();
        let missing: Vec<String> = COMMANDS
            .iter()
            .zip(&found)
            .filter(|(_, found)| found.is_none())
            .map(|(name, _)| name.to_string())
            .collect();
        if !missing.is_empty() {
            let path = path.map(|p| p.to_string_lossy().into_owned());
            return Err(LaunchError::ExecutablesMissing { missing, path });
        }
        let mut found = found.into_iter().flatten();
        let mut next = || found.next().expect("every command was found");
        Ok(Self {
            sbatch: next(),
            squeue: next(),
            sacct: next(),
            scontrol: next(),
            scancel: next(),
            srun: find("srun"),
        })
    }
}

/// One command to run: program, arguments, extra environment (added to
/// the inherited one) and working directory.
#[derive(Clone, Debug)]
pub struct Invocation<'a> {
    pub program: &'a Path,
    pub args: Vec<OsString>,
    pub env: &'a [(String, String)],
    pub cwd: Option<&'a Path>,
}

impl<'a> Invocation<'a> {
    pub fn new<S: AsRef<OsStr>>(program: &'a Path, args: impl IntoIterator<Item = S>) -> Self {
        Self {
            program,
            args: args.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            env: &[],
            cwd: None,
        }
    }
}

/// Why a command gave no usable answer.
#[derive(Debug)]
pub enum Failure {
    /// It could not be started at all.
    Spawn(io::Error),
    /// It ran past the timeout and was killed.
    TimedOut(Duration),
    /// It exited unsuccessfully; `stderr` holds SLURM's message.
    Exited { code: Option<i32>, stderr: String },
}

impl Failure {
    /// Worth retrying: timeouts and the messages in [`TRANSIENT`].
    pub fn is_transient(&self) -> bool {
        match self {
            Failure::Spawn(_) => false,
            Failure::TimedOut(_) => true,
            Failure::Exited { stderr, .. } => is_transient(stderr),
        }
    }

    /// SLURM's message, or what happened instead.
    pub fn message(&self) -> String {
        match self {
            Failure::Spawn(error) => format!("cannot run: {error}"),
            Failure::TimedOut(after) => format!("no answer within {after:?}; killed"),
            Failure::Exited { code, stderr } if stderr.trim().is_empty() => {
                format!("exit status {code:?} and nothing on stderr")
            }
            Failure::Exited { stderr, .. } => stderr.trim().to_owned(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl Failure {
    /// For [`retrying`](crate::retry::retrying): transient with SLURM's message, or the
    /// failure itself when retrying cannot help.
    pub fn classified(self) -> CallError<Failure> {
        match self.is_transient() {
            true => CallError::Transient(self.message()),
            false => CallError::Permanent(self),
        }
    }
}

/// Whether SLURM's `stderr` reports a transient failure.
pub fn is_transient(stderr: &str) -> bool {
    let stderr = stderr.to_ascii_lowercase();
    TRANSIENT.iter().any(|pattern| stderr.contains(pattern))
}

/// Runs `invocation` and returns its stdout, after `timeout` at the latest.
pub fn run(invocation: &Invocation, timeout: Duration) -> Result<String, Failure> {
    run_keeping_stderr(invocation, timeout).map(|(stdout, _)| stdout)
}

/// [`run`], with stderr also on success (where `sbatch --test-only`
/// answers).
pub fn run_keeping_stderr(
    invocation: &Invocation,
    timeout: Duration,
) -> Result<(String, String), Failure> {
    let mut child = spawn(invocation).map_err(Failure::Spawn)?;
    let stdout = read_in_background(child.stdout.take());
    let stderr = read_in_background(child.stderr.take());
    let status = wait_or_kill(&mut child, timeout);
    let (stdout, stderr) = (joined(stdout), joined(stderr));
    match status {
        None => Err(Failure::TimedOut(timeout)),
        Some(status) if status.success() => Ok((stdout, stderr)),
        Some(status) => Err(Failure::Exited {
            code: status.code(),
            stderr,
        }),
    }
}

fn spawn(invocation: &Invocation) -> io::Result<Child> {
    let mut command = Command::new(invocation.program);
    command
        .args(&invocation.args)
        .envs(invocation.env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = invocation.cwd {
        command.current_dir(cwd);
    }
    command.spawn()
}

/// Drains a pipe on a thread, so a chatty command never blocks on a full
/// pipe while we wait for it.
fn read_in_background(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut text);
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

fn joined(reader: JoinHandle<String>) -> String {
    reader.join().unwrap_or_default()
}

/// The exit status, or `None` after killing a child that outlived
/// `timeout`. Checks often at first (most SLURM calls take milliseconds),
/// then every 50 ms.
fn wait_or_kill(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => {}
            Ok(None) | Err(_) => break,
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages recorded from SLURM 22.05 with slurmctld down or refusing.
    #[test]
    fn controller_trouble_is_transient() {
        for stderr in [
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
            "slurm_load_jobs error: Socket timed out on send/recv operation",
            "sbatch: error: Batch job submission failed: Resource temporarily unavailable",
            "sbatch: error: Batch job submission failed: Zero Bytes were transmitted or received",
            "sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying",
            "scancel: error: Kill job error on job id 3_1: Unable to contact slurm controller (connect failure)",
        ] {
            assert!(is_transient(stderr), "{stderr}");
        }
    }

    /// Messages recorded from SLURM 22.05 for jobs it will never accept.
    #[test]
    fn refusals_are_permanent() {
        for stderr in [
            "sbatch: error: invalid partition specified: nope\n\
             sbatch: error: Batch job submission failed: Invalid partition name specified",
            "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
            "sbatch: error: Batch job submission failed: Invalid qos specification",
            "sbatch: error: Memory specification can not be satisfied\n\
             sbatch: error: Batch job submission failed: Requested node configuration is not available",
            "sbatch: error: Invalid generic resource (gres) specification",
            "sbatch: error: Invalid --time specification",
            "",
        ] {
            assert!(!is_transient(stderr), "{stderr}");
        }
    }

    #[test]
    fn a_timeout_is_transient_and_a_missing_program_is_not() {
        assert!(Failure::TimedOut(Duration::from_secs(1)).is_transient());
        let spawn = Failure::Spawn(io::Error::from(io::ErrorKind::NotFound));
        assert!(!spawn.is_transient());
    }

    #[test]
    fn run_returns_stdout_and_stderr_on_failure() {
        let sh = Path::new("/bin/sh");
        let ok = Invocation::new(sh, ["-c", "echo 42"]);
        assert_eq!(run(&ok, Duration::from_secs(5)).unwrap(), "42\n");
        let bad = Invocation::new(sh, ["-c", "echo oops >&2; exit 3"]);
        match run(&bad, Duration::from_secs(5)).unwrap_err() {
            Failure::Exited { code, stderr } => {
                assert_eq!((code, stderr.as_str()), (Some(3), "oops\n"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn run_kills_a_command_past_its_timeout() {
        // Killed, not waited for: far sooner than the sleep would end.
        let slow = Invocation::new(Path::new("/bin/sleep"), ["600"]);
        let started = Instant::now();
        let failure = run(&slow, Duration::from_millis(100)).unwrap_err();
        assert!(matches!(failure, Failure::TimedOut(_)), "{failure:?}");
        assert!(started.elapsed() < Duration::from_secs(300));
    }

    #[test]
    fn retries_stop_at_a_permanent_failure() {
        let sh = Path::new("/bin/sh");
        let refused = Invocation::new(
            sh,
            ["-c", "echo 'Invalid partition name specified' >&2; exit 1"],
        );
        let mut count = 0;
        let delays = [Duration::ZERO; 3];
        let timeout = Duration::from_secs(5);
        let run_retrying = |invocation: &Invocation, count: &mut u64| {
            let run = || run(invocation, timeout).map_err(Failure::classified);
            crate::retry::retrying(&delays, count, "test", run)
        };
        let _ = run_retrying(&refused, &mut count);
        assert_eq!(count, 1);
        let busy = Invocation::new(sh, ["-c", "echo 'Socket timed out' >&2; exit 1"]);
        let _ = run_retrying(&busy, &mut count);
        assert_eq!(count, 1 + 4, "one try and three retries");
    }

    #[test]
    fn missing_commands_are_all_named_with_the_path_searched() {
        let empty = tempfile::tempdir().unwrap();
        let error = SlurmCommands::find(Some(empty.path().into())).unwrap_err();
        let message = error.to_string();
        for name in COMMANDS {
            assert!(message.contains(name), "{message}");
        }
        assert!(
            message.contains(&*empty.path().to_string_lossy()),
            "{message}"
        );
    }
}
