"""Programs written for daisy, unchanged, on this engine: the switch that
makes ``import daisy`` give daisy_rs in every process of a run, daisy
1.x's spawn pattern (a worker function starting processes that call
``daisy.Client()``), forked clients, ``Context``, ``SerialServer`` with
``CLMonitor``, daisy 1.x's ``Task`` positions, opt-in done tracking and
functions from modules loaded by file path. Each runs real scripts with
real drivers and workers, with daisy 2.0.0 installed beside daisy_rs (the
test environment has it), so the switch must win over the real package."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import events


def run_script(workdir, source, *, how="env", args=(), check=True, timeout=300):
    """Runs ``source`` as ``main.py`` in ``workdir`` with ``import daisy``
    switched to daisy_rs ``how``: "env" (DAISY_RS_AS_DAISY=1) or "module"
    (``python -m daisy_rs run``); its completed process."""
    (workdir / "main.py").write_text(textwrap.dedent(source))
    env = {k: v for k, v in os.environ.items() if k not in ("DAISY_RS_AS_DAISY", "DAISY_CONTEXT")}
    if how == "env":
        env["DAISY_RS_AS_DAISY"] = "1"
        command = [sys.executable, "main.py", *args]
    else:
        command = [sys.executable, "-m", "daisy_rs", "run", "main.py", *args]
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


CHILD = """
import os, sys
import daisy

client = daisy.Client()
assert daisy.__name__ == "daisy_rs", daisy.__name__
while True:
    with client.acquire_block() as block:
        if block is None:
            break
        if os.environ.get("FAIL_BLOCK") == str(block.block_id[1]):
            os._exit(3)  # dies holding the block
        (Path := __import__("pathlib").Path)("out").mkdir(exist_ok=True)
        Path(f"out/{block.block_id[1]}-{os.getpid()}").write_text(
            f"{client.worker_id} {client.task_id} {client.context['logdir']}"
        )
"""

SPAWNING = """
import subprocess, sys
import daisy

daisy.logging.set_log_basedir("logs")

def start_worker():
    context = daisy.Context.from_env()
    assert context["task_id"] == "spawn"
    subprocess.run([sys.executable, "child.py"], check=False)

