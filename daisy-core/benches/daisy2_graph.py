"""daisy 2.0 baseline for `cargo bench -p daisy-core --bench graph`.

Times `BlockwiseDependencyGraph(...).enumerate_all_dependencies()` (every
block of every level with its upstream blocks, as a Python list)
on one of daisy's four graph cases and prints one JSON line:

    {"case": 2, "seconds": 7.9, "runs": 1, "blocks": 970299,
     "upstream": 2852486, "id_sum": 2773450045856, "levels": 8,
     "peak_rss_kib": 2600668, "api": "native", "version": "2.0.0"}

`seconds` is the best of `--repeat` runs (building the graph and
enumerating it); `upstream` counts upstream links and `id_sum` adds the
spatial ids of every block and every upstream block (mod 2^64), computed
after the clock stops, so the Rust side can check it built the same
graph; `peak_rss_kib` is `ru_maxrss` of this process (interpreter and
imports included).

Usage: python daisy2_graph.py CASE [--repeat N] [--wrapped]

By default this calls the extension class
`daisy._daisy.BlockwiseDependencyGraph` directly: its enumeration is
daisy 2.0's Rust core plus one PyO3 object per block, and its times are
close to daisy's published figures. `--wrapped` goes through the public
`daisy.BlockwiseDependencyGraph`, whose Python wrapper re-wraps every
block and takes 2 to 3 times as long (the comparison is then kinder to
us).
"""

import argparse
import gc
import json
import resource
import time

import daisy
from funlib.geometry import Roi

# (total shape, read offset, read shape, write offset, write shape, conflict)
# per dimension, all three dimensions alike. The no-context cases use
# read_write_conflict=True as well (daisy's default); with no context
# there is one level either way.
CASES = {
    1: (1000, 0, 10, 0, 10, True),
    2: (1000, 0, 14, 2, 10, True),
    3: (200, 0, 4, 0, 4, True),
    4: (500, 0, 7, 1, 5, True),
}


def cube(offset, shape):
    return Roi((offset,) * 3, (shape,) * 3)


def build_graph(case, wrapped):
    total, read_off, read_shape, write_off, write_shape, conflict = CASES[case]
    cls = daisy.BlockwiseDependencyGraph if wrapped else daisy._daisy.BlockwiseDependencyGraph
    return cls(
        "bench",
        cube(read_off, read_shape),
        cube(write_off, write_shape),
        conflict,
        "valid",
        total_read_roi=cube(0, total),
    )


def checksum(dependencies):
    """(blocks, upstream links, sum of all spatial ids mod 2^64), as the
    Rust side counts them."""
    upstream = sum(len(deps) for _, deps in dependencies)
    ids = sum(b.block_id[1] + sum(u.block_id[1] for u in deps) for b, deps in dependencies)
    return len(dependencies), upstream, ids % 2**64


def run_once(case, wrapped):
    """Build the graph and enumerate it (timed), then check-sum it (not
    timed); returns (seconds, checksum, levels)."""
    gc.collect()
    start = time.perf_counter()
    graph = build_graph(case, wrapped)
    dependencies = graph.enumerate_all_dependencies()
    seconds = time.perf_counter() - start
    return seconds, checksum(dependencies), graph.num_levels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", type=int, choices=sorted(CASES))
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best counts")
    parser.add_argument(
        "--wrapped", action="store_true", help="time the public Python wrapper"
    )
    args = parser.parse_args()

    best = None
    for _ in range(max(args.repeat, 1)):
        seconds, (blocks, upstream, id_sum), levels = run_once(args.case, args.wrapped)
        best = seconds if best is None else min(best, seconds)
    result = {
        "case": args.case,
        "seconds": best,
        "runs": max(args.repeat, 1),
        "blocks": blocks,
        "upstream": upstream,
        "id_sum": id_sum,
        "levels": levels,
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "api": "wrapped" if args.wrapped else "native",
        "version": daisy.__version__,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
