"""`Task` and task composition, as in daisy 2.0.

A task is plain data: its regions, its function and how its workers
run. ``a + b`` is a `Pipeline` in which ``b`` reads ``a``'s output (its
blocks wait for the blocks of ``a`` whose write ROI overlaps their read
ROI); ``a | b`` runs both side by side. daisy 1.x's
``upstream_tasks=[a]`` says the same as ``a + b``.
"""

from __future__ import annotations

import datetime
import numbers
import re
import warnings

from daisy_rs._writes import array_paths
from daisy_rs.block import _as_roi

_FITS = ("valid", "overhang", "shrink")

#: daisy 2.0's positional arguments after ``check_function``, in order.
_V2_POSITIONS = (
    "read_write_conflict",
    "fit",
    "max_workers",
    "max_retries",
    "timeout",
    "done_marker_path",
    "resource_tracking",
    "requires",
    "max_worker_restarts",
    "skip_mask",
)

#: daisy 1.x's positional arguments after ``check_function``, in order.
_V1_POSITIONS = (
    "init_callback_fn",
    "read_write_conflict",
    "num_workers",
    "max_retries",
    "fit",
    "timeout",
    "upstream_tasks",
)



#: What a task id may hold: it names the task's directories in the run
#: directory (``done/<task_id>/``, ``logs/<task_id>/``).
_ID_CHARACTER = re.compile(r"[A-Za-z0-9_.-]")


def _checked_id(task_id):
    """``task_id``, if it can name directories; else a `ValueError`
    saying why and what would do."""
    if not isinstance(task_id, str):
        raise TypeError(f"Task({task_id!r}, ...): a task id is a str, not {type(task_id).__name__}")
    bad = sorted({c for c in task_id if not _ID_CHARACTER.fullmatch(c)})
    if task_id and not bad and task_id not in (".", ".."):
        return task_id
    why = f"it holds {' '.join(map(repr, bad))}" if bad else "it is empty or a directory name"
    suggestion = re.sub(r"[^A-Za-z0-9_.-]", "_", task_id).strip(".") or "task"
    raise ValueError(
        f"Task({task_id!r}, ...): a task id names the task's directories in the run directory "
        f"(done/<task_id>/, logs/<task_id>/), so it may only hold letters, digits, '_', '.' and "
        f"'-'; {why}. Use e.g. {suggestion!r}"
    )

