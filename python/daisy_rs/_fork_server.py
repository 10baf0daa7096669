"""Workers forked from this program, with everything it imported, instead
of fresh interpreters that import it all again (daisy 1.x forks its
workers from the program too; `import volara.blockwise` alone takes
seconds).

`start` forks a *fork server* from the program before its driver starts
(so the server is a copy of one thread, with no driver thread in it);
``daisy-driver run`` of a pipeline with Python tasks starts one as
``python -m daisy_rs._fork_server`` (`main`), which imports the tasks'
functions first.
The driver's local launcher asks it, over a Unix socket, to fork each
Python worker (``launchers/src/local/fork_server.rs`` has the protocol):
the worker leads a process group of its own, runs in the directory, with
the environment and the log files the launcher gives, and calls
``daisy_rs.worker.main``. The server reaps its workers and reports how
each ended, so a block that kills its worker is blamed as before.

The server leaves the terminal's process group (Ctrl-C is the driver's
to handle) and ends when its socket closes: at the end of the run, or
when the program dies, however it dies.

A program in a state that a fork would copy half-way (other threads
running, CUDA initialised, a library that is not fork-safe) gets fresh
interpreters, and the run says why, once. ``fork_workers=False`` (of
`run_blockwise` or a `Task`) and ``DAISY_FORK_WORKERS=0`` turn forking off.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
import traceback

#: The environment variable that turns forking off ("0", "false", "no",
#: "off").
ENV_VARIABLE = "DAISY_FORK_WORKERS"

#: Modules that start threads of their own or are documented as unsafe to
#: fork once imported.
_FORK_UNSAFE_MODULES = ("jax", "tensorflow")

#: Modules that reset their IO threads in a forked child, each keeping its
#: loop in ``loop[0]`` and its thread in ``iothread[0]``.
_LIBRARIES_RESET_AFTER_FORK = ("zarr.core.sync", "fsspec.asyn")

#: The modules whose thread classes a notebook kernel runs (its IOPub,
#: heartbeat, control and history threads): a forked child never uses
#: them (its output goes to its log files), as multiprocessing's forks in
#: notebooks have shown for years.
_NOTEBOOK_THREAD_MODULES = ("ipykernel.", "IPython.", "zmq.")

#: How long the server gets to end once its socket closed.
_END_WAIT_S = 5.0

#: The thread-count variables the driver sets per worker; the first one
#: set is the worker's count.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

#: What every forked worker imports before its first block: imported once
#: by the server, while the driver starts, instead of by each worker.
_WORKER_MODULES = ("daisy_rs.worker", "daisy_rs._code")


class Server:
    """The program's end of a running fork server."""

    def __init__(self, pid, sock):
        self.pid = pid
        self._socket = sock

    def fileno(self):
        return self._socket.fileno()

    def close(self):
        """Ends the server (its socket closes once the driver's copy is
        closed too) and reaps it; one still there after `_END_WAIT_S` is
        killed."""
        self._socket.close()
        try:
            if not _reaped_within(self.pid, _END_WAIT_S):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass  # reaped by someone else


