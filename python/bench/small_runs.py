"""Small runs: how long one `run_blockwise` of 4 no-op blocks with 2
workers takes, on this engine and on the real daisy 2.0.0 and 1.2.3, in
one run. Test suites of libraries built on daisy (volara's has 205
tests) are hundreds of such runs, so start-up is what they wait for.

Each engine runs in its own interpreter with `import daisy` (daisy_rs
through DAISY_RS_AS_DAISY=1), every repetition a fresh task in a fresh
working directory inside one process (as a test suite does); engines
alternate repetition by repetition so load on the machine falls on all
of them alike. The time covers the whole call: driver and worker
start-up, the blocks, the end of the run.

    python python/bench/small_runs.py --daisy2 PY2 [--daisy1 PY1] [--repeat N]

PY2 (PY1): a Python in which `import daisy` is daisy 2.0.0 (1.2.3); this
interpreter must have daisy_rs installed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

from engines import environment, print_ratios

RUN = textwrap.dedent(
    """
    import inspect, json, os, sys, time
    import daisy

    def noop(block):
        pass

    # daisy 1.x has no way to turn its progress off
    takes = inspect.signature(daisy.run_blockwise).parameters
    quiet = {{"progress": False, "summary": False}} if "summary" in takes else {{}}
    times = []
    for i in range({repeat}):
        os.chdir(os.path.join(sys.argv[1], str(i)))
        task = daisy.Task(
            f"small{{i}}", daisy.Roi((0,), (4,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
            process_function=noop, read_write_conflict=False, num_workers=2,
        )
        started = time.perf_counter()
        assert daisy.run_blockwise([task], **quiet) is not False
        times.append(time.perf_counter() - started)
    print(json.dumps(times))
    """
)


def timings(python, repeat, switched):
    """Seconds per run, ``repeat`` runs in one interpreter."""
    env = environment(python, switched)
    with tempfile.TemporaryDirectory() as cwd:
        for i in range(repeat):
            os.mkdir(os.path.join(cwd, str(i)))
        done = subprocess.run(
            [python, "-c", RUN.format(repeat=repeat), cwd],
            cwd=cwd, env=env, capture_output=True, text=True, check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"{python} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daisy2", required=True, help="a Python with daisy 2.0.0")
    parser.add_argument("--daisy1", help="a Python with daisy 1.2.3")
    parser.add_argument("--repeat", type=int, default=10, help="runs per engine and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    engines = {"daisy_rs": (sys.executable, True), "daisy 2.0.0": (args.daisy2, False)}
    if args.daisy1:
        engines["daisy 1.2.3"] = (args.daisy1, False)
    seen = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, (python, switched) in engines.items():
            # The first run of an interpreter imports the engine: left out.
            seen[name] += timings(python, args.repeat + 1, switched)[1:]
    print(f"{'engine':<12} {'median':>8} {'p10':>8} {'p90':>8}   runs of 4 blocks, 2 workers")
    for name, times in seen.items():
        deciles = statistics.quantiles(times, n=10)
        print(f"{name:<12} {statistics.median(times):8.3f} {deciles[0]:8.3f} {deciles[-1]:8.3f} s")
    print_ratios(seen)


if __name__ == "__main__":
    main()
