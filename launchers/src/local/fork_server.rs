//! Python workers forked from a process that has already imported what
//! they need (a *fork server*, as multiprocessing's forkserver and
//! Android's zygote), instead of started as fresh interpreters that
//! import it all again: `import volara.blockwise` alone takes seconds.
//!
//! The server is `daisy_rs._fork_server`, a Python process that either
//! `run_blockwise` forked from the user's program before its driver
//! started (so it holds every module the program imported), or a fresh
//! interpreter that imported the tasks' functions. It talks to this
//! launcher over a Unix socket, one JSON object a line:
//!
//! - it opens with `hello`: its interpreter and the tasks it may serve
//!   (a task may opt out);
//! - `start` asks it to fork a worker: the child leads a process group of
//!   its own, runs in the request's directory with its environment and
//!   log files, and calls `daisy_rs.worker.main(args)`; the answer is
//!   `started` (the pid) or `refused` (why);
//! - `ended` reports a worker's exit status or signal once the server
//!   reaped it, after it killed what was left of the worker's group,
//!   as [`super::LocalLauncher`] does for the workers it spawns.
//!
//! The server ends when this socket closes (the launcher dropped, or the
//! driver's process died), so it never outlives the run. A server this
//! launcher started ([`ForkServer::spawn`], for `daisy-driver run`) is
//! also reaped by it; one a program forked is that program's to reap.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::{JobEnd, WorkerRequest};

/// How long the server may take to answer: its hello, or a fork. A
/// server that does not answer in this time is given up (its workers
/// then start as fresh interpreters).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a server this launcher started gets to end once its socket
/// closed.
const END_WAIT: Duration = Duration::from_secs(5);

/// The module a Python worker runs (`python -m daisy_rs.worker`).
const WORKER_MODULE: [&str; 2] = ["-m", "daisy_rs.worker"];

/// What the server says.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FromServer {
    Hello {
        /// The interpreter the server is (`sys.executable`).
        python: PathBuf,
        /// The tasks it serves; `None`: every task.
        tasks: Option<BTreeSet<String>>,
    },
    Started {
        worker_id: u64,
        pid: u32,
    },
    Refused {
        worker_id: u64,
        error: String,
    },
    Ended {
        pid: u32,
        #[serde(default)]
        code: Option<i32>,
        #[serde(default)]
        signal: Option<String>,
    },
}

/// What the launcher asks of the server.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum ToServer<'a> {
    Start {
        worker_id: u64,
        /// The worker's arguments after `-m daisy_rs.worker`.
        args: &'a [String],
        env: &'a [(String, String)],
        cwd: &'a Path,
        stdout: &'a Path,
        stderr: &'a Path,
    },
}

/// The launcher's end of a fork server's socket.
pub struct ForkServer {
    stream: UnixStream,
    /// The server's process, when this launcher started it (rather than
    /// the program that passed its socket): reaped when the server ends.
    process: Option<Child>,
    /// Bytes read that do not yet end a line.
    unread: Vec<u8>,
    python: PathBuf,
    tasks: Option<BTreeSet<String>>,
    /// Ends the server reported, by pid, until the launcher takes them.
    ended: HashMap<u32, JobEnd>,
    /// Why the server can no longer be used (it closed its end, or broke
    /// the protocol); its workers' ends are then unknown.
    gone: Option<String>,
}

impl ForkServer {
    /// The server whose socket is the file descriptor `fd` of this process
    /// (which keeps its own: this is a duplicate), once it said hello.
    pub fn connect(fd: RawFd) -> io::Result<Self> {
        // SAFETY: the caller names an open descriptor of this process; it
        // is only borrowed long enough to be duplicated.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let stream = UnixStream::from(borrowed.try_clone_to_owned()?);
        Self::greeted(stream, None)
    }

