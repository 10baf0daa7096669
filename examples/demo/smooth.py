"""Worker command of the demo's "smooth" task: a 3x3x3 mean filter.

daisy starts it once per worker and feeds it blocks, one JSON object per
line on stdin:

    {"task_id": "smooth", "block_id": 7,
     "read_roi":  {"offset": [31, -1, 63], "shape": [34, 34, 34]},
     "write_roi": {"offset": [32, 0, 64], "shape": [32, 32, 32]}}

For each block it reads the block's read region of the input array (the
write region plus one voxel of context on every side, which lies in up to 8
chunks of the input), averages every voxel's 3x3x3 neighbourhood, writes
the write region as one chunk of the output array, and answers

    {"block_id": 7, "ok": true}

on stdout (or "ok": false with an "error"). Any other line it prints goes
to daisy's log of the worker (daisy_run/demo/logs/smooth/).

Voxels outside the volume repeat the border voxel, so the output has the
input's shape. The mean is rounded to the nearest integer:
(sum of the 27 voxels + 13) // 27.

Usage: python3 examples/demo/smooth.py INPUT.zarr OUTPUT.zarr
"""

import json
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the clone
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinyzarr  # noqa: E402


def box_sum_3(rows):
    """Sums of 3 neighbours along the rows: n rows of m -> n - 2 rows of m.

    `rows` is a list of equally long lists (or bytes); row i of the result
    is rows[i] + rows[i + 1] + rows[i + 2], element by element.
    """
    return [[a + b + c for a, b, c in zip(*rows[i : i + 3])] for i in range(len(rows) - 2)]


def smooth(data, shape):
    """The 3x3x3 means of the inside of a block: `data` (bytes, C order) of
    `shape` (n0, n1, n2) gives (n0 - 2) * (n1 - 2) * (n2 - 2) bytes.

    The 3-D sum is three 1-D sums, one per axis (the box filter is
    separable): 6 additions per voxel instead of 26.
    """
    n0, n1, n2 = shape
    # Along x: each row of n2 voxels becomes n2 - 2 sums of three.
    planes = []
    for i in range(n0):
        plane = []
        for j in range(n1):
            r = data[(i * n1 + j) * n2 : (i * n1 + j + 1) * n2]
            plane.append([a + b + c for a, b, c in zip(r, r[1:], r[2:])])
        planes.append(plane)
    # Along y: within each plane, rows j, j+1, j+2 add up.
    planes = [box_sum_3(plane) for plane in planes]
    # Along z: planes i, i+1, i+2 add up, row by row.
    out = bytearray()
    for i in range(n0 - 2):
        for r0, r1, r2 in zip(planes[i], planes[i + 1], planes[i + 2]):
            out += bytes((a + b + c + 13) // 27 for a, b, c in zip(r0, r1, r2))
    return out


class Smoother:
    def __init__(self, source, target):
        self.source = source
        self.target = target
        self.source_meta = None

    def process(self, block):
        read, write = block["read_roi"], block["write_roi"]
        if self.source_meta is None:
            # Opened on the first block: the input exists once a block of
            # "generate" finished, and daisy only sends blocks whose input
            # is complete. Several workers may create the output at once.
            self.source_meta = tinyzarr.open_array(self.source)
            tinyzarr.create(
                self.target,
                self.source_meta["shape"],
                tinyzarr.chunk_shape(self.source_meta),
                {"description": f"daisy demo: 3x3x3 mean of {os.path.basename(self.source)}"},
            )
        context = [w - r for w, r in zip(write["offset"], read["offset"])]
        if context != [1, 1, 1] or [
            r - w for r, w in zip(read["shape"], write["shape"])
        ] != [2, 2, 2]:
            raise ValueError(f"a 3x3x3 filter needs a context of 1 on each side, not {block}")
        data = tinyzarr.read_region(self.source, self.source_meta, read["offset"], read["shape"])
        index = tinyzarr.chunk_of_roi(self.source_meta, write["offset"], write["shape"])
        tinyzarr.write_chunk(self.target, index, smooth(data, read["shape"]))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.rsplit("Usage: ", 1)[1])
    smoother = Smoother(sys.argv[1], sys.argv[2])
    # Not a result: goes to the log (logs/smooth/worker-N-user.out).
    print(f"smooth.py: loaded (pid {os.getpid()}), {sys.argv[1]} -> {sys.argv[2]}", flush=True)
    blocks, started = 0, time.monotonic()
    for line in sys.stdin:
        block = json.loads(line)
        try:
            smoother.process(block)
            result = {"block_id": block["block_id"], "ok": True}
            blocks += 1
        except Exception as e:  # report it; daisy retries the block
            error = f"{type(e).__name__}: {e}"
            result = {"block_id": block["block_id"], "ok": False, "error": error}
        print(json.dumps(result), flush=True)
    # stdin closed: no more blocks.
    print(f"smooth.py: done, {blocks} blocks in {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
