"""daisy's worker log directory: ``set_log_basedir``, ``get_log_basedir``,
``get_worker_log_basename``, ``redirect_stdouterr``.

The run directory always has every worker's output (``logs/<task>/``).
When a program sets a log directory (``set_log_basedir(path)``, as volara
does), each worker's stdout and stderr are also found where daisy 1.x puts
them, ``<basedir>/<task_id>/worker_<worker_id>.out`` and ``.err``: links
to the files the worker writes (`link_worker_logs`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["get_log_basedir", "get_worker_log_basename", "redirect_stdouterr", "set_log_basedir"]

#: daisy's default; worker logs are linked there only once a program sets one.
LOG_BASEDIR: Path | None = Path("./daisy_logs")
_set_by_program = False


def set_log_basedir(path):
    """Sets the base directory of worker logs; ``None`` turns them off."""
    global LOG_BASEDIR, _set_by_program
    LOG_BASEDIR = Path(path) if path is not None else None
    _set_by_program = path is not None


def adopt_log_basedir(path):
    """Takes the log directory a worker's context names, as daisy's
    `Client` does, without counting it as one this program chose (a
    serial run's client must not make later runs link worker logs)."""
    global LOG_BASEDIR
    LOG_BASEDIR = Path(path) if path is not None else None


def get_log_basedir() -> Path | None:
    return LOG_BASEDIR


def chosen_log_basedir() -> Path | None:
    """The log directory a program set, as an absolute path (workers may
    start elsewhere), or None if it kept daisy's default."""
    if not _set_by_program or LOG_BASEDIR is None:
        return None
    return LOG_BASEDIR.absolute()


def get_worker_log_basename(worker_id, task_id=None) -> Path | None:
    """``<basedir>/[task_id/]worker_<worker_id>``, without ``.out``/``.err``."""
    base = get_log_basedir()
    if base is None:
        return None
    if task_id is not None:
        base = base / str(task_id)
    return base / f"worker_{worker_id}"


def redirect_stdouterr(basename, mode="w"):
    """Sends this process's stdout and stderr (its file descriptors too)
    to ``<basename>.out`` and ``<basename>.err``."""
    if basename is None:
        return
    basename = Path(basename)
    basename.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout = _reopen(Path(f"{basename}.out"), mode, sys.__stdout__)
    sys.stderr = _reopen(Path(f"{basename}.err"), mode, sys.__stderr__)


def _reopen(path, mode, stream):
    new = open(path, mode)
    os.dup2(new.fileno(), stream.fileno())
    return new


def link_worker_logs(basedir, task_id, worker_id):
    """Makes ``<basedir>/<task_id>/worker_<worker_id>.out``/``.err`` name
    the files this process's stdout and stderr write to (when they are
    files: a terminal or a pipe has nothing to link)."""
    target = Path(basedir) / str(task_id)
    for fd, suffix in ((1, "out"), (2, "err")):
        try:
            written = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return  # no /proc: not Linux
        if not written.startswith("/") or not os.path.isfile(written):
            continue
        link = target / f"worker_{worker_id}.{suffix}"
        try:
            target.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(written)
        except OSError as error:
            print(f"daisy_rs: cannot link the worker log {link}: {error}", file=sys.stderr)
