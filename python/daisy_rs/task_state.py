"""daisy's module path of `TaskState`."""

from daisy_rs.run import TaskState

__all__ = ["TaskState"]
