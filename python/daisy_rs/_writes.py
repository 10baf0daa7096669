"""``Task(writes=...)``: the Zarr arrays a task's blocks write into, as the
paths the driver reads their chunk and shard grids from
(docs/user-guide.md, "Writing Zarr safely").

An entry is a path, a ``zarr.Array`` (zarr 3 or 2) or a funlib.persistence
``Array`` (as volara passes them); the driver needs the array on the local
file system, where every worker writes it too.
"""

import os


def array_paths(task_id, writes):
    """``writes`` (one array or a list of them) as absolute paths."""
    if writes is None:
        return []
    if not isinstance(writes, (list, tuple)):
        writes = [writes]
    return [_path_of(task_id, array) for array in writes]


def _path_of(task_id, array):
    if isinstance(array, (str, os.PathLike)):
        return os.path.abspath(os.fspath(array))
    source = getattr(array, "_source_data", None)
    if source is not None:
        # A funlib.persistence Array: its `data` is a dask view; the zarr
        # array it reads and writes is kept as `_source_data`.
        return _path_of(task_id, source)
    if hasattr(array, "store") and hasattr(array, "path"):
        return _zarr_path(task_id, array)
    raise TypeError(
        f"task {task_id!r}: writes takes paths, zarr arrays or funlib.persistence "
        f"arrays, not {type(array).__name__}"
    )


def _zarr_path(task_id, array):
    store = array.store
    # zarr 3's LocalStore has `root`; zarr 2's DirectoryStore `path`.
    root = getattr(store, "root", None) or getattr(store, "path", None)
    if root is None:
        raise ValueError(
            f"task {task_id!r}: writes: the array {array!r} is not stored on the local "
            f"file system ({type(store).__name__}), where the driver reads its chunk "
            "grid and the workers write it"
        )
    return os.path.abspath(os.path.join(os.fspath(root), array.path or ""))
