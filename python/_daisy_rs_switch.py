"""Makes ``import daisy`` (and ``daisy.<module>``) give ``daisy_rs``.

Kept outside the package so that the start-up hook (``daisy_rs_as_daisy.pth``,
run by every interpreter of the environment) costs one small import: it
installs the finder only where ``DAISY_RS_AS_DAISY`` is set, and
``daisy_rs`` itself is imported when a program first imports ``daisy``.
The variable is inherited, so every process of a run (workers, the
processes their functions start, ``srun``/``sbatch`` jobs that keep the
environment) gets the same switch.
"""

import importlib
import os
import sys

ENV_VARIABLE = "DAISY_RS_AS_DAISY"


class _Alias:
    """Finds ``daisy`` and ``daisy.x`` as ``daisy_rs`` and ``daisy_rs.x``
    (a meta path finder and its loader, duck-typed: importlib.abc costs an
    interpreter's start-up tens of ms):
    the same module objects, so there is one state (log directory,
    tracking base directory) whichever name a program uses."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "daisy" and not fullname.startswith("daisy."):
            return None
        import importlib.util  # here, not at start-up: it costs tens of ms

        real = "daisy_rs" + fullname[len("daisy") :]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=real)

    def create_module(self, spec):
        module = importlib.import_module(spec.origin)
        # Importing sets these on the module it gets; they stay daisy_rs's.
        spec.loader_state = (module.__spec__, getattr(module, "__loader__", None))
        return module

    def exec_module(self, module):
        real_spec, real_loader = module.__spec__.loader_state
        module.__spec__ = real_spec
        module.__loader__ = real_loader


def install_finder():
    """Routes later imports of ``daisy`` to ``daisy_rs`` in this process."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())


def install_as_daisy():
    """``import daisy`` gives ``daisy_rs`` here and in every process this
    one starts. Call it before anything imports daisy."""
    found = sys.modules.get("daisy")
    if found is not None and not found.__name__.startswith("daisy_rs"):
        if not getattr(getattr(found, "__spec__", None), "_initializing", False):
            raise RuntimeError(
                f"daisy was imported before install_as_daisy() (from {getattr(found, '__file__', found)}): "
                "call daisy_rs.install_as_daisy() first, or set DAISY_RS_AS_DAISY=1 in the environment, "
                "or run the program with `python -m daisy_rs run script.py`"
            )
        # A module named daisy that is being imported calls this (a shim
        # package that stands in for daisy): the import ends with daisy_rs.
        sys.modules["daisy"] = importlib.import_module("daisy_rs")
    os.environ[ENV_VARIABLE] = "1"
    install_finder()


