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
from daisy_rs.run import PipelineError, RunError, TaskState, run_blockwise, states
from daisy_rs.task import Pipeline, Task

#: daisy 2.0's names this package leaves out on purpose, and what to use.
_DIFFERS = {
    "set_tracking_basedir": "done markers live in the run directory: run_blockwise(run_dir=...)",
    "get_tracking_basedir": "done markers live in the run directory: run_blockwise(run_dir=...)",
    "set_done_marker_basedir": "done markers live in the run directory: run_blockwise(run_dir=...)",
    "get_done_marker_basedir": "done markers live in the run directory: run_blockwise(run_dir=...)",
    "Scheduler": "the scheduler is the driver's; `python -m daisy_rs.driver plan` shows blocks and levels",
    "Server": "the server is the driver: run_blockwise runs it",
    "SerialServer": "run_blockwise(tasks, multiprocessing=False) runs serially",
    "Context": "workers find their driver themselves (DAISY_CONTEXT, or --context-file)",
    "BlockwiseDependencyGraph": "not exposed; `python -m daisy_rs.driver plan` shows blocks and levels",
    "DependencyGraph": "not exposed; `python -m daisy_rs.driver plan` shows blocks and levels",
    "profile_block": "per-block resource measurements are not recorded yet",
}


def __getattr__(name):
    if name in _DIFFERS:
        raise AttributeError(
            f"daisy_rs has no {name}: it differs from daisy 2.0 on purpose: {_DIFFERS[name]} "
            "(docs/python.md, 'What differs')"
        )
    raise AttributeError(f"module 'daisy_rs' has no attribute {name!r}")


__all__ = [
    "Block",
    "BlockStatus",
    "Client",
    "Coordinate",
    "Pipeline",
    "PipelineError",
    "Roi",
    "RunError",
    "Task",
    "TaskState",
    "run_blockwise",
    "states",
]
