"""Workers forked from the program (daisy_rs._fork_server): they have the
program's imports without importing them again, they take the thread
counts the driver gives them, a program that must not be forked gets
fresh interpreters and is told why once, and nothing outlives a run.
Real scripts, real drivers and workers."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import assert_nothing_left_in, wait_for

#: A module the scripts import: it records every import of itself (one
#: line a process), and its process function records the worker's view.
MARKER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path

    with open("imports", "a") as imports:
        imports.write(f"{os.getpid()}\\n")

    def record(block):
        seen = {
            "pid": os.getpid(),
            "parent": os.getppid(),
            "group": os.getpgid(0),
            "threads": int(os.environ.get("OMP_NUM_THREADS", "0")),
        }
        if "numpy" in sys.modules:
            from threadpoolctl import threadpool_info
            seen["blas_threads"] = [pool["num_threads"] for pool in threadpool_info()]
        Path("seen").mkdir(exist_ok=True)
        Path("seen", str(block.block_id[1])).write_text(json.dumps(seen))
        time.sleep(float(os.environ.get("BLOCK_SLEEP_S", "0")))
    """
)

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, threading
    {imports}
    import daisy_rs as daisy
    import marker

    {before}
    task = daisy.Task(
        "t",
        total_roi=daisy.Roi((0,), ({blocks},)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=marker.record,
        read_write_conflict=False,
        max_workers=2,
        batch_size=1,
        {task_options}
    )
    print(json.dumps({{"program": os.getpid()}}), flush=True)
    try:
        for _ in range({runs}):
            ok = daisy.run_blockwise([task], progress=False, summary=False, {run_options})
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(5)
    sys.exit(0 if ok else 1)
    """
)


def start(workdir, blocks=6, runs=1, imports="", before="", task_options="", run_options="", env=()):
    (workdir / "marker.py").write_text(MARKER)
    script = SCRIPT.format(
        imports=imports,
        before=before,
        blocks=blocks,
        runs=runs,
        task_options=task_options,
        run_options=run_options,
    )
    (workdir / "run.py").write_text(script)
    return subprocess.Popen(
        [sys.executable, "run.py"],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": str(workdir), **dict(env)},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(workdir, **options):
    """Runs a script to its end: its pid, stderr, and each block's view."""
    script = start(workdir, **options)
    out, err = script.communicate(timeout=300)
    assert script.returncode == 0, err
    program = json.loads(out.splitlines()[0])["program"]
    seen = [json.loads(p.read_text()) for p in sorted((workdir / "seen").iterdir())]
    return program, err, seen


def imports(workdir):
    return (workdir / "imports").read_text().split()


def test_workers_are_forked_with_the_programs_imports_and_groups_of_their_own(workdir):
    program, err, seen = run(workdir)
    assert imports(workdir) == [str(program)], "imported by the program alone"
    servers = {block["parent"] for block in seen}
    assert len(servers) == 1 and program not in servers, "one fork server, not the program, forked them"
    assert all(block["group"] == block["pid"] for block in seen), "each worker leads its group"
    assert "fresh interpreters" not in err, err


@pytest.mark.parametrize(
    "how",
    [
        {"env": {"DAISY_FORK_WORKERS": "0"}},
        {"run_options": "fork_workers=False"},
        {"task_options": "fork_workers=False"},
    ],
    ids=["environment", "run_blockwise", "task"],
)
def test_forking_can_be_turned_off(workdir, how):
    program, err, seen = run(workdir, **how)
    workers = {block["pid"] for block in seen}
    assert set(imports(workdir)) >= set(map(str, [program, *workers])), "each worker imported it"
    assert {block["parent"] for block in seen} == {program}
    assert "fresh interpreters" not in err, "an opt-out is no surprise to be told about"


def test_a_program_with_threads_gets_fresh_workers_and_is_told_why_once(workdir):
    before = "threading.Thread(target=threading.Event().wait, name='poller', daemon=True).start()"
    program, err, seen = run(workdir, before=before, runs=2)
    assert {block["parent"] for block in seen} == {program}
    assert len(imports(workdir)) > 1, "workers imported the module themselves"
    lines = [line for line in err.splitlines() if "fresh interpreters" in line]
    assert len(lines) == 1 and "'poller'" in lines[0], err


def test_a_preimported_numpy_takes_the_workers_thread_count(workdir):
    """numpy's BLAS sizes its thread pool when numpy is imported: the
    program's pool has a thread per core, a forked worker's the count of
    its cpu share."""
    pytest.importorskip("numpy")
    options = "resources={'cpu': 2}"
    program, _, seen = run(workdir, imports="import numpy", task_options="requires={'cpu': 1},", run_options=options)
    assert {block["threads"] for block in seen} == {1}
    assert all(block["blas_threads"] and set(block["blas_threads"]) == {1} for block in seen), seen
    assert program not in {block["parent"] for block in seen}, "forked"


PIPELINE = textwrap.dedent(
    """
    name = "cli"
    [[task]]
    id = "t"
    total_roi = {{ offset = [0], shape = [6] }}
    read_roi = {{ offset = [0], shape = [1] }}
    write_roi = {{ offset = [0], shape = [1] }}
    read_write_conflict = false
    max_workers = 2
    batch_size = 1
    process_function = "marker:record"
    python_path = ["{workdir}"]
    """
)


@pytest.mark.parametrize("forking", [True, False], ids=["forked", "DAISY_FORK_WORKERS=0"])
def test_the_cli_forks_a_pipelines_python_workers_from_a_server_that_imported_their_functions(workdir, forking):
    """``daisy-driver run`` of a pipeline file: a fresh fork server
    imports the task's module once; its workers import nothing again."""
    (workdir / "marker.py").write_text(MARKER)
    (workdir / "pipeline.toml").write_text(PIPELINE.format(workdir=workdir))
    driver = Path(sys.executable).parent / "daisy-rs-driver"
    env = {**os.environ, "DAISY_FORK_WORKERS": "1" if forking else "0"}
    done = subprocess.run(
        [str(driver), "run", "pipeline.toml"], cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = [json.loads(p.read_text()) for p in (workdir / "seen").iterdir()]
    workers = {block["pid"] for block in seen}
    if forking:
        [server] = imports(workdir)
        assert {block["parent"] for block in seen} == {int(server)}
    else:
        assert set(imports(workdir)) >= set(map(str, workers)), "each worker imported it"
    assert_nothing_left_in(workdir)


def test_ctrl_c_of_a_forking_run_leaves_no_process_behind(workdir):
    script = start(workdir, blocks=200, env={"BLOCK_SLEEP_S": "0.2"})
    program = json.loads(script.stdout.readline())["program"]
    wait_for("4 blocks done", lambda: len(list((workdir / "seen").glob("*"))) >= 4)
    server = [pid for pid in children_of(program) if children_of(pid)]
    assert len(server) == 1, "a fork server with workers under it"
    os.killpg(script.pid, signal.SIGINT)  # a terminal's Ctrl-C
    out, err = script.communicate(timeout=120)
    assert script.returncode == 5 and "interrupted" in out, err
    assert_nothing_left_in(workdir)


def test_a_killed_program_takes_its_fork_server_along(workdir):
    script = start(workdir, blocks=200, env={"BLOCK_SLEEP_S": "0.2"})
    program = json.loads(script.stdout.readline())["program"]
    wait_for("2 blocks done", lambda: len(list((workdir / "seen").glob("*"))) >= 2)
    os.kill(program, signal.SIGKILL)
    script.communicate(timeout=120)
    assert_nothing_left_in(workdir)


def children_of(pid):
    try:
        listed = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in listed.split()]
