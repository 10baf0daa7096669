"""The worker side of a task's function, called by the native module.

`load` turns the driver's description of a function (a reference
``"module:function"``, or a pickle file on a shared file system) into
``(call, check)``; `run_block` calls a process function on one block;
`run_worker_function` runs a worker function, its `Client` reading
blocks from the feed it is given. Everything here runs inside a worker
process (``python -m daisy_rs.worker``), on its main thread as in daisy
1.x and 2.0, or inside the user's interpreter for a serial run (where
`start_worker_function` gives a worker function a thread of its own: the
caller's thread feeds it).
"""

from __future__ import annotations

import importlib
import os
import pickle
import socket
import sys
import threading

from daisy_rs import logging as daisy_logging
from daisy_rs._feed import describe, next_unchecked
from daisy_rs.block import Block, BlockStatus

#: The reference a serial run gives its function tasks: the functions are
#: this interpreter's own objects, registered by `run_blockwise`.
IN_PROCESS = "daisy_rs._code:in_process"

_in_process: dict[str, tuple] = {}

#: The process id, the feed of the worker function running in that
#: process, and its task's check function, if any.
_worker = None

#: The pickle each task's check function came from, by task id: what
#: the processes a worker function starts load it from.
_check_payloads: dict[str, str] = {}

#: The process id and the block relay of this worker process.
_relay = None


#: How long a returning worker function waits for the processes it
#: started to be done with their blocks (see `Relay.settle`).
_SETTLE_S = 2.0


def register_in_process(task_id, call, check):
    _in_process[task_id] = (call, check)


def forget_in_process():
    """Drops the functions a serial run registered (and the worker
    function's feed), so that what they capture can be freed."""
    global _worker
    _in_process.clear()
    _worker = None
    _restore_context()


#: ``DAISY_CONTEXT`` as it was before a worker function set it in this
#: process: a serial run leaves the user's interpreter as it found it.
_context_before = ()


def _set_context(context):
    from daisy_rs.context import Context

    global _context_before
    if _context_before == ():
        _context_before = (os.environ.get(Context.ENV_VARIABLE),)
    os.environ[Context.ENV_VARIABLE] = context.to_env()


def _restore_context():
    from daisy_rs.context import Context

    global _context_before
    if _context_before == ():
        return
    (before,) = _context_before
    _context_before = ()
    if before is None:
        os.environ.pop(Context.ENV_VARIABLE, None)
    else:
        os.environ[Context.ENV_VARIABLE] = before


def load(task_id, worker_id, source_kind, source, search_path):
    """``(call, check)`` for a task; ``check`` may be None. A pickled
    function's payload also carries the log directory the program set,
    which this worker takes on (daisy 1.x's ``Client`` does the same)."""
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
    _check_payloads[task_id] = source
    logdir = payload.get("logdir")
    if logdir is not None:
        daisy_logging.set_log_basedir(logdir)
        daisy_logging.link_worker_logs(logdir, task_id, worker_id)
    return payload["function"], payload.get("check_function")


def _import(reference):
    module_name, _, attribute = reference.partition(":")
    found = importlib.import_module(module_name)
    for name in attribute.split("."):
        found = getattr(found, name)
    return found


def run_block(function, check, task_id, block_id, read, write):
    """Runs one block: None if it succeeded, True if ``check`` calls it
    done (it is not run, and counts as skipped), else why it failed. A
    `KeyboardInterrupt` is not a failure of the block: it propagates."""
    block = Block._from_wire(task_id, block_id, read, write)
    try:
        if check is not None and check(block):
            return True
        function(block)
    except Exception as error:  # noqa: BLE001 — every failure is the block's
        return describe(error)
    if block.status == BlockStatus.FAILED:
        return "the process function set the block's status to FAILED"
    return None


def run_worker_function(function, check, feed):
    """Calls ``function()`` on this thread (a worker's main thread) with
    its `Client` reading ``feed``, skipping the blocks ``check`` (if not
    None) calls done, and reports through ``feed`` how it ended. Processes
    the function starts find the feed through the relay named in
    ``DAISY_CONTEXT``. A worker that cannot set that up cannot serve."""
    try:
        _serve(check, feed)
    except Exception as error:  # noqa: BLE001 — the worker says why it cannot serve
        feed.ended(describe(error))
        return
    _run_worker_function(function, feed)


def start_worker_function(function, check, feed):
    """`run_worker_function` on a daemon thread of its own (a serial run,
    whose caller's thread feeds the function); returns the thread."""
    _serve(check, feed)
    thread = threading.Thread(
        target=_run_worker_function, args=(function, feed), name="daisy-worker-function", daemon=True
    )
    thread.start()
    return thread


def _serve(check, feed):
    """Makes ``feed`` this process's worker function's feed: for its own
    `Client`, and through the relay for the processes it starts."""
    global _worker
    _worker = (os.getpid(), feed, check)
    relay = _relay_of_this_process()
    relay.serve(feed, check)
    basedir = daisy_logging.get_log_basedir()
    logdir = "" if basedir is None else basedir.absolute()
    payload = _check_payloads.get(feed.task_id) if check is not None else None
    _set_context(relay.context(feed.task_id, feed.worker_id, logdir, payload))


def _relay_of_this_process():
    # Imported here: a process function's worker never needs a relay.
    from daisy_rs._relay import Relay

    global _relay
    if _relay is None or _relay[0] != os.getpid():
        _relay = (os.getpid(), Relay(_host_name()))
    return _relay[1]


def _host_name():
    """How processes on other hosts reach this one: its name, where the
    name resolves to an address they can reach (as on cluster nodes); else
    the address it sends from on its default route (a name in /etc/hosts
    as 127.0.x.x, usual on workstations and containers, would send a job on
    another node to that node itself); else the loopback address."""
    name = socket.gethostname()
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET)}
    except OSError:
        resolved = set()
    if any(not address.startswith("127.") for address in resolved):
        return name
    return _default_route_address() or "127.0.0.1"


#: An address on no local network (TEST-NET-3, RFC 5737): the way to it is
#: the default route.
_BEYOND_ANY_LOCAL_NETWORK = ("203.0.113.1", 9)


def _default_route_address():
    """The address this host sends from on its default route, or None
    without one. Connecting a UDP socket sends nothing; it only picks the
    route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(_BEYOND_ANY_LOCAL_NETWORK)
        except OSError:
            return None
        return probe.getsockname()[0]


def _run_worker_function(function, feed):
    try:
        function()
    except BaseException as error:  # noqa: BLE001 — reported, the worker decides
        _relay_of_this_process().settle(_SETTLE_S)
        feed.ended(describe(error))
    else:
        _relay_of_this_process().settle(_SETTLE_S)
        feed.ended(None)


def current_worker():
    """``(feed, check)`` of the worker function running in this process,
    or None (none runs, or this is a process forked from the worker,
    whose copy of the feed leads nowhere: it uses the relay)."""
    if _worker is None or _worker[0] != os.getpid():
        return None
    return _worker[1:]
