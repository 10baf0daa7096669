"""daisy's dependency graphs, as views over the engine's.

`BlockwiseDependencyGraph` (the blocks of one task, and which wait for
which because one reads what another writes) and `DependencyGraph` (a
pipeline's, as `Scheduler.dependency_graph`) ask daisy-core, the crate the
driver schedules with. Blocks, ids, levels and dependencies are the
driver's, so what a program sees here is what a run does.

Terms (daisy's): a **level** is a set of blocks of one task that may run
at the same time; with ``read_write_conflict`` a block of level L waits
for the blocks of level L-1 whose write ROI its read ROI overlaps.
Across tasks, a block waits for the upstream task's blocks whose write
ROI its read ROI overlaps.
"""

from __future__ import annotations

import operator

from daisy_rs import _native
from daisy_rs.block import Block, BlockStatus, _as_roi
from daisy_rs.task import Pipeline

__all__ = ["BlockwiseDependencyGraph", "DependencyGraph"]


class BlockwiseDependencyGraph:
    """The blocks of one task and the conflicts between them.

    ``BlockwiseDependencyGraph(task_id, read_roi, write_roi,
    read_write_conflict=True, fit="valid", total_read_roi=None,
    total_write_roi=None)``: give one of the totals (both, if they agree);
    the other is the given one grown or shrunk by the block's context.
    daisy 1.x's keywords ``block_read_roi`` and ``block_write_roi`` work
    too.
    """

    def __init__(
        self,
        task_id,
        read_roi=None,
        write_roi=None,
        read_write_conflict=True,
        fit="valid",
        total_read_roi=None,
        total_write_roi=None,
        *,
        block_read_roi=None,
        block_write_roi=None,
    ):
        read_roi = _as_roi(_either("read_roi", read_roi, block_read_roi))
        write_roi = _as_roi(_either("write_roi", write_roi, block_write_roi))
        self.task_id = task_id
        self.block_read_roi = read_roi
        self.block_write_roi = write_roi
        self.read_write_context = (write_roi.begin - read_roi.begin, read_roi.end - write_roi.end)
        self.total_read_roi, self.total_write_roi = self._totals(total_read_roi, total_write_roi)
        self.read_write_conflict = bool(read_write_conflict)
        self.fit = fit
        task = (str(task_id), self.total_read_roi, read_roi, write_roi, fit, self.read_write_conflict, 0, [])
        self._native = _native.Graph([_wire_task(*task)])

    def _totals(self, total_read_roi, total_write_roi):
        """``(total_read_roi, total_write_roi)`` from either."""
        before, after = self.read_write_context
        if total_read_roi is not None:
            total_read_roi = _as_roi(total_read_roi)
            derived = total_read_roi.grow(-before, -after)
            if total_write_roi is not None and _as_roi(total_write_roi) != derived:
                raise ValueError(
                    f"task {self.task_id!r}: total_write_roi {total_write_roi} is not total_read_roi "
                    f"{total_read_roi} less the block context {before} / {after} (that is {derived})"
                )
            return total_read_roi, derived
        if total_write_roi is not None:
            total_write_roi = _as_roi(total_write_roi)
            return total_write_roi.grow(before, after), total_write_roi
        raise ValueError(f"task {self.task_id!r}: give total_read_roi or total_write_roi")

    @property
    def num_blocks(self):
        return self._native.num_blocks(0)

    @property
    def num_levels(self):
        return self._native.num_levels(0)

    def num_roots(self):
        """Number of blocks of level 0, counted without enumerating them."""
        return self._native.num_level_blocks(0, 0)

    def root_gen(self):
        """The blocks of level 0, lazily, in the order a run starts them."""
        return self.level_blocks(0)

    def level_blocks(self, level):
        """The blocks of ``level``, lazily."""
        return (self._block(wire) for wire in self._native.level_blocks(0, level))

    def upstream(self, block):
        """The blocks ``block`` waits for, by spatial id."""
        return [self._block(w) for w in self._native.upstream(_wire_block(block, 0))]

    def downstream(self, block):
        """The blocks that wait for ``block``, by spatial id."""
        return [self._block(w) for w in self._native.downstream(_wire_block(block, 0))]

    def get_subgraph_blocks(self, sub_roi, read_roi=False):
        """The blocks whose write ROI (clipped to the total write ROI)
        overlaps ``sub_roi``; with ``read_roi=True``, those whose read ROI
        does."""
        find = self._native.blocks_reading if read_roi else self._native.blocks_writing
        return [self._block(w) for w in find(0, _wire_roi(_as_roi(sub_roi)))]

    def enumerate_all_dependencies(self):
        """Every block, level by level, as ``(block, [upstream blocks])``."""
        return [
            (self._block(wire), [self._block(w) for w in upstream])
            for wire, upstream in self._native.dependencies(0)
        ]

    def _level(self, block):
        """The level of ``block`` (daisy 1.x's private name)."""
        level = self._native.level_of(_wire_block(block, 0))
        if level is None:
            raise ValueError(f"{block} is not on the block grid of task {self.task_id!r}")
        return level

    def _block(self, wire):
        return _graph_block(self.task_id, wire)


