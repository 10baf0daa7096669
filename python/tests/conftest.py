"""Fixtures of the Python tests: every test runs real drivers and real
worker processes in a directory of its own, and reads what happened
back from the run's events.jsonl."""

import json
import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

# The Ctrl-C tests send SIGINT to scripts they start. A shell without job
# control starts background commands with SIGINT ignored (POSIX), exec
# keeps "ignored", and a Python started that way never raises
# KeyboardInterrupt: give this process, and so its scripts, a terminal's
# disposition.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh working directory (runs go to ./daisy_run/<name>)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAISY_RUN_DIR", raising=False)
    return tmp_path


def events(run_dir):
    """The events of the run directory, in order; none before it has a
    log, and without a line a killed driver left torn."""
    path = Path(run_dir) / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return parsed


def done_blocks(run_dir, task):
    """Block ids of ``task`` that block_done events record, in order."""
    return [
        e["block_id"] for e in events(run_dir) if e.get("event") == "block_done" and e.get("task") == task
    ]


def concurrency(run_dir):
    """Connected workers per task after every worker_connected and
    worker_gone event: a list of snapshots."""
    now = defaultdict(int)
    history = []
    for event in events(run_dir):
        kind = event.get("event")
        if kind not in ("worker_connected", "worker_gone"):
            continue
        now[event["task"]] += 1 if kind == "worker_connected" else -1
        history.append(dict(now))
    return history


def peak(history, score):
    return max((score(snapshot) for snapshot in history), default=0)


def requires(what):
    """Skips (or, under CI, fails) a test that needs ``what``."""
    message = f"needs {what}"
    if os.environ.get("CI"):
        pytest.fail(f"{message}, and CI is set: CI must provide it")
    pytest.skip(message)


def wait_for(what, condition, limit_s=120):
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def processes_in(directory):
    """Pids of processes whose working directory is ``directory`` (this
    test's own process aside: the fixture made it its working directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if os.readlink(entry / "cwd") == str(directory):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def assert_nothing_left_in(directory):
    wait_for(f"no process left in {directory}", lambda: not processes_in(directory), limit_s=30)
