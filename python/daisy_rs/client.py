"""`Client`: what a worker function loops over, as in daisy.

    def start_worker():
        model = load_model()              # once per worker
        client = daisy.Client()
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                predict(model, block)

Blocks come from the worker this function runs in (``python -m
daisy_rs.worker``): it keeps the connection to the driver, its
heartbeats, its batches and prefetch, and hands blocks to the function
in process. An exception inside ``with`` fails the block (its traceback
is the block's error) and propagates, as in daisy.
"""

from __future__ import annotations

from contextlib import contextmanager

from daisy_rs import _code
from daisy_rs.block import Block, BlockStatus


class Client:
    """The blocks of the worker function running in this process.

    ``context`` is accepted for daisy's signature and ignored: the worker
    already knows its driver.
    """

    def __init__(self, context=None):
        worker = _code.current_worker()
        if worker is None:
            raise RuntimeError(
                "daisy_rs.Client() works inside a worker function that daisy_rs runs "
                "(a Task whose process_function takes no argument); unlike daisy 2.0 it "
                "does not connect a script of its own to a driver: start such workers "
                "with `python -m daisy_rs.worker` (see docs/python.md)"
            )
        self._feed, self._check = worker

    @contextmanager
    def acquire_block(self):
        block = self._next_unchecked()
        if block is None:
            yield None
            return
        try:
            yield block
        except BaseException as error:
            block.status = BlockStatus.FAILED
            self._feed.release(block._spatial_id, _code.describe(error))
            raise
        if block.status == BlockStatus.FAILED:
            self._feed.release(block._spatial_id, "the worker function set the block's status to FAILED")
        else:
            block.status = BlockStatus.SUCCESS
            self._feed.release(block._spatial_id, None)

    def _next_unchecked(self):
        """The next block the task's check_function does not call done
        (those are released as done, or failed if the check raises)."""
        while True:
            wire = self._feed.next_block()
            if wire is None:
                return None
            block = Block._from_wire(*wire)
            if self._check is None:
                return block
            try:
                if not self._check(block):
                    return block
            except Exception as error:  # noqa: BLE001 — the block's failure
                self._feed.release(block._spatial_id, _code.describe(error))
                continue
            self._feed.release(block._spatial_id, None)
