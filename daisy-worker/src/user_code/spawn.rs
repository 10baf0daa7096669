//! Starting a block's process without copying the worker: the child
//! shares the worker's memory until it executes the user's program
//! (`clone(CLONE_VM | CLONE_VFORK)`, what `posix_spawn` does inside
//! glibc), instead of `fork`, which copies the worker's page tables and
//! then makes the worker take a copy-on-write fault per page it writes
//! until the child has executed. `std::process::Command` forks as soon as
//! it has a `pre_exec` closure, and a user process needs one: it must be
//! told to die with the worker (PR_SET_PDEATHSIG, which `posix_spawn`
//! cannot set) and announce its group to the watcher before user code
//! runs. A fork of the worker cost a block about 0.25 ms of CPU more
//! than starting its process needs (docs/benchmarks.md, "Block commands
//! against xargs").
//!
//! Everything the child needs (paths to try, argv, environment) is built
//! here, in the parent, before the clone; the child only makes system
//! calls on it, then executes the program or records why it could not
//! and exits. The calling thread is suspended meanwhile (CLONE_VFORK), so
//! nothing it owns changes under the child; other threads of the worker
//! never touch it. Signals are blocked around the clone, and the child
//! resets every handler to its default before unblocking them, so no
//! handler of the worker's ever runs on the shared memory.
//!
//! The program is looked up as `execvp` does (and as `Command` did): a
//! name without a slash in each directory of the command's `PATH` (the
//! user's `env`, else the worker's, else `/bin:/usr/bin`), skipping those
//! where it is missing, reporting "permission denied" if it was found
//! only where it cannot run, and running a file without a `#!` line (or
//! binary format) with `/bin/sh`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::ptr;

/// The child's stack: it makes system calls only, a few frames deep.
const CHILD_STACK_BYTES: usize = 64 * 1024;
/// Where `execvp` looks when `PATH` is unset.
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";
/// Runs a file the kernel cannot execute (no `#!` line), as `execvp` does.
const SHELL: &std::ffi::CStr = c"/bin/sh";

/// A process to start: its program, arguments and environment, and the
/// descriptors that become its stdin, stdout and stderr.
pub(super) struct Spec<'a> {
    pub program: &'a str,
    pub args: &'a [String],
    /// The environment the process gets, with `extra_env` after it.
    pub env: &'a Environment,
    /// Variables whose names `env` does not hold (see [`Environment::new`]).
    pub extra_env: &'a [(&'a str, &'a str)],
    pub stdio: [RawFd; 3],
    /// Run in the child after its group and descriptors are set, before
    /// its signals are unblocked and the program executed; an error stops
    /// the start. Must be async-signal-safe and must not allocate.
    pub before_exec: &'a dyn Fn() -> io::Result<()>,
}

thread_local! {
    /// The child's stack, kept for the next start from this thread (a
    /// fresh 64 KiB allocation per block made `malloc` consolidate).
    static STACK: Cell<Option<Box<[MaybeUninit<u8>]>>> = const { Cell::new(None) };
}

/// What the child reads and writes, all of it built by the parent.
struct Shared<'a> {
    /// Full paths to try, in order.
    candidates: Vec<CString>,
    /// `argv` (null-terminated), its strings in `_strings`.
    argv: Vec<*const libc::c_char>,
    /// `["sh", <candidate>, args.., null]` for a file without a `#!`.
    sh_argv: Vec<*const libc::c_char>,
    /// The environment's strings, then `_strings`' extra ones.
    envp: Vec<*const libc::c_char>,
    _strings: Vec<CString>,
    stdio: [RawFd; 3],
    before_exec: &'a dyn Fn() -> io::Result<()>,
    /// Set by the child when it could not execute the program: errno.
    error: i32,
}

