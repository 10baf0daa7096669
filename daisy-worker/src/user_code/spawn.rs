//! Starting a block's process without copying the worker: the child
//! shares the worker's memory until it executes the user's program
//! (`clone(CLONE_VM | CLONE_VFORK)`, what `posix_spawn` does inside
//! glibc), instead of `fork`, which copies the worker's page tables and
//! then makes the worker take a copy-on-write fault per page it writes
//! until the child has executed. `std::process::Command` forks as soon as
//! it has a `pre_exec` closure, and a user process needs one: it must be
//! told to die with the worker (PR_SET_PDEATHSIG, which `posix_spawn`
//! cannot set) and announce its group to the watcher before user code
//! runs. A fork of the worker cost a block about 0.1-1 ms more than a
//! process start needs (docs/benchmarks.md, "Block commands against
//! xargs").
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

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
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
    /// The whole environment the process gets.
    pub env: &'a BTreeMap<OsString, OsString>,
    pub stdio: [RawFd; 3],
    /// Run in the child after its group and descriptors are set, before
    /// its signals are unblocked and the program executed; an error stops
    /// the start. Must be async-signal-safe and must not allocate.
    pub before_exec: &'a dyn Fn() -> io::Result<()>,
}

/// What the child reads and writes, all of it built by the parent.
struct Shared<'a> {
    /// Full paths to try, in order.
    candidates: Vec<CString>,
    /// `argv` (null-terminated), its strings in `_strings`.
    argv: Vec<*const libc::c_char>,
    /// `["sh", <candidate>, args.., null]` for a file without a `#!`.
    sh_argv: Vec<*const libc::c_char>,
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
    let mut stack = vec![0u8; CHILD_STACK_BYTES];
    // SAFETY: the stack grows down from its end, aligned to 16 bytes.
    let top = unsafe { stack.as_mut_ptr().add(CHILD_STACK_BYTES) };
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
        let cstring = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
        };
        let mut strings = vec![cstring(spec.program.as_bytes())?];
        for arg in spec.args {
            strings.push(cstring(arg.as_bytes())?);
        }
        let argc = strings.len();
        for (key, value) in spec.env {
            let mut pair = key.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            strings.push(cstring(&pair)?);
        }
        strings.push(cstring(b"sh")?);
        let pointers: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        let with_null = |mut list: Vec<_>| {
            list.push(ptr::null());
            list
        };
        let argv = with_null(pointers[..argc].to_vec());
        let envp = with_null(pointers[argc..strings.len() - 1].to_vec());
        // The candidate's slot (1) is filled in by the child.
        let mut sh_argv = vec![pointers[strings.len() - 1], ptr::null()];
        sh_argv.extend_from_slice(&pointers[1..argc]);
        let candidates = candidates(spec.program, spec.env)?;
        Ok(Self {
            candidates,
            argv,
            sh_argv: with_null(sh_argv),
            envp,
            _strings: strings,
            stdio: spec.stdio,
            before_exec: spec.before_exec,
            error: 0,
        })
    }
}

/// Where the program may be, in the order `execvp` tries.
fn candidates(program: &str, env: &BTreeMap<OsString, OsString>) -> io::Result<Vec<CString>> {
    let invalid = |_| io::Error::from(io::ErrorKind::InvalidInput);
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if program.contains('/') {
        return Ok(vec![CString::new(program).map_err(invalid)?]);
    }
    let path = env.get(OsStr::new("PATH")).map(|p| p.as_bytes());
    (path.unwrap_or(DEFAULT_PATH).split(|b| *b == b':'))
        .map(|dir| {
            let mut full = match dir {
                // An empty entry is the current directory.
                [] => Vec::new(),
                dir => [dir, b"/"].concat(),
            };
            full.extend_from_slice(program.as_bytes());
            CString::new(full).map_err(invalid)
        })
        .collect()
}

/// The environment a user process gets: the worker's, less `remove`,
/// plus `set` (later entries win).
pub(super) fn environment<'a>(
    remove: &str,
    set: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    env.remove(OsStr::new(remove));
    for (key, value) in set {
        env.insert(key.into(), value.into());
    }
    env
}

/// The child, on its own stack and the parent's memory. It must not
/// allocate, lock, unwind or return into the parent's frames: it ends in
/// `execve` or `_exit`.
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

/// Default signal handlers, the new group, stdio, then the caller's
/// checks; signals unblocked last.
fn prepare(shared: &Shared) -> Result<(), i32> {
    default_signal_handlers();
    for (target, &fd) in shared.stdio.iter().enumerate() {
        let target = target as RawFd;
        // dup2 onto itself keeps close-on-exec: clear it instead.
        let done = match fd == target {
            true => unsafe { libc::fcntl(fd, libc::F_SETFD, 0) },
            false => unsafe { libc::dup2(fd, target) },
        };
        if done < 0 {
            return Err(errno());
        }
    }
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
