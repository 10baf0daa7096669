"""Block command of the demo's "generate" task: computes one block of a
synthetic 3-D volume and writes it as one chunk of a Zarr v3 uint8 array.

daisy runs it once per block, several at a time, e.g.

    python3 examples/demo/generate.py daisy_run/demo/volume.zarr \
        --volume-shape 96,96,96 --offset 32,0,64 --shape 32,32,32

The volume: a brightness gradient along z, four bright balls with soft
edges, and noise. Every voxel is a function of its coordinates alone
(`value` below), so any block can be computed on its own, in any order, as
often as needed, and always gives the same bytes.
"""

import argparse
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the clone
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinyzarr  # noqa: E402

# (centre, radius) as fractions of the volume's size, and brightness.
BALLS = [
    ((0.42, 0.30, 0.30), 0.20, 220),
    ((0.55, 0.36, 0.72), 0.15, 170),
    ((0.50, 0.72, 0.42), 0.13, 250),
    ((0.78, 0.76, 0.78), 0.10, 130),
]
EDGE = 2.0  # voxels over which a ball's edge fades into the background
NOISE = 24  # the noise is uniform in [-NOISE, NOISE)


def noise(z, y, x):
    """Deterministic noise from the voxel's coordinates (an integer hash)."""
    h = (z * 73856093) ^ (y * 19349663) ^ (x * 83492791)
    h = ((h ^ (h >> 13)) * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 15
    return h % (2 * NOISE) - NOISE


def balls_in(shape):
    """The balls in voxel units: (centre, radius, brightness)."""
    return [
        (tuple(f * s for f, s in zip(centre, shape)), r * min(shape), value)
        for centre, r, value in BALLS
    ]


def value(z, y, x, shape, balls=None):
    """The voxel at (z, y, x) of a volume of `shape`.

    `balls`: those that may touch the voxel (all of them by default).
    """
    if balls is None:
        balls = balls_in(shape)
    background = 30.0 + 60.0 * z / max(shape[0] - 1, 1)  # a gradient along z
    v = background
    for (cz, cy, cx), r, bright in balls:
        d = ((z - cz) ** 2 + (y - cy) ** 2 + (x - cx) ** 2) ** 0.5
        inside = min(max((r - d) / EDGE + 0.5, 0.0), 1.0)  # 1 inside, 0 out
        v = max(v, background + inside * (bright - background))
    return min(max(int(v) + noise(z, y, x), 0), 255)


def block(offset, shape, volume_shape):
    """The voxels of one block, as bytes in C order (z, then y, then x)."""
    balls = balls_in(volume_shape)
    out = bytearray()
    for z in range(offset[0], offset[0] + shape[0]):
        for y in range(offset[1], offset[1] + shape[1]):
            # Only the balls this row of voxels passes close to (faster).
            near = [
                b for b in balls
                if (z - b[0][0]) ** 2 + (y - b[0][1]) ** 2 < (b[1] + EDGE) ** 2
            ]
            out += bytes(
                value(z, y, x, volume_shape, near)
                for x in range(offset[2], offset[2] + shape[2])
            )
    return out


def coords(text):
    return [int(v) for v in text.split(",")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("array", help="the Zarr array to write, e.g. daisy_run/demo/volume.zarr")
    parser.add_argument("--volume-shape", type=coords, required=True)
    parser.add_argument("--offset", type=coords, required=True, help="the block's write offset")
    parser.add_argument("--shape", type=coords, required=True, help="the block's write shape")
    args = parser.parse_args()

    # Every block tries to create the array (blocks run in any order, several
    # at once); tinyzarr.create makes that safe. Chunks are blocks.
    meta = tinyzarr.create(
        args.array,
        args.volume_shape,
        args.shape,
        {"description": "daisy demo: synthetic volume (gradient, four balls, noise)"},
    )
    index = tinyzarr.chunk_of_roi(meta, args.offset, args.shape)
    tinyzarr.write_chunk(args.array, index, block(args.offset, args.shape, args.volume_shape))


if __name__ == "__main__":
    main()
