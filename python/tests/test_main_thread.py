"""A task's functions run on their worker's main thread, as daisy 1.x and
2.0 run them, so they may install signal handlers (checkpointing on
SIGTERM): the same script runs on this engine and on daisy 2.0.0, the
handler runs on both, and here the worker still drains on SIGTERM and
hands back its blocks. Real drivers, real worker processes, real
signals."""

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

import daisy_rs as daisy
from conftest import events, requires

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from pathlib import Path

    import daisy

    OUT = Path(sys.argv[2]).resolve()
    SIGNAL = getattr(signal, sys.argv[3])
    HANDLER = sys.argv[4] in ("handler", "exit")
    EXITS = sys.argv[4] == "exit"


    def record(name, **fields):
        with open(OUT / name, "a") as file:
            file.write(json.dumps(fields) + "\\n")


    def here():
        return {"pid": os.getpid(), "main": threading.current_thread() is threading.main_thread()}


    def checkpoint(signum, frame):
        record("checkpoint", signal=signum, **here())
        if EXITS:
            sys.exit(0)


    def signal_once_mid_block():
        # The first block of the run only (of any worker): the signal to
        # this process, and the block goes on until the handler has run
        # (without one, until the driver heard that the worker drains).
        try:
            os.close(os.open(OUT / "sent", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        os.kill(os.getpid(), SIGNAL)
        if HANDLER:
            while not (OUT / "checkpoint").exists():
                time.sleep(0.01)
        else:
            events = Path("daisy_run", "sig", "events.jsonl")
            while '"worker_draining"' not in events.read_text():
                time.sleep(0.01)


    def process(block):
        record("blocks", block=block.block_id[1], pid=os.getpid())


    def worker_function():
        if HANDLER:
            signal.signal(SIGNAL, checkpoint)
        record("installed", **here())
        client = daisy.Client()
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                signal_once_mid_block()
                process(block)


    def process_function(block):
        if not (OUT / f"installed-{os.getpid()}").exists():
            (OUT / f"installed-{os.getpid()}").touch()
            if HANDLER:
                signal.signal(SIGNAL, checkpoint)
            record("installed", **here())
        signal_once_mid_block()
        process(block)


    if __name__ == "__main__":
        function = worker_function if sys.argv[1] == "worker_function" else process_function
        task = daisy.Task(
            "sig",
            total_roi=daisy.Roi((0,), (8,)),
            read_roi=daisy.Roi((0,), (1,)),
            write_roi=daisy.Roi((0,), (1,)),
            process_function=function,
            read_write_conflict=False,
            max_workers=1,
        )
        sys.exit(0 if daisy.run_blockwise([task]) else 1)
    """
).replace("import os, signal", "import json, os, signal")


def run_script(directory, kind, as_daisy, signal_name="SIGTERM", handler="handler"):
    """Runs the script in ``directory`` on this engine (``as_daisy``: the
    switch) or on the installed daisy, a function of ``kind`` sending
    itself ``signal_name`` mid-block (once in the run; caught by a handler
    of its own: ``"handler"``, one that then calls `sys.exit`: ``"exit"``,
    or none); what it recorded, by file."""
    directory.mkdir()
    (directory / "sig.py").write_text(SCRIPT)
    (directory / "out").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DAISY_RS_AS_DAISY"}
    if as_daisy:
        env["DAISY_RS_AS_DAISY"] = "1"
    done = subprocess.run(
        [sys.executable, "sig.py", kind, "out", signal_name, handler],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return {
        path.name: [json.loads(line) for line in path.read_text().splitlines()]
        for path in (directory / "out").glob("*")
        if path.name in ("installed", "checkpoint", "blocks")
    }


def assert_handler_ran_on_the_main_thread(recorded):
    """Every function installed its handler on its main thread; the one
    SIGTERM sent ran it once, there, in the worker that had the block."""
    assert recorded["installed"] and all(i["main"] for i in recorded["installed"]), recorded
    (checkpoint,) = recorded["checkpoint"]
    assert checkpoint["main"] and checkpoint["signal"] == 15, checkpoint
    assert checkpoint["pid"] == recorded["installed"][0]["pid"], recorded
    ran = Counter(b["block"] for b in recorded["blocks"])
    assert sorted(ran) == list(range(8)) and set(ran.values()) == {1}, ran


def assert_drained_and_handed_back(directory, recorded, signalled, why):
    """The signalled worker drained (once, for ``why``) and left cleanly;
    another worker ran the rest, and no block failed."""
    by_pid = Counter(b["pid"] for b in recorded["blocks"])
    assert by_pid[signalled] < 8, "the signalled worker drained: another ran the rest"
    ran = Counter(b["block"] for b in recorded["blocks"])
    assert sorted(ran) == list(range(8)) and set(ran.values()) == {1}, ran
    run = events(directory / "daisy_run" / "sig")
    pids = {e["worker_id"]: e["pid"] for e in run if e.get("event") == "worker_connected"}
    drained = [e for e in run if e.get("event") == "worker_draining"]
    assert [(pids[e["worker_id"]], e["why"]) for e in drained] == [(signalled, why)], run
    gone = [e for e in run if e.get("event") == "worker_gone"]
    assert len(gone) == len(pids) >= 2 and all(e["clean"] for e in gone), gone
    assert not [e for e in run if e.get("event") == "block_failed"], "the blocks it held were not failed"


@pytest.mark.parametrize("kind", ["worker_function", "process_function"])
def test_a_sigterm_handler_of_the_users_runs_and_the_worker_still_drains(workdir, kind):
    recorded = run_script(workdir / "ours", kind, as_daisy=True)
    assert_handler_ran_on_the_main_thread(recorded)
    signalled = recorded["checkpoint"][0]["pid"]
    assert_drained_and_handed_back(workdir / "ours", recorded, signalled, "received SIGTERM")

    try:
        import daisy as installed  # daisy 2.0.0 from PyPI, the baseline
    except ImportError:
        requires("daisy 2.0.0 from PyPI (pip install daisy==2.0.0)")
    assert installed.__version__ == "2.0.0", installed.__file__
    theirs = run_script(workdir / "daisy2", kind, as_daisy=False)
    assert_handler_ran_on_the_main_thread(theirs)


@pytest.mark.parametrize("kind", ["worker_function", "process_function"])
def test_a_handler_that_exits_fails_the_block_it_interrupts_and_the_retry_runs_it(workdir, kind):
    """`sys.exit()` in a handler raises in the function, as any exception
    there: the block fails and is retried; the worker drains all the same."""
    recorded = run_script(workdir / "ours", kind, as_daisy=True, handler="exit")
    (checkpoint,) = recorded["checkpoint"]
    run = events(workdir / "ours" / "daisy_run" / "sig")
    failed = [e for e in run if e.get("event") == "block_failed"]
    assert len(failed) == 1 and "SystemExit" in failed[0]["error"], failed
    assert [e["why"] for e in run if e.get("event") == "worker_draining"] == ["received SIGTERM"], run
    ran = Counter(b["block"] for b in recorded["blocks"])
    assert sorted(ran) == list(range(8)) and set(ran.values()) == {1}, "the failed block ran on retry"
    assert failed[0]["block_id"] not in [b["block"] for b in recorded["blocks"] if b["pid"] == checkpoint["pid"]]


@pytest.mark.parametrize("kind", ["worker_function", "process_function"])
def test_ctrl_c_without_a_handler_drains_the_worker_and_interrupts_no_function(workdir, kind):
    """SIGINT reaches the worker's own handler, not `KeyboardInterrupt`:
    the block in hand finishes, the rest goes back."""
    recorded = run_script(workdir / "ours", kind, as_daisy=True, signal_name="SIGINT", handler="none")
    assert "checkpoint" not in recorded
    signalled = recorded["installed"][0]["pid"]
    assert_drained_and_handed_back(workdir / "ours", recorded, signalled, "received SIGINT")


def test_a_module_that_installs_a_handler_when_imported_loads_in_a_worker(workdir, monkeypatch):
    """Workers import (and unpickle) the task's function on their main
    thread, as daisy's do: `signal.signal` at import time works."""
    (workdir / "at_import.py").write_text(
        textwrap.dedent(
            """
            import os, signal
            from pathlib import Path

            signal.signal(signal.SIGUSR1, lambda signum, frame: None)

            def touch(block):
                Path("out", str(block.block_id[1])).touch()
            """
        )
    )
    (workdir / "out").mkdir()
    monkeypatch.syspath_prepend(str(workdir))
    task = daisy.Task(
        "imported",
        total_roi=daisy.Roi((0,), (4,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function="at_import:touch",
        read_write_conflict=False,
        max_workers=1,
    )
    assert daisy.run_blockwise([task], run_dir="run")
    assert sorted(int(p.name) for p in Path("out").iterdir()) == [0, 1, 2, 3]


def fork_a_child_terminate_it_and_serve():
    """A worker function whose forked child (multiprocessing's fork, as
    gunpowder's fetchers are) is ended with SIGTERM; then it serves."""
    import multiprocessing
    import time

    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(3600,))
    child.start()
    child.terminate()
    child.join()
    Path("out", "child").write_text(str(child.exitcode))
    client = daisy.Client()
    while True:
        with client.acquire_block() as block:
            if block is None:
                break
            Path("out", str(block.block_id[1])).touch()


def test_a_forked_childs_sigterm_is_the_childs_not_its_workers(workdir):
    """The child dies of its SIGTERM, as a child of a daisy worker does,
    and the worker that forked it does not drain."""
    (workdir / "out").mkdir()
    task = daisy.Task(
        "forks",
        total_roi=daisy.Roi((0,), (4,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=fork_a_child_terminate_it_and_serve,
        read_write_conflict=False,
        max_workers=1,
    )
    assert daisy.run_blockwise([task], run_dir="run")
    assert Path("out", "child").read_text() == "-15"
    assert sorted(p.name for p in Path("out").iterdir()) == ["0", "1", "2", "3", "child"]
    run = events("run")
    assert not [e for e in run if e.get("event") == "worker_draining"], run
    assert len([e for e in run if e.get("event") == "worker_connected"]) == 1, run
