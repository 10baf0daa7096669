"""`Server` and `SerialServer`: daisy 1.x's way to run tasks, over this
engine's driver (the distributed run and the serial run).

    server = daisy.SerialServer()
    cl_monitor = daisy.cl_monitor.CLMonitor(server)
    states = server.run_blockwise(tasks)      # {task_id: TaskState}

As in daisy 1.x, a server shows progress and a summary when a `CLMonitor`
watches it, and nothing otherwise.
"""

from __future__ import annotations

import warnings

from daisy_rs.run import run_blockwise

__all__ = ["SerialServer", "Server"]


class Server:
    """Runs tasks with workers (``python -m daisy_rs.worker`` processes
    started by the driver's launcher). ``stop_event`` is accepted for
    daisy 1.x's signature and not watched: Ctrl-C or SIGTERM stops a run."""

    _multiprocessing = True

    def __init__(self, stop_event=None):
        self._monitored = False

    def run_blockwise(self, tasks, scheduler=None, block_tracking=True, **options):
        """Runs ``tasks`` to the end; ``{task_id: TaskState}``. ``options``
        are `run_blockwise`'s (``resources``, ``run_dir``, ``launcher``, ...)."""
        if scheduler is not None:
            raise TypeError(
                "run_blockwise(tasks, scheduler=...) is not supported: the driver schedules the "
                "blocks (same blocks, ids and levels as daisy's Scheduler); pass the tasks alone"
            )
        return run_blockwise(
            tasks,
            multiprocessing=self._multiprocessing,
            progress=self._monitored,
            summary=self._monitored,
            block_tracking=block_tracking,
            return_states=True,
            **options,
        )


class SerialServer(Server):
    """Runs tasks one block at a time in this process (for pdb, and
    functions that hold live objects)."""

    _multiprocessing = False

    def __init__(self):
        warnings.warn(
            "daisy.SerialServer is daisy 1.x's; daisy 2.0 spells it "
            "run_blockwise(tasks, multiprocessing=False)",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__()
