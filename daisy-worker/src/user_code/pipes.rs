//! A worker command's stdin and stdout as non-blocking pipes: lines are
//! queued for stdin and written as far as the pipe takes them, stdout is
//! read into a buffer and split into lines.
//!
//! Waiting for either pipe is the one thing that differs between the two
//! callers: a synchronous one (the serial `daisy-driver run`, a blocking
//! thread) blocks in `poll(2)`; the worker runtime waits on its tokio
//! reactor, so relaying a block costs no thread hop. Both wait for stdout
//! and for room in stdin at once, so blocks written ahead can never
//! deadlock against a process that writes more than it reads.

use daisy_core::protocol::WireBlock;
use std::fs::File;
use std::future::Future;
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::pin::pin;
use std::process::{ChildStdin, ChildStdout};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

/// Bytes read from stdout at a time.
const CHUNK: usize = 64 * 1024;

/// How to wait for a pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Block the thread in `poll(2)`.
    Blocking,
    /// Yield to the tokio runtime this is called on.
    Async,
}

/// Runs `future` in [`Wait::Blocking`] mode, where every wait blocks the
/// thread instead of returning `Pending`, so one poll completes it.
pub fn run_blocking<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
}

/// What reading stdout gave.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Filled {
    /// Bytes arrived (maybe a line).
    Data,
    /// Stdout is closed.
    Eof,
    /// Nothing before the deadline.
    TimedOut,
}

/// The two pipes, non-blocking.
#[derive(Debug)]
pub(super) struct Pipes {
    /// Registered with the reactor on the first async wait; declared
    /// first so it is dropped (deregistered) before the pipes close.
    reactor: Option<Registered>,
    /// `None` once closed: no more work.
    stdin: Option<File>,
    stdout: File,
    out: Outgoing,
    read: Incoming,
}

/// The pipes' registrations with the tokio reactor (by fd: the files
/// stay in [`Pipes`]).
#[derive(Debug)]
struct Registered {
    stdin: Option<AsyncFd<RawFd>>,
    stdout: AsyncFd<RawFd>,
}

/// Bytes queued for stdin, written up to `written`.
#[derive(Debug, Default)]
struct Outgoing {
    bytes: Vec<u8>,
    written: usize,
}

impl Outgoing {
    fn pending(&self) -> bool {
        self.written < self.bytes.len()
    }

    /// Writes until done or the pipe is full.
    fn flush(&mut self, stdin: Option<&File>) -> io::Result<()> {
        let stdin = stdin.ok_or(ErrorKind::BrokenPipe)?;
        while self.pending() {
            match (&*stdin).write(&self.bytes[self.written..]) {
                Ok(n) => self.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.bytes.clear();
        self.written = 0;
        Ok(())
    }

    /// Like `flush` while waiting for an answer: a process that stopped
    /// reading is found out by its stdout closing, so a broken stdin only
    /// drops the bytes.
    fn flush_or_drop(&mut self, stdin: Option<&File>) -> io::Result<()> {
        match self.flush(stdin) {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                *self = Self::default();
                Ok(())
            }
            other => other,
        }
    }
}

impl Pipes {
    pub(super) fn new(stdin: ChildStdin, stdout: ChildStdout) -> io::Result<Self> {
        Ok(Self {
            reactor: None,
            stdin: Some(non_blocking(stdin.into())?),
            stdout: non_blocking(stdout.into())?,
            out: Outgoing::default(),
            read: Incoming::default(),
        })
    }

    /// Queues `block` as one JSON line, for [`Self::flush`].
    pub(super) fn queue_line(&mut self, block: &WireBlock) {
        block.write_json_line(&mut self.out.bytes);
    }

    /// Writes what is queued, as far as the pipe takes it (the rest while
    /// waiting in [`Self::fill`]).
    pub(super) fn flush(&mut self) -> io::Result<()> {
        self.out.flush(self.stdin.as_ref())
    }

    /// Closes stdin, dropping what was not written: the process gets no
    /// more work.
    pub(super) fn close_stdin(&mut self) {
        if let Some(reactor) = &mut self.reactor {
            reactor.stdin = None;
        }
        self.stdin = None;
        self.out = Outgoing::default();
    }

    /// The next complete line read, without its line end, lossily decoded.
    pub(super) fn take_line(&mut self) -> Option<String> {
        let end = self.read.bytes().iter().position(|&b| b == b'\n')?;
        Some(self.read.take(end + 1))
    }

    /// What is left after stdout closed: a last line without line end.
    pub(super) fn take_rest(&mut self) -> Option<String> {
        (self.read.filled > 0).then(|| self.read.take(self.read.filled))
    }

    /// Reads more of stdout, waiting until `deadline` at most, and writes
    /// queued stdin bytes as the pipe takes them meanwhile.
    pub(super) async fn fill(
        &mut self,
        wait: Wait,
        deadline: Option<Instant>,
    ) -> io::Result<Filled> {
        match wait {
            Wait::Blocking => self.fill_blocking(deadline),
            Wait::Async => self.fill_async(deadline).await,
        }
    }

    fn fill_blocking(&mut self, deadline: Option<Instant>) -> io::Result<Filled> {
        loop {
            if let Some((filled, _)) = self.read.read_once(&self.stdout)? {
                return Ok(filled);
            }
            if !self.poll(deadline)? {
                return Ok(Filled::TimedOut);
            }
            self.out.flush_or_drop(self.stdin.as_ref())?;
        }
    }

