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
(`daisy_rs._relay`). An exception inside ``with`` fails the block (its
traceback is the block's error) and propagates, as in daisy 2.0.
"""

from __future__ import annotations

import os
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
        self.context = context
        daisy_logging.adopt_log_basedir(context.get("logdir") or None)
        self.task_id = context["task_id"]
        self.worker_id = int(context["worker_id"])
        self._pid = os.getpid()
        if in_process is not None:
            self._feed, self._check = in_process
        else:
            self._connect()

    def _connect(self):
        """Reaches the worker's blocks through its relay."""
        context = self.context
        try:
            self._feed = RelayClient(context)
        except ConnectionRefusedError:
            # As in daisy 2.0: a worker already gone means the run ended.
            import logging

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


class _Ended:
    """The relay of a worker that is gone: no blocks."""

    check = None

    def next_block(self):
        return None

    def release(self, block_id, error):
        pass

    def close(self):
        pass
