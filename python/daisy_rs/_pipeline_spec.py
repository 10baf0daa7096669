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


def _task_table(task, pipeline):
    """``task``'s ``[[task]]`` table (the fields `schema.rs` declares) but
    its function and skip mask, which `_complete_table` adds."""
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
        "retry_backoff_max": task.retry_backoff_max,
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


def unwritable(value):
    raise TypeError(
        f"{type(value).__name__} value {value!r} in a Task cannot be written to the "
        "pipeline file: give numbers, strings, lists or dicts"
    )