    /// Blocks until stdout is readable or stdin writable (if anything is
    /// queued for it); false at the deadline.
    fn poll(&self, deadline: Option<Instant>) -> io::Result<bool> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(at) => match at.saturating_duration_since(Instant::now()) {
                left if left.is_zero() => return Ok(false),
                // Rounded up: never woken before the deadline.
                left => PollTimeout::try_from(left + Duration::from_micros(999))
                    .unwrap_or(PollTimeout::MAX),
            },
        };
        let mut fds = vec![PollFd::new(self.stdout.as_fd(), PollFlags::POLLIN)];
        if let (true, Some(stdin)) = (self.out.pending(), &self.stdin) {
            fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLOUT));
        }
        match poll(&mut fds, timeout) {
            Ok(n) => Ok(n > 0 || deadline.is_none()),
            Err(nix::errno::Errno::EINTR) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    async fn fill_async(&mut self, deadline: Option<Instant>) -> io::Result<Filled> {
        self.register()?;
        let Self {
            reactor: Some(reactor),
            stdin,
            stdout,
            out,
            read,
        } = self
        else {
            return Err(io::Error::other("the pipes are not registered"));
        };
        let mut sleep = std::pin::pin!(sleep_until(deadline));
        loop {
            let writing = stdin.is_some() && out.pending();
            tokio::select! {
                ready = reactor.stdout.readable() => {
                    let mut ready = ready?;
                    let filled = read.read_once(stdout);
                    // Unless the read filled its buffer, the pipe is
                    // empty now: wait for the next edge.
                    if !matches!(filled, Ok(Some((Filled::Data, true)))) {
                        ready.clear_ready();
                    }
                    if let Some((filled, _)) = filled? {
                        return Ok(filled);
                    }
                }
                ready = writable(reactor.stdin.as_ref()), if writing => {
                    ready?.clear_ready();
                    out.flush_or_drop(stdin.as_ref())?;
                }
                () = &mut sleep => return Ok(Filled::TimedOut),
            }
        }
    }

    fn register(&mut self) -> io::Result<()> {
        if self.reactor.is_none() {
            let stdin = self.stdin.as_ref().map(register).transpose()?;
            let stdout = register(&self.stdout)?;
            self.reactor = Some(Registered { stdin, stdout });
        }
        Ok(())
    }
}

/// `bytes` without its line end, lossily decoded. A valid line (the
/// usual) is checked in one pass: the lossy decoder's chunked scan cost
/// more per answer than the rest of reading it.
fn line_text(bytes: &[u8]) -> String {
    let end = bytes
        .iter()
        .rposition(|&b| b != b'\n' && b != b'\r')
        .map_or(0, |last| last + 1);
    let bytes = &bytes[..end];
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// Bytes read from stdout and not yet taken as lines: `buf[..filled]`.
/// The buffer keeps its length (zeroed once), so a read costs no memset.
#[derive(Debug, Default)]
struct Incoming {
    buf: Vec<u8>,
    filled: usize,
}

impl Incoming {
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.filled]
    }

    fn take(&mut self, len: usize) -> String {
        let line = line_text(&self.buf[..len]);
        self.buf.copy_within(len..self.filled, 0);
        self.filled -= len;
        line
    }

    /// One non-blocking read: what it gave and whether it filled all the
    /// room it had; `None` if the pipe was empty.
    fn read_once(&mut self, stdout: &File) -> io::Result<Option<(Filled, bool)>> {
        if self.buf.len() - self.filled < CHUNK / 2 {
            self.buf.resize(self.filled + CHUNK, 0);
        }
        let room = &mut self.buf[self.filled..];
        let room_len = room.len();
        let got = loop {
            match (&*stdout).read(room) {
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                got => break got,
            }
        };
        match got {
            Ok(0) => Ok(Some((Filled::Eof, false))),
            Ok(n) => {
                self.filled += n;
                Ok(Some((Filled::Data, n == room_len)))
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Resolves when stdin has room; never, once it is closed.
async fn writable(
    stdin: Option<&AsyncFd<RawFd>>,
) -> io::Result<tokio::io::unix::AsyncFdReadyGuard<'_, RawFd>> {
    match stdin {
        Some(stdin) => stdin.writable().await,
        None => std::future::pending().await,
    }
}

/// Registers a pipe of [`Pipes`] with the reactor of this thread's runtime.
fn register(pipe: &File) -> io::Result<AsyncFd<RawFd>> {
    // SAFETY: the fd stays open as long as the registration: the file is
    // in the same `Pipes`, dropped after it (field order), and
    // `close_stdin` drops stdin's registration before the file.
    unsafe { AsyncFd::register(pipe.as_raw_fd()) }.map_err(|e| e.into_parts().1)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

fn non_blocking(fd: OwnedFd) -> io::Result<File> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_retain(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)?);
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::line_text;

    #[test]
    fn a_line_reads_as_the_lossy_decoder_reads_it_without_its_line_ends() {
        let lines: [&[u8]; 8] = [
            b"{\"block_id\": 1, \"ok\": true}\n",
            b"plain\r\n",
            b"ends\n\r\n\n",
            b"\n",
            b"",
            b"caf\xc3\xa9 \xe2\x9c\x93\n",
            b"bad \xff byte\r\n",
            b"cut \xe2\x9c\r\n",
        ];
        for line in lines {
            let lossy = String::from_utf8_lossy(line);
            let expected = lossy.trim_end_matches(['\n', '\r']);
            assert_eq!(line_text(line), expected, "{line:?}");
        }
    }
}
