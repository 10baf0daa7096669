"""``python -m daisy_rs run script.py [args...]`` (or ``run -m module``):
runs a program written for daisy on this engine, unchanged. ``import
daisy`` gives ``daisy_rs`` in it and in every process it starts."""

import importlib.util
import os
import runpy
import sys

USAGE = """\
usage: python -m daisy_rs run SCRIPT [ARGS...]
       python -m daisy_rs run -m MODULE [ARGS...]

Runs a program written for daisy 1.x or 2.0 on daisy_rs: `import daisy`
gives daisy_rs in the program and in every process it starts (workers,
subprocesses, srun/sbatch jobs that keep the environment). The same as
setting DAISY_RS_AS_DAISY=1, or calling daisy_rs.install_as_daisy() first.
"""


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"] and args[1:2] in (["-h"], ["--help"]):
        print(USAGE, end="")
        return 0
    if args[:1] != ["run"] or len(args) < 2 or args[1:] == ["-m"]:
        print(USAGE, end="", file=sys.stderr)
        return 2
    import _daisy_rs_switch

    _daisy_rs_switch.install_as_daisy()
    if args[1] == "-m":
        module = args[2]
        if importlib.util.find_spec(module) is None:
            return _refuse(f"no module named {module!r} on this Python's path")
        sys.argv = [module, *args[3:]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    script = args[1]
    if not os.path.isfile(script):
        return _refuse(f"{script}: no such file")
    sys.argv = args[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python script.py` does
    runpy.run_path(script, run_name="__main__")
    return 0


def _refuse(why):
    print(f"python -m daisy_rs run: {why}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
