//! Running LSF's commands: finding bsub, bjobs and bkill, running one with
//! a bounded wait, and telling what failed for passing reasons (the
//! retrying is `retry.rs`'s).
//!
//! The wait is bounded because LSF's commands never give up by themselves
//! while mbatchd is unreachable ("... still trying"), and the launcher
//! thread must come back to the driver: a command that overstays is
//! killed and its failure counts as transient.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::replies;
use crate::LaunchError;

/// The LSF commands the launcher uses, in the order they are looked for.
pub const COMMANDS: [&str; 3] = ["bsub", "bjobs", "bkill"];

/// How often a running command is checked for having exited.
const EXIT_POLL: Duration = Duration::from_millis(5);

/// The absolute paths of the LSF commands.
#[derive(Clone, Debug)]
pub(crate) struct LsfCommands {
    pub bsub: PathBuf,
    pub bjobs: PathBuf,
    pub bkill: PathBuf,
    /// Asked for `MAX_JOB_ARRAY_SIZE` when it is there; without it, bsub
    /// refuses too large an array and the array is halved.
    pub bparams: Option<PathBuf>,
}

impl LsfCommands {
    /// Finds every command on `path` (a PATH value, so a test or a site's
    /// wrapper directory can be put first without touching the process
    /// environment); the error names all that are missing and the path.
    pub(crate) fn find(path: Option<OsString>) -> Result<Self, LaunchError> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let find = |name: &str| which::which_in(name, path.as_ref(), &cwd).ok();
        let [bsub, bjobs, bkill] = COMMANDS.map(find);
        match (bsub, bjobs, bkill) {
            (Some(bsub), Some(bjobs), Some(bkill)) => Ok(Self {
                bsub,
                bjobs,
                bkill,
                bparams: find("bparams"),
            }),
            found => {
                let found = [found.0.is_some(), found.1.is_some(), found.2.is_some()];
                let missing = COMMANDS.iter().zip(found).filter(|(_, found)| !found);
                Err(LaunchError::ExecutablesMissing {
                    missing: missing.map(|(name, _)| name.to_string()).collect(),
                    path: path.map(|p| p.to_string_lossy().into_owned()),
                })
            }
        }
    }
}

/// One command to run: arguments, the file it reads as stdin (`bsub <
/// script`), extra environment (added to the inherited one), directory.
/// Not `Debug`: the environment holds the run token, and nothing may log it.
#[derive(Default)]
pub(crate) struct Invocation<'a> {
    pub args: Vec<String>,
    pub stdin: Option<&'a Path>,
    pub env: &'a [(String, String)],
    pub working_dir: Option<&'a Path>,
}

/// What a command did.
#[derive(Debug)]
pub(crate) struct Output {
    /// `None` when it was killed for overstaying.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub(crate) fn succeeded(&self) -> bool {
        self.status.is_some_and(|status| status.success())
    }

    /// Worth trying again: it overstayed, or LSF says it is unreachable.
    pub(crate) fn is_transient(&self) -> bool {
        self.status.is_none() || replies::is_transient(&self.stderr)
    }

    /// LSF's message (stderr, else stdout), or what happened instead.
    pub(crate) fn message(&self) -> String {
        let text = match self.stderr.trim() {
            "" => self.stdout.trim(),
            stderr => stderr,
        };
        match (self.status, text) {
            (None, _) => format!("no answer within the time limit, killed ({text})"),
            (Some(status), "") => format!("failed without a message ({status})"),
            (Some(_), text) => text.to_owned(),
        }
    }
}

/// Runs `program` and collects its output, killing it after `timeout`.
/// Only failing to start it at all is an error.
pub(crate) fn run(program: &Path, call: &Invocation, timeout: Duration) -> io::Result<Output> {
    let stdin = match call.stdin {
        Some(path) => Stdio::from(File::open(path)?),
        None => Stdio::null(),
    };
    let mut command = Command::new(program);
    command
        .args(&call.args)
        .envs(call.env.iter().map(|(name, value)| (name, value)))
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = call.working_dir {
        command.current_dir(dir);
    }
    let mut child = command.spawn()?;
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let status = wait_at_most(&mut child, timeout)?;
    Ok(Output {
        status,
        stdout: joined(stdout),
        stderr: joined(stderr),
    })
}

/// Reads a pipe to its end on a thread, so a chatty command never blocks
/// on a full pipe while we wait for it.
fn drain(pipe: Option<impl Read + Send + 'static>) -> Option<JoinHandle<String>> {
    let mut pipe = pipe?;
    Some(std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    }))
}

fn joined(reader: Option<JoinHandle<String>>) -> String {
    reader.and_then(|r| r.join().ok()).unwrap_or_default()
}

/// The exit status, or `None` after killing a child that outlived
/// `timeout` (its pipes then close, so the readers finish).
fn wait_at_most(child: &mut Child, timeout: Duration) -> io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(EXIT_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_reads_its_stdin_file_and_gets_environment_and_directory() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, "from-stdin\n").unwrap();
        let env = [("DAISY_TEST_VALUE".to_owned(), "from-env".to_owned())];
        let call = Invocation {
            args: vec!["-c".into(), "cat; echo \"$DAISY_TEST_VALUE\"; pwd".into()],
            stdin: Some(&script),
            env: &env,
            working_dir: Some(dir.path()),
        };
        let output = run(Path::new("/bin/sh"), &call, Duration::from_secs(10)).unwrap();
        assert!(output.succeeded(), "{output:?}");
        let expected = format!("from-stdin\nfrom-env\n{}\n", dir.path().display());
        assert_eq!(output.stdout, expected);
    }

    #[test]
    fn a_command_that_overstays_is_killed_and_transient() {
        let call = Invocation {
            args: vec!["-c".into(), "echo still trying >&2; exec sleep 30".into()],
            ..Invocation::default()
        };
        let started = Instant::now();
        let output = run(Path::new("/bin/sh"), &call, Duration::from_millis(300)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(output.status.is_none() && output.is_transient());
        assert!(
            output.message().contains("still trying"),
            "{}",
            output.message()
        );
    }

    #[test]
    fn missing_commands_are_all_named_with_the_path_searched() {
        let dir = tempfile::tempdir().unwrap();
        let bjobs = dir.path().join("bjobs");
        std::fs::write(&bjobs, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bjobs, std::fs::Permissions::from_mode(0o755)).unwrap();
        let error = LsfCommands::find(Some(dir.path().into())).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("bsub, bkill"), "{message}");
        assert!(
            message.contains(&*dir.path().to_string_lossy()),
            "{message}"
        );
    }
}
