"""daisy_rs: daisy 2.0's Python API on a Rust engine built for clusters.

    import daisy_rs as daisy

    task = daisy.Task(
        "smooth",
        total_roi=daisy.Roi((0, 0), (1024, 1024)),
        read_roi=daisy.Roi((0, 0), (72, 72)),
        write_roi=daisy.Roi((4, 4), (64, 64)),
        process_function=smooth_block,
        max_workers=4,
    )
    daisy.run_blockwise([task])

Blocks are served by the engine's driver (``python -m daisy_rs.driver``,
the same program as ``daisy-driver``) to workers started by its
launchers (local processes, sbatch, bsub, slurmrestd) or by hand
(``python -m daisy_rs.worker``); the functions run inside those workers.
See docs/python.md for what is the same as daisy and what differs.
"""

from funlib.geometry import Coordinate, Roi

from daisy_rs.block import Block, BlockStatus
from daisy_rs.client import Client
from daisy_rs.run import PipelineError, TaskState, run_blockwise, states
from daisy_rs.task import Pipeline, Task

__all__ = [
    "Block",
    "BlockStatus",
    "Client",
    "Coordinate",
    "Pipeline",
    "PipelineError",
    "Roi",
    "Task",
    "TaskState",
    "run_blockwise",
    "states",
]
