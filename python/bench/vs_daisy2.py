"""Python process functions: this engine against daisy 2.0.0, in one run.

100,000 no-op blocks (a 1-D task, no conflicts), 4 workers, default
settings on both sides, each engine in a fresh interpreter and working
directory; the wall time covers the whole `run_blockwise` call (driver
and worker start-up included). Then the Python-side cost of one block
in a worker: making the `Block` and calling the function, the path
`daisy_rs._code.run_block` takes for every block.

    python python/bench/vs_daisy2.py [--blocks N] [--workers N] [--repeat N]

Needs daisy_rs and daisy==2.0.0 installed in the same environment.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

RUN = textwrap.dedent(
    """
    import json, sys, time
    import {module} as daisy

    def noop(block):
        pass

    task = daisy.Task(
        "noop",
        total_roi=daisy.Roi((0,), ({blocks},)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=noop,
        read_write_conflict=False,
        max_workers={workers},
    )
    started = time.perf_counter()
    ok = daisy.run_blockwise([task], progress=False, summary=False)
    print(json.dumps({{"ok": bool(ok), "seconds": time.perf_counter() - started}}))
    """
)


def run_once(module, blocks, workers):
    with tempfile.TemporaryDirectory() as cwd:
        script = RUN.format(module=module, blocks=blocks, workers=workers)
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        raise SystemExit(f"{module} failed:\n{done.stdout}\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["ok"]:
        raise SystemExit(f"{module}: run_blockwise returned False")
    return result["seconds"]


def per_block_micros(n=200_000):
    """Python-side µs per block: Block made, function called, outcome."""
    from daisy_rs import _code

    def noop(block):
        pass

    read = write = ((0,), (1,))
    run_block = _code.run_block
    started = time.perf_counter()
    for i in range(n):
        run_block(noop, None, "noop", i, read, write)
    return (time.perf_counter() - started) / n * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    seconds = {"daisy": [], "daisy_rs": []}
    for _ in range(args.repeat):  # interleaved, so drift hits both alike
        for module in seconds:
            seconds[module].append(run_once(module, args.blocks, args.workers))
    print(f"{args.blocks} no-op blocks, {args.workers} workers, best of {args.repeat}:")
    rates = {}
    for module, times in seconds.items():
        best = min(times)
        rates[module] = args.blocks / best
        shown = ", ".join(f"{t:.2f}" for t in times)
        print(f"  {module:9} {best:6.2f} s  {rates[module]:9.0f} blocks/s  (runs: {shown} s)")
    print(f"  daisy_rs / daisy 2.0.0: {rates['daisy_rs'] / rates['daisy']:.1f}x blocks/s")
    micros = statistics.median(per_block_micros() for _ in range(3))
    print(f"  Python-side cost per block in a worker: {micros:.2f} us")


if __name__ == "__main__":
    main()
