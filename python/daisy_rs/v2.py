"""``import daisy.v2 as daisy``: the same names as the package."""

from daisy_rs import *  # noqa: F401,F403
from daisy_rs import __all__  # noqa: F401