def _reaped_within(pid, seconds):
    """Whether the child ``pid`` ended within ``seconds`` (then it is
    reaped): woken by its end (a pidfd), not by polling; by polling where
    pidfds are missing."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    deadline = time.monotonic() + seconds
    try:
        while os.waitpid(pid, os.WNOHANG)[0] != pid:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if pidfd is None:
                time.sleep(min(left, 0.005))
            else:
                select.select([pidfd], [], [], left)
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def enabled_by_environment():
    return os.environ.get(ENV_VARIABLE, "1").strip().lower() not in ("0", "false", "no", "off")


def start(task_ids):
    """A fork server for the workers of ``task_ids``, or None (and the
    reason, printed once) where this program must not be forked."""
    reason = _reason_not_to_fork()
    if reason is not None:
        _say_once(f"daisy_rs: workers start as fresh interpreters: {reason}")
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            ours.close()
            _serve(theirs, sorted(task_ids))
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    theirs.close()
    return Server(pid, ours)


_said = set()


def _say_once(message):
    if message not in _said:
        _said.add(message)
        print(message, file=sys.stderr)


def _reason_not_to_fork():
    """Why this program must not be forked now, or None."""
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return f"forking workers needs Linux (this is {sys.platform})"
    reset = _threads_reset_after_fork()
    current = threading.current_thread()
    others = [
        t.name
        for t in threading.enumerate()
        if t is not current and t not in reset and not type(t).__module__.startswith(_NOTEBOOK_THREAD_MODULES)
    ]
    if others:
        shown = ", ".join(repr(name) for name in others[:3])
        return (
            f"this program runs {len(others)} other thread(s) ({shown}), "
            "which a fork would copy in the middle of what they do"
        )
    unsafe = [name for name in _FORK_UNSAFE_MODULES if name in sys.modules]
    if unsafe:
        return f"this program imported {', '.join(unsafe)}, which is not safe to fork"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "this program initialised CUDA (torch), which a forked process cannot use"
    return None


def _threads_reset_after_fork():
    """The threads of libraries that start them afresh in a forked child
    (they reset their state with `os.register_at_fork`): the IO event
    loops of zarr and fsspec, and their loops' thread pools. Forking with
    these running is what those libraries are built for."""
    threads = set()
    for name in _LIBRARIES_RESET_AFTER_FORK:
        module = sys.modules.get(name)
        if module is None:
            continue
        threads.add(getattr(module, "iothread", [None])[0])
        loop = getattr(module, "loop", [None])[0]
        for executor in (getattr(loop, "_default_executor", None), getattr(module, "_executor", None)):
            threads.update(getattr(executor, "_threads", ()))
    return threads


def _serve(sock, task_ids):
    """The server's loop: forks workers on request, reports their ends,
    returns when the socket closes."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    hello = {"python": sys.executable, "tasks": task_ids}
    _send(sock, {"hello": hello})
    for name in _WORKER_MODULES:
        importlib.import_module(name)
    workers = set()
    unread = b""
    while True:
        readable, _, _ = select.select([sock, wake_read], [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
        if sock in readable:
            data = sock.recv(65536)
            if not data:
                return
            unread += data
            *lines, unread = unread.split(b"\n")
            for line in lines:
                request = json.loads(line)["start"]
                pid = _fork_worker(request, sock, (wake_read, wake_write))
                if pid is not None:
                    workers.add(pid)
        for pid, how in _reap(workers):
            workers.discard(pid)
            _send(sock, {"ended": {"pid": pid, **how}})


def _send(sock, message):
    sock.sendall(json.dumps(message).encode() + b"\n")


def _fork_worker(request, sock, wake_fds):
    """Forks the worker ``request`` asks for; its pid (None if the fork
    failed, which the launcher is told)."""
    worker_id = request["worker_id"]
    if any(name in _THREAD_VARIABLES for name, _ in request["env"]):
        _import_threadpoolctl()
    try:
        pid = os.fork()
    except OSError as error:
        _send(sock, {"refused": {"worker_id": worker_id, "error": f"fork failed: {error}"}})
        return None
    if pid == 0:
        _become_worker(request, sock, wake_fds)
    # Also here: the launcher may signal the group before the child set it.
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child did it first, or already exec'd a program
    _send(sock, {"started": {"worker_id": worker_id, "pid": pid}})
    return pid


def _import_threadpoolctl():
    """Imports threadpoolctl here, once, rather than in every worker that
    limits its threads (see `_limit_threads`); one that is missing is
    reported by the worker."""
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        pass


def _reap(workers):
    """``(pid, how)`` of each worker that ended; what was left of its
    group is killed before it is reaped (the unreaped leader keeps the
    group's id from being reused meanwhile)."""
    ended = []
    for pid in list(workers):
        try:
            exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            ended.append((pid, {"code": None, "signal": None}))
            continue
        if exited is None:
            continue
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass  # nobody left in the group
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            ended.append((pid, {"signal": signal.Signals(os.WTERMSIG(status)).name}))
        else:
            ended.append((pid, {"code": os.waitstatus_to_exitcode(status)}))
    return ended


def _become_worker(request, sock, wake_fds):
    """The forked child: becomes the worker the request describes and runs
    it; never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        sock.close()
        for fd in wake_fds:
            os.close(fd)
        _default_signals()
        os.chdir(request["cwd"])
        _redirect(request["stdout"], request["stderr"])
        os.environ.update(dict(request["env"]))
        _limit_threads()
        from daisy_rs import worker

        sys.argv = [worker.__file__, *request["args"]]
        status = worker.main(request["args"])
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            from daisy_rs import worker

            worker._exit(status)
        finally:
            os._exit(status)


def _default_signals():
    """The signal handling of a fresh interpreter, not the program's."""
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # one the interpreter may not set
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def _redirect(stdout, stderr):
    """stdin from /dev/null, stdout and stderr appended to the worker's
    log files, and Python's streams on them afresh (the program's may be
    a terminal's, a notebook's or pytest's)."""
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, stdout, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
        (2, stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
    ):
        opened = os.open(path, flags, 0o644)
        if opened != fd:  # the server's socket was fd 0, now closed
            os.dup2(opened, fd)
            os.close(opened)
    sys.stdin = sys.__stdin__ = open(0, closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", closefd=False, buffering=1, errors="backslashreplace")


def _limit_threads():
    """The worker's thread count (the driver's ``OMP_NUM_THREADS`` and
    friends) for the thread pools of libraries the program had loaded
    before the fork, which read those variables only when loaded."""
    count = next((os.environ[name] for name in _THREAD_VARIABLES if name in os.environ), None)
    if count is None or not count.isdigit() or int(count) < 1:
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        print(
            "daisy_rs: threadpoolctl is missing (a dependency of daisy-rs): the thread pools "
            f"loaded before the fork keep their sizes, not {count}",
            file=sys.stderr,
        )
    else:
        threadpool_limits(limits=int(count))
    numba = sys.modules.get("numba")
    if numba is not None:
        try:
            numba.set_num_threads(min(int(count), numba.config.NUMBA_NUM_THREADS))
        except Exception as error:  # its threading layer did not start
            print(f"daisy_rs: numba keeps its thread count: {error}", file=sys.stderr)


def main(argv=None):
    """A fork server started by ``daisy-driver run``, its socket on stdin:
    imports the functions ``--preload`` names (a JSON list of the driver's
    function codes), then serves the workers of the ``--task``s, unless
    what it imported makes forking unsafe (then it serves none, and says
    why)."""
    parser = argparse.ArgumentParser(prog="python -m daisy_rs._fork_server")
    parser.add_argument("--preload", default="[]")
    parser.add_argument("--task", action="append", default=[])
    args = parser.parse_args(argv)
    for code in json.loads(args.preload):
        _preload(code)
    tasks = args.task
    reason = _reason_not_to_fork()
    if reason is not None:
        _say_once(f"daisy_rs: workers start as fresh interpreters: {reason}")
        tasks = []
    _serve(socket.socket(fileno=0), tasks)


def _preload(code):
    """Imports what a task's function needs: its module, or what its
    pickle refers to. One that fails is left to the worker to report."""
    for directory in reversed(code.get("search_path", [])):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    source = code["source"]
    try:
        if "reference" in source:
            importlib.import_module(source["reference"].partition(":")[0])
        else:
            with open(source["pickle"], "rb") as file:
                pickle.load(file)
    except Exception as error:
        print(f"daisy_rs: the fork server did not preload {source}: {error!r}", file=sys.stderr)


if __name__ == "__main__":
    main()

