"""``python -m daisy_rs run script.py [args...]`` (or ``run -m module``):
runs a program written for daisy on this engine, unchanged. ``import
daisy`` gives ``daisy_rs`` in it and in every process it starts."""

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
    if len(args) < 2 or args[0] != "run" or args[1] in ("-h", "--help"):
        print(USAGE, end="", file=sys.stderr if args[:1] != ["run"] or len(args) < 2 else sys.stdout)
        return 0 if args[1:2] in (["-h"], ["--help"]) else 2
    import _daisy_rs_switch

    _daisy_rs_switch.install_as_daisy()
    if args[1] == "-m":
        if len(args) < 3:
            print(USAGE, end="", file=sys.stderr)
            return 2
        sys.argv = [args[2], *args[3:]]
        runpy.run_module(args[2], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args[1:]
        sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(args[1])))
        runpy.run_path(args[1], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
