"""daisy 1.x's module path of `SerialServer`."""

from daisy_rs.server import SerialServer

__all__ = ["SerialServer"]