class DependencyGraph:
    """The blocks of a pipeline and who waits for whom, across tasks.

    ``DependencyGraph(tasks)`` takes what `Scheduler` takes: a task (with
    its daisy 1.x ``upstream_tasks``), a list of tasks, or a `Pipeline`.
    """

    def __init__(self, tasks):
        pipeline = Pipeline.of(tasks)
        self._tasks = list(pipeline.tasks)
        self._index = {}
        for i, task in enumerate(self._tasks):
            if self._index.setdefault(task.task_id, i) != i:
                raise ValueError(f"two tasks have the id {task.task_id!r}")
        position = {id(task): i for i, task in enumerate(self._tasks)}
        self._native = _native.Graph(
            [
                _wire_task(
                    str(task.task_id),
                    task.total_roi,
                    task.read_roi,
                    task.write_roi,
                    task.fit,
                    task.read_write_conflict,
                    task.max_retries,
                    [position[id(up)] for up in pipeline.upstream_of(task)],
                )
                for task in self._tasks
            ]
        )

    @property
    def task_ids(self):
        return list(self._index)

    def num_blocks(self, task_id):
        return self._native.num_blocks(self._task(task_id))

    def num_roots(self, task_id):
        return self._native.num_level_blocks(self._task(task_id), 0)

    def root_gen(self, task_id):
        """The blocks of level 0 of ``task_id``, lazily."""
        index = self._task(task_id)
        return (_graph_block(task_id, w) for w in self._native.level_blocks(index, 0))

    def root_tasks(self):
        """The ids of the tasks that read no other task's output."""
        return [tid for tid, i in self._index.items() if not self._native.upstream_tasks(i)]

    def roots(self):
        """``{task_id: (num_roots, root_gen)}`` of the root tasks."""
        return {tid: (self.num_roots(tid), self.root_gen(tid)) for tid in self.root_tasks()}

    def upstream(self, block):
        """The blocks ``block`` waits for, in its task and upstream tasks,
        by spatial id."""
        wires = self._native.upstream(_wire_block(block, self._task(block.task_id)))
        return [self._block(w) for w in wires]

    def downstream(self, block):
        """The blocks that wait for ``block``, in its task and downstream
        tasks, by spatial id."""
        wires = self._native.downstream(_wire_block(block, self._task(block.task_id)))
        return [self._block(w) for w in wires]

    def _task(self, task_id):
        try:
            return self._index[task_id]
        except KeyError:
            raise KeyError(f"no task {task_id!r} in this graph (tasks: {self.task_ids})") from None

    def _block(self, wire):
        return _graph_block(self._tasks[wire[0]].task_id, wire)


def _either(name, value, v1_value):
    if value is not None and v1_value is not None:
        raise TypeError(f"pass either {name} or block_{name} (daisy 1.x's name), not both")
    if value is None and v1_value is None:
        raise TypeError(f"missing argument {name!r}")
    return value if value is not None else v1_value


def _graph_block(task_id, wire):
    """A block of a graph, not handed out: CREATED, as in daisy."""
    block = Block._from_wire(task_id, wire[1], wire[2], wire[3])
    block.status = BlockStatus.CREATED
    return block


def _wire_task(task_id, total_roi, read_roi, write_roi, fit, read_write_conflict, max_retries, upstream):
    return (
        task_id,
        _wire_roi(_as_roi(total_roi)),
        _wire_roi(_as_roi(read_roi)),
        _wire_roi(_as_roi(write_roi)),
        fit,
        bool(read_write_conflict),
        operator.index(max_retries),
        upstream,
    )


def _wire_roi(roi):
    return (tuple(roi.offset), tuple(roi.shape))


def _wire_block(block, task):
    """``block`` as the engine takes it, as a block of task number ``task``."""
    # A block the engine made still holds its ROIs as it sent them.
    read, write = getattr(block, "_read", None), getattr(block, "_write", None)
    if read is None or write is None:
        read, write = _wire_roi(block.read_roi), _wire_roi(block.write_roi)
    return (task, block.block_id[1], read, write)
