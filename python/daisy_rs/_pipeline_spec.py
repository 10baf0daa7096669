"""The pipeline file `run_blockwise` writes: each `Task` as a ``[[task]]``
table the driver reads, checked on its own by the driver's rules
(`_native.task_problems`) so a bad option is named as the `Task`
argument it came from."""

from __future__ import annotations

import json
import operator
import os
import site
import sys
import sysconfig

from funlib.geometry import Roi

from daisy_rs import _code, _native, _skip_mask
from daisy_rs._files import digest
from daisy_rs.task import seconds


class PipelineError(ValueError):
    """The pipeline breaks rules; ``problems`` lists every one: a task's
    own options named as the `Task` argument they came from, and what
    needs other tasks or files (upstream, ``skip_mask``, ``writes``),
    checked once those pass, as ``daisy-driver`` prints it."""

    def __init__(self, problems):
        self.problems = list(problems)
        listed = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"the pipeline has {len(self.problems)} problem(s):\n{listed}")


#: The task table's fields that no `Task` argument of that name sets: what
#: `_task_table` fills them from. Every other field of the driver's
#: (`_native.TASK_FIELDS`) is a `Task` argument, or in `NOT_FOR_PYTHON`.
FILLED_BY_PYTHON = {
    "id": "the task_id argument",
    "upstream": "the pipeline's edges (upstream + task, daisy 1.x's upstream_tasks)",
    "python_path": "this interpreter's sys.path, less its own directories",
}

#: The task table's fields a Python task has no use for, and why.
NOT_FOR_PYTHON = {
    "command": "a worker program fed blocks on stdin; a Python task runs a function",
    "block_command": "a process per block; a Python task runs a function",
    "env": "the environment of a command; a function runs in its worker's",
}


def pipeline_file(pipeline, name, top, run_dir, in_process):
    """The pipeline as the driver reads it, and the pickles it names; a
    `PipelineError` naming each refused `Task` argument, as given, if a
    task's table breaks the driver's rules for a table on its own."""
    payloads = {}
    tables = [_complete_table(task, pipeline, run_dir, in_process, payloads) for task in pipeline.tasks]
    spec = {"name": name, "task": tables}
    if top["resources"]:
        spec["resources"] = {key: _whole(value) for key, value in top["resources"].items()}
    if top["launcher"]:
        spec["launcher"] = dict(top["launcher"])
    if top["resource_tracking"]:
        spec["resource_tracking"] = True
    problems = [
        problem for task, table in zip(pipeline.tasks, tables) for problem in _problems(task, table, spec)
    ]
    if problems:
        raise PipelineError(problems)
    return spec, payloads


def _complete_table(task, pipeline, run_dir, in_process, payloads):
    """``task``'s table with its function (registered in this process, a
    reference, or a pickle added to ``payloads``) and its skip mask."""
    table = _task_table(task, pipeline)
    kind, function = task.function()
    if in_process:
        _code.register_in_process(task.task_id, function, task.check_function)
        table[kind] = _code.IN_PROCESS
    elif isinstance(function, str):
        table[kind] = function
    else:
        from daisy_rs import _pickling  # here: the driver and the workers import this module without pickling

        data = _pickling.payload(task, kind, function)
        path = run_dir / "python" / f"{task.task_id}-{digest(data)}.pickle"
        payloads[path] = data
        table[kind] = {"pickle": str(path)}
    if task.skip_mask is not None:
        table["skip_mask"], files = _skip_mask.path_and_files(task, run_dir)
        payloads.update(files)
    return table


def _problems(task, table, spec):
    """What the driver refuses in ``task``'s table on its own, in Python's
    words: ``Task('predict', max_retries=-1): max_retries is not ...``,
    the argument as the program gave it (a field Python fills, as the
    table holds it)."""
    found = _native.task_problems(json.dumps(table, default=unwritable), json.dumps(spec.get("resources", {})))
    worded = []
    for field, what in found:
        key = field.partition(".")[0]
        given = table.get(key) if key in FILLED_BY_PYTHON else getattr(task, key, table.get(key))
        worded.append(f"Task({task.task_id!r}, {key}={given!r}): {what}")
    return worded


#: The table's fields `_complete_table` adds: the function, and the skip
#: mask (written as a Zarr array first when it is one in Python).
_ADDED_LATER = ("process_function", "worker_function", "skip_mask")

#: `Task` arguments in seconds (or a `datetime.timedelta`) that the table
#: holds as durations.
_DURATIONS = ("timeout", "retry_backoff", "retry_backoff_max", "idle_timeout")

#: Flags the table holds only when on: off, the pipeline's value stands.
_ONLY_WHEN_ON = ("resource_tracking",)


def _task_table(task, pipeline):
    """``task``'s ``[[task]]`` table but what `_complete_table` adds: each
    field the driver declares (`_native.TASK_FIELDS`) from the `Task`
    attribute of its name, unless None, or from `FILLED_BY_PYTHON`'s
    sources. A new task option thus needs a `Task` argument and nothing
    here, unless it is a duration or a flag that defers to the pipeline."""
    table = {
        "id": task.task_id,
        "upstream": [u.task_id for u in pipeline.upstream_of(task)],
        "python_path": _search_path(),
        "worker_program": task.worker_program or [sys.executable, "-m", "daisy_rs.worker"],
    }
    own = [field for field in _native.TASK_FIELDS if field not in (*table, *_ADDED_LATER, *NOT_FOR_PYTHON)]
    for field in own:
        value = getattr(task, field)
        if value is None or (field in _ONLY_WHEN_ON and not value):
            continue
        if field in _DURATIONS:
            value = f"{round(seconds(value, f'task {task.task_id!r}: {field}') * 1000)}ms"
        table[field] = _as_written(value)
    return table


def _as_written(value):
    """A `Task` attribute as JSON holds it: a ROI as its offset and shape,
    integer-likes as ints (also in dicts and lists), anything else (a
    bool, which is an integer-like too, included) as it is, for the
    driver to judge."""
    if isinstance(value, bool):
        return value
    if isinstance(value, Roi):
        return {"offset": [int(x) for x in value.offset], "shape": [int(x) for x in value.shape]}
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    return _whole(value)


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


def unwritable(value):
    raise TypeError(
        f"{type(value).__name__} value {value!r} in a Task cannot be written to the "
        "pipeline file: give numbers, strings, lists or dicts"
    )
