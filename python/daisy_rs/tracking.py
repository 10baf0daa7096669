"""Done tracking, opt-in as in daisy 2.0: ``set_tracking_basedir``,
``get_tracking_basedir`` (and their deprecated aliases).

A run records finished blocks in its run directory
(``<run_dir>/done/<task>/``, daisy 2.0.0's layout) either way, so
``status`` and ``report`` always work; whether a later run *skips* them
is what tracking decides. It is on when the program asks for it: a
tracking base directory (runs go to ``<basedir>/<run name>``), a task's
``tracking_path``, ``run_blockwise(run_dir=...)`` or ``DAISY_RUN_DIR``.
Without any of these a run never skips a block because of an earlier
run: daisy 2.0 made tracking opt-in because a rerun of changed code
silently skipping everything is the worse failure.
"""

from __future__ import annotations

import warnings
from pathlib import Path

__all__ = [
    "get_done_marker_basedir",
    "get_tracking_basedir",
    "set_done_marker_basedir",
    "set_tracking_basedir",
]

_basedir: Path | None = None


def set_tracking_basedir(path) -> None:
    """Turns tracking on for every run (``None`` turns it off): runs live
    in ``<path>/<run name>`` and resume from their done markers."""
    global _basedir
    _basedir = Path(path).absolute() if path is not None else None


def get_tracking_basedir() -> Path | None:
    return _basedir


def set_done_marker_basedir(path) -> None:
    """daisy 2.0's deprecated name of `set_tracking_basedir`."""
    warnings.warn(
        "set_done_marker_basedir() is deprecated; use set_tracking_basedir()",
        DeprecationWarning,
        stacklevel=2,
    )
    set_tracking_basedir(path)


def get_done_marker_basedir() -> Path | None:
    """daisy 2.0's deprecated name of `get_tracking_basedir`."""
    warnings.warn(
        "get_done_marker_basedir() is deprecated; use get_tracking_basedir()",
        DeprecationWarning,
        stacklevel=2,
    )
    return get_tracking_basedir()
