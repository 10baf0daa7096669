"""Real daisy clients, unchanged, on this engine: volara 1.0.5's blockwise
pipeline and gunpowder 1.4.4's DaisyRequestBlocks, each in a virtual
environment of its own (they need zarr 3 and zarr 2) with no daisy
installed and daisy_rs switched in (DAISY_RS_AS_DAISY=1). The scripts in
real_clients/ run with that environment's Python in a directory of their
own; ci/test.sh makes the environments and names them in
DAISY_VOLARA_PYTHON and DAISY_GUNPOWDER_PYTHON.

What they check: volara's multiprocessing workers, and its LocalWorker
(volara-cli processes that call daisy.Client() through their worker),
give what the same pipeline gives serially on daisy.SerialServer;
gunpowder's forked fetchers write every voxel of a prediction, with
context, exactly once and right. And no process of a run outlives it."""

import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import concurrency, events, peak, requires

SCRIPTS = Path(__file__).parent / "real_clients"
VOLARA_TASKS = {"frags-extract-frags": 16, "rag-aff-agglom": 16, "lut-graph-mws": 1}


def python_of(variable, what):
    python = os.environ.get(variable)
    if not python or not Path(python).exists():
        requires(f"{what} in a virtual environment with daisy_rs, its Python in {variable} (ci/test.sh makes it)")
    return python


def processes_marked(marker):
    """Live processes whose environment holds ``marker``: everything a run
    started, however deep, orphans included."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, a zombie, or not ours
            continue
        if marker in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_client(python, script, cwd, *args, timeout=600):
    """Runs ``script`` with ``python`` in ``cwd``, daisy switched to
    daisy_rs; fails unless it succeeds and everything it started has
    ended within a grace period (volara's worker processes take seconds
    to tear their interpreter down after their last block)."""
    tag = uuid.uuid4().hex
    marker = f"DAISY_REAL_CLIENT_RUN={tag}".encode()
    env = {k: v for k, v in os.environ.items()
           if k not in ("DAISY_CONTEXT", "DAISY_RUN_DIR", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["DAISY_RS_AS_DAISY"] = "1"
    # The environment's own commands first, as if it were activated:
    # volara's LocalWorker starts `volara-cli` by name.
    env["PATH"] = f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DAISY_REAL_CLIENT_RUN"] = tag  # inherited by all it starts
    cwd.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    process = subprocess.Popen([python, SCRIPTS / script, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill([process.pid, *processes_marked(marker)])
        output, _ = process.communicate()
        pytest.fail(f"{script} {' '.join(args)} ran past {timeout} s:\n{output[-6000:]}")
    took = time.monotonic() - started
    leftover = processes_marked(marker)
    deadline = time.monotonic() + 30
    while leftover and time.monotonic() < deadline:
        time.sleep(0.2)
        leftover = processes_marked(marker)
    if leftover:
        described = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                     for pid in leftover if Path(f"/proc/{pid}/cmdline").exists()]
        kill(leftover)
        pytest.fail(f"{script} {' '.join(args)} (exit {process.returncode}) left processes running 30 s after"
                    f" it ended: {described}\n{output[-6000:]}")
    assert process.returncode == 0, f"{script} {' '.join(args)}: exit {process.returncode}\n{output[-6000:]}"
    print(f"{script} {' '.join(args)}: {took:.1f} s")
    return output


def the_run(cwd):
    """The one run directory a script's run_blockwise left."""
    (run_dir,) = (cwd / "daisy_run").iterdir()
    return run_dir


def counts(run_dir, kind):
    return Counter(e["task"] for e in events(run_dir) if e.get("event") == kind)


def summary(run_dir):
    """The run's events but block_done, for a failure to show."""
    return "\n".join(str(e) for e in events(run_dir) if e.get("event") != "block_done")


@pytest.fixture(scope="module")
def volara_python():
    return python_of("DAISY_VOLARA_PYTHON", "volara 1.0.5")


