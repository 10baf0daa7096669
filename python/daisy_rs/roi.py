"""daisy 1.x's module path of `Roi` (funlib.geometry's, as daisy uses)."""

from funlib.geometry import Roi

__all__ = ["Roi"]
