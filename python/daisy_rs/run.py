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
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import json
import logging
import operator
import os
import re
import signal
import site
import socket
import sys
import sysconfig
import threading
import weakref
from pathlib import Path


from daisy_rs import _code, _fork_server, _native, tracking
from daisy_rs import logging as daisy_logging
from daisy_rs.context import Context
from daisy_rs.task import Pipeline, seconds

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


class PipelineError(ValueError):
    """The pipeline breaks rules; ``problems`` lists every one, each as
    ``daisy-driver`` prints it."""

    def __init__(self, problems):
        self.problems = list(problems)
        listed = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"the pipeline has {len(self.problems)} problem(s):\n{listed}")


class TaskState:
    """Where a task stands after a run, with daisy's counters. Read back
    from the run directory once the run ended: nothing is ready or
    processing then. As in daisy, ``skipped_count`` counts the blocks the
    run did not run (done before, with tracking; found done by the
    check function; left out by a skip mask), and ``completed_count``
    includes them. The worker counts are daisy 2.0's, of the last run:
    a worker that was lost or never connected is a failure, and the
    driver started another in its place (a restart)."""

    def __init__(self, status: dict, ended: dict | None = None, workers: list = ()):
        """``status``: the task in ``daisy-driver status --json``;
        ``ended``: the counters its last run ended it with, if that run
        saw it to its end (a stopped run did not: the run directory's
        numbers stand in); ``workers``: the last run's workers of the
        task, as ``status --json`` lists them."""
        self.task_id = status["id"]
        self.started = True
        self.total_block_count = status["total"]
        if ended is not None:
            self.completed_count = ended["completed"]
            self.skipped_count = ended["skipped"]
        else:
            self.skipped_count = status.get("skipped", 0)
            self.completed_count = status["done"] + self.skipped_count
        self.failed_count = status["failed"]
        self.orphaned_count = status["orphaned"]
        self.ready_count = 0
        self.processing_count = 0
        self.abandon_reason = status.get("abandoned")
        self.abandoned = self.abandon_reason is not None
        self.failed_blocks = status.get("failed_blocks", [])
        self._remaining = status["remaining"]
        unclean = [worker for worker in workers if worker["end"] in ("lost", "failed_start")]
        self.worker_start_count = len(workers)
        self.worker_failure_count = len(unclean)
        self.worker_restart_count = len(unclean)
        self.first_worker_error = unclean[0]["why"] if unclean else None
        self.last_worker_error = unclean[-1]["why"] if unclean else None

    @property
    def pending_count(self):
        return self._remaining

    def is_done(self) -> bool:
        return self.total_block_count - self.completed_count - self.failed_count - self.orphaned_count <= 0

    def __str__(self):
        return (
            f"Started: {self.started}\n"
            f"Total Blocks: {self.total_block_count}\n"
            f"Ready: {self.ready_count}\n"
            f"Processing: {self.processing_count}\n"
            f"Pending: {self.pending_count}\n"
            f"Completed: {self.completed_count}\n"
            f"Skipped: {self.skipped_count}\n"
            f"Failed: {self.failed_count}\n"
            f"Orphaned: {self.orphaned_count}\n"
        )

    def __repr__(self):
        return (
            f"TaskState({self.task_id!r}: {self.completed_count}/{self.total_block_count} done, "
            f"{self.failed_count} failed, {self.orphaned_count} orphaned)"
        )


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
    spec, payloads = _pipeline_file(pipeline, name, top, run_dir, not multiprocessing)
    text = json.dumps(spec, indent=1, default=_unwritable)
    file = run_dir / "python" / f"pipeline-{_digest(text.encode())}.json"
    payloads[file] = text.encode()
    new_dirs = _missing_dirs(payloads)
    # Skip masks are read when the pipeline is checked: they go first.
    masks = {path: data for path, data in payloads.items() if _MASK_SUFFIX in str(path)}
    written = [path for path, data in masks.items() if _write_once(path, data)]
    problems = _native.pipeline_problems(text, str(file))
    if problems:
        _remove(written, new_dirs)
        raise PipelineError(problems)
    others = {path: data for path, data in payloads.items() if path not in masks}
    written += [path for path, data in others.items() if _write_once(path, data)]
    args = ["run", str(file), "--run-dir", str(run_dir), *options]
    if host is not None:
        args += ["--listen", f"{host}:0"]
    lock_before = _lock_of(run_dir)
    if multiprocessing:
        status = _run_driver(args, _forked_tasks(pipeline, top), reserved)
    else:
        status = _native.driver_main(args + ["--serial"])
    if status == _native.EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    if status == _native.EXIT_PANICKED:
        raise RunError(f"the driver crashed running the pipeline in {run_dir}: its message is above")
    if status == _native.EXIT_ERROR and not _took_lock(run_dir, lock_before):
        _remove(written, new_dirs)
    if status == _native.EXIT_ERROR:
        raise RunError(
            f"the driver did not run the pipeline in {run_dir} (exit status {status}): "
            "its message is above"
        )
    return status


