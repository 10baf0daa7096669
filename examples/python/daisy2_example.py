"""A daisy 2.0 script, written for daisy 2.0's documented API: a 2-D
mean filter over a Zarr array, block by block, in two chained tasks.

Both tasks write whole chunks of their Zarr arrays. Run it with daisy 2.0 (`python daisy2_example.py OUT.zarr`), or on this
engine by changing one line: `import daisy` becomes
`import daisy_rs as daisy` (python/tests/test_daisy2_script.py does
exactly that and compares both outputs).
"""

import functools
import sys

import daisy
import numpy as np
import zarr

SIZE = 256
CONTEXT = 2


def make_arrays(path):
    root = zarr.open_group(path, mode="w")
    root.create_array("raw", shape=(SIZE, SIZE), chunks=(64, 64), dtype="float32")
    root.create_array("smoothed", shape=(SIZE, SIZE), chunks=(64, 64), dtype="float32")


def fill(path, block):
    """Writes a deterministic pattern into the block's write ROI."""
    raw = zarr.open_group(path, mode="r+")["raw"]
    roi = block.write_roi
    y, x = np.mgrid[roi.begin[0] : roi.end[0], roi.begin[1] : roi.end[1]]
    raw[roi.to_slices()] = np.sin(y / 7.0) * np.cos(x / 5.0)


def smooth(path, block):
    """A (2·CONTEXT+1)² mean of raw around each voxel of the write ROI;
    the volume's edge is extended outwards."""
    root = zarr.open_group(path, mode="r+")
    inside = block.read_roi.intersect(daisy.Roi((0, 0), (SIZE, SIZE)))
    data = root["raw"][inside.to_slices()]
    before = inside.begin - block.read_roi.begin
    after = block.read_roi.end - inside.end
    data = np.pad(data, list(zip(before, after)), mode="edge")
    k = 2 * CONTEXT + 1
    windows = np.lib.stride_tricks.sliding_window_view(data, (k, k))
    root["smoothed"][block.write_roi.to_slices()] = windows.mean(axis=(-1, -2))


def main():
    path = sys.argv[1]
    make_arrays(path)
    total = daisy.Roi((0, 0), (SIZE, SIZE))
    fill_task = daisy.Task(
        "fill",
        total_roi=total,
        read_roi=daisy.Roi((0, 0), (64, 64)),
        write_roi=daisy.Roi((0, 0), (64, 64)),
        process_function=functools.partial(fill, path),
        read_write_conflict=False,
        max_workers=2,
    )
    # Blocks write whole chunks (64², as the arrays are chunked), so no two
    # blocks write one chunk, and read CONTEXT voxels around them.
    context = daisy.Coordinate((CONTEXT, CONTEXT))
    smooth_task = daisy.Task(
        "smooth",
        total_roi=total.grow(context, context),
        read_roi=daisy.Roi((0, 0), (64, 64)).grow(context, context),
        write_roi=daisy.Roi((0, 0), (64, 64)),
        process_function=functools.partial(smooth, path),
        read_write_conflict=False,
        max_workers=2,
    )
    ok = daisy.run_blockwise(fill_task + smooth_task)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