    /// Starts `python -m daisy_rs._fork_server`, which first imports what
    /// `preload` names (a JSON list of the tasks' function codes) and
    /// serves the workers of `tasks` that run `python`, once it said hello.
    pub fn spawn(python: &Path, tasks: &[String], preload: &str) -> io::Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        let process = Command::new(python)
            .args(["-m", "daisy_rs._fork_server", "--preload", preload])
            .args(tasks.iter().flat_map(|task| ["--task", task]))
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let mut server = Self::greeted(ours, Some(process))?;
        // Requests name the program as the pipeline does ("python3"), the
        // server its resolved path.
        server.python = python.to_path_buf();
        Ok(server)
    }

    fn greeted(stream: UnixStream, process: Option<Child>) -> io::Result<Self> {
        stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        let mut server = Self {
            stream,
            process,
            unread: Vec::new(),
            python: PathBuf::new(),
            tasks: None,
            ended: HashMap::new(),
            gone: None,
        };
        match server.read_message()? {
            FromServer::Hello { python, tasks } => {
                server.python = python;
                server.tasks = tasks;
                Ok(server)
            }
            other => Err(protocol_error(format!("expected hello, got {other:?}"))),
        }
    }

    /// Whether this server can start the worker `request` asks for: a
    /// `python -m daisy_rs.worker` of the server's own interpreter, for a
    /// task that did not opt out, while the server is there.
    pub fn serves(&self, request: &WorkerRequest) -> bool {
        self.gone.is_none()
            && request.program == self.python
            && request.args.starts_with(&WORKER_MODULE.map(String::from))
            && self
                .tasks
                .as_ref()
                .is_none_or(|tasks| tasks.contains(&request.task_id))
    }

    /// Forks the worker `request` asks for, its output appended to
    /// `stdout` and `stderr`; its pid.
    pub fn start(&mut self, request: &WorkerRequest, logs: [&Path; 2]) -> io::Result<u32> {
        let ask = ToServer::Start {
            worker_id: request.worker_id,
            args: &request.args[WORKER_MODULE.len()..],
            env: &request.env,
            cwd: &request.working_dir,
            stdout: logs[0],
            stderr: logs[1],
        };
        let answer = self
            .send(&ask)
            .and_then(|()| self.answer_to(request.worker_id));
        answer.inspect_err(|error| self.give_up(error))
    }

    /// Reads what the server reported meanwhile, without waiting.
    pub fn poll(&mut self) {
        if self.gone.is_some() {
            return;
        }
        let read = self.read_available();
        if let Err(error) = read {
            self.give_up(&error);
        }
    }

    /// How the worker `pid` ended, once the server reported it; `None`
    /// while it runs, or while the server is gone and the process is still
    /// there. A worker whose server went away before its end was reported
    /// ends as failed, its status unknown.
    pub fn end_of(&mut self, pid: u32) -> Option<JobEnd> {
        self.poll();
        if let Some(end) = self.ended.remove(&pid) {
            return Some(end);
        }
        let gone = self.gone.as_ref()?;
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok();
        (!alive).then(|| JobEnd::Failed {
            reason: format!("its exit status is unknown: the fork server {gone}"),
        })
    }

    /// Waits up to `timeout` for the server to say something (a worker's
    /// end, say), without reading it: [`Self::poll`] does. A server that
    /// is gone has nothing to say: the whole `timeout` passes.
    pub fn wait_for_news(&self, timeout: Duration) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let started = Instant::now();
        if self.gone.is_none() {
            let wait = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
            let ready = poll(&mut fds, wait).is_ok_and(|ready| ready > 0);
            let news = (fds[0].revents()).is_some_and(|events| events.contains(PollFlags::POLLIN));
            if ready && news {
                return;
            }
        }
        std::thread::sleep(timeout.saturating_sub(started.elapsed()));
    }

    fn send(&mut self, message: &ToServer<'_>) -> io::Result<()> {
        let mut line = serde_json::to_vec(message).map_err(io::Error::other)?;
        line.push(b'\n');
        self.stream.write_all(&line)
    }

    /// Reads until the server answers about `worker_id`, keeping the ends
    /// it reports meanwhile.
    fn answer_to(&mut self, worker_id: u64) -> io::Result<u32> {
        loop {
            match self.read_message()? {
                FromServer::Started { worker_id: w, pid } if w == worker_id => return Ok(pid),
                FromServer::Refused {
                    worker_id: w,
                    error,
                } if w == worker_id => return Err(io::Error::other(error)),
                FromServer::Ended { pid, code, signal } => self.record_end(pid, code, signal),
                other => return Err(protocol_error(format!("unexpected {other:?}"))),
            }
        }
    }

    /// The next message, waiting up to [`ANSWER_TIMEOUT`] for it.
    fn read_message(&mut self) -> io::Result<FromServer> {
        loop {
            if let Some(line) = self.take_line() {
                return parse(&line);
            }
            let mut buffer = [0u8; 4096];
            match self.stream.read(&mut buffer)? {
                0 => return Err(io::Error::new(ErrorKind::UnexpectedEof, "it closed")),
                n => self.unread.extend_from_slice(&buffer[..n]),
            }
        }
    }

    /// Takes in every message the server has sent so far.
    fn read_available(&mut self) -> io::Result<()> {
        self.stream.set_nonblocking(true)?;
        let mut buffer = [0u8; 4096];
        let read = loop {
            match self.stream.read(&mut buffer) {
                Ok(0) => break Err(io::Error::new(ErrorKind::UnexpectedEof, "ended")),
                Ok(n) => self.unread.extend_from_slice(&buffer[..n]),
                Err(error) if error.kind() == ErrorKind::WouldBlock => break Ok(()),
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(error) => break Err(error),
            }
        };
        self.stream.set_nonblocking(false)?;
        while let Some(line) = self.take_line() {
            match parse(&line)? {
                FromServer::Ended { pid, code, signal } => self.record_end(pid, code, signal),
                other => return Err(protocol_error(format!("unexpected {other:?}"))),
            }
        }
        read
    }

    fn take_line(&mut self) -> Option<Vec<u8>> {
        let end = self.unread.iter().position(|&byte| byte == b'\n')?;
        let line = self.unread.drain(..=end).collect();
        Some(line)
    }

    fn record_end(&mut self, pid: u32, code: Option<i32>, signal: Option<String>) {
        let end = match (code, signal) {
            (Some(code), _) => JobEnd::Exited { code },
            (None, Some(signal)) => JobEnd::Signalled { signal },
            (None, None) => JobEnd::Failed {
                reason: "the fork server reported neither a code nor a signal".into(),
            },
        };
        self.ended.insert(pid, end);
    }

    /// Stops using the server; the workers it started are still waited
    /// for, by their pids.
    fn give_up(&mut self, error: &io::Error) {
        if self.gone.is_none() {
            tracing::warn!(
                "the fork server is gone ({error}): workers start as fresh interpreters"
            );
            self.gone = Some(format!("is gone ({error})"));
        }
    }
}

/// A server this launcher started ends when its socket closes; it is
/// waited for (killed if it lingers), so no process is left behind.
impl Drop for ForkServer {
    fn drop(&mut self) {
        let Some(mut process) = self.process.take() else {
            return;
        };
        let _ = self.stream.shutdown(Shutdown::Both);
        let deadline = Instant::now() + END_WAIT;
        while matches!(process.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = process.kill();
                let _ = process.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn parse(line: &[u8]) -> io::Result<FromServer> {
    serde_json::from_slice(line).map_err(|error| {
        let shown = String::from_utf8_lossy(line);
        protocol_error(format!("unreadable message {shown:?}: {error}"))
    })
}

fn protocol_error(message: String) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, message)
}