def states(run_dir):
    """``task_id -> TaskState`` of the run directory ``run_dir``."""
    status = json.loads(_native.status_json(Path(run_dir)))
    last_run = status.get("last_run") or {}
    ended = last_run.get("tasks_ended", {})
    workers = last_run.get("workers", [])
    return {
        task["id"]: TaskState(task, ended.get(task["id"]), [w for w in workers if w["task"] == task["id"]])
        for task in status["tasks"]
    }


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


def _pipeline_file(pipeline, name, top, run_dir, in_process):
    """The pipeline as the driver reads it, and the pickles it names."""
    payloads = {}
    task_tables = []
    for task in pipeline.tasks:
        table = _task_table(task, pipeline)
        kind, function = task.function()
        if in_process:
            _code.register_in_process(task.task_id, function, task.check_function)
            table[kind] = _code.IN_PROCESS
        elif isinstance(function, str):
            table[kind] = function
        else:
            data = _pickle(task, kind, function)
            path = run_dir / "python" / f"{task.task_id}-{_digest(data)}.pickle"
            payloads[path] = data
            table[kind] = {"pickle": str(path)}
        if task.skip_mask is not None:
            table["skip_mask"], files = _skip_mask(task, run_dir)
            payloads.update(files)
        task_tables.append(table)
    spec = {"name": name, "task": task_tables}
    if top["resources"]:
        spec["resources"] = {key: _whole(value) for key, value in top["resources"].items()}
    if top["launcher"]:
        spec["launcher"] = dict(top["launcher"])
    if top["resource_tracking"]:
        spec["resource_tracking"] = True
    return spec, payloads


def _task_table(task, pipeline):
    table = {
        "id": task.task_id,
        "total_roi": _roi(task.total_roi),
        "read_roi": _roi(task.read_roi),
        "write_roi": _roi(task.write_roi),
        "fit": task.fit,
        "read_write_conflict": task.read_write_conflict,
        "max_workers": task.max_workers,
        "max_retries": task.max_retries,
        "max_worker_restarts": task.max_worker_restarts,
        "requires": task.requires,
        "upstream": [u.task_id for u in pipeline.upstream_of(task)],
        "worker_program": task.worker_program or [sys.executable, "-m", "daisy_rs.worker"],
        "python_path": _search_path(),
    }
    optional = {
        "timeout": task.timeout,
        "retry_backoff": task.retry_backoff,
        "idle_timeout": task.idle_timeout,
    }
    for field, value in optional.items():
        if value is not None:
            table[field] = f"{round(seconds(value, f'task {task.task_id!r}: {field}') * 1000)}ms"
    for field in ("batch_size", "prefetch"):
        if getattr(task, field) is not None:
            table[field] = getattr(task, field)
    for field in ("max_workers", "max_retries", "max_worker_restarts", "batch_size", "prefetch"):
        if field in table:
            table[field] = _whole(table[field])
    table["requires"] = {key: _whole(value) for key, value in table["requires"].items()}
    if task.launcher:
        table["launcher"] = task.launcher
    if task.resource_tracking:
        table["resource_tracking"] = True
    if task.pin:
        table["pin"] = True
    if task.writes:
        table["writes"] = task.writes
    if task.share_chunks:
        table["share_chunks"] = True
    return table


#: How the Zarr arrays of skip masks given as arrays are named.
_MASK_SUFFIX = ".mask.zarr"


def _skip_mask(task, run_dir):
    """``skip_mask`` as the driver reads it: a Zarr array's path, or an
    array-like (one byte per block of the task's grid, nonzero to skip)
    written as a Zarr v3 array of one raw chunk under ``<run_dir>/python/``,
    named by its content; returns the path and the files to write."""
    mask = task.skip_mask
    if isinstance(mask, (str, os.PathLike)):
        return os.path.abspath(mask), {}
    import numpy as np

    try:
        cells = np.ascontiguousarray(mask, dtype=np.uint8)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"task {task.task_id!r}: skip_mask must be an array-like of one byte per block "
            f"of the task's grid, or the path of a Zarr array ({error})"
        ) from error
    shape = [int(n) for n in cells.shape]
    data = cells.tobytes()
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shape}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "attributes": {},
    }
    name = f"{task.task_id}-{_digest(json.dumps(shape).encode() + data)}{_MASK_SUFFIX}"
    store = run_dir / "python" / name
    chunk = store.joinpath("c", *["0"] * len(shape))
    return str(store), {store / "zarr.json": json.dumps(meta).encode(), chunk: data}


def _whole(value):
    """An integer-like value (a numpy integer, say) as the `int` JSON
    takes, also in a list of ids (``{"gpu": [0, 2]}``); anything else as
    it is, for the driver to judge."""
    if isinstance(value, (list, tuple)):
        return [_whole(item) for item in value]
    try:
        return operator.index(value)
    except TypeError:
        return value


def _roi(roi):
    return {"offset": [int(x) for x in roi.offset], "shape": [int(x) for x in roi.shape]}


