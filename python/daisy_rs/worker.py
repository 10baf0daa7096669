"""``python -m daisy_rs.worker``: a worker that runs Python functions.

The same program as ``daisy-worker`` (same flags, context, exit
statuses; see ``--help``), with a task's ``process_function`` or
``worker_function`` called in this process, on its main thread (as daisy
1.x and 2.0 call them: ``signal.signal`` works there); the worker's own
runtime runs on a thread of its own. The driver starts it for function
tasks; start it by hand to add a machine to a run:

    python -m daisy_rs.worker --context-file daisy_run/<name>/context.json --task <task>

SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 drain the worker (it finishes the
block in hand and hands back the rest). Their Python handler is
`_drains`, which does nothing: the runtime hears them through Python's
wakeup fd, so a handler the task's code installs instead runs on the
main thread and the worker drains all the same.
"""

import glob
import os
import signal
import sys
import threading
import time

from daisy_rs import _native


def main(argv=None) -> int:
    """Runs the worker (call it on the main thread); its exit status. A
    worker whose main thread is stuck in the task's code when the worker
    is done (a block past its timeout) does not return: its process ends
    as `_exit` ends it."""
    return _native.worker_main(list(sys.argv[1:] if argv is None else argv))


#: The signals that drain a worker.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def _drains(signum, frame):
    """The worker's Python handler of its stop signals: nothing to do here
    (the runtime drains; see the module's doc). A handler of the task's
    code may call it, or not: the worker drains either way."""


def _listen(wakeup_fd):
    """Has Python catch the stop signals and write each signal's number to
    ``wakeup_fd``, which the runtime reads. Called by
    `_native.worker_main`, on the main thread, for the process's life."""
    signal.set_wakeup_fd(wakeup_fd, warn_on_full_buffer=False)
    for stop in _STOP_SIGNALS:
        signal.signal(stop, _drains)
    os.register_at_fork(before=_hold_signals, after_in_parent=_release_signals, after_in_child=_not_a_worker)


#: The forking thread's signal mask before `_hold_signals`.
_forking = threading.local()


def _hold_signals():
    """Blocks the stop signals in the forking thread, and so in the child
    until `_not_a_worker` gave it its own handlers: a SIGTERM sent to the
    child meanwhile (``Process.terminate()`` right after ``start()``) waits
    for them, rather than reach this worker's."""
    _forking.mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)


def _release_signals():
    signal.pthread_sigmask(signal.SIG_SETMASK, _forking.mask)


def _not_a_worker():
    """In a process the task's code forks (multiprocessing's workers,
    gunpowder's fetchers) the signals are that process's own again: the
    wakeup fd would drain this worker when the child gets SIGTERM, and
    `_drains` would keep the child alive on SIGTERM and Ctrl-C. Handlers
    the task's code installed stay, as a fork keeps them."""
    signal.set_wakeup_fd(-1)
    for stop in _STOP_SIGNALS:
        if signal.getsignal(stop) is _drains:
            default = signal.default_int_handler if stop == signal.SIGINT else signal.SIG_DFL
            signal.signal(stop, default)
    _release_signals()


#: How long the processes a function started get between SIGTERM and
#: SIGKILL when their worker ends.
_CHILD_GRACE_S = 2.0


def _exit(status: int):
    """Ends the process without waiting for the user's threads: a worker
    whose block ran past its timeout ends to stop it, and a thread the
    function started must not keep a finished worker (and its job) alive.
    The processes the function started end with it (a `volara-cli` child
    still in its shutdown when the worker function's grace ran out)."""
    sys.stdout.flush()
    sys.stderr.flush()
    _end_children()
    os._exit(status)


def _end_children():
    """SIGTERM to this process's children, then SIGKILL to those still
    there after `_CHILD_GRACE_S`; they are reaped here (Linux's /proc)."""
    children = _children()
    for pid in children:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + _CHILD_GRACE_S
    while children and time.monotonic() < deadline:
        children = [pid for pid in children if not _reaped(pid)]
        time.sleep(0.02)
    for pid in children:
        _signal(pid, signal.SIGKILL)
        _reaped(pid, block=True)


def _children():
    """The children of every thread of this process (the kernel lists a
    child under the thread that started it: the main thread, where the
    task's functions run, or a thread they started)."""
    found = []
    for listing in glob.glob("/proc/self/task/*/children"):
        try:
            with open(listing) as pids:
                found += [int(pid) for pid in pids.read().split()]
        except OSError:
            continue  # the thread ended meanwhile
    return found


def _signal(pid, signum):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _reaped(pid, block=False):
    try:
        return os.waitpid(pid, 0 if block else os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True


if __name__ == "__main__":
    _exit(main())
