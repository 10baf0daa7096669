"""daisy 1.x's module path of `Coordinate` (funlib.geometry's, as daisy uses)."""

from funlib.geometry import Coordinate

__all__ = ["Coordinate"]
