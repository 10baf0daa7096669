"""Just enough Zarr v3 to read and write the demo's arrays, with the Python
standard library only (no numpy, no zarr package).

The arrays it writes are ordinary Zarr v3 arrays: zarr-python, napari or
neuroglancer open them. What it supports: 3-D uint8 arrays, a regular chunk
grid, the default chunk key encoding with "/" ("c/0/1/2"), the bytes codec
(raw bytes in C order, no compression).

Everything here is safe with many processes writing the same array at
once, which is the normal case in daisy:

- `create` makes zarr.json exactly once: every process writes its own
  temporary file and hard-links it to zarr.json; the link either creates
  zarr.json whole or fails because it exists. Nobody ever sees a half
  written zarr.json, and the losers check it says the same as theirs.
- `write_chunk` writes a temporary file and renames it over the chunk, so a
  chunk is always either the old one or the new one, never half of each:
  a block that is killed and run again leaves no torn chunk behind.
"""

import json
import os
import tempfile


def metadata(shape, chunk_shape, attributes=None):
    """The zarr.json of a uint8 array."""
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": "uint8",
        "chunk_grid": {
            "name": "regular",
            "configuration": {"chunk_shape": list(chunk_shape)},
        },
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "dimension_names": ["z", "y", "x"],
        "attributes": attributes or {},
    }


# mkstemp makes files only their owner can read; chunks should get the
# usual permissions (0644 with the common umask 022).
_UMASK = os.umask(0)
os.umask(_UMASK)


def _write_temp(directory, data):
    """Writes `data` to a new temporary file in `directory`; its path."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def create(path, shape, chunk_shape, attributes=None):
    """Creates the array at `path` unless it exists; returns its metadata.

    Race-free: any number of processes may call this at the same time.
    Fails if the array exists with other metadata (left over from a run with
    another shape, say).
    """
    meta = metadata(shape, chunk_shape, attributes)
    os.makedirs(path, exist_ok=True)
    target = os.path.join(path, "zarr.json")
    tmp = _write_temp(path, (json.dumps(meta, indent=2) + "\n").encode())
    try:
        os.link(tmp, target)  # atomic, and never replaces an existing file
    except FileExistsError:
        existing = open_array(path)
        if existing != meta:
            raise RuntimeError(
                f"{target} exists and describes another array; remove "
                f"{path} (or the whole run directory) to start over"
            ) from None
    finally:
        os.unlink(tmp)
    return meta


def open_array(path):
    """The metadata of the array at `path`."""
    with open(os.path.join(path, "zarr.json")) as f:
        meta = json.load(f)
    if meta.get("data_type") != "uint8" or len(meta["shape"]) != 3:
        raise ValueError(f"{path}: tinyzarr only reads 3-D uint8 arrays")
    return meta


def chunk_shape(meta):
    return meta["chunk_grid"]["configuration"]["chunk_shape"]


def chunk_path(path, index):
    return os.path.join(path, "c", *(str(i) for i in index))


def write_chunk(path, index, data):
    """Writes one chunk (its bytes in C order) atomically."""
    target = chunk_path(path, index)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.replace(_write_temp(os.path.dirname(target), bytes(data)), target)


def read_chunk(path, index):
    """The bytes of one chunk; FileNotFoundError if it was never written."""
    with open(chunk_path(path, index), "rb") as f:
        return f.read()


def chunk_of_roi(meta, offset, shape):
    """The index of the chunk that is exactly the region (offset, shape)."""
    chunks = chunk_shape(meta)
    if list(shape) != chunks or any(o % c for o, c in zip(offset, chunks)):
        raise ValueError(
            f"region offset {list(offset)} shape {list(shape)} is not one chunk "
            f"of the {chunks} chunk grid"
        )
    return tuple(o // c for o, c in zip(offset, chunks))


def read_region(path, meta, offset, shape):
    """The voxels of the region (offset, shape) as bytes in C order.

    The region may stick out of the array: outside voxels repeat the nearest
    border voxel ("clamp", like numpy's mode="edge"). Reads only the chunks
    the region touches (up to 8 for a block with a context of 1).
    """
    full = meta["shape"]
    chunks = chunk_shape(meta)
    # Per axis: for each coordinate of the region, (chunk index, position
    # inside the chunk) of the array voxel it shows.
    axes = []
    for o, n, size, c in zip(offset, shape, full, chunks):
        coords = (min(max(o + i, 0), size - 1) for i in range(n))
        axes.append([divmod(x, c) for x in coords])
    cache = {}

    def chunk(index):
        if index not in cache:
            try:
                cache[index] = read_chunk(path, index)
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"chunk {'/'.join(map(str, index))} of {path} was never written"
                ) from None
        return cache[index]

    out = bytearray()
    for c0, i0 in axes[0]:
        for c1, i1 in axes[1]:
            row_start = (i0 * chunks[1] + i1) * chunks[2]
            out += bytes(chunk((c0, c1, c2))[row_start + i2] for c2, i2 in axes[2])
    return out
