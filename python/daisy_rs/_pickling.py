"""Pickles of the functions workers run, keeping their file names.

cloudpickle 3 writes a function's code with the file name
``<dynamic-code>`` (a payload the same wherever the function was
defined), so a traceback from a worker read ``File "<dynamic-code>",
line 7``. Here the code keeps its file name: the traceback in ``status``,
the logs and the summary names the user's file and line, as a plain
Python traceback would, with the line's source where the worker can read
that file (a shared file system, as on most clusters).

`payload` is what a task's pickle holds; when it cannot be pickled, the
error names what the function captures that cannot.
"""

from __future__ import annotations

import importlib.machinery
import io
import sys
import types

import cloudpickle

from daisy_rs import logging as daisy_logging

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


def payload(task, kind, function):
    """The function's payload for workers: the function and the check
    function (by value where workers could not import their modules by
    name), and the log directory the program set."""
    contents = {
        "function": function,
        "check_function": task.check_function,
        "logdir": daisy_logging.chosen_log_basedir(),
    }
    by_value = _modules_workers_cannot_import(function, task.check_function)
    try:
        for module in by_value:
            cloudpickle.register_pickle_by_value(module)
        return dumps(contents)
    except Exception as error:
        captured = _unpicklable_captures(function) or _unpicklable_captures(task.check_function)
        what = f": it captures {', '.join(captured)}" if captured else ""
        raise TypeError(
            f"task {task.task_id!r}: its {kind} cannot be sent to workers{what} ({error}). "
            "Create such objects inside the function (a worker function loads them once), "
            "or run with multiprocessing=False"
        ) from error
    finally:
        for module in by_value:
            cloudpickle.unregister_pickle_by_value(module)


def _modules_workers_cannot_import(*functions):
    """The modules of ``functions`` that a worker could not import by name
    from the search path it gets: modules loaded from a file path
    (``importlib``'s ``spec_from_file_location``, as dacapo loads its
    worker files). cloudpickle would pickle their functions by reference."""
    found = []
    for function in functions:
        module = sys.modules.get(getattr(function, "__module__", None) or "")
        if module is None or module.__name__ == "__main__" or module in found:
            continue
        top = module.__name__.partition(".")[0]
        if top in sys.builtin_module_names:
            continue
        spec = importlib.machinery.PathFinder.find_spec(top, sys.path)
        if spec is None:
            found.append(module)
    return found


def _unpicklable_captures(function):
    """The names (and types) of what ``function`` refers to that cannot
    be pickled: closure cells, globals, or an object's attributes."""
    import inspect

    if function is None:
        return []
    try:
        found = inspect.getclosurevars(function)
        captured = {**found.nonlocals, **found.globals}
    except TypeError:
        captured = dict(getattr(function, "__dict__", {}))
    culprits = []
    for name, value in captured.items():
        try:
            cloudpickle.dumps(value)
        except Exception:
            culprits.append(f"{name} ({type(value).__name__})")
    return culprits
