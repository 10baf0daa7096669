"""`TaskState`: where each task stands after a run, read from
``daisy-driver status --json`` of the run directory."""

from __future__ import annotations

import json
from pathlib import Path

from daisy_rs import _native


class TaskState:
    """Where a task stands after a run, with daisy's counters. Read back
    from the run directory once the run ended: nothing is ready or
    processing then. As in daisy, ``skipped_count`` counts the blocks the
    run did not run (done before, with tracking; found done by the
    check function; left out by a skip mask), and ``completed_count``
    includes them. The worker counts are daisy 2.0's, of the last run:
    a worker that was lost or never connected is a failure, and the
    driver started another in its place (a restart)."""

    def __init__(self, status: dict, ended: dict | None = None, workers: list = ()):
        """``status``: the task in ``daisy-driver status --json``;
        ``ended``: the counters its last run ended it with, if that run
        saw it to its end (a stopped run did not: the run directory's
        numbers stand in); ``workers``: the last run's workers of the
        task, as ``status --json`` lists them."""
        self.task_id = status["id"]
        self.started = True
        self.total_block_count = status["total"]
        if ended is not None:
            self.completed_count = ended["completed"]
            self.skipped_count = ended["skipped"]
        else:
            self.skipped_count = status.get("skipped", 0)
            self.completed_count = status["done"] + self.skipped_count
        self.failed_count = status["failed"]
        self.orphaned_count = status["orphaned"]
        self.ready_count = 0
        self.processing_count = 0
        self.abandon_reason = status.get("abandoned")
        self.abandoned = self.abandon_reason is not None
        self.failed_blocks = status.get("failed_blocks", [])
        self._remaining = status["remaining"]
        unclean = [worker for worker in workers if worker["end"] in ("lost", "failed_start")]
        self.worker_start_count = len(workers)
        self.worker_failure_count = len(unclean)
        self.worker_restart_count = len(unclean)
        self.first_worker_error = unclean[0]["why"] if unclean else None
        self.last_worker_error = unclean[-1]["why"] if unclean else None

    @property
    def pending_count(self):
        return self._remaining

    def is_done(self) -> bool:
        return self.total_block_count - self.completed_count - self.failed_count - self.orphaned_count <= 0

    def __str__(self):
        return (
            f"Started: {self.started}\n"
            f"Total Blocks: {self.total_block_count}\n"
            f"Ready: {self.ready_count}\n"
            f"Processing: {self.processing_count}\n"
            f"Pending: {self.pending_count}\n"
            f"Completed: {self.completed_count}\n"
            f"Skipped: {self.skipped_count}\n"
            f"Failed: {self.failed_count}\n"
            f"Orphaned: {self.orphaned_count}\n"
        )

    def __repr__(self):
        return (
            f"TaskState({self.task_id!r}: {self.completed_count}/{self.total_block_count} done, "
            f"{self.failed_count} failed, {self.orphaned_count} orphaned)"
        )


def states(run_dir):
    """``task_id -> TaskState`` of the run directory ``run_dir``."""
    status = json.loads(_native.status_json(Path(run_dir)))
    last_run = status.get("last_run") or {}
    ended = last_run.get("tasks_ended", {})
    workers = last_run.get("workers", [])
    return {
        task["id"]: TaskState(task, ended.get(task["id"]), [w for w in workers if w["task"] == task["id"]])
        for task in status["tasks"]
    }
