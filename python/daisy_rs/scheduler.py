"""daisy's `Scheduler`: the driver's scheduler, driven by hand.

    scheduler = daisy.Scheduler([task])
    while (block := scheduler.acquire_block("task")) is not None:
        block.status = daisy.BlockStatus.SUCCESS   # or FAILED
        scheduler.release_block(block)

Every call goes to daisy-core's scheduler state machine, the one the
driver runs: ready order, retries (``max_retries`` per task), orphans and
counters are a run's, with no driver, workers or sockets. A task's
``check_function`` is asked about each ready block before it is handed
out, as in daisy; blocks it calls done are skipped. Done markers
(``tracking_path``) are not read: they belong to a run directory.
"""

from __future__ import annotations

from daisy_rs import _native
from daisy_rs.block import Block, BlockStatus
from daisy_rs.dependency_graph import DependencyGraph
from daisy_rs.run import TaskState

__all__ = ["Scheduler"]


class Scheduler:
    """Hands out the blocks of ``tasks`` (a task, with its daisy 1.x
    ``upstream_tasks``; a list of tasks; or a `Pipeline`) in dependency
    order, one call at a time. ``count_all_orphans`` is daisy 1.x's and
    accepted for its signature: orphans are always counted."""

    def __init__(self, tasks, count_all_orphans=True):
        self._graph = DependencyGraph(tasks)
        self._native = _native.Scheduler(self._graph._native)
        tasks = self._graph._tasks
        self._checks = [_check_of(task) for task in tasks]
        # daisy's TaskState.started: a block was handed out (not skipped).
        self._started = [False] * len(tasks)

    @property
    def dependency_graph(self):
        return self._graph

    @property
    def task_states(self):
        """``{task_id: TaskState}``, counted now (a snapshot, as daisy's)."""
        return {
            task_id: _SchedulerTaskState(task_id, self._started[i], self._native.counters(i))
            for task_id, i in self._graph._index.items()
        }

    def acquire_block(self, task_id):
        """The next ready block of ``task_id``, or None when none is ready
        now (or there is no such task, as in daisy)."""
        index = self._graph._index.get(task_id)
        if index is None:
            return None
        wire = self._native.acquire(index, self._checks[index])
        if wire is None:
            return None
        self._started[index] = True
        return Block._from_wire(task_id, wire[1], wire[2], wire[3])

    def release_block(self, block):
        """Records a block handed out by `acquire_block`, whose ``status``
        the caller set to ``BlockStatus.SUCCESS`` or ``BlockStatus.FAILED``.
        A failed block is retried up to its task's ``max_retries``, then
        fails for good and orphans what waits for it. A block not handed
        out (or released already) changes nothing."""
        index = self._graph._task(block.task_id)
        if block.status == BlockStatus.SUCCESS:
            succeeded = True
        elif block.status == BlockStatus.FAILED:
            succeeded = False
        else:
            raise RuntimeError(
                f"release_block({block!r}): set block.status to BlockStatus.SUCCESS or "
                "BlockStatus.FAILED before releasing it"
            )
        self._native.release(index, block.block_id[1], succeeded)


class _SchedulerTaskState(TaskState):
    """A `TaskState` counted by a `Scheduler` while blocks are in play:
    ready and processing blocks count too."""

    def __init__(self, task_id, started, counters):
        self.task_id = task_id
        self.started = started
        self.abandoned = False
        self.abandon_reason = None
        for name, count in counters.items():
            setattr(self, name, count)

    @property
    def pending_count(self):
        return self._pending

    @pending_count.setter
    def pending_count(self, count):
        self._pending = count


def _check_of(task):
    """``task``'s check_function as the engine asks it (None without
    one). As in daisy, a check that raises is logged and the block runs."""
    check = task.check_function
    if check is None:
        return None
    task_id = task.task_id

    def is_done(wire):
        block = Block._from_wire(task_id, wire[1], wire[2], wire[3])
        try:
            return bool(check(block))
        except Exception:
            import logging

            logging.getLogger(__name__).exception(
                "check_function of task %r raised on block %s; the block runs", task_id, block.block_id
            )
            return False

    return is_done
