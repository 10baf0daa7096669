"""What the benchmarks that put daisy_rs beside the real daisy share: the
environment one engine runs in, and the table of ratios they end with."""

import os
import statistics


def environment(python, switched):
    """The environment for a run under ``python``: ``import daisy`` gives
    daisy_rs there if ``switched``, and that environment's commands
    (volara-cli) come first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("DAISY_RS_AS_DAISY", "PYTHONPATH")}
    if switched:
        env["DAISY_RS_AS_DAISY"] = "1"
    env["PATH"] = f"{os.path.dirname(python)}:{env['PATH']}"
    return env


def print_ratios(seen, indent=""):
    """daisy_rs's median time over each other engine's, from ``seen``
    (engine name -> seconds of its runs)."""
    ours = statistics.median(seen["daisy_rs"])
    for name, times in seen.items():
        if name != "daisy_rs":
            print(f"{indent}daisy_rs / {name}: {ours / statistics.median(times):.2f}x the time")
