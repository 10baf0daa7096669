"""daisy_rs: daisy's Python API (1.x and 2.0) on a Rust engine built for clusters.

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

Programs written for daisy run unchanged with ``import daisy`` giving this
package: ``daisy_rs.install_as_daisy()`` before anything imports daisy,
``DAISY_RS_AS_DAISY=1`` in the environment, or ``python -m daisy_rs run
script.py``; every process of the run inherits the switch.

Blocks are served by the engine's driver (``python -m daisy_rs.driver``,
the same program as ``daisy-driver``) to workers started by its
launchers (local processes, sbatch, bsub, slurmrestd) or by hand
(``python -m daisy_rs.worker``); the functions run inside those workers.
See docs/python.md for what is the same as daisy and what differs.
"""

from funlib.geometry import Coordinate, Roi

from _daisy_rs_switch import install_as_daisy
from daisy_rs import logging
from daisy_rs.block import Block, BlockStatus
from daisy_rs.client import Client
from daisy_rs.context import Context
from daisy_rs.dependency_graph import BlockwiseDependencyGraph, DependencyGraph
from daisy_rs.logging import get_worker_log_basename, redirect_stdouterr
from daisy_rs.run import PipelineError, RunError, TaskAbandoned, TaskState, run_blockwise, states
from daisy_rs.scheduler import Scheduler
from daisy_rs.server import SerialServer, Server
from daisy_rs.task import Pipeline, Task
from daisy_rs.tracking import (
    get_done_marker_basedir,
    get_tracking_basedir,
    set_done_marker_basedir,
    set_tracking_basedir,
)

#: daisy's names this package leaves out on purpose, and what to use.
_DIFFERS = {
    "profile_block": "per-block measurements: Task(resource_tracking=True), shown by `status` and `report`",
}


def __getattr__(name):
    if name in _DIFFERS:
        raise AttributeError(
            f"daisy_rs has no {name}: it differs from daisy on purpose: {_DIFFERS[name]} "
            "(docs/python.md, 'What differs')"
        )
    raise AttributeError(f"module 'daisy_rs' has no attribute {name!r}")


__all__ = [
    "Block",
    "BlockStatus",
    "BlockwiseDependencyGraph",
    "Client",
    "Context",
    "Coordinate",
    "DependencyGraph",
    "Pipeline",
    "PipelineError",
    "Roi",
    "RunError",
    "Scheduler",
    "SerialServer",
    "Server",
    "Task",
    "TaskAbandoned",
    "TaskState",
    "get_done_marker_basedir",
    "get_tracking_basedir",
    "get_worker_log_basename",
    "install_as_daisy",
    "logging",
    "redirect_stdouterr",
    "run_blockwise",
    "set_done_marker_basedir",
    "set_tracking_basedir",
    "states",
]
