"""The worker side of a task's function, called by the native module.

`load` turns the driver's description of a function (a reference
``"module:function"``, or a pickle file on a shared file system) into
``(call, check)``; `run_block` calls a process function on one block;
`start_worker_function` runs a worker function on a thread of its own,
its `Client` reading blocks from the feed it is given. Everything here
runs inside a worker process (``python -m daisy_rs.worker``), or inside
the user's interpreter for a serial run.
"""

from __future__ import annotations

import importlib
import pickle
import sys
import threading
import traceback

from daisy_rs.block import Block, BlockStatus

#: The reference a serial run gives its function tasks: the functions are
#: this interpreter's own objects, registered by `run_blockwise`.
IN_PROCESS = "daisy_rs._code:in_process"

_in_process: dict[str, tuple] = {}

#: The feed of the worker function running in this process, and its
#: task's check function, if any.
_worker = None

_TRACEBACK_LINES = 12


def register_in_process(task_id, call, check):
    _in_process[task_id] = (call, check)


def forget_in_process():
    """Drops the functions a serial run registered (and the worker
    function's feed), so that what they capture can be freed."""
    global _worker
    _in_process.clear()
    _worker = None


def load(task_id, source_kind, source, search_path):
    """``(call, check)`` for a task; ``check`` may be None."""
    for directory in reversed(search_path):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    if source_kind == "reference" and source == IN_PROCESS:
        if task_id not in _in_process:
            raise LookupError(f"no function of this interpreter is registered for task {task_id!r}")
        return _in_process[task_id]
    if source_kind == "reference":
        return _import(source), None
    with open(source, "rb") as file:
        payload = pickle.load(file)
    return payload["function"], payload.get("check_function")


def _import(reference):
    module_name, _, attribute = reference.partition(":")
    found = importlib.import_module(module_name)
    for name in attribute.split("."):
        found = getattr(found, name)
    return found


def describe(error: BaseException) -> str:
    """The end of the traceback of ``error``: what `status` shows."""
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    text = "".join(lines).rstrip().splitlines()
    if len(text) > _TRACEBACK_LINES:
        text = ["..."] + text[-_TRACEBACK_LINES:]
    return "\n".join(text)


def run_block(function, check, task_id, block_id, read, write):
    """Runs one block: None if it succeeded, else why it failed. A
    `KeyboardInterrupt` is not a failure of the block: it propagates."""
    block = Block._from_wire(task_id, block_id, read, write)
    try:
        if check is not None and check(block):
            return None
        function(block)
    except Exception as error:  # noqa: BLE001 — every failure is the block's
        return describe(error)
    if block.status == BlockStatus.FAILED:
        return "the process function set the block's status to FAILED"
    return None


def start_worker_function(function, check, feed):
    """Calls ``function()`` on a daemon thread whose `Client` reads
    ``feed``, skipping the blocks ``check`` (if not None) calls done;
    returns the thread."""
    global _worker
    _worker = (feed, check)
    thread = threading.Thread(
        target=_run_worker_function, args=(function, feed), name="daisy-worker-function", daemon=True
    )
    thread.start()
    return thread


def _run_worker_function(function, feed):
    try:
        function()
    except BaseException as error:  # noqa: BLE001 — reported, the worker decides
        feed.ended(describe(error))
    else:
        feed.ended(None)


def current_worker():
    """``(feed, check)`` of the worker function running here, or None."""
    return _worker
