"""The time from a `run_blockwise` call to its first block done, on this
engine and on the real daisy 1.2.3 and 2.0.0 in one run, and where this
engine spends it.

A small run as people iterate on: one task of 4 blocks, 2 workers, its
process function from a module that imports numpy; each engine in a
fresh interpreter (the program's first `run_blockwise`, as a script or a
test sees it), `import daisy` and the module done before the call. The
first block is done when its function returns (each engine's function
writes the time then). On daisy_rs the run is also taken apart: the
functions of `daisy_rs` that each step runs are wrapped to write the time
they start and end (the wrappers are inherited by the fork server and
the workers it forks), beside the driver's own events (`events.jsonl`);
each line of the breakdown is the time from the line above to its own,
median over the rounds.

    python python/bench/first_block.py --daisy1 PY1 --daisy2 PY2 [--daisy-rs PY] [--baseline PYB] [--rounds 5]

PY1 (PY2): a Python in which `import daisy` is daisy 1.2.3 (2.0.0), with
numpy; ``--daisy-rs`` (default: this interpreter) has daisy_rs and numpy;
``--baseline``, another build of daisy_rs (before a change), is run and
taken apart beside it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

from engines import environment

WORK = textwrap.dedent(
    """
    import time
    import numpy as np

    def process(block):
        np.ones(16).sum()
        with open("block-ends", "a") as ends:
            ends.write(f"{time.time()}\\n")
    """
)

RUN = textwrap.dedent(
    """
    import inspect, json, os, sys, time
    import daisy
    import work

    if sys.argv[1] == "steps":
        import steps
        steps.wrap()
    takes = inspect.signature(daisy.run_blockwise).parameters
    quiet = {"progress": False, "summary": False} if "summary" in takes else {}
    task = daisy.Task(
        "first", daisy.Roi((0,), (4,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
        process_function=work.process, read_write_conflict=False, num_workers=2,
    )
    called = time.time()
    assert daisy.run_blockwise([task], **quiet) is not False
    returned = time.time()
    print(json.dumps({"called": called, "returned": returned}))
    """
)

# Wrappers around the functions of daisy_rs that each step runs; each
# writes "<time> <pid> <mark>" lines to the file ``marks`` (appended, so
# the forked processes' lines land whole).
STEPS = textwrap.dedent(
    """
    import functools, os, time
    import daisy_rs
    from daisy_rs import _code, _fork_server, _native, run, worker

    def mark(name):
        with open(os.path.join(os.environ["FIRST_BLOCK_DIR"], "marks"), "a") as marks:
            marks.write(f"{time.time()} {os.getpid()} {name}\\n")

    def timed(owner, attribute, name):
        inner = getattr(owner, attribute)

        @functools.wraps(inner)
        def wrapper(*args, **kwargs):
            mark(f"{name} starts")
            try:
                return inner(*args, **kwargs)
            finally:
                mark(f"{name} ends")
        setattr(owner, attribute, wrapper)

    def wrap():
        os.environ["FIRST_BLOCK_DIR"] = os.getcwd()
        timed(run, "_pipeline_file", "pipeline tables")
        timed(run, "_pickle", "pickling")
        timed(_native, "pipeline_problems", "pipeline check")
        timed(_fork_server, "start", "fork server start")
        timed(_native, "start_driver", "driver thread start")
        timed(_fork_server, "_become_worker", "worker set-up")
        timed(_fork_server, "_limit_threads", "thread limits")
        timed(worker, "main", "worker main")
        timed(_code, "load", "function load")
        timed(_fork_server.Server, "close", "fork server end")
        timed(run, "states", "states read")
    """
)

#: The driver's events that mark steps, by the name the breakdown gives.
#: (Not `worker_submitted`: the launcher's answer may come after the
#: worker's blocks, and is then not recorded at all.)
EVENTS = {
    "run_started": "driver: run_started",
    "worker_connected": "driver: worker_connected",
    "block_done": "driver: block_done",
}


def one_run(python, switched, steps):
    """Seconds from the call to the first block's end and to the call's
    return; with ``steps``, also each mark's first time (seconds since the
    call)."""
    env = environment(python, switched)
    with tempfile.TemporaryDirectory() as cwd:
        with open(os.path.join(cwd, "work.py"), "w") as file:
            file.write(WORK)
        with open(os.path.join(cwd, "steps.py"), "w") as file:
            file.write(STEPS)
        done = subprocess.run(
            [python, "-c", RUN, "steps" if steps else "plain"],
            cwd=cwd, env=env, capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{python} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        times = json.loads(done.stdout.strip().splitlines()[-1])
        called = times["called"]
        with open(os.path.join(cwd, "block-ends")) as ends:
            first = min(float(line) for line in ends)
        seen = {"first block done": first - called, "run_blockwise returned": times["returned"] - called}
        if steps:
            seen["marks"] = marks(cwd, called)
        return seen


def marks(cwd, called):
    """Each mark's first time, in seconds since the call."""
    found = {}
    with open(os.path.join(cwd, "marks")) as lines:
        for line in lines:
            at, _pid, name = line.rstrip("\n").split(" ", 2)
            found.setdefault(name, float(at) - called)
    with open(os.path.join(cwd, "daisy_run", "first", "events.jsonl")) as lines:
        for line in lines:
            event = json.loads(line)
            name = EVENTS.get(event["event"])
            if name is not None:
                found.setdefault(name, event["time"] - called)
    return found


def print_breakdown(builds):
    """The marks in the order of their median times (on the first build),
    each with the time since the mark above: median, and range over the
    rounds, per build (``builds``: name -> rounds of marks)."""
    common = set.intersection(*(set(r) for rounds in builds.values() for r in rounds))
    first = next(iter(builds.values()))
    names = sorted(common, key=lambda name: statistics.median(r[name] for r in first))
    header = "".join(f" | {name[:30]:>30}" for name in builds)
    print(f"  {'step (ends at)':<30}{header}")
    print(f"  {'':<30}" + " | since call, step (range)" * len(builds))
    previous = None
    for name in names:
        line = f"  {name:<30}"
        for rounds in builds.values():
            at = [r[name] * 1000 for r in rounds]
            step = [r[name] * 1000 - (r[previous] * 1000 if previous else 0.0) for r in rounds]
            shown = f"{statistics.median(at):6.1f} {statistics.median(step):5.1f} ({min(step):.1f}-{max(step):.1f})"
            line += f" | {shown:>30}"
        print(line)
        previous = name


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daisy-rs", default=sys.executable, help="a Python with daisy_rs")
    parser.add_argument("--baseline", help="a Python with another build of daisy_rs, run beside it")
    parser.add_argument("--daisy1", help="a Python with daisy 1.2.3")
    parser.add_argument("--daisy2", help="a Python with daisy 2.0.0")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    engines = {"daisy_rs": (args.daisy_rs, True)}
    if args.baseline:
        engines["daisy_rs baseline"] = (args.baseline, True)
    if args.daisy1:
        engines["daisy 1.2.3"] = (args.daisy1, False)
    if args.daisy2:
        engines["daisy 2.0.0"] = (args.daisy2, False)
    builds = [name for name in engines if name.startswith("daisy_rs")]
    seen = {name: [] for name in engines}
    steps = {name: [] for name in builds}
    for _ in range(args.rounds):
        # Engines take turns, so that load falls on all of them alike; the
        # wrapped runs are runs of their own (the wrappers cost a little).
        for name, (python, switched) in engines.items():
            seen[name].append(one_run(python, switched, steps=False))
        for name in builds:
            steps[name].append(one_run(engines[name][0], True, steps=True))
    print(f"1 task, 4 blocks, 2 workers, a function from a module importing numpy; {args.rounds} rounds")
    print(f"  {'engine':<18} {'first block':>12} {'range':>14} {'returned':>10} {'range':>14}")
    for name, runs in seen.items():
        first = [r["first block done"] * 1000 for r in runs]
        whole = [r["run_blockwise returned"] * 1000 for r in runs]
        print(
            f"  {name:<18} {statistics.median(first):10.1f}ms {min(first):6.1f}-{max(first):6.1f}"
            f" {statistics.median(whole):8.1f}ms {min(whole):6.1f}-{max(whole):6.1f}"
        )
    ours = seen["daisy_rs"]
    for name, runs in seen.items():
        if name == "daisy_rs":
            continue
        for what in ("first block done", "run_blockwise returned"):
            ratio = statistics.median(r[what] for r in ours) / statistics.median(r[what] for r in runs)
            print(f"  daisy_rs / {name}, {what}: {ratio:.2f}x the time")
    print("step by step, ms (runs of their own, with the wrappers):")
    print_breakdown({
        name: [{**r["marks"], "first block done": r["first block done"],
                "run_blockwise returned": r["run_blockwise returned"]} for r in rounds]
        for name, rounds in steps.items()
    })


if __name__ == "__main__":
    main()