/// Starts the process in a new process group of its own (its pid is the
/// group's id); returns its pid once it has executed the program.
pub(super) fn spawn(spec: &Spec) -> io::Result<libc::pid_t> {
    let mut shared = Shared::new(spec)?;
    let mut stack = STACK
        .take()
        .unwrap_or_else(|| Box::new_uninit_slice(CHILD_STACK_BYTES));
    // SAFETY: the stack grows down from its end, aligned to 16 bytes.
    let top = unsafe { stack.as_mut_ptr().add(stack.len()) };
    let top = (top as usize & !15) as *mut libc::c_void;
    let all = full_signal_set();
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: plain calls on live, initialised values. While the child
    // runs, this thread is suspended (CLONE_VFORK) and `shared` and
    // `stack` outlive it: the call returns only once it executed or
    // exited.
    let pid = unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut shared as *mut Shared).cast(),
        );
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        pid
    };
    STACK.set(Some(stack));
    // SAFETY: written by the child before it exited, read after.
    let error = unsafe { ptr::read_volatile(&shared.error) };
    if error != 0 {
        reap_failed(pid);
        return Err(io::Error::from_raw_os_error(error));
    }
    Ok(pid)
}

/// Reaps a child that exited without executing anything.
fn reap_failed(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waits for our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && errno() == libc::EINTR {}
}

impl<'a> Shared<'a> {
    fn new(spec: &Spec<'a>) -> io::Result<Self> {
        let mut strings = vec![cstring(spec.program.as_bytes())?];
        for arg in spec.args {
            strings.push(cstring(arg.as_bytes())?);
        }
        let argc = strings.len();
        strings.push(cstring(b"sh")?);
        for (key, value) in spec.extra_env {
            strings.push(cstring(&pair(key.as_bytes(), value.as_bytes()))?);
        }
        let pointers: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        let argv = with_null(pointers[..argc].to_vec());
        let mut envp: Vec<_> = spec.env.pairs.iter().map(|s| s.as_ptr()).collect();
        envp.extend_from_slice(&pointers[argc + 1..]);
        // The candidate's slot (1) is filled in by the child.
        let mut sh_argv = vec![pointers[argc], ptr::null()];
        sh_argv.extend_from_slice(&pointers[1..argc]);
        let candidates = candidates(spec.program, spec.env.path.as_deref())?;
        Ok(Self {
            candidates,
            argv,
            sh_argv: with_null(sh_argv),
            envp: with_null(envp),
            _strings: strings,
            stdio: spec.stdio,
            before_exec: spec.before_exec,
            error: 0,
        })
    }
}

fn with_null(mut list: Vec<*const libc::c_char>) -> Vec<*const libc::c_char> {
    list.push(ptr::null());
    list
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// `KEY=VALUE`.
fn pair(key: &[u8], value: &[u8]) -> Vec<u8> {
    [key, b"=", value].concat()
}

/// Where the program may be, in the order `execvp` tries, on `path`.
fn candidates(program: &str, path: Option<&[u8]>) -> io::Result<Vec<CString>> {
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if program.contains('/') {
        return Ok(vec![cstring(program.as_bytes())?]);
    }
    (path.unwrap_or(DEFAULT_PATH).split(|b| *b == b':'))
        .map(|dir| match dir {
            // An empty entry is the current directory.
            [] => cstring(program.as_bytes()),
            dir => cstring(&[dir, b"/", program.as_bytes()].concat()),
        })
        .collect()
}

/// An environment for user processes, built once (the worker's own does
/// not change while it runs) rather than per block: the worker's, less
/// some names, plus the user's variables.
#[derive(Debug, Clone)]
pub(super) struct Environment {
    /// `KEY=VALUE`, one per name.
    pairs: Vec<CString>,
    /// Where the program is looked up.
    path: Option<Vec<u8>>,
}

impl Environment {
    /// The worker's environment without the names in `remove`, then
    /// `set` (which wins over the worker's, and may not hold a name in
    /// `remove`: those are the per-process `extra_env` of a [`Spec`]).
    pub(super) fn new<'a>(
        remove: &[&str],
        set: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> io::Result<Self> {
        let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        for (key, value) in set {
            env.insert(key.into(), value.into());
        }
        for name in remove {
            env.remove(OsStr::new(name));
        }
        let path = env.get(OsStr::new("PATH")).map(|p| p.as_bytes().to_vec());
        let pairs = (env.iter())
            .map(|(key, value)| cstring(&pair(key.as_bytes(), value.as_bytes())))
            .collect::<io::Result<_>>()?;
        Ok(Self { pairs, path })
    }
}

/// The child, on its own stack and the parent's memory. It must not
/// allocate, lock, unwind or return into the parent's frames: it ends in
/// `execve` or `_exit`. The `errno` its calls set is the suspended
/// calling thread's, which does not read it afterwards.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Shared`, alive and untouched by the
    // parent while this runs.
    let shared = unsafe { &mut *arg.cast::<Shared>() };
    let error = match prepare(shared) {
        Ok(()) => execute(shared),
        Err(error) => error,
    };
    // SAFETY: read by the parent once this process has exited.
    unsafe {
        ptr::write_volatile(&mut shared.error, error.max(1));
        libc::_exit(127)
    }
}