def _search_path():
    """This interpreter's module search path but its own directories, so
    that workers import the modules a function comes from (the script's
    directory included), as absolute paths: a worker may start in
    another directory."""
    own = _interpreter_dirs()
    entries = [os.path.abspath(entry) for entry in sys.path]
    return [entry for entry in entries if os.path.isdir(entry) and entry not in own]


def _interpreter_dirs():
    """The standard library and site-packages of this interpreter: every
    worker has its own, and these would shadow them if a task's
    ``worker_program`` is another interpreter."""
    stdlib = os.path.dirname(os.__file__)  # a venv's sysconfig names its own
    paths = sysconfig.get_paths()
    found = {stdlib, os.path.join(stdlib, "lib-dynload"), paths["purelib"], paths["platlib"]}
    found |= {site.getusersitepackages(), *site.getsitepackages()}
    return {os.path.abspath(d) for d in found}


def _pickle(task, kind, function):
    """The function's payload for workers: the function and the check
    function (by value where workers could not import their modules by
    name), and the log directory the program set."""
    payload = {
        "function": function,
        "check_function": task.check_function,
        "logdir": daisy_logging.chosen_log_basedir(),
    }
    import cloudpickle  # here: the driver and the workers import this module without pickling

    from daisy_rs import _pickling

    by_value = _modules_workers_cannot_import(function, task.check_function)
    try:
        for module in by_value:
            cloudpickle.register_pickle_by_value(module)
        return _pickling.dumps(payload)
    except Exception as error:
        captured = _unpicklable_captures(function) or _unpicklable_captures(task.check_function)
        what = f": it captures {', '.join(captured)}" if captured else ""
        raise TypeError(
            f"task {task.task_id!r}: its {kind} cannot be sent to workers{what} ({error}). "
            "Create such objects inside the function (a worker function loads them once), "
            "or run with multiprocessing=False"
        ) from error
    finally:
        for module in by_value:
            cloudpickle.unregister_pickle_by_value(module)


def _modules_workers_cannot_import(*functions):
    """The modules of ``functions`` that a worker could not import by name
    from the search path it gets: modules loaded from a file path
    (``importlib``'s ``spec_from_file_location``, as dacapo loads its
    worker files). cloudpickle would pickle their functions by reference."""
    found = []
    for function in functions:
        module = sys.modules.get(getattr(function, "__module__", None) or "")
        if module is None or module.__name__ == "__main__" or module in found:
            continue
        top = module.__name__.partition(".")[0]
        if top in sys.builtin_module_names:
            continue
        spec = importlib.machinery.PathFinder.find_spec(top, sys.path)
        if spec is None:
            found.append(module)
    return found


def _unpicklable_captures(function):
    """The names (and types) of what ``function`` refers to that cannot
    be pickled: closure cells, globals, or an object's attributes."""
    import inspect

    import cloudpickle

    if function is None:
        return []
    try:
        found = inspect.getclosurevars(function)
        captured = {**found.nonlocals, **found.globals}
    except TypeError:
        captured = dict(getattr(function, "__dict__", {}))
    culprits = []
    for name, value in captured.items():
        try:
            cloudpickle.dumps(value)
        except Exception:
            culprits.append(f"{name} ({type(value).__name__})")
    return culprits


def _unwritable(value):
    raise TypeError(
        f"{type(value).__name__} value {value!r} in a Task cannot be written to the "
        "pipeline file: give numbers, strings, lists or dicts"
    )


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _write_once(path: Path, data: bytes) -> bool:
    """Writes a content-named file unless it is there already, atomically;
    whether it wrote it."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    partial.replace(path)
    return True


def _lock_of(run_dir):
    """What the run directory's lock says (who took it, when), or None."""
    try:
        return (run_dir / "driver.lock").read_text()
    except OSError:
        return None


def _took_lock(run_dir, before) -> bool:
    """Whether the driver that just ran took the run directory's lock (it
    writes its pid and start into driver.lock; a driver that did not was
    refused). The driver ran in this process, so the pid alone cannot tell
    it from an earlier run here: the lock must have changed too."""
    now = _lock_of(run_dir)
    try:
        holder = json.loads(now) if now is not None else None
    except ValueError:
        return False
    return now != before and isinstance(holder, dict) and holder.get("pid") == os.getpid()


def _missing_dirs(paths):
    """The directories that writing ``paths`` creates, outermost first."""
    missing = []
    for path in paths:
        for directory in reversed(Path(path).parents):
            if not directory.exists() and directory not in missing:
                missing.append(directory)
    return missing


def _remove(files, new_dirs):
    """Takes back what a refused run wrote: a run directory another
    driver holds is left as it was."""
    for path in files:
        path.unlink(missing_ok=True)
    for directory in reversed(new_dirs):
        try:
            directory.rmdir()
        except OSError:
            pass  # not empty: the driver wrote there, so it is the driver's


def _default_name(pipeline):
    """The task ids, with what a run name may not hold replaced: a task
    id the driver refuses is reported once, as the id's problem."""
    ids = re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(str(task.task_id) for task in pipeline.tasks))
    if len(ids) <= 64:
        return ids
    return f"{pipeline.tasks[0].task_id[:40]}-{_digest(ids.encode())[:8]}"