@pytest.fixture(scope="module")
def volara_serial(volara_python, tmp_path_factory):
    """What the pipeline gives on daisy.SerialServer, the reference."""
    cwd = tmp_path_factory.mktemp("volara") / "serial"
    run_client(volara_python, "volara_pipeline.py", cwd, "serial")
    result = dict(np.load(cwd / "result.npz"))
    # The comparisons mean something only if blocks cut regions into
    # fragments that the agglomeration across blocks joins again: 25
    # regions of the synthetic volume, in more fragments than that.
    assert len(np.unique(result["segs"])) == 25, np.unique(result["segs"])
    assert len(np.unique(result["frags"])) > 25
    return result


@pytest.mark.parametrize("mode", ["multiprocessing", "local-worker"])
def test_volara_pipeline_on_workers_gives_what_it_gives_serially(volara_python, volara_serial, tmp_path, mode):
    cwd = tmp_path / mode
    run_client(volara_python, "volara_pipeline.py", cwd, mode)
    result = np.load(cwd / "result.npz")
    for name, serial in volara_serial.items():
        np.testing.assert_array_equal(result[name], serial, err_msg=f"{name} differs from the serial run's")
    # Every block ran once, on this engine's workers, never more of them
    # at once than volara asked for. ExtractFrags, whose blocks are all
    # ready at the start, had both of its two at once; the tasks downstream
    # get workers as their blocks become ready, which timing decides.
    run_dir = the_run(cwd)
    happened = summary(run_dir)
    assert counts(run_dir, "block_done") == VOLARA_TASKS, happened
    assert not counts(run_dir, "block_failed"), happened
    history = concurrency(run_dir)
    most = {task: peak(history, lambda now: now.get(task, 0)) for task in VOLARA_TASKS}
    assert most["frags-extract-frags"] == 2 and most["rag-aff-agglom"] in (1, 2), (most, happened)
    assert most["lut-graph-mws"] == 1, (most, happened)
    # volara writes the config its volara-cli workers read only when it
    # starts them: the blocks of these tasks came from those processes.
    configs = {p.parent.name for p in (cwd / "volara_logs").glob("*-meta/config.json")}
    if mode == "local-worker":
        assert configs == {"frags-extract-frags-meta", "rag-aff-agglom-meta"}
    else:
        assert configs == set()


def test_gunpowder_prediction_through_forked_fetchers_writes_every_voxel(tmp_path):
    python = python_of("DAISY_GUNPOWDER_PYTHON", "gunpowder 1.4.4")
    run_client(python, "gunpowder_predict.py", tmp_path)
    result = np.load(tmp_path / "result.npz")
    raw, pred = result["raw"].astype(np.float64), result["pred"]
    # What Smooth and IntensityScaleShift give for each voxel that has its
    # 3 x 3 neighbourhood inside raw; raw is at least 1, so a voxel left
    # unwritten (0) cannot pass.
    height, width = raw.shape[0] - 2, raw.shape[1] - 2
    box = sum(raw[dy : dy + height, dx : dx + width] for dy in range(3) for dx in range(3))
    np.testing.assert_array_equal(pred, 2 * box + 1)

    run_dir = the_run(tmp_path)
    assert counts(run_dir, "block_done") == {"predict": 24}
    assert not counts(run_dir, "block_failed")
    assert peak(concurrency(run_dir), lambda now: now.get("predict", 0)) == 2, summary(run_dir)
    workers = {e["pid"] for e in events(run_dir) if e.get("event") == "worker_connected"}
    # Each block was fetched by a process a worker forked, not by a worker.
    fetched = {int(p.name): tuple(map(int, p.read_text().split())) for p in (tmp_path / "blocks").iterdir()}
    done = [e["block_id"] for e in events(run_dir) if e.get("event") == "block_done"]
    assert sorted(fetched) == sorted(done), (sorted(fetched), sorted(done))
    for block, (pid, parent) in fetched.items():
        assert parent in workers and pid not in workers, (block, pid, parent, workers)
