"""A daisy worker command whose per-block time is mostly I/O.

Each block is 'read' (50 ms of sleeping, as if fetching a chunk from a
network file system), 'computed' (5 ms) and 'written' (20 ms). A reader
thread reads blocks from stdin and loads them as soon as they arrive, so
when the worker feeds blocks ahead (the task's `prefetch`), the next
block is being read while this one is computed and written: the time per
block drops from read + compute + write to about max(read, compute +
write). Without prefetch the worker sends the next block only after this
one is answered, and the reader thread has nothing to read ahead.

Results go to stdout, one JSON line per block, in the order finished.
"""

import json
import queue
import sys
import threading
import time

READ_S = 0.050
COMPUTE_S = 0.005
WRITE_S = 0.020


def read_ahead(loaded):
    """Loads every block as soon as its line arrives; None at the end."""
    for line in sys.stdin:
        block = json.loads(line)
        time.sleep(READ_S)
        loaded.put(block)
    loaded.put(None)


def main():
    # At most 2 loaded blocks waiting: memory stays bounded however far
    # ahead the worker feeds.
    loaded = queue.Queue(maxsize=2)
    threading.Thread(target=read_ahead, args=(loaded,), daemon=True).start()
    while (block := loaded.get()) is not None:
        time.sleep(COMPUTE_S)
        time.sleep(WRITE_S)
        print(json.dumps({"block_id": block["block_id"], "ok": True}), flush=True)


if __name__ == "__main__":
    main()