task = daisy.Task(
    "spawn", daisy.Roi((0,), (24,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
    start_worker, read_write_conflict=False, num_workers=2, max_retries={retries}, {extra}
)
states = daisy.run_blockwise([task], return_states=True)
state = states["spawn"]
print("STATE", state.completed_count, state.failed_count, state.total_block_count)
print("SKIPPED", state.skipped_count)
"""


def outputs(workdir):
    return {int(p.name.split("-")[0]): p.read_text().split() for p in (workdir / "out").glob("*")}


@pytest.mark.parametrize("how", ["env", "module"])
def test_the_switch_reaches_every_process_and_wins_over_an_installed_daisy(workdir, how):
    (workdir / "child.py").write_text(CHILD)
    done = run_script(workdir, SPAWNING.format(retries=2, extra=""), how=how)
    assert "STATE 24 0 24" in done.stdout, done.stdout + done.stderr
    written = outputs(workdir)
    assert sorted(written) == list(range(24))
    # The children are accounted as the workers that started them: two
    # workers connected, and every child reports one of their ids.
    connected = [e["worker_id"] for e in events(workdir / "daisy_run" / "spawn") if e.get("event") == "worker_connected"]
    assert len(connected) == 2
    assert {int(worker) for worker, _, _ in written.values()} <= set(connected)
    assert {Path(logdir) for _, _, logdir in written.values()} == {workdir / "logs"}
    # Worker logs where daisy 1.x puts them, once a program sets a basedir.
    logs = sorted(p.name for p in (workdir / "logs" / "spawn").iterdir())
    assert logs == sorted(f"worker_{w}.{s}" for w in connected for s in ("out", "err"))


def test_a_spawned_client_skips_what_the_check_function_calls_done(workdir):
    (workdir / "child.py").write_text(CHILD)
    check = "check_function=lambda block: block.block_id[1] < 10,"
    done = run_script(workdir, SPAWNING.format(retries=0, extra=check))
    assert "STATE 24 0 24" in done.stdout and "SKIPPED 10" in done.stdout, done.stdout + done.stderr
    assert sorted(outputs(workdir)) == list(range(10, 24))


def test_a_log_directory_a_context_cannot_hold_leaves_it_out(workdir):
    """`:` and `=` separate a context's fields: a log directory such as
    lr=0.1/ (Hydra's runs) is left out of the context, not a failure; the
    child keeps its own (daisy's default), as a daisy 1.x Context does."""
    (workdir / "child.py").write_text(CHILD)
    done = run_script(workdir, SPAWNING.format(retries=0, extra="").replace('"logs"', '"lr=0.1/logs"'))
    assert "STATE 24 0 24" in done.stdout, done.stdout + done.stderr
    assert {logdir for _, _, logdir in outputs(workdir).values()} == {"daisy_logs"}


def test_a_child_that_dies_holding_a_block_fails_that_block_and_the_run_goes_on(workdir):
    (workdir / "child.py").write_text(CHILD.replace('os.environ.get("FAIL_BLOCK")', '"5"'))
    done = run_script(workdir, SPAWNING.format(retries=0, extra=""))
    assert "STATE 23 1 24" in done.stdout, done.stdout + done.stderr
    failed = [e for e in events(workdir / "daisy_run" / "spawn") if e.get("event") == "block_failed"]
    assert [e["block_id"] for e in failed] == [5]
    assert "ended or disconnected before it released it" in failed[0]["error"]


def test_forked_clients_share_their_worker(workdir):
    """gunpowder's DaisyRequestBlocks(num_workers=2): the worker function
    forks fetchers, each with its own daisy.Client()."""
    run_script(
        workdir,
        """
        import multiprocessing, os
        import daisy

        def fetch():
            client = daisy.Client()
            while True:
                with client.acquire_block() as block:
                    if block is None:
                        return
                    open(f"out/{block.block_id[1]}", "w").write(str(os.getpid()))

        def start_worker():
            fetchers = [multiprocessing.get_context("fork").Process(target=fetch) for _ in range(2)]
            for f in fetchers:
                f.start()
            for f in fetchers:
                f.join()

        os.makedirs("out")
        task = daisy.Task("fork", daisy.Roi((0, 0), (6, 6)), daisy.Roi((0, 0), (1, 1)),
                          daisy.Roi((0, 0), (1, 1)), process_function=start_worker,
                          read_write_conflict=False, max_workers=1, prefetch=1)
        assert daisy.run_blockwise([task])
        """,
    )
    assert len(list((workdir / "out").iterdir())) == 36


def test_client_and_context_outside_a_worker_say_why(workdir):
    done = run_script(
        workdir,
        """
        import daisy
        try:
            daisy.Client()
        except KeyError as error:
            print("KEYERROR", error)
        context = daisy.Context(hostname="localhost", port=1234, task_id="t", worker_id=0)
        assert daisy.Context.ENV_VARIABLE == "DAISY_CONTEXT"
        import os
        os.environ["DAISY_CONTEXT"] = context.to_env()
        back = daisy.Context.from_env()
        print("BACK", back["hostname"], back["port"], back["worker_id"], back["logdir"])
        try:
            daisy.Client()
        except ValueError as error:
            print("VALUEERROR", error)
        os.environ["DAISY_CONTEXT"] = "logdir=daisy_logs:task_id=t"  # daisy_rs's before issue 34
        try:
            daisy.Client()
        except KeyError as error:
            print("LACKS", error)
        """,
    )
    assert "KEYERROR" in done.stdout and "not started by a daisy worker" in done.stdout
    assert "BACK localhost 1234 0 daisy_logs" in done.stdout
    assert "VALUEERROR" in done.stdout and "no 'token'" in done.stdout
    lacks = next(line for line in done.stdout.splitlines() if line.startswith("LACKS"))
    assert "DAISY_CONTEXT has no 'worker_id'" in lacks and "init_callback_fn(context)" in lacks, lacks


def test_serial_server_with_cl_monitor_and_daisy1_positions(workdir):
    done = run_script(
        workdir,
        """
        import daisy
        from daisy.cl_monitor import CLMonitor
        from daisy.block import BlockStatus

        seen = []
        def process(block):
            seen.append(block.block_id[1])
            if block.block_id[1] == 3:
                block.status = BlockStatus.FAILED

        # daisy 1.x's 13 arguments, by position (as dacapo passes them)
        first = daisy.Task("first", daisy.Roi((0,), (8,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
                           process, None, None, False, 1, 0, "valid", None, None)

        class Second(daisy.Task):
            def __init__(self, label, **kwargs):  # keywords of its own
                self.label = label
                super().__init__(**kwargs)

        second = Second("x", task_id="second", total_roi=daisy.Roi((0,), (8,)),
                        read_roi=daisy.Roi((0,), (1,)), write_roi=daisy.Roi((0,), (1,)),
                        process_function=process, read_write_conflict=False, upstream_tasks=[first])
        server = daisy.SerialServer()
        CLMonitor(server)
        states = server.run_blockwise([first, second])
        for task_id, state in sorted(states.items()):
            print("STATE", task_id, state.completed_count, state.failed_count, state.orphaned_count,
                  state.ready_count, state.processing_count, state.is_done())
        """,
    )
    assert "STATE first 7 1 0 0 0 True" in done.stdout, done.stdout
    assert "STATE second 7 0 1 0 0 True" in done.stdout, done.stdout


CHECKED = """
import json
import daisy

def process(block):
    pass

def check(block):
    return block.block_id[1] % 3 == 0

def task(task_id):
    return daisy.Task(task_id, daisy.Roi((0,), (12,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
                      process, check_function=check, read_write_conflict=False, num_workers=2)

counters = {}
for task_id, server in (("distributed", daisy.Server()), ("serial", daisy.SerialServer())):
    state = server.run_blockwise([task(task_id)])[task_id]
    counters[task_id] = [state.total_block_count, state.completed_count, state.skipped_count,
                         state.failed_count, state.orphaned_count]
print("COUNTERS", json.dumps(counters))
"""


def printed_counters(done):
    line = next(line for line in done.stdout.splitlines() if line.startswith("COUNTERS "))
    return json.loads(line.removeprefix("COUNTERS "))


def test_blocks_a_check_function_calls_done_count_as_skipped_as_in_daisy_2(workdir):
    ours = printed_counters(run_script(workdir, CHECKED))
    real = subprocess.run(
        [sys.executable, "main.py"], cwd=workdir, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k not in ("DAISY_RS_AS_DAISY", "DAISY_CONTEXT")},
    )
    assert real.returncode == 0, real.stderr
    assert printed_counters(real) == ours
    assert ours["distributed"] == [12, 12, 4, 0, 0], ours


def test_done_tracking_is_opt_in(workdir):
    source = """
    import os, sys
    import daisy

    def process(block):
        open(f"ran-{sys.argv[1]}-{block.block_id[1]}", "w").close()

    if sys.argv[2] == "basedir":
        daisy.set_tracking_basedir("tracking")
    task = daisy.Task("t", daisy.Roi((0,), (5,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
                      process_function=process, read_write_conflict=False)
    assert daisy.run_blockwise([task], multiprocessing=False)
    """
    for run in ("1", "2"):
        run_script(workdir, source, args=(run, "none"))
    assert len(list(workdir.glob("ran-2-*"))) == 5, "a run without tracking skipped blocks"
    for run in ("3", "4"):
        run_script(workdir, source, args=(run, "basedir"))
    assert len(list(workdir.glob("ran-3-*"))) == 5
    assert len(list(workdir.glob("ran-4-*"))) == 0, "a tracked run did not resume"
    assert (workdir / "tracking" / "t" / "done" / "t").is_dir()


def test_functions_of_modules_loaded_by_file_path_and_unwrapped_wrappers(workdir):
    (workdir / "tasks").mkdir()
    (workdir / "tasks" / "work.py").write_text(
        textwrap.dedent(
            """
            import daisy

            def process(block):
                open(f"out/{block.block_id[1]}", "w").close()

            def start():
                client = daisy.Client()
                while True:
                    with client.acquire_block() as block:
                        if block is None:
                            return
                        process(block)

            def wrapped(*args, **kwargs):  # no functools.wraps: a worker function, as in daisy
                return start(*args, **kwargs)
            """
        )
    )
    run_script(
        workdir,
        """
        import importlib.util, os
        import daisy

        spec = importlib.util.spec_from_file_location("loaded_by_path", "tasks/work.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        os.makedirs("out")
        make = lambda name, f: daisy.Task(name, daisy.Roi((0,), (6,)), daisy.Roi((0,), (1,)),
                                          daisy.Roi((0,), (1,)), process_function=f,
                                          read_write_conflict=False, max_workers=2)
        assert daisy.run_blockwise([make("per-block", module.process)])
        assert daisy.run_blockwise([make("wrapped", module.wrapped)])
        """,
    )
    assert len(list((workdir / "out").iterdir())) == 6


def test_install_as_daisy_after_daisy_was_imported_says_what_to_do(workdir):
    (workdir / "main.py").write_text("import daisy\nimport daisy_rs\ndaisy_rs.install_as_daisy()\n")
    env = {k: v for k, v in os.environ.items() if k != "DAISY_RS_AS_DAISY"}
    done = subprocess.run([sys.executable, "main.py"], cwd=workdir, env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "daisy was imported before install_as_daisy()" in done.stderr


def test_a_task_whose_regions_hold_no_block_runs_with_none_and_a_warning(workdir):
    done = run_script(
        workdir,
        """
        import daisy

        def process(block):
            open(f"ran-{block.block_id[0]}-{block.block_id[1]}", "w").close()

        empty = daisy.Task("empty", daisy.Roi((0, 0), (4, 4)), daisy.Roi((0, 0), (8, 8)),
                           daisy.Roi((0, 0), (8, 8)), process)
        down = daisy.Task("down", daisy.Roi((0, 0), (4, 4)), daisy.Roi((0, 0), (2, 2)),
                          daisy.Roi((0, 0), (2, 2)), process, upstream_tasks=[empty])
        states = daisy.run_blockwise([empty, down], return_states=True)
        for task_id, state in sorted(states.items()):
            print("STATE", task_id, state.total_block_count, state.completed_count, state.is_done())
        """,
    )
    assert "STATE down 4 4 True" in done.stdout and "STATE empty 0 0 True" in done.stdout, done.stdout
    assert "task 'empty' runs with no blocks" in done.stderr
    assert "shape [8, 8]" in done.stderr, "the warning names the regions"
    assert len(list(workdir.glob("ran-down-*"))) == 4


def test_python_m_daisy_rs_run_refuses_what_it_cannot_run_in_one_line(workdir):
    for args, said in (
        (["run", "nothere.py"], "nothere.py: no such file"),
        (["run", "-m", "no_such_module_here"], "no module named 'no_such_module_here'"),
        ([], "usage: python -m daisy_rs run SCRIPT"),
    ):
        done = subprocess.run([sys.executable, "-m", "daisy_rs", *args], cwd=workdir, capture_output=True, text=True)
        assert done.returncode == 2, done
        assert said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_daisy1_internal_modules_say_what_to_use_instead(workdir):
    """issue 34: ``import daisy.worker_pool`` (and ``daisy.tcp``,
    ``daisy.messages``, daisy 1.x internals) under the switch, and the
    same modules as ``daisy_rs.X``, raise an `ImportError` that names
    what to use."""
    done = run_script(
        workdir,
        """
        import importlib
        for name in ["daisy.worker_pool", "daisy.tcp", "daisy.tcp.tcp_client", "daisy.messages",
                     "daisy_rs.worker_pool", "daisy_rs.tcp", "daisy_rs.messages"]:
            try:
                importlib.import_module(name)
            except ImportError as error:
                print("IMPORTERROR", name, "|", error)
        try:
            from daisy.messages import AcquireBlock
        except ImportError as error:
            print("FROM", error)
        """,
    )
    said = dict(line.split(" | ", 1) for line in done.stdout.splitlines() if line.startswith("IMPORTERROR"))
    assert len(said) == 7, done.stdout + done.stderr
    assert "launcher" in said["IMPORTERROR daisy.worker_pool"] and "max_workers" in said["IMPORTERROR daisy.worker_pool"]
    assert "daisy.Client()" in said["IMPORTERROR daisy.tcp"]
    assert said["IMPORTERROR daisy.tcp.tcp_client"] == said["IMPORTERROR daisy.tcp"]
    assert "acquire_block()" in said["IMPORTERROR daisy.messages"]
    assert said["IMPORTERROR daisy_rs.worker_pool"] == said["IMPORTERROR daisy.worker_pool"]
    assert "FROM daisy_rs has no module 'messages'" in done.stdout


EXITS_AFTER_ONE_BLOCK = """
import os, sys
import daisy

client = daisy.Client()
try:  # the first child (or every one, with ALL_EXIT) leaves after one block
    os.close(os.open("first", os.O_CREAT | os.O_EXCL))
    leaves = True
except FileExistsError:
    leaves = os.environ.get("ALL_EXIT") == "1"
while True:
    with client.acquire_block() as block:
        if block is None:
            break
        os.makedirs("out", exist_ok=True)
        open(f"out/{block.block_id[1]}-{os.getpid()}", "w").close()
    if leaves:
        sys.exit(0)
"""

SPAWNS_COUNTED = """
import os, subprocess, sys, uuid
import daisy

def start_worker():
    os.makedirs("starts", exist_ok=True)
    open(f"starts/{uuid.uuid4().hex}", "w").close()
    subprocess.run([sys.executable, "child.py"], check=True)

task = daisy.Task("spawn", daisy.Roi((0,), (4,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
                  start_worker, read_write_conflict=False, num_workers=2, max_retries=0)
serial = os.environ.get("SERIAL") == "1"
print("OK", daisy.run_blockwise([task], multiprocessing=not serial), "STARTS", len(os.listdir("starts")))
"""


@pytest.mark.parametrize("all_exit", [False, True])
def test_a_spawned_worker_that_exits_normally_is_not_replaced_while_another_runs(workdir, all_exit, monkeypatch):
    """issue 34: a spawn-pattern worker whose child exits with status 0
    while blocks remain is not replaced while the other worker of its task
    runs, as in daisy 1.2.3 (checked there: two starts, the other worker
    runs the three blocks left); when every child leaves so, daisy 1.2.3
    waits forever with blocks left, and here the last worker is replaced,
    one at a time."""
    monkeypatch.setenv("ALL_EXIT", "1" if all_exit else "0")
    (workdir / "child.py").write_text(EXITS_AFTER_ONE_BLOCK)
    done = run_script(workdir, SPAWNS_COUNTED)
    assert sorted(int(p.name.split("-")[0]) for p in (workdir / "out").iterdir()) == [0, 1, 2, 3]
    workers = [e for e in events(workdir / "daisy_run" / "spawn") if e.get("event") in ("worker_submitted", "worker_gone")]
    submitted = [e for e in workers if e["event"] == "worker_submitted"]
    assert all(e["clean"] for e in workers if e["event"] == "worker_gone"), workers
    # No worker after the first two starts while another of the task runs:
    # the one whose child left keeps its place empty. (Where the other one
    # asks while the leaver's prefetched block is on its way back, the
    # driver lets it go for want of a ready block, and the returned block
    # then gets one more worker: 3 starts; usually there are 2.)
    running = 0
    for event in workers:
        if event["event"] == "worker_submitted" and event["worker_id"] > 2:
            assert running == 0, workers
        running += 1 if event["event"] == "worker_submitted" else -1
    if not all_exit:
        assert "OK True STARTS" in done.stdout, done.stdout + done.stderr
        assert len(submitted) in (2, 3), workers
        return
    # Every child leaves after one block: 2 workers, then 1 replacement
    # per block left, each started once no worker of the task ran.
    assert "OK True STARTS 4" in done.stdout, done.stdout + done.stderr
    assert len(submitted) == 4, workers


HAND_STARTED = """
import os
import daisy

client = daisy.Client()
os.makedirs("out", exist_ok=True)
while True:
    with client.acquire_block() as block:
        if block is None:
            break
        open(f"out/{block.block_id[1]}-{os.getpid()}", "w").write(f"{client.worker_id} {client.task_id}")
"""


def test_a_worker_started_by_hand_from_init_callback_fn_serves_its_task(workdir):
    """issue 34: daisy 1.x's init_callback_fn(context) names the server
    (hostname, port, worker_id 0, as daisy 1.2.3's does), and a documented
    daisy 1.x pattern starts workers by hand with it:
    ``DAISY_CONTEXT={context.to_env()} python worker.py``. Here that
    process's daisy.Client() joins the run as a worker started by hand;
    the task has no other worker (num_workers=0), so it ran every block
    that the task's check function (loaded from the task's pickle) does
    not call done."""
    (workdir / "hand.py").write_text(HAND_STARTED)
    done = run_script(
        workdir,
        """
        import subprocess, sys
        import daisy

        started = []

        def init(context):
            print("CONTEXT", context["hostname"], context["port"], context["worker_id"], context["task_id"])
            print("SHOWN", repr(context))
            command = f"DAISY_CONTEXT={context.to_env()} {sys.executable} hand.py"
            started.append(subprocess.Popen(command, shell=True))

        def never(block):
            raise RuntimeError("only the worker started by hand serves this task")

        task = daisy.Task(
            "hand", daisy.Roi((0,), (6,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)), never,
            init_callback_fn=init, num_workers=0, read_write_conflict=False, max_retries=0,
            check_function=lambda block: block.block_id[1] < 2,
        )
        ok = daisy.run_blockwise([task])
        print("OK", ok, "EXIT", started[0].wait())
        """,
    )
    assert "OK True EXIT 0" in done.stdout, done.stdout + done.stderr
    _, hostname, port, worker_id, task_id = next(l for l in done.stdout.splitlines() if l.startswith("CONTEXT")).split()
    assert (worker_id, task_id) == ("0", "hand")
    context_json = json.loads((workdir / "daisy_run" / "hand" / "context.json").read_text())
    assert f"{hostname}:{port}" == context_json["addresses"][0]
    shown = next(l for l in done.stdout.splitlines() if l.startswith("SHOWN"))
    assert "run_token=***" in shown and context_json["token"] not in shown
    written = {int(p.name.split("-")[0]): (p.name.split("-")[1], p.read_text().split()) for p in (workdir / "out").iterdir()}
    assert sorted(written) == [2, 3, 4, 5]
    assert len({pid for pid, _ in written.values()}) == 1, "one process ran them all"
    [ended] = [e for e in events(workdir / "daisy_run" / "hand") if e.get("event") == "task_done"]
    assert (ended["counters"]["completed"], ended["counters"]["skipped"]) == (6, 2), ended
    connected = [e for e in events(workdir / "daisy_run" / "hand") if e.get("event") == "worker_connected"]
    assert [e["by_hand"] for e in connected] == [True], connected
    assert {tuple(info) for _, info in written.values()} == {(str(connected[0]["worker_id"]), "hand")}
    gone = [e for e in events(workdir / "daisy_run" / "hand") if e.get("event") == "worker_gone"]
    assert [e["clean"] for e in gone] == [True], gone


def test_a_serial_run_starts_a_spawn_function_that_exited_normally_again(workdir, monkeypatch):
    """A serial run's one worker is its task's last: a spawn function whose
    child left after one block is started again for the next block."""
    monkeypatch.setenv("ALL_EXIT", "1")
    monkeypatch.setenv("SERIAL", "1")
    (workdir / "child.py").write_text(EXITS_AFTER_ONE_BLOCK)
    done = run_script(workdir, SPAWNS_COUNTED)
    assert "OK True STARTS 4" in done.stdout, done.stdout + done.stderr
    assert sorted(int(p.name.split("-")[0]) for p in (workdir / "out").iterdir()) == [0, 1, 2, 3]


def test_workers_forked_after_init_callback_fn_do_not_hold_the_drivers_port(workdir):
    """The listener bound for init_callback_fn's context before the run is
    closed in every process forked from the program meanwhile (the fork
    server and its workers): a worker outliving its driver must not keep
    the port."""
    run_script(
        workdir,
        """
        import json, os
        import daisy

        def listening(port):
            found = set()
            for table in ("/proc/net/tcp", "/proc/net/tcp6"):
                for line in open(table).read().splitlines()[1:]:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                        found.add(f"socket:[{fields[9]}]")
            return found

        def block_function(block):
            port = int(json.load(open("daisy_run/fk/context.json"))["addresses"][0].rsplit(":", 1)[1])
            held = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                    if os.path.exists(f"/proc/self/fd/{fd}")}
            open(f"holds-{os.getpid()}", "w").write(str(bool(listening(port) & held)))

        task = daisy.Task("fk", daisy.Roi((0,), (4,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
                          block_function, init_callback_fn=lambda context: None, max_workers=2,
                          read_write_conflict=False)
        assert daisy.run_blockwise([task])
        """,
    )
    held = [p.read_text() for p in workdir.glob("holds-*")]
    assert held and set(held) == {"False"}, held
