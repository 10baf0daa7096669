"""daisy 2.0 baseline for `cargo bench -p daisy-driver --bench throughput`.

Runs `daisy.run_blockwise` on one 1-D task of BLOCKS blocks (read = write
shape 1, no read/write conflict, so every block is ready at once) with a
no-op process function and `max_workers=WORKERS`, and prints one JSON line:

    {"blocks": 10000, "workers": 4, "seconds": 0.87, "total_seconds": 1.03,
     "blocks_per_s": 11494.3, "version": "2.0.0"}

daisy 2.0 runs every worker as its own `python -m daisy._subprocess_worker`
process (a Python `daisy.Client` acquire/process/release loop), so the
figures include Python on the worker side, as they do for its users.

- `seconds`: from the first block any worker processed to the return of
  `run_blockwise`, the same span the Rust side measures (first acquire to
  the driver's exit). Each worker process writes the time of its first
  block to a file; the earliest counts.
- `total_seconds`: the whole `run_blockwise` call, worker start-up
  (spawning interpreters, unpickling the function) included.

Tracking (done markers) is left off, daisy's default; progress bars and the
summary are off. The run happens in a temporary directory, because daisy
writes `daisy_logs/` into the working directory.

Usage: python daisy2_throughput.py BLOCKS WORKERS
"""

import json
import os
import shutil
import sys
import tempfile
import time

import daisy
from funlib.geometry import Roi


def first_block_recorder(directory):
    """A no-op block function that, in each worker process, writes the
    time of its first block to `directory/<pid>`. The mutable default is
    per process: cloudpickle ships a copy to every worker."""

    def process(block, _state={"first": True}):
        if _state["first"]:
            _state["first"] = False
            with open(os.path.join(directory, str(os.getpid())), "w") as f:
                f.write(repr(time.time()))

    return process


def main():
    blocks, workers = int(sys.argv[1]), int(sys.argv[2])
    work = tempfile.mkdtemp(prefix="daisy2-throughput-")
    firsts_dir = os.path.join(work, "firsts")
    os.mkdir(firsts_dir)
    os.chdir(work)
    task = daisy.Task(
        "noop",
        Roi((0,), (blocks,)),
        Roi((0,), (1,)),
        Roi((0,), (1,)),
        process_function=first_block_recorder(firsts_dir),
        read_write_conflict=False,
        fit="valid",
        max_workers=workers,
    )
    start = time.time()
    ok = daisy.run_blockwise([task], progress=False, summary=False)
    end = time.time()
    if not ok:
        sys.exit("daisy 2.0: run_blockwise reported failed blocks")
    firsts = [float(open(os.path.join(firsts_dir, f)).read()) for f in os.listdir(firsts_dir)]
    seconds = end - min(firsts)
    os.chdir(tempfile.gettempdir())
    shutil.rmtree(work)
    print(
        json.dumps(
            {
                "blocks": blocks,
                "workers": workers,
                "seconds": seconds,
                "total_seconds": end - start,
                "blocks_per_s": blocks / seconds,
                "version": daisy.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
