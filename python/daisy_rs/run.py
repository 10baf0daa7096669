"""`run_blockwise`: a pipeline of Python tasks on this engine's driver.

The tasks become a pipeline file (JSON) the driver reads, their
functions pickles beside it (cloudpickle; a function given as
``"module:function"`` is imported by the workers instead), both in
``<run_dir>/python/`` under names that hash their content, so cluster
workers read them from the shared file system and a running driver's
files are never overwritten. Then:

- ``multiprocessing=True``: ``daisy-driver run`` on a thread of this
  interpreter (progress bars, summary, run directory), with no signal
  handler of its own; its workers are ``python -m daisy_rs.worker``
  processes started by the pipeline's launcher. Ctrl-C stops it as it
  stops the CLI, and is raised again here once it has. If this process
  dies, the workers see the driver's connections close and stop.
- ``multiprocessing=False``: the driver's serial run inside this
  interpreter, calling the original functions (no pickling), one block
  at a time: for pdb, and closures over live objects.

This module runs the driver; each other concern has its own: the
pipeline file and its check in Python's words (`_pipeline_spec`), the
content-named files (`_files`), skip masks given as arrays
(`_skip_mask`), the functions' pickles (`_pickling`), the run
directory's lock (`_lock`) and the states read back (`_states`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import weakref
from pathlib import Path


from daisy_rs import _code, _fork_server, _native, tracking
from daisy_rs._files import digest, missing_dirs, remove, write_once
from daisy_rs._lock import lock_of, took_lock
from daisy_rs._pipeline_spec import PipelineError, pipeline_file, unwritable
from daisy_rs._skip_mask import MASK_SUFFIX
from daisy_rs._states import TaskState, states
from daisy_rs.context import Context
from daisy_rs.task import Pipeline

#: How often a wait for the driver lets Python look at its signals.
_SIGNAL_CHECK_S = 0.1


class RunError(RuntimeError):
    """The driver did not run the pipeline; its message is on stderr."""


class TaskAbandoned(RuntimeError):
    """A task was abandoned (its workers failed ``max_worker_restarts``
    times with blocks left), which daisy 2.0 raises as a `RuntimeError`
    whether or not states were asked for. ``states`` holds every task's
    `TaskState`."""

    def __init__(self, abandoned, states):
        self.states = states
        reasons = "; ".join(f"task {task_id!r}: {state.abandon_reason}" for task_id, state in abandoned.items())
        super().__init__(f"abandoned {reasons}")


def run_blockwise(
    tasks,
    multiprocessing=True,
    resources=None,
    progress=True,
    block_tracking=True,
    return_states=False,
    host=None,
    summary=True,
    *,
    run_dir=None,
    launcher=None,
    name=None,
    resource_tracking=False,
    dashboard=None,
    fork_workers=True,
):
    """Runs ``tasks`` (a task, a list of tasks, or a `Pipeline`) to the
    end. Returns True only if every block completed or was done before;
    with ``return_states=True``, the ``task_id -> TaskState`` dict.

    This engine's own arguments: ``run_dir`` (default
    ``./daisy_run/<name>``, ``name`` defaulting to the task ids),
    ``launcher`` (the pipeline's ``[launcher]`` table, e.g.
    ``{"kind": "sbatch", "partition": "gpu"}``; default local processes),
    ``resource_tracking`` (measure what each block costs, for every task;
    ``Task(resource_tracking=True)`` for one), ``dashboard`` (True, or an
    address such as ``"0.0.0.0:8790"``: a live web page of the run, whose
    URL is printed and written to ``<run_dir>/dashboard.url``),
    ``fork_workers`` (False: local workers start as fresh interpreters
    instead of forks of this program; see `daisy_rs._fork_server`).
    """
    pipeline, empty = _without_empty_tasks(Pipeline.of(tasks))
    if not pipeline.tasks:
        return empty if return_states else True
    _check_requirements(pipeline, resources)
    name = name or _default_name(pipeline)
    run_dir, tracked = _run_dir(pipeline, name, run_dir, block_tracking)
    reserved = _reserve(pipeline, host, multiprocessing)
    try:
        _call_init_callbacks(pipeline, reserved)
        top = {
            "resources": resources,
            "launcher": launcher,
            "resource_tracking": resource_tracking,
            "fork_workers": fork_workers,
        }
        options = _shown(progress, summary) + ([] if tracked else ["--untracked"])
        options += _dashboard(dashboard, multiprocessing)
        status = _run(pipeline, name, run_dir, top, host, multiprocessing, options, reserved)
    finally:
        if reserved is not None:
            reserved.close()  # a run refused before its driver took it
        _code.forget_in_process()  # a serial run's functions, and what they hold
    found = {**states(run_dir), **empty}
    abandoned = {task_id: state for task_id, state in found.items() if state.abandoned}
    if abandoned:
        raise TaskAbandoned(abandoned, found)
    if return_states:
        return found
    return status == 0


def _check_requirements(pipeline, resources):
    """Every key a task ``requires`` must be in the run's budget; a
    `ValueError` in Python's terms names the first one that is not."""
    budget = resources or {}
    for task in pipeline.tasks:
        missing = [key for key in (task.requires or {}) if key not in budget]
        if missing:
            needed = ", ".join(f"{key!r}: {task.requires[key]}" for key in missing)
            raise ValueError(
                f"task {task.task_id!r} requires {dict(task.requires)!r}, but "
                f"run_blockwise(resources=...) has no {', '.join(map(repr, missing))}: pass "
                f"resources={{{needed}, ...}} (how much of each all the run's workers may use "
                "at once), or leave requires out"
            )


