"""Writes into a sharded Zarr array: what `writes` costs, and what it saves.

A Zarr v3 array of 512×512 int32 in chunks of 8×8 and shards of 64×64
(64 shards), one task of 16×16 blocks (4 chunks each, 16 blocks per
shard, 1,024 blocks), `read_write_conflict=False`, 4 workers; each block
does 20 ms of work (a sleep: the engine's view of a block that computes
elsewhere), then writes its id + 1 into its region. Three runs, each in a
fresh interpreter and directory, all in one invocation:

- this engine without `writes` (what every engine does today),
- this engine with `writes=[array]`,
- daisy 2.0.0, for its lost-block count.

Prints each run's wall time (the whole `run_blockwise` call), blocks per
second, blocks whose writes were lost (read back after the run), and the
ratio of throughput with `writes` to without (the issue asks >= 0.9).

    python python/bench/sharded_writes.py [--work-ms 20] [--workers 4] [--repeat 1]

Needs daisy_rs, daisy==2.0.0, zarr>=3 and numpy in the same environment
(`pip install "./python[test]"`).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap

RUN = textwrap.dedent(
    """
    import json, time
    import numpy as np
    import zarr
    import {module} as daisy

    path = "out.zarr"
    zarr.create_array(store=path, shape=(512, 512), chunks=(8, 8), shards=(64, 64),
                      dtype="int32", fill_value=0)

    def write(block):
        time.sleep({work_ms} / 1000)
        array = zarr.open_array(path, mode="r+")
        array[block.write_roi.to_slices()] = block.block_id[1] + 1

    options = {{"writes": [path]}} if {with_writes} else {{}}
    task = daisy.Task(
        "write",
        total_roi=daisy.Roi((0, 0), (512, 512)),
        read_roi=daisy.Roi((0, 0), (16, 16)),
        write_roi=daisy.Roi((0, 0), (16, 16)),
        process_function=write,
        read_write_conflict=False,
        max_workers={workers},
        **options,
    )
    started = time.perf_counter()
    ok = daisy.run_blockwise([task], progress=False, summary=False)
    seconds = time.perf_counter() - started
    data = zarr.open_array(path, mode="r")[:]
    lost = 0
    for y in range(0, 512, 16):
        for x in range(0, 512, 16):
            roi = daisy.Roi((y, x), (16, 16))
            block = daisy.Block(task.total_roi, roi, roi, task_id="write")
            lost += int(np.any(data[roi.to_slices()] != block.block_id[1] + 1))
    print(json.dumps({{"ok": bool(ok), "seconds": seconds, "lost": lost}}))
    """
)

BLOCKS = (512 // 16) ** 2


def run_once(module, with_writes, work_ms, workers):
    with tempfile.TemporaryDirectory() as cwd:
        script = RUN.format(module=module, with_writes=with_writes, work_ms=work_ms, workers=workers)
        done = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{module} failed:\n{done.stdout}\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["ok"]:
        raise SystemExit(f"{module}: run_blockwise returned False")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-ms", type=float, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1, help="rounds; medians are shown")
    args = parser.parse_args()
    engines = [
        ("daisy_rs, no writes", "daisy_rs", False),
        ("daisy_rs, writes=[array]", "daisy_rs", True),
        ("daisy 2.0.0", "daisy", False),
    ]
    seen = {name: [] for name, _, _ in engines}
    for _ in range(args.repeat):
        for name, module, with_writes in engines:
            seen[name].append(run_once(module, with_writes, args.work_ms, args.workers))
    print(f"{BLOCKS} blocks of {args.work_ms:g} ms, 64 shards, {args.workers} workers")
    print(f"{'engine':<26} {'seconds':>8} {'blocks/s':>9} {'lost':>6}")
    medians = {}
    for name, results in seen.items():
        seconds = statistics.median(r["seconds"] for r in results)
        lost = [r["lost"] for r in results]
        medians[name] = seconds
        print(f"{name:<26} {seconds:>8.2f} {BLOCKS / seconds:>9.1f} {','.join(map(str, lost)):>6}")
    ratio = medians["daisy_rs, no writes"] / medians["daisy_rs, writes=[array]"]
    print(f"throughput with writes / without: {ratio:.2f}x")


if __name__ == "__main__":
    main()
