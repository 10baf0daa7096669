"""volara 1.0.5's own test suite, timed on this engine, daisy 1.2.3 and
daisy 2.0.0 in one run: a library's test suite is hundreds of small
`run_blockwise` calls, so this is start-up as users meet it.

    python python/bench/volara_suite.py --tests DIR --daisy-rs PY [--daisy1 PY1] [--daisy2 PY2] [--rounds N]

DIR holds volara's tests (the sdist's ``tests/`` with the repository's
``conftest.py``; ``../shared/compat/run-volara-suite.sh`` shows how to make
it). Each PY is a Python with volara 1.0.5 and its dependencies: for
``--daisy-rs`` with daisy_rs installed (``import daisy`` switched with
DAISY_RS_AS_DAISY=1), for the others with daisy 1.2.3 or 2.0.0. Rounds
alternate the engines; the table gives each engine's wall times and the
ratios of medians, and every run's pytest summary line.
"""

import argparse
import os
import re
import statistics
import subprocess
import time

from engines import environment, print_ratios


def run_suite(python, tests, switched):
    """Wall seconds of one pytest run of ``tests``, and its summary line."""
    env = environment(python, switched)
    started = time.perf_counter()
    done = subprocess.run(
        [python, "-m", "pytest", tests, "-q", "-p", "no:cacheprovider", "--timeout", "300"],
        cwd=os.path.dirname(os.path.abspath(tests)), env=env, capture_output=True, text=True, check=False,
    )
    seconds = time.perf_counter() - started
    summary = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    return seconds, summary[-1] if summary else f"exit {done.returncode}: {done.stdout[-500:]}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True)
    parser.add_argument("--daisy-rs", required=True)
    parser.add_argument("--daisy1")
    parser.add_argument("--daisy2")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    engines = {"daisy_rs": (args.daisy_rs, True)}
    if args.daisy1:
        engines["daisy 1.2.3"] = (args.daisy1, False)
    if args.daisy2:
        engines["daisy 2.0.0"] = (args.daisy2, False)
    seen = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, (python, switched) in engines.items():
            seconds, summary = run_suite(python, args.tests, switched)
            seen[name].append(seconds)
            print(f"{name:<12} {seconds:7.1f} s   {summary}", flush=True)
    for name, times in seen.items():
        print(f"{name:<12} median {statistics.median(times):7.1f} s")
    print_ratios(seen)


if __name__ == "__main__":
    main()