class Task:
    """One blockwise task, as daisy 1.x and 2.0 define it.

    ``Task(task_id, total_roi, read_roi, write_roi, process_function,
    check_function, ...)``: the arguments after ``check_function`` may come
    in daisy 2.0's positions (``read_write_conflict, fit, max_workers,
    max_retries, timeout, done_marker_path, resource_tracking, requires,
    max_worker_restarts, skip_mask``) or in daisy 1.x's
    (``init_callback_fn, read_write_conflict, num_workers, max_retries,
    fit, timeout, upstream_tasks``): a bool in the seventh place is 2.0's
    ``read_write_conflict``, anything else 1.x's ``init_callback_fn``.
    Every argument of both also works by keyword, and so do this engine's
    own (``batch_size``, ``prefetch``, ``retry_backoff``, ``retry_backoff_max``,
    ``idle_timeout``, ``launcher``, ``worker_function``, ``worker_program``,
    ``pin``).

    ``process_function`` takes a block, or nothing: a function without
    positional parameters (daisy's rule) is a *worker function* that loops
    over its own ``daisy.Client()``, or starts processes that do. It may
    also be ``"module:function"``, which workers import instead of
    receiving a pickle. ``timeout`` is in seconds (or a
    `datetime.timedelta`). ``tracking_path`` (or a tracking base
    directory, see `daisy_rs.tracking`) turns on resuming from done
    markers.
    """

    def __init__(
        self,
        task_id,
        total_roi,
        read_roi,
        write_roi,
        process_function=None,
        check_function=None,
        *positional,
        **keywords,
    ):
        names = _V2_POSITIONS
        if positional and not isinstance(positional[0], bool):
            names = _V1_POSITIONS
            warnings.warn(
                "Task(...) with daisy 1.x's positional arguments after check_function "
                "(init_callback_fn, read_write_conflict, num_workers, ...): pass them by "
                "keyword",
                DeprecationWarning,
                stacklevel=2,
            )
        if len(positional) > len(names):
            raise TypeError(
                f"Task() takes at most {6 + len(names)} positional arguments "
                f"({6 + len(positional)} given)"
            )
        for name, value in zip(names, positional):
            if name in keywords:
                raise TypeError(f"Task() got multiple values for argument {name!r}")
            keywords[name] = value
        self._configure(task_id, total_roi, read_roi, write_roi, process_function, check_function, **keywords)

    def _configure(
        self,
        task_id,
        total_roi,
        read_roi,
        write_roi,
        process_function,
        check_function,
        *,
        read_write_conflict=True,
        fit="valid",
        max_workers=None,
        max_retries=2,
        timeout=None,
        done_marker_path=None,
        tracking_path=None,
        resource_tracking=False,
        requires=None,
        max_worker_restarts=10,
        skip_mask=None,
        init_callback_fn=None,
        upstream_tasks=None,
        num_workers=None,
        worker_function=None,
        batch_size=None,
        prefetch=None,
        retry_backoff=None,
        retry_backoff_max=None,
        idle_timeout=None,
        launcher=None,
        worker_program=None,
        pin=False,
        fork_workers=True,
        writes=None,
        share_chunks=False,
        **unknown,
    ):
        for name in unknown:
            raise TypeError(f"Task() got an unexpected keyword argument {name!r}")
        if num_workers is not None and max_workers is not None:
            raise TypeError("pass either max_workers or num_workers (daisy 1.x), not both")
        if num_workers is not None:
            _deprecated("Task(num_workers=N) is daisy 1.x's name; use max_workers=N")
        if upstream_tasks:
            _deprecated("Task(upstream_tasks=[...]) is daisy 1.x's form; compose with `upstream + task`")
        if done_marker_path is not None:
            if tracking_path is not None:
                raise TypeError("pass either tracking_path or done_marker_path (its deprecated alias), not both")
            _deprecated("Task(done_marker_path=...) is deprecated; use tracking_path=...")
            tracking_path = done_marker_path
        if fit not in _FITS:
            raise ValueError(f"task {task_id!r}: fit = {fit!r} is not one of {', '.join(_FITS)}")
        self.task_id = _checked_id(task_id)
        self.total_roi = _as_roi(total_roi)
        self.read_roi = _as_roi(read_roi)
        self.write_roi = _as_roi(write_roi)
        self.process_function = process_function
        self.worker_function = worker_function
        self.check_function = check_function
        self.init_callback_fn = init_callback_fn
        self.read_write_conflict = bool(read_write_conflict)
        self.fit = fit
        self.max_workers = _first(max_workers, num_workers, 1)
        self.max_retries = max_retries
        self.timeout = timeout
        #: Where this task's done markers are tracked; False or None:
        #: not asked for (see `daisy_rs.tracking`).
        self.tracking_path = tracking_path
        self.upstream_tasks = list(upstream_tasks or [])
        self.requires = dict(requires or {})
        self.max_worker_restarts = max_worker_restarts
        self.skip_mask = skip_mask
        #: Measure what each block costs (docs/user-guide.md, "What each
        #: block cost"); ``run_blockwise(resource_tracking=True)`` turns it
        #: on for every task.
        self.resource_tracking = bool(resource_tracking)
        self.batch_size = batch_size
        self.prefetch = prefetch
        self.retry_backoff = retry_backoff
        #: The longest ``retry_backoff`` grows to, doubling per retry.
        self.retry_backoff_max = retry_backoff_max
        self.idle_timeout = idle_timeout
        self.launcher = dict(launcher or {})
        self.worker_program = worker_program
        #: Bind each local worker to the cpu ids it was given from the
        #: budget (docs/user-guide.md, "Resource slots").
        self.pin = bool(pin)
        #: Fork this task's local Python workers from the program rather
        #: than start fresh interpreters (docs/python.md, "How workers
        #: start"); ``run_blockwise(fork_workers=False)`` and
        #: ``DAISY_FORK_WORKERS=0`` turn it off for every task.
        self.fork_workers = bool(fork_workers)
        #: The Zarr arrays the blocks write into, as paths: two workers
        #: never write into one shard (or chunk) at once
        #: (docs/user-guide.md, "Writing Zarr safely").
        self.writes = array_paths(self.task_id, writes)
        #: Accept blocks that write parts of chunks other blocks write.
        self.share_chunks = bool(share_chunks)

    @property
    def done_marker_path(self):
        """daisy 2.0's deprecated name of ``tracking_path``."""
        return self.tracking_path

    @property
    def timeout_secs(self):
        """``timeout`` in seconds, or None (daisy 2.0's name)."""
        return None if self.timeout is None else seconds(self.timeout, f"task {self.task_id!r}: timeout")

    @property
    def num_workers(self):
        """daisy 1.x's name for ``max_workers``."""
        return self.max_workers

    @property
    def block_grid_shape(self):
        """Blocks per axis of the grid done markers and a ``skip_mask``
        index: ``ceil(total_roi.shape / write_roi.shape)``, as in daisy 2.0."""
        total, write = self.total_roi.shape, self.write_roi.shape
        return tuple(-(-int(t) // int(w)) for t, w in zip(total, write))

    def function(self):
        """``(kind, function)``: ``"process_function"`` or
        ``"worker_function"``, and the callable or reference."""
        if self.worker_function is not None:
            if self.process_function is not None:
                raise ValueError(
                    f"task {self.task_id!r}: give process_function or worker_function, not both"
                )
            return "worker_function", self.worker_function
        if self.process_function is None:
            raise ValueError(f"task {self.task_id!r}: it has no process_function")
        if callable(self.process_function) and _takes_no_argument(self.process_function):
            return "worker_function", self.process_function
        return "process_function", self.process_function

    def __add__(self, other):
        return Pipeline.of(self) + other

    def __radd__(self, other):
        return other + Pipeline.of(self)

    def __or__(self, other):
        return Pipeline.of(self) | other

    def __ror__(self, other):
        return other | Pipeline.of(self)

    def __repr__(self):
        return f"Task({self.task_id!r})"


class Pipeline:
    """Tasks and the edges "the second reads the first's output"."""

    def __init__(self, tasks=None, edges=None):
        self.tasks = []
        self.edges = []
        for task in tasks or []:
            self._add_task(task)
        for upstream, downstream in edges or []:
            self._add_edge(upstream, downstream)

    @classmethod
    def of(cls, item):
        """``item`` as a pipeline: a pipeline, a task (with its daisy 1.x
        ``upstream_tasks``, transitively) or a list of tasks."""
        if isinstance(item, Pipeline):
            return item
        if isinstance(item, Task):
            item = [item]
        if not isinstance(item, (list, tuple)):
            raise TypeError(f"expected a Pipeline, a Task or a list of tasks, got {type(item).__name__}")
        pipeline = cls()
        for task in item:
            pipeline._add_with_upstream(task)
        return pipeline

    @property
    def sources(self):
        """Tasks that read no other task's output."""
        downstream = {id(d) for _, d in self.edges}
        return [t for t in self.tasks if id(t) not in downstream]

    @property
    def outputs(self):
        """Tasks whose output no other task reads."""
        upstream = {id(u) for u, _ in self.edges}
        return [t for t in self.tasks if id(t) not in upstream]

    def upstream_of(self, task):
        return [u for u, d in self.edges if d is task]

    def __add__(self, other):
        other = Pipeline.of(other)
        joined = self | other
        for upstream in self.outputs:
            for downstream in other.sources:
                joined._add_edge(upstream, downstream)
        return joined

    def __radd__(self, other):
        return Pipeline.of(other) + self

    def __or__(self, other):
        other = Pipeline.of(other)
        return Pipeline(self.tasks + other.tasks, self.edges + other.edges)

    def __ror__(self, other):
        return Pipeline.of(other) | self

    def __repr__(self):
        return f"Pipeline(tasks={[t.task_id for t in self.tasks]})"

    def _add_task(self, task):
        if not isinstance(task, Task):
            raise TypeError(f"a pipeline holds daisy_rs.Task objects, not {type(task).__name__}")
        if all(t is not task for t in self.tasks):
            self.tasks.append(task)

    def _add_edge(self, upstream, downstream):
        self._add_task(upstream)
        self._add_task(downstream)
        if all(u is not upstream or d is not downstream for u, d in self.edges):
            self.edges.append((upstream, downstream))

    def _add_with_upstream(self, task):
        self._add_task(task)
        for upstream in task.upstream_tasks:
            self._add_with_upstream(upstream)
            self._add_edge(upstream, task)


def _first(*values):
    return next(v for v in values if v is not None)


def _takes_no_argument(function) -> bool:
    """daisy's rule: a function whose named positional parameters are
    none (``self`` aside; ``*args`` does not count, so a ``(*args,
    **kwargs)`` wrapper is a worker function, as in daisy 1.x and 2.0) is
    a worker function; so is a callable without a signature, as in 2.0."""
    import inspect  # here: workers import this module and never ask

    try:
        named = inspect.getfullargspec(function).args
    except TypeError:
        return True
    return not [name for name in named if name != "self"]


def _deprecated(message):
    warnings.warn(message, DeprecationWarning, stacklevel=4)


def seconds(value, what):
    """A duration in seconds from seconds or a `datetime.timedelta`."""
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise ValueError(f"{what} = {value!r} is not a positive number of seconds or a timedelta")