/// Default signal handlers, stdio, the new group, then the caller's
/// steps; signals unblocked last.
fn prepare(shared: &Shared) -> Result<(), i32> {
    default_signal_handlers();
    for (target, &fd) in shared.stdio.iter().enumerate() {
        let target = target as RawFd;
        // dup2 onto itself keeps close-on-exec: clear it instead.
        // SAFETY: descriptor calls on descriptors the parent keeps open.
        let done = match fd == target {
            true => unsafe { libc::fcntl(fd, libc::F_SETFD, 0) },
            false => unsafe { libc::dup2(fd, target) },
        };
        if done < 0 {
            return Err(errno());
        }
    }
    // SAFETY: makes this process the leader of a new group.
    if unsafe { libc::setpgid(0, 0) } < 0 {
        return Err(errno());
    }
    (shared.before_exec)().map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
    let empty = empty_signal_set();
    // SAFETY: a valid set; no handler of the worker's is left to run.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &empty, ptr::null_mut()) };
    Ok(())
}

/// Resets every caught signal to its default action (the handlers are
/// the worker's, on memory shared with it), and SIGPIPE, which the Rust
/// runtime ignores, as `Command` does; ignored ones stay ignored.
fn default_signal_handlers() {
    for signal in 1..=libc::SIGRTMAX() {
        // SAFETY: sigaction on a zeroed (default) action and a local.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, ptr::null(), &mut action) < 0 {
                continue;
            }
            let caught =
                action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN;
            if caught || signal == libc::SIGPIPE {
                let default: libc::sigaction = std::mem::zeroed();
                libc::sigaction(signal, &default, ptr::null_mut());
            }
        }
    }
}

/// Tries each candidate as `execvp` does; returns only on failure, with
/// the errno to report.
fn execute(shared: &mut Shared) -> i32 {
    let mut denied = false;
    let mut last = libc::ENOENT;
    for candidate in &shared.candidates {
        // SAFETY: null-terminated arrays of live C strings.
        unsafe {
            libc::execve(
                candidate.as_ptr(),
                shared.argv.as_ptr(),
                shared.envp.as_ptr(),
            )
        };
        last = errno();
        match last {
            libc::ENOEXEC => {
                shared.sh_argv[1] = candidate.as_ptr();
                // SAFETY: as above.
                unsafe {
                    libc::execve(
                        SHELL.as_ptr(),
                        shared.sh_argv.as_ptr(),
                        shared.envp.as_ptr(),
                    )
                };
                return errno();
            }
            libc::EACCES => denied = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            other => return other,
        }
    }
    match denied {
        true => libc::EACCES,
        false => last,
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

fn full_signal_set() -> libc::sigset_t {
    // SAFETY: sigfillset initialises the set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        set
    }
}

fn empty_signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        set
    }
}
