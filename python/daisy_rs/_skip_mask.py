"""A task's ``skip_mask`` as the driver reads it: a Zarr array's path,
an array given in Python written as a Zarr v3 array first."""

from __future__ import annotations

import json
import os

from daisy_rs._files import digest


#: How the Zarr arrays of skip masks given as arrays are named.
MASK_SUFFIX = ".mask.zarr"


def path_and_files(task, run_dir):
    """``skip_mask`` as the driver reads it: a Zarr array's path, or an
    array-like (one byte per block of the task's grid, nonzero to skip)
    written as a Zarr v3 array of one raw chunk under ``<run_dir>/python/``,
    named by its content; returns the path and the files to write."""
    mask = task.skip_mask
    if isinstance(mask, (str, os.PathLike)):
        return os.path.abspath(mask), {}
    import numpy as np

    try:
        cells = np.ascontiguousarray(mask, dtype=np.uint8)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"task {task.task_id!r}: skip_mask must be an array-like of one byte per block "
            f"of the task's grid, or the path of a Zarr array ({error})"
        ) from error
    shape = [int(n) for n in cells.shape]
    data = cells.tobytes()
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shape}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "attributes": {},
    }
    name = f"{task.task_id}-{digest(json.dumps(shape).encode() + data)}{MASK_SUFFIX}"
    store = run_dir / "python" / name
    chunk = store.joinpath("c", *["0"] * len(shape))
    return str(store), {store / "zarr.json": json.dumps(meta).encode(), chunk: data}
