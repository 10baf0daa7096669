"""Checks the demo's output after a run; exits 1 on any mismatch.

    python3 examples/demo/verify.py [RUN_DIR]      (default daisy_run/demo)

- volume.zarr and smoothed.zarr are complete Zarr v3 arrays (metadata, every
  chunk there with the right size);
- volume.zarr holds what generate.py computes, voxel for voxel, at a few
  thousand voxels (each block landed in its own chunk);
- smoothed.zarr holds the rounded 3x3x3 mean of volume.zarr (border voxels
  repeated outside the volume), computed here the slow obvious way, at
  every voxel on or next to a chunk border and at random voxels;
- smoothing made the volume smoother.

Then it prints the middle z slice of both arrays as text.
"""

import itertools
import os
import random
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the clone
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate  # noqa: E402
import tinyzarr  # noqa: E402

problems = []


def check(ok, message):
    if not ok:
        problems.append(message)
        if len(problems) <= 20:
            print(f"MISMATCH: {message}")
    return ok


def load(path):
    """(metadata, all voxels as bytes in C order)."""
    meta = tinyzarr.open_array(path)
    shape = meta["shape"]
    return meta, tinyzarr.read_region(path, meta, [0] * len(shape), shape)


def main():
    run_dir = sys.argv[1] if len(sys.argv) > 1 else "daisy_run/demo"
    vol_path = os.path.join(run_dir, "volume.zarr")
    out_path = os.path.join(run_dir, "smoothed.zarr")

    # Complete arrays.
    for path in (vol_path, out_path):
        meta = tinyzarr.open_array(path)
        chunks = tinyzarr.chunk_shape(meta)
        grid = [s // c for s, c in zip(meta["shape"], chunks)]
        size = chunks[0] * chunks[1] * chunks[2]
        for index in itertools.product(*(range(n) for n in grid)):
            chunk = tinyzarr.chunk_path(path, index)
            check(
                os.path.isfile(chunk) and os.path.getsize(chunk) == size,
                f"{chunk}: missing or not {size} bytes",
            )
    if problems:
        return finish()

    vmeta, vol = load(vol_path)
    smeta, out = load(out_path)
    check(vmeta["shape"] == smeta["shape"], "the two arrays have different shapes")
    Z, Y, X = shape = vmeta["shape"]

    def at(data, z, y, x):  # clamped, like the filter
        z, y, x = min(max(z, 0), Z - 1), min(max(y, 0), Y - 1), min(max(x, 0), X - 1)
        return data[(z * Y + y) * X + x]

    rng = random.Random(7)
    chunks = tinyzarr.chunk_shape(vmeta)
    # Coordinates on and next to chunk borders (and the volume's borders)
    # along each axis, plus random voxels.
    near_borders = [
        sorted({v for b in range(0, n + 1, c) for v in (b - 2, b - 1, b, b + 1) if 0 <= v < n})
        for n, c in zip(shape, chunks)
    ]
    voxels = list(itertools.product(*near_borders))
    voxels += [(rng.randrange(Z), rng.randrange(Y), rng.randrange(X)) for _ in range(2000)]

    balls = generate.balls_in(shape)
    for z, y, x in voxels:
        want = generate.value(z, y, x, shape, balls)
        got = vol[(z * Y + y) * X + x]
        check(got == want, f"volume{[z, y, x]} = {got}, generate.py says {want}")
    for z, y, x in voxels:
        total = sum(
            at(vol, z + dz, y + dy, x + dx)
            for dz, dy, dx in itertools.product((-1, 0, 1), repeat=3)
        )
        want = (total + 13) // 27
        got = out[(z * Y + y) * X + x]
        check(got == want, f"smoothed{[z, y, x]} = {got}, the 3x3x3 mean is {want}")

    def roughness(data):  # mean |difference| between neighbours along x
        return sum(abs(a - b) for a, b in zip(data, data[1:])) / len(data)

    before, after = roughness(vol), roughness(out)
    check(after < before / 2, f"smoothing did not smooth: roughness {before:.2f} -> {after:.2f}")

    show(vol, out, shape)
    print(
        f"checked {len(voxels)} voxels of each array ({Z}x{Y}x{X}); "
        f"roughness {before:.1f} -> {after:.1f}"
    )
    return finish()


def show(vol, out, shape):
    """The middle z slice of both arrays, every other voxel, as text."""
    Z, Y, X = shape
    ramp = " .:-=+*#%@"
    z = Z // 2
    print(f"z = {z}: volume.zarr (left) and smoothed.zarr (right)")
    for y in range(0, Y, 4):
        rows = []
        for data in (vol, out):
            row = data[(z * Y + y) * X : (z * Y + y + 1) * X : 2]
            rows.append("".join(ramp[v * len(ramp) // 256] for v in row))
        print("  ".join(rows))


def finish():
    if problems:
        print(f"verify.py: {len(problems)} problems", file=sys.stderr)
        return 1
    print("verify.py: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
