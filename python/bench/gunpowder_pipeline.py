"""A gunpowder 1.4.4 prediction pipeline ending in
``DaisyRequestBlocks(num_workers=2)``, timed on this engine and on daisy
1.2.3 in one run: the project's own test pipeline
(python/tests/real_clients/gunpowder_predict.py: ZarrSource -> a 3 x 3
box sum -> IntensityScaleShift -> ZarrWrite, 24 blocks, 2 daisy workers
each forking 2 fetchers with a `daisy.Client()` of their own).

Each engine runs it in a fresh interpreter and directory, twice: the run,
then a re-run with nothing to do (the task's check function finds every
block fetched). Each time is the `run_blockwise` call; each run's
prediction is checked voxel by voxel.

    python python/bench/gunpowder_pipeline.py --daisy-rs PY --daisy1 PY1 [--baseline PYB] [--rounds 3]

PY: a Python with gunpowder 1.4.4, daisy_rs and no daisy distribution
(``import daisy`` switched with DAISY_RS_AS_DAISY=1, as ci/test.sh's
client environments); PY1: one with gunpowder 1.4.4 and daisy 1.2.3;
PYB: as PY with another build of daisy_rs (before a change), run beside.
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import textwrap

from engines import environment, print_ratios

CLIENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "real_clients")

RUN = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import daisy
    import gunpowder_predict as client

    root = client.prepare()
    seconds = []
    for _ in range(2):
        started = time.perf_counter()
        assert client.run(check_function=client.fetched), "not every block completed"
        seconds.append(time.perf_counter() - started)
    raw, pred = root["raw"][:].astype(np.float64), root["pred"][:]
    height, width = raw.shape[0] - 2, raw.shape[1] - 2
    box = sum(raw[dy : dy + height, dx : dx + width] for dy in range(3) for dx in range(3))
    print(json.dumps({"engine": daisy.__name__, "seconds": seconds,
                      "right": bool(np.array_equal(pred, 2 * box + 1))}))
    """
)


def run(python, switched):
    """Seconds of the run and of the re-run, and whether the prediction
    is right."""
    env = environment(python, switched)
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run(
            [python, "-c", RUN, os.path.abspath(CLIENTS)],
            cwd=cwd, env=env, capture_output=True, text=True, check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"{python} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = "daisy_rs" if switched else "daisy"
    if result["engine"] != expected:
        raise SystemExit(f"{python}: import daisy gave {result['engine']}, not {expected}")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daisy-rs", required=True, help="a Python with gunpowder 1.4.4 and daisy_rs")
    parser.add_argument("--daisy1", required=True, help="a Python with gunpowder 1.4.4 and daisy 1.2.3")
    parser.add_argument("--baseline", help="as --daisy-rs, with another build of daisy_rs")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    engines = {"daisy 1.2.3": (args.daisy1, False), "daisy_rs": (args.daisy_rs, True)}
    if args.baseline:
        engines["daisy_rs baseline"] = (args.baseline, True)
    seen = {what: {name: [] for name in engines} for what in ("run", "re-run")}
    right = {name: True for name in engines}
    for _ in range(args.rounds):
        # Engines take turns, so that load falls on both alike.
        for name, (python, switched) in engines.items():
            result = run(python, switched)
            seen["run"][name].append(result["seconds"][0])
            seen["re-run"][name].append(result["seconds"][1])
            right[name] = right[name] and result["right"]
    print("gunpowder 1.4.4, DaisyRequestBlocks(num_workers=2): 24 blocks, 2 workers, 2 fetchers each")
    for what, times in seen.items():
        print(f"{what}{' (nothing to do)' if what == 're-run' else ''}:")
        for name, runs in times.items():
            shown = ", ".join(f"{t:.2f}" for t in runs)
            output = "prediction right" if right[name] else "prediction WRONG"
            print(f"  {name:<17} median {statistics.median(runs):6.2f} s  (runs {shown})  {output}")
        print_ratios(times, indent="  ")


if __name__ == "__main__":
    main()
