"""Pickles of the functions workers run, keeping their file names.

cloudpickle 3 writes a function's code with the file name
``<dynamic-code>`` (a payload the same wherever the function was
defined), so a traceback from a worker read ``File "<dynamic-code>",
line 7``. Here the code keeps its file name: the traceback in ``status``,
the logs and the summary names the user's file and line, as a plain
Python traceback would, with the line's source where the worker can read
that file (a shared file system, as on most clusters).
"""

from __future__ import annotations

import io
import types

import cloudpickle

#: How cloudpickle reduces a code object, where it replaces the file name
#: (cloudpickle 3; cloudpickle 2 kept the file name and has none here).
_code_reduce = getattr(cloudpickle.cloudpickle, "_code_reduce", None)
_DYNAMIC = "<dynamic-code>"


class _Pickler(cloudpickle.Pickler):
    def reducer_override(self, obj):
        if _code_reduce is not None and isinstance(obj, types.CodeType):
            constructor, args = _code_reduce(obj)
            return constructor, tuple(obj.co_filename if arg == _DYNAMIC else arg for arg in args)
        return super().reducer_override(obj)


def dumps(obj) -> bytes:
    """``cloudpickle.dumps(obj)``, code keeping its file names."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
    return buffer.getvalue()
