"""The files a run writes beside its pipeline under ``<run_dir>/python/``:
named by their content, so a running driver's are never overwritten,
written once and atomically, and taken back when the driver refuses
the run."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def digest(data: bytes) -> str:
    """The name part that tells ``data`` from other contents: 16 hex
    digits of its SHA-256."""
    return hashlib.sha256(data).hexdigest()[:16]


def write_once(path: Path, data: bytes) -> bool:
    """Writes a content-named file unless it is there already, atomically;
    whether it wrote it."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    partial.replace(path)
    return True


def missing_dirs(paths):
    """The directories that writing ``paths`` creates, outermost first."""
    missing = []
    for path in paths:
        for directory in reversed(Path(path).parents):
            if not directory.exists() and directory not in missing:
                missing.append(directory)
    return missing


def remove(files, new_dirs):
    """Takes back what a refused run wrote: a run directory another
    driver holds is left as it was."""
    for path in files:
        path.unlink(missing_ok=True)
    for directory in reversed(new_dirs):
        try:
            directory.rmdir()
        except OSError:
            pass  # not empty: the driver wrote there, so it is the driver's
