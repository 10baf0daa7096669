"""`Client`: what a worker function loops over, as in daisy.

    def start_worker():
        model = load_model()              # once per worker
        client = daisy.Client()
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                predict(model, block)

Inside a worker function, blocks come from the worker it runs in
(``python -m daisy_rs.worker``), in process: it keeps the connection to
the driver, its heartbeats, its batches and prefetch. In any other
process that has a daisy context (one the function started: a
subprocess, a forked fetcher, an ``sbatch --wait`` job), the client reads
``DAISY_CONTEXT`` and gets the same worker's blocks through its relay
(`daisy_rs._relay`). A process started by hand with the context daisy
1.x's ``init_callback_fn(context)`` gets (it names the driver and holds
``run_token``) joins the run as a worker of its own, started by hand
(`daisy_rs._native.DriverClient`): the driver accounts for it as for
``python -m daisy_rs.worker`` started by hand. An exception inside
``with`` fails the block (its traceback is the block's error) and
propagates, as in daisy 2.0.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
from contextlib import contextmanager

from daisy_rs import _code
from daisy_rs import logging as daisy_logging
from daisy_rs._feed import describe, next_unchecked
from daisy_rs._relay import RelayClient
from daisy_rs.block import BlockStatus
from daisy_rs.context import Context


class Client:
    """The blocks of the worker this process belongs to.

    ``context``: where to find them; by default ``DAISY_CONTEXT`` (a
    `KeyError` in a process no daisy worker started, as in daisy).
    ``worker_id``, ``task_id`` and ``context`` are daisy's attributes.
    """

    def __init__(self, context=None):
        in_process = _code.current_worker() if context is None else None
        if context is None:
            context = Context.from_env()
        _require(context, ("task_id", "worker_id"))
        self.context = context
        daisy_logging.adopt_log_basedir(context.get("logdir") or None)
        self.task_id = context["task_id"]
        self.worker_id = int(context["worker_id"])
        self._pid = os.getpid()
        if in_process is not None:
            self._feed, self._check = in_process
        else:
            self._connect()

    def _join_the_run(self):
        """Joins the run as a worker started by hand: the context names
        the driver (daisy 1.x's ``init_callback_fn`` context)."""
        _require(self.context, ("hostname", "port"))
        self._feed = _DriverFeed(self.context)
        self.worker_id = self._feed.worker_id
        self._check = self._feed.check

    def _connect(self):
        """Reaches the worker's blocks through its relay, or joins the
        run if the context names the driver."""
        context = self.context
        if "run_token" in context:
            return self._join_the_run()
        try:
            self._feed = RelayClient(context)
        except ConnectionRefusedError:
            # As in daisy 2.0: a worker already gone means the run ended.
            logging.getLogger(__name__).warning(
                "the daisy worker at %s:%s is not reachable; assuming the run has ended",
                context.get("hostname"),
                context.get("port"),
            )
            self._feed = _Ended()
        self._check = self._feed.check

    @contextmanager
    def acquire_block(self):
        if self._pid != os.getpid():
            # Forked since it was made (gunpowder forks its fetchers): the
            # copy of the worker's feed leads nowhere here.
            self._pid = os.getpid()
            self._connect()
        block = next_unchecked(self._feed, self._check)
        if block is None:
            if isinstance(self._feed, _DriverFeed):
                self._feed.close()  # as daisy 1.x's disconnects: the driver may end the run
            yield None
            return
        try:
            yield block
        except BaseException as error:
            block.status = BlockStatus.FAILED
            self._feed.release(block._spatial_id, describe(error))
            raise
        if block.status == BlockStatus.FAILED:
            self._feed.release(block._spatial_id, "the worker function set the block's status to FAILED")
        else:
            block.status = BlockStatus.SUCCESS
            self._feed.release(block._spatial_id, None)

    def __del__(self):
        close = getattr(getattr(self, "_feed", None), "close", None)
        if close is not None:
            close()


def _require(context, keys):
    """Says which of ``keys`` the context lacks, and what to do (a
    `KeyError`, as daisy's ``Client`` raises, with a reason)."""
    missing = [key for key in keys if key not in context]
    if missing:
        raise KeyError(
            f"daisy.Client(): {Context.ENV_VARIABLE} has no {' and no '.join(map(repr, missing))} "
            f"({context!r}). A process a worker function started inherits a whole context; a "
            "worker started by hand needs the context init_callback_fn(context) gets "
            "(DAISY_CONTEXT={context.to_env()} python worker.py, as in daisy 1.x), or run "
            "`python -m daisy_rs.worker --context-file <run_dir>/context.json --task <task>`"
        )


class _DriverFeed:
    """The blocks of a worker started by hand (`daisy_rs._native.DriverClient`),
    as a feed (see `daisy_rs._feed`), with the task's check function."""

    def __init__(self, context):
        from daisy_rs import _native

        address = f"{context['hostname']}:{context['port']}"
        self._client = _native.DriverClient([address], context["run_token"], context["task_id"])
        self.worker_id = self._client.worker_id
        self.next_block = self._client.next_block
        self.release = self._client.release
        self.found_done = self._client.found_done
        self.check = _check_function(self._client.function, context["task_id"])

    def close(self):
        self._client.close()


def _check_function(function, task_id):
    """The task's check function from its function's description
    ``(kind, source, search_path)``, or None: a function pickled by
    ``run_blockwise`` carries it (one named ``"module:function"`` does
    not). A pickle that does not load here leaves it out, saying so."""
    if function is None or function[0] != "pickle":
        return None
    _, path, search_path = function
    for directory in reversed(search_path):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    try:
        with open(path, "rb") as file:
            return pickle.load(file).get("check_function")
    except Exception as error:  # noqa: BLE001 — the run goes on without it
        logging.getLogger(__name__).warning(
            "task %r: its check function does not load in this process (%s: %s): blocks it "
            "would call done run here",
            task_id,
            type(error).__name__,
            error,
        )
        return None


class _Ended:
    """The relay of a worker that is gone: no blocks."""

    check = None

    def next_block(self):
        return None

    def release(self, block_id, error):
        pass

    def close(self):
        pass
