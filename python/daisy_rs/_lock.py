"""What the run directory's lock (``driver.lock``, JSON written by the
driver that holds it) says, so a refused run can tell it took nothing."""

from __future__ import annotations

import json
import os


def lock_of(run_dir):
    """What the run directory's lock says (who took it, when), or None."""
    try:
        return (run_dir / "driver.lock").read_text()
    except OSError:
        return None


def took_lock(run_dir, before) -> bool:
    """Whether the driver that just ran took the run directory's lock (it
    writes its pid and start into driver.lock; a driver that did not was
    refused). The driver ran in this process, so the pid alone cannot tell
    it from an earlier run here: the lock must have changed too."""
    now = lock_of(run_dir)
    try:
        holder = json.loads(now) if now is not None else None
    except ValueError:
        return False
    return now != before and isinstance(holder, dict) and holder.get("pid") == os.getpid()