def _without_empty_tasks(pipeline):
    """The pipeline less the tasks whose regions hold no block, and those
    tasks' states. daisy runs such a task with no blocks (its downstream
    tasks wait for nothing of it); the driver would refuse the pipeline,
    so it never sees them. Each is named with its regions, as a warning."""
    empty = {}
    for task in pipeline.tasks:
        wire = (task.task_id, _roi_pair(task.total_roi), _roi_pair(task.read_roi), _roi_pair(task.write_roi))
        try:
            reason = _native.no_block_reason((*wire, task.fit, task.read_write_conflict, 0, []))
        except (ValueError, TypeError, OverflowError):
            reason = None  # regions wrong in another way: the driver says how
        if reason is not None:
            logging.getLogger("daisy_rs").warning("task %r runs with no blocks: %s", task.task_id, reason)
            empty[task.task_id] = TaskState(
                {"id": task.task_id, "total": 0, "done": 0, "failed": 0, "orphaned": 0, "remaining": 0}
            )
    if not empty:
        return pipeline, empty
    kept = [task for task in pipeline.tasks if task.task_id not in empty]
    edges = [(u, d) for u, d in pipeline.edges if u.task_id not in empty and d.task_id not in empty]
    return Pipeline(kept, edges), empty


def _roi_pair(roi):
    return (tuple(int(x) for x in roi.offset), tuple(int(x) for x in roi.shape))


def _run_dir(pipeline, name, run_dir, block_tracking):
    """The run directory and whether done tracking is on: it is when the
    program asked for it (see `daisy_rs.tracking`); ``block_tracking=False``
    turns it off whatever else says."""
    basedir = tracking.get_tracking_basedir()
    from_env = os.environ.get("DAISY_RUN_DIR")
    asked = run_dir is not None or from_env or basedir is not None
    asked = asked or any(task.tracking_path for task in pipeline.tasks)
    default = (basedir or Path("daisy_run")) / name
    return Path(run_dir or from_env or default).absolute(), bool(block_tracking and asked)


def _reserve(pipeline, host, multiprocessing):
    """The driver's listener and token, bound before the run when a task
    has an ``init_callback_fn`` (see `_call_init_callbacks`); None
    otherwise: the driver binds its own."""
    if not multiprocessing or all(task.init_callback_fn is None for task in pipeline.tasks):
        return None
    if host is None:
        address = os.environ.get("DAISY_LISTEN") or "0.0.0.0:0"
    else:
        address = f"[{host}]:0" if ":" in host else f"{host}:0"
    reserved = _native.ReservedRun(address)
    # A process forked meanwhile (the fork server, its workers, the
    # program's own) must not keep the driver's port open.
    os.register_at_fork(after_in_child=functools.partial(_close_in_child, weakref.ref(reserved)))
    return reserved


def _close_in_child(reserved):
    reserved = reserved()
    if reserved is not None:
        reserved.close()


def _call_init_callbacks(pipeline, reserved):
    """daisy 1.x's ``init_callback_fn(context)``, once per task before it
    runs, in this process. As daisy 1.2.3's, the context names the driver
    (``hostname``, ``port``: its first advertised address, which is bound
    already), the task and ``worker_id`` 0, with the log directory and
    the run's token (``run_token``), so ``DAISY_CONTEXT={context.to_env()}
    python worker.py`` started by hand joins the run: its ``daisy.Client()``
    connects as a worker started by hand (`daisy_rs.client`). A serial run
    (``multiprocessing=False``) has no driver to name."""
    fields = {"worker_id": 0}
    if reserved is not None:
        hostname, _, port = reserved.addresses[0].rpartition(":")
        if not Context.can_hold(hostname):  # an IPv6 address: its name instead
            hostname = socket.gethostname()
        fields.update(hostname=hostname, port=port, run_token=reserved.token)
    for task in pipeline.tasks:
        if task.init_callback_fn is not None:
            task.init_callback_fn(Context(task_id=task.task_id, **fields))


def _shown(progress, summary):
    """The driver's arguments that leave out what the user turned off:
    with both off, the start-up lines too, as daisy prints nothing then."""
    if not progress and not summary:
        return ["--quiet"]
    return [flag for flag, on in [("--no-progress", progress), ("--no-summary", summary)] if not on]


