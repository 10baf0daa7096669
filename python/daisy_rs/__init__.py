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

import importlib

#: Where each public name lives. Loaded on first use (PEP 562): every
#: worker and the driver process import this package, and a block's
#: start-up is what a small run costs.
_HOMES = {
    "Coordinate": "funlib.geometry",
    "Roi": "funlib.geometry",
    "install_as_daisy": "_daisy_rs_switch",
    "Block": "daisy_rs.block",
    "BlockStatus": "daisy_rs.block",
    "Client": "daisy_rs.client",
    "Context": "daisy_rs.context",
    "BlockwiseDependencyGraph": "daisy_rs.dependency_graph",
    "DependencyGraph": "daisy_rs.dependency_graph",
    "get_worker_log_basename": "daisy_rs.logging",
    "redirect_stdouterr": "daisy_rs.logging",
    "PipelineError": "daisy_rs._pipeline_spec",
    "RunError": "daisy_rs.run",
    "TaskAbandoned": "daisy_rs.run",
    "TaskState": "daisy_rs._states",
    "run_blockwise": "daisy_rs.run",
    "states": "daisy_rs._states",
    "Scheduler": "daisy_rs.scheduler",
    "SerialServer": "daisy_rs.server",
    "Server": "daisy_rs.server",
    "Pipeline": "daisy_rs.task",
    "Task": "daisy_rs.task",
    "get_done_marker_basedir": "daisy_rs.tracking",
    "get_tracking_basedir": "daisy_rs.tracking",
    "set_done_marker_basedir": "daisy_rs.tracking",
    "set_tracking_basedir": "daisy_rs.tracking",
}

#: Submodules that are attributes of the package, as in daisy.
_SUBMODULES = frozenset(("logging", "block", "client", "context", "cl_monitor", "task", "server"))

#: daisy's names this package leaves out on purpose, and what to use.
_DIFFERS = {
    "profile_block": "per-block measurements: Task(resource_tracking=True), shown by `status` and `report`",
    "Worker": "workers are started by the driver's launcher (local, sbatch, bsub, slurmrestd) or by hand "
    "with `python -m daisy_rs.worker`; a worker function starts processes of its own",
    "WorkerPool": "the driver keeps each task's workers (max_workers, the resources budget)",
    "expand_roi_to_grid": "Task(fit=...) decides which blocks cover the total ROI; "
    "`python -m daisy_rs.driver plan` shows them",
    "expand_write_roi_to_grid": "Task(fit=...) decides which blocks cover the total ROI; "
    "`python -m daisy_rs.driver plan` shows them",
}


#: daisy 1.x's internal modules, which programs sometimes import; this
#: package has none of them (its driver and workers are Rust), and
#: ``import daisy.tcp`` says what to use (the modules of those names here
#: raise `_internal_module_error`).
_INTERNALS = {
    "worker_pool": "workers are started by the driver's launcher (local processes, sbatch, bsub, "
    "slurmrestd) and kept per task by the driver (Task(max_workers=...), run_blockwise(resources=...)); "
    "to add a worker by hand, run `python -m daisy_rs.worker --context-file <run_dir>/context.json --task <task>`",
    "tcp": "workers talk to the driver over the engine's own protocol (docs/protocol.md); a process reaches "
    "its blocks with daisy.Client(), which reads DAISY_CONTEXT",
    "messages": "blocks are asked for and released with daisy.Client().acquire_block(); the driver's "
    "messages are the engine's own protocol (docs/protocol.md), not daisy 1.x's message classes",
}


def _internal_module_error(name):
    """The `ImportError` of ``import daisy_rs.<name>`` for daisy 1.x's
    internal module ``name``."""
    return ImportError(
        f"daisy_rs has no module {name!r}: daisy 1.x's daisy.{name} is internal to daisy 1.x and "
        f"differs here on purpose: {_INTERNALS[name]} (docs/python.md, 'What differs')",
        name=f"daisy_rs.{name}",
    )


def __getattr__(name):
    if name == "__version__":
        from importlib.metadata import version

        return version("daisy-rs")
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"daisy_rs.{name}")
    if name in _INTERNALS:
        raise AttributeError(str(_internal_module_error(name)))
    if name in _DIFFERS:
        raise AttributeError(
            f"daisy_rs has no {name}: it differs from daisy on purpose: {_DIFFERS[name]} "
            "(docs/python.md, 'What differs')"
        )
    raise AttributeError(f"module 'daisy_rs' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_HOMES, *_SUBMODULES})


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
