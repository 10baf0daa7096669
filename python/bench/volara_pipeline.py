"""A volara 1.0.5 pipeline on a synthetic 3-D volume, timed on this engine,
daisy 1.2.3 and daisy 2.0.0 in one run, with each engine's output compared
to daisy 1.2.3's.

The pipeline is volara's segmentation chain: ExtractFrags -> AffAgglom ->
GraphMWS over affinities of a grid of cubes (with noise, so no two edge
scores tie), blocks of 16^3 that cut the cubes, 4 workers. Modes:
``multiprocessing`` (volara's default: daisy workers run volara's loop),
``local-worker`` (``worker_config=LocalWorker()``: each worker function
starts ``volara-cli blockwise-worker``, which calls ``daisy.Client()``)
and ``serial`` (``daisy.SerialServer``).

    python python/bench/volara_pipeline.py --daisy-rs PY --daisy1 PY1 [--daisy2 PY2] [--size 64] [--rounds 2]

Each PY is a Python with volara 1.0.5 and its dependencies; ``--daisy-rs``
has daisy_rs (``import daisy`` switched with DAISY_RS_AS_DAISY=1), the
others daisy 1.2.3 or 2.0.0.
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import textwrap

import numpy as np
from engines import environment, print_ratios

PIPELINE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import numpy as np
    from funlib.geometry import Coordinate
    from funlib.persistence.arrays import prepare_ds
    from volara.blockwise import AffAgglom, ExtractFrags, GraphMWS
    from volara.datasets import Affs, Labels
    from volara.dbs import SQLite
    from volara.logging import set_log_basedir
    from volara.lut import LUT
    from volara.segment_utils import seg_to_affgraph
    from volara.workers import LocalWorker

    mode, size, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    here = Path.cwd()
    set_log_basedir(here / "volara_logs")
    cube = size // 4
    labels = np.zeros((size,) * 3, dtype=np.uint64)
    for i, corner in enumerate(np.ndindex(4, 4, 4)):
        labels[tuple(slice(c * cube, (c + 1) * cube) for c in corner)] = i + 1
    nhood = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    affs_data = seg_to_affgraph(labels, nhood=nhood).astype(np.float32) * 0.75
    affs_data += np.random.default_rng(3).random(affs_data.shape, dtype=np.float32) * 0.25
    array = prepare_ds(here / "data.zarr" / "affs", shape=affs_data.shape,
                       voxel_size=Coordinate(1, 1, 1), dtype=affs_data.dtype, mode="w")
    array[:] = affs_data
    array._source_data.attrs["neighborhood"] = nhood

    affs = Affs(store=here / "data.zarr" / "affs")
    frags = Labels(store=here / "data.zarr" / "frags")
    db = SQLite(path=here / "data.zarr" / "rag.sqlite", node_attrs={"size": "int"},
                edge_attrs={"aff": "float"}, ndim=3)
    lut = LUT(path=here / "data.zarr" / "lut.npz")
    parallel = {} if mode == "serial" else {"num_workers": workers}
    if mode == "local-worker":
        parallel["worker_config"] = LocalWorker()
    block = Coordinate(16, 16, 16)
    context = Coordinate(2, 2, 2)
    pipeline = (
        ExtractFrags(db=db, affs_data=affs, frags_data=frags, block_size=block, context=context,
                     bias=[-0.5, -0.5, -0.5], **parallel)
        + AffAgglom(db=db, affs_data=affs, frags_data=frags, block_size=block, context=context,
                    scores={"aff": [Coordinate(1, 0, 0), Coordinate(0, 1, 0), Coordinate(0, 0, 1)]},
                    **parallel)
        + GraphMWS(db=db, lut=lut, weights={"aff": (1.0, -0.5)}, roi=affs.array("r").roi)
    )
    started = time.perf_counter()
    pipeline.run_blockwise(multiprocessing=mode != "serial")
    seconds = time.perf_counter() - started
    fragments = frags.array("r")[:]
    table = lut.load()
    segment_of = dict(zip(table[0].tolist(), table[1].tolist()))
    name = {}
    for fragment in sorted(segment_of):
        name.setdefault(segment_of[fragment], fragment)
    segments = np.vectorize(lambda f: name[segment_of[int(f)]] if f else 0, otypes=[np.uint64])(fragments)
    np.savez("result.npz", frags=fragments, segs=segments)
    print("SECONDS", seconds)
    """
)


def run(python, switched, mode, size, workers):
    """Seconds of the pipeline's run_blockwise, and its fragments and
    segments (segments named by their smallest fragment)."""
    env = environment(python, switched)
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run(
            [python, "-c", PIPELINE, mode, str(size), str(workers)],
            cwd=cwd, env=env, capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{python} {mode} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        seconds = float(done.stdout.split("SECONDS")[-1].split()[0])
        with np.load(os.path.join(cwd, "result.npz")) as result:
            return seconds, result["frags"], result["segs"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daisy-rs", required=True)
    parser.add_argument("--daisy1", required=True)
    parser.add_argument("--daisy2")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default="multiprocessing,local-worker,serial")
    args = parser.parse_args()
    engines = {"daisy 1.2.3": (args.daisy1, False), "daisy_rs": (args.daisy_rs, True)}
    if args.daisy2:
        engines["daisy 2.0.0"] = (args.daisy2, False)
    for mode in args.modes.split(","):
        seen = {name: [] for name in engines}
        outputs = {}
        for _ in range(args.rounds):
            for name, (python, switched) in engines.items():
                seconds, frags, segs = run(python, switched, mode, args.size, args.workers)
                seen[name].append(seconds)
                outputs[name] = (frags, segs)
        reference = outputs["daisy 1.2.3"]
        print(f"{mode}: {args.size}^3 voxels, blocks of 16^3, {args.workers} workers")
        for name, times in seen.items():
            frags, segs = outputs[name]
            same = np.array_equal(frags, reference[0]) and np.array_equal(segs, reference[1])
            runs = ", ".join(f"{t:.2f}" for t in times)
            print(f"  {name:<12} median {statistics.median(times):6.2f} s  (runs {runs})  "
                  f"output {'equal to' if same else 'DIFFERS from'} daisy 1.2.3's")
        print_ratios(seen, indent="  ")


if __name__ == "__main__":
    main()