def _dashboard(dashboard, multiprocessing):
    """The driver's ``--dashboard`` argument for ``dashboard``."""
    if dashboard is None or dashboard is False:
        return []
    if not multiprocessing:
        raise ValueError(
            "run_blockwise(dashboard=...) needs multiprocessing=True: a serial run "
            "(multiprocessing=False, SerialServer) runs its blocks in this process, "
            "without a driver to serve the page"
        )
    if dashboard is True:
        return ["--dashboard"]
    return [f"--dashboard={dashboard}"]


def _run(pipeline, name, run_dir, top, host, multiprocessing, options, reserved=None):
    """Writes the pipeline file (``top``: its top-level fields) and runs
    the driver on it (``options``: its arguments; ``reserved``: its
    listener and token, if bound before); its exit status, unless it was
    interrupted or did not run."""
    spec, payloads = pipeline_file(pipeline, name, top, run_dir, not multiprocessing)
    text = json.dumps(spec, indent=1, default=unwritable)
    file = run_dir / "python" / f"pipeline-{digest(text.encode())}.json"
    payloads[file] = text.encode()
    new_dirs = missing_dirs(payloads)
    # Skip masks are read when the pipeline is checked: they go first.
    masks = {path: data for path, data in payloads.items() if MASK_SUFFIX in str(path)}
    written = [path for path, data in masks.items() if write_once(path, data)]
    problems = _native.pipeline_problems(text, str(file))
    if problems:
        remove(written, new_dirs)
        raise PipelineError(problems)
    others = {path: data for path, data in payloads.items() if path not in masks}
    written += [path for path, data in others.items() if write_once(path, data)]
    args = ["run", str(file), "--run-dir", str(run_dir), *options]
    if host is not None:
        args += ["--listen", f"{host}:0"]
    lock_before = lock_of(run_dir)
    if multiprocessing:
        status = _run_driver(args, _forked_tasks(pipeline, top), reserved)
    else:
        status = _native.driver_main(args + ["--serial"])
    if status == _native.EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    if status == _native.EXIT_PANICKED:
        raise RunError(f"the driver crashed running the pipeline in {run_dir}: its message is above")
    if status == _native.EXIT_ERROR and not took_lock(run_dir, lock_before):
        remove(written, new_dirs)
    if status == _native.EXIT_ERROR:
        raise RunError(
            f"the driver did not run the pipeline in {run_dir} (exit status {status}): "
            "its message is above"
        )
    return status


def _forked_tasks(pipeline, top):
    """The tasks whose workers may be forked from this program: those
    that run as local processes of this interpreter and did not opt out."""
    if not top["fork_workers"] or not _fork_server.enabled_by_environment():
        return []
    local = [task for task in pipeline.tasks if _is_local(task.launcher or top["launcher"] or {})]
    return [task.task_id for task in local if task.fork_workers and task.worker_program is None]


def _is_local(launcher):
    return launcher.get("kind", "local") == "local"


def _run_driver(args, forked_tasks, reserved=None):
    """The driver on a thread of this interpreter (``reserved``: its
    listener and token, if bound before): its exit status.
    Ctrl-C here stops it as Ctrl-C stops the CLI, then is raised; SIGTERM
    (a job's time limit, `kill`) stops it the same way while it runs. The
    workers of ``forked_tasks`` are forked by a fork server started first,
    while this process has no driver thread (see `daisy_rs._fork_server`)."""
    server = _fork_server.start(forked_tasks) if forked_tasks else None
    if server is not None:
        args = [*args, "--fork-server", str(server.fileno())]
    else:
        args = [*args, "--no-fork-server"]
    try:
        driver = _native.start_driver(args, reserved)
        with _sigterm_stops(driver):
            try:
                return _wait(driver)
            except KeyboardInterrupt:
                driver.stop()
                _wait_through_interrupts(driver)
                raise
    finally:
        if server is not None:
            server.close()


def _wait(driver):
    """The driver's exit status, waited for in slices so that Ctrl-C
    reaches this thread as a `KeyboardInterrupt`."""
    while True:
        status = driver.wait(_SIGNAL_CHECK_S)
        if status is not None:
            return status


def _wait_through_interrupts(driver):
    """Waits for a stopped driver to stop its workers; another Ctrl-C
    meanwhile does not leave them running."""
    while True:
        try:
            return _wait(driver)
        except KeyboardInterrupt:
            print("daisy_rs: still stopping the workers", file=sys.stderr)


@contextlib.contextmanager
def _sigterm_stops(driver):
    """SIGTERM stops ``driver`` while it runs (only the main thread may
    set a handler; elsewhere the process's own handling stands)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: driver.stop())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _default_name(pipeline):
    """The task ids, with what a run name may not hold replaced: a task
    id the driver refuses is reported once, as the id's problem."""
    ids = re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(str(task.task_id) for task in pipeline.tasks))
    if len(ids) <= 64:
        return ids
    return f"{pipeline.tasks[0].task_id[:40]}-{digest(ids.encode())[:8]}"
