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
        feed = _code.current_feed()
        if feed is None:
            raise RuntimeError(
                "daisy_rs.Client() works inside a worker function that daisy_rs runs "
                "(a Task whose process_function takes no argument); unlike daisy 2.0 it "
                "does not connect a script of its own to a driver: start such workers "
                "with `python -m daisy_rs.worker` (see docs/python.md)"
            )
        self._feed = feed

    @contextmanager
    def acquire_block(self):
        wire = self._feed.next_block()
        if wire is None:
            yield None
            return
        block = Block._from_wire(*wire)
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
