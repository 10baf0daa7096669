"""Thread counts set by the engine, against the same run without them and
against daisy 2.0.0, in one run.

A numpy-heavy block function (matrix products through numpy's threaded
BLAS), 4 workers on this machine. With ``requires={"cpu": n}`` under
``resources={"cpu": 4 * n}`` daisy_rs sets each worker's
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and friends to ``n``; without
``requires`` (and on daisy 2.0.0, which sets nothing) every worker's BLAS
starts one thread per core of the machine, and 4 workers fight over the
cores. The wall time covers the whole ``run_blockwise`` call.

    python python/bench/threads.py [--blocks N] [--size N] [--products N] [--repeat N]

Needs daisy_rs, numpy and daisy==2.0.0 installed in the same environment.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

from engines import print_ratios

WORKERS = 4

RUN = textwrap.dedent(
    """
    import json, time
    import {module} as daisy
    import numpy as np

    def products(block):
        rng = np.random.default_rng(block.block_id[1])
        a = rng.random(({size}, {size}))
        for _ in range({products}):
            a = a @ a
            a /= np.abs(a).max()

    task = daisy.Task(
        "matmul",
        total_roi=daisy.Roi((0,), ({blocks},)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=products,
        read_write_conflict=False,
        max_workers={workers},
        {requires}
    )
    started = time.perf_counter()
    ok = daisy.run_blockwise([task], progress=False, summary=False, {resources})
    print(json.dumps({{"ok": bool(ok), "seconds": time.perf_counter() - started}}))
    """
)

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


def engines(cpus_per_worker):
    """Each engine's name, module and the Task/run_blockwise arguments."""
    budget = WORKERS * cpus_per_worker
    return {
        "daisy_rs": ("daisy_rs", f'requires={{"cpu": {cpus_per_worker}}},', f'resources={{"cpu": {budget}}}'),
        "daisy_rs, thread counts unset": ("daisy_rs", "", ""),
        "daisy 2.0.0": ("daisy", "", ""),
    }


def run_once(module, requires, resources, args):
    script = RUN.format(
        module=module,
        requires=requires,
        resources=resources,
        blocks=args.blocks,
        size=args.size,
        products=args.products,
        workers=WORKERS,
    )
    # The user's own thread counts would win over the engine's: measure
    # with none set, as a fresh login shell has.
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(
            [sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True
        )
    if out.returncode != 0:
        sys.exit(f"{module} failed:\n{out.stderr}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["ok"]:
        sys.exit(f"{module}: run_blockwise returned False")
    return result["seconds"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=48)
    parser.add_argument("--size", type=int, default=384, help="matrix side")
    parser.add_argument("--products", type=int, default=12, help="matrix products per block")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--cpus-per-worker",
        type=int,
        default=max(1, (os.cpu_count() or 1) // WORKERS),
        help="the cpu each worker requires (default: the machine's cores over 4)",
    )
    args = parser.parse_args()
    print(
        f"{args.blocks} blocks of {args.products} products of {args.size}x{args.size} "
        f"matrices, {WORKERS} workers, {os.cpu_count()} cores, "
        f"{args.cpus_per_worker} cpu per worker"
    )
    seen = {name: [] for name in engines(args.cpus_per_worker)}
    # Engines alternate round by round, so a slow spell of a shared
    # machine is spread over all of them.
    for _ in range(args.repeat):
        for name, (module, requires, resources) in engines(args.cpus_per_worker).items():
            seen[name].append(run_once(module, requires, resources, args))
    for name, times in seen.items():
        print(f"  {name}: median {statistics.median(times):.2f} s of {len(times)}")
    print_ratios(seen, indent="  ")


if __name__ == "__main__":
    main()
