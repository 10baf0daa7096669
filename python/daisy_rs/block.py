"""The block handed to process functions, check functions and
`Client.acquire_block()`: daisy 2.0's `Block`, with the same fields.

Blocks from the engine are made with `Block._from_wire`, which costs a
few hundred nanoseconds: the ROIs (`funlib.geometry.Roi`, as in daisy)
are built only when the function first reads them.
"""

from __future__ import annotations

import enum
import math

from funlib.geometry import Coordinate, Roi

__all__ = ["Block", "BlockStatus"]


class BlockStatus(enum.Enum):
    """Where a block is; set ``block.status = BlockStatus.FAILED`` in a
    process function to fail the block without raising."""

    CREATED = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3


class Block:
    """One unit of work: a read ROI, a write ROI, an id and a status.

    ``block_id`` is ``(task_id, spatial_id)`` as in daisy; the spatial id
    is derived from the write ROI's position in ``total_roi`` unless
    ``block_id`` is given.
    """

    __slots__ = ("task_id", "_spatial_id", "_read", "_write", "_read_roi", "_write_roi", "status")

    def __init__(self, total_roi, read_roi, write_roi, task_id=None, block_id=None):
        read_roi, write_roi = _as_roi(read_roi), _as_roi(write_roi)
        if block_id is None:
            block_id = _spatial_id(_as_roi(total_roi), write_roi)
        self.task_id = task_id
        self._spatial_id = int(block_id)
        self._read_roi, self._write_roi = read_roi, write_roi
        self._read = self._write = None
        self.status = BlockStatus.CREATED

    @classmethod
    def _from_wire(cls, task_id, spatial_id, read, write):
        """A block as the engine sends it: ROIs as ``(offset, shape)``."""
        self = object.__new__(cls)
        self.task_id = task_id
        self._spatial_id = spatial_id
        self._read, self._write = read, write
        self._read_roi = self._write_roi = None
        self.status = BlockStatus.PROCESSING
        return self

    @property
    def block_id(self):
        """``(task_id, spatial_id)``, as in daisy."""
        return (self.task_id, self._spatial_id)

    @property
    def read_roi(self) -> Roi:
        if self._read_roi is None:
            self._read_roi = Roi(*self._read)
        return self._read_roi

    @property
    def write_roi(self) -> Roi:
        if self._write_roi is None:
            self._write_roi = Roi(*self._write)
        return self._write_roi

    def __eq__(self, other):
        if isinstance(other, Block):
            return self.block_id == other.block_id
        return NotImplemented

    def __hash__(self):
        return hash(self.block_id)

    def __repr__(self):
        return (
            f"Block(id={self.block_id!r}, read_roi={self.read_roi}, "
            f"write_roi={self.write_roi}, status={self.status.name})"
        )

    def __reduce__(self):
        return (_rebuild, (self.task_id, self._spatial_id, self.read_roi, self.write_roi, self.status))


def _rebuild(task_id, spatial_id, read_roi, write_roi, status):
    block = Block._from_wire(
        task_id,
        spatial_id,
        (read_roi.offset, read_roi.shape),
        (write_roi.offset, write_roi.shape),
    )
    block.status = status
    return block


def _as_roi(roi) -> Roi:
    """A `funlib.geometry.Roi` from anything with ``offset`` and ``shape``."""
    if isinstance(roi, Roi):
        return roi
    return Roi(Coordinate(roi.offset), Coordinate(roi.shape))


def _spatial_id(total_roi: Roi, write_roi: Roi) -> int:
    """daisy's block id: the Cantor number of the write ROI's grid index
    in the total ROI (negative indices count as 0)."""
    index = [
        max(0, (w - t) // s)
        for w, t, s in zip(write_roi.offset, total_roi.offset, write_roi.shape)
    ]
    return _cantor(index)


def _cantor(index) -> int:
    if len(index) == 1:
        return index[0]
    n = len(index)
    return math.comb(sum(index) + n - 1, n) + _cantor(index[:-1])
