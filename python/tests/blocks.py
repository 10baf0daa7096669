"""Process and worker functions of the tests. They live in a module of
their own so that they reach workers both as pickles and by reference
(``"blocks:touch"``)."""

import os
import time
from pathlib import Path


def out_dir():
    return Path(os.environ.get("TEST_OUT", "out"))


def touch(block):
    """Records that the block ran: one file per run of a block."""
    directory = out_dir()
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{block.task_id}-{block.block_id[1]}-{os.getpid()}-{time.monotonic_ns()}"
    (directory / name).write_text(f"{block.read_roi}|{block.write_roi}")


def nap(block):
    time.sleep(0.3)


def noop(block):
    pass


def hold_memory(block):
    """Holds 40 MB for a moment and writes a 1 MB file."""
    data = b"x" * 40_000_000
    out_dir().mkdir(parents=True, exist_ok=True)
    (out_dir() / f"big-{block.block_id[1]}").write_bytes(b"y" * 1_000_000)
    del data


def slow_touch(block):
    touch(block)
    time.sleep(0.3)


def slow_touch_while_asked(block):
    """`slow_touch` while TEST_SLOW is set, else `touch`: a run slow
    enough to interrupt, then a quick re-run of the same pipeline."""
    touch(block)
    if os.environ.get("TEST_SLOW"):
        time.sleep(0.3)


def hang_on_block_0(block):
    """Block 0 never ends (until its worker does); the others are quick."""
    touch(block)
    if block.block_id[1] == 0:
        time.sleep(3600)


def serve(process):
    """A worker function's loop: ``process`` every block of this worker's
    own Client until there are none."""
    import daisy_rs

    client = daisy_rs.Client()
    while True:
        with client.acquire_block() as block:
            if block is None:
                break
            process(block)


def crash_on_blocks_2_and_5(block):
    """Blocks 2 and 5 kill their worker: one exits, one segfaults."""
    import signal
    import sys

    touch(block)
    if block.block_id[1] == 2:
        print("block 2 gives up", file=sys.stderr, flush=True)
        os._exit(3)
    if block.block_id[1] == 5:
        os.kill(os.getpid(), signal.SIGSEGV)


def take_one_block_and_return():
    """A worker function that serves one block, then returns."""
    import daisy_rs

    client = daisy_rs.Client()
    with client.acquire_block() as block:
        if block is not None:
            touch(block)
