"""What a daisy 2.0 user meets at the edges: daisy 2.0's positional
orders, its TaskState names, numpy numbers, names the driver refuses,
check functions of worker functions, Ctrl-C in a serial run of a worker
function, a refused run's files, and the search path workers get."""

import gc
import json
import os
import signal
import subprocess
import sys
import sysconfig
import textwrap
import weakref

import numpy as np
import pytest

import daisy_rs as daisy
from blocks import out_dir, serve, touch
from conftest import done_blocks
from test_processes import TESTS_DIR, assert_nothing_left_in, start_script, wait_for

TOTAL = daisy.Roi((0,), (6,))
ONE = daisy.Roi((0,), (1,))


def test_a_block_takes_task_id_then_block_id_as_daisy_2_does():
    block = daisy.Block(TOTAL, ONE, ONE, "task", 5)
    assert block.block_id == ("task", 5)


def test_a_task_takes_daisy_2s_positional_order():
    task = daisy.Task("a", TOTAL, ONE, ONE, touch, None, True, "valid", 3, 2, None, None, False, {"cpu": 1}, 5)
    assert (task.max_workers, task.requires, task.max_worker_restarts) == (3, {"cpu": 1}, 5)
    with pytest.warns(DeprecationWarning, match="use tracking_path"):
        tracked = daisy.Task("a", TOTAL, ONE, ONE, touch, None, True, "valid", 3, 2, None, "/tmp/done")
    assert tracked.tracking_path == "/tmp/done"


def test_task_state_has_daisys_counters_after_a_run():
    state = daisy.TaskState({"id": "a", "total": 3, "done": 1, "skipped": 1, "failed": 1, "orphaned": 0, "remaining": 0})
    assert (state.ready_count, state.processing_count, state.pending_count) == (0, 0, 0)
    assert (state.completed_count, state.skipped_count) == (2, 1)
    assert state.is_done()


def test_numpy_integers_are_taken_where_daisy_takes_integers(workdir):
    task = daisy.Task(
        "np", TOTAL, ONE, ONE, touch, max_workers=np.int64(2), requires={"cpu": np.int32(1)}, batch_size=np.int64(2)
    )
    assert daisy.run_blockwise([task], multiprocessing=False, resources={"cpu": np.int64(2)}, run_dir="run")
    assert len(list(out_dir().glob("np-*"))) == 6


def test_a_bad_timeout_names_the_task(workdir):
    task = daisy.Task("slow", TOTAL, ONE, ONE, touch, timeout=0)
    with pytest.raises(ValueError, match="task 'slow': timeout = 0 is not a positive number"):
        daisy.run_blockwise([task], run_dir="run")


def test_a_task_id_the_driver_would_refuse_is_refused_by_task(workdir):
    with pytest.raises(ValueError, match="it holds 'â'. Use e.g. 't_che'"):
        daisy.Task("tâche", TOTAL, ONE, ONE, touch)
    assert not (workdir / "daisy_run").exists()


def skip_even_blocks(block):
    return block.block_id[1] % 2 == 0


def touch_every_block():
    serve(touch)


def test_a_worker_functions_check_function_skips_the_blocks_it_calls_done(workdir):
    task = daisy.Task("checked", TOTAL, ONE, ONE, touch_every_block, skip_even_blocks, read_write_conflict=False)
    state = daisy.run_blockwise([task], run_dir="run", return_states=True)["checked"]
    assert (state.completed_count, state.skipped_count) == (6, 3), "as daisy counts them"
    ran = sorted(int(p.name.split("-")[1]) for p in out_dir().glob("checked-*"))
    assert ran == [1, 3, 5]
    assert sorted(done_blocks("run", "checked")) == list(range(6))


def die_once_then_serve():
    died = out_dir() / "died"
    if not died.exists():
        died.parent.mkdir(parents=True, exist_ok=True)
        died.touch()
        os._exit(3)
    serve(touch)


def test_task_state_counts_the_workers_that_failed_and_were_restarted(workdir):
    task = daisy.Task("restarted", TOTAL, ONE, ONE, die_once_then_serve, max_workers=1, read_write_conflict=False)
    state = daisy.run_blockwise([task], run_dir="run", return_states=True)["restarted"]
    assert state.completed_count == 6
    assert (state.worker_start_count, state.worker_failure_count, state.worker_restart_count) == (2, 1, 1)
    assert state.first_worker_error == state.last_worker_error is not None


SERIAL_WORKER_FUNCTION = textwrap.dedent(
    """
    import sys
    import daisy_rs as daisy
    from blocks import serve, slow_touch

    def start():
        serve(slow_touch)

    task = daisy.Task("serial", daisy.Roi((0,), (200,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)), start)
    try:
        ok = daisy.run_blockwise([task], multiprocessing=False, run_dir="run")
    except KeyboardInterrupt:
        print("interrupted")
        sys.exit(5)
    sys.exit(0 if ok else 1)
    """
)


def test_ctrl_c_stops_a_serial_run_of_a_worker_function(workdir):
    (workdir / "serial.py").write_text(SERIAL_WORKER_FUNCTION)
    env = {**os.environ, "TEST_OUT": "out", "PYTHONPATH": TESTS_DIR}
    script = subprocess.Popen(
        [sys.executable, "serial.py"], cwd=workdir, env=env, start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    wait_for("2 blocks run", lambda: len(list((workdir / "out").glob("*"))) >= 2)
    os.killpg(script.pid, signal.SIGINT)
    output, _ = script.communicate(timeout=120)
    assert script.returncode == 5 and "interrupted" in output, output
    assert len(list((workdir / "out").glob("*"))) < 200


def files_in(directory):
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def test_a_refused_run_leaves_the_busy_run_directory_as_it_was(workdir):
    script = start_script(workdir, "out", task="busy", blocks=40, workers=1, function="slow_touch")
    wait_for("1 block done", lambda: len(done_blocks(workdir / "run", "busy")) >= 1)
    before = files_in(workdir / "run")
    other = daisy.Task("other", daisy.Roi((0,), (40,)), ONE, ONE, touch)
    with pytest.raises(daisy.RunError, match="did not run the pipeline"):
        daisy.run_blockwise([other], run_dir="run")
    assert files_in(workdir / "run") == before
    os.killpg(script.pid, signal.SIGINT)
    script.communicate(timeout=120)
    assert_nothing_left_in(workdir)


def test_workers_get_an_absolute_search_path(workdir, monkeypatch):
    (workdir / "mods").mkdir()
    monkeypatch.syspath_prepend("mods")
    task = daisy.Task("paths", TOTAL, ONE, ONE, touch)
    assert daisy.run_blockwise([task], multiprocessing=False, run_dir="run")
    (pipeline,) = (workdir / "run" / "python").glob("pipeline-*.json")
    search_path = json.loads(pipeline.read_text())["task"][0]["python_path"]
    assert str(workdir / "mods") in search_path
    assert all(os.path.isabs(entry) for entry in search_path), search_path
    interpreter = {os.path.dirname(os.__file__), sysconfig.get_paths()["purelib"]}
    assert not interpreter & set(search_path), "another interpreter's workers would import this one's modules"


def test_a_task_names_its_worker_program(workdir):
    program = [sys.executable, "-X", "utf8", "-m", "daisy_rs.worker"]
    task = daisy.Task("prog", TOTAL, ONE, ONE, touch, worker_program=program)
    assert daisy.run_blockwise([task], run_dir="run")
    (pipeline,) = (workdir / "run" / "python").glob("pipeline-*.json")
    assert json.loads(pipeline.read_text())["task"][0]["worker_program"] == program
    assert len(list(out_dir().glob("prog-*"))) == 6


def test_a_terminated_python_session_leaves_no_driver_and_no_workers(workdir):
    script = start_script(workdir, "out", task="orphan", blocks=1000, workers=2, function="slow_touch")
    wait_for("1 block done", lambda: len(done_blocks(workdir / "run", "orphan")) >= 1)
    script.terminate()  # the session alone, as `kill <pid>` does: not its process group
    script.wait(timeout=120)
    assert_nothing_left_in(workdir)


def test_a_parameter_with_a_default_makes_a_process_function_as_in_daisy():
    def process(block=None):
        pass

    def serve(*, model="unet"):
        pass

    assert daisy.Task("p", TOTAL, ONE, ONE, process).function()[0] == "process_function"
    assert daisy.Task("w", TOTAL, ONE, ONE, serve).function()[0] == "worker_function"


class Model:
    """Something big a function captures."""


def predictor(model):
    def predict(block):
        assert model is not None

    return predict


def test_a_serial_run_lets_go_of_its_functions(workdir):
    model = Model()
    held = weakref.ref(model)
    predict = predictor(model)
    task = daisy.Task("held", TOTAL, ONE, ONE, predict)
    assert daisy.run_blockwise([task], multiprocessing=False, run_dir="run")
    del model, predict, task
    gc.collect()
    assert held() is None, "the run keeps what its functions captured"


def test_the_printed_hand_start_line_of_a_python_task_starts_a_worker(workdir):
    script = start_script(workdir, "out", task="hand", blocks=4, workers=0, function="touch")
    commands = workdir / "run" / "worker-commands.txt"
    wait_for("worker-commands.txt", lambda: commands.exists() and commands.read_text().strip())
    (line,) = commands.read_text().splitlines()
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": TESTS_DIR, "TEST_OUT": str(workdir / "out")}
    worker = subprocess.run(line, shell=True, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert worker.returncode == 0, f"{line}\n{worker.stderr}"
    assert script.wait(timeout=120) == 0
    assert len(list((workdir / "out").glob("hand-*"))) == 4


def check_raises_on_block_2(block):
    if block.block_id[1] == 2:
        raise RuntimeError("cannot tell whether block 2 is done")
    return False


@pytest.mark.parametrize("function", [touch, touch_every_block], ids=["process", "worker"])
def test_a_check_function_that_raises_fails_that_block_with_its_traceback(workdir, function):
    task = daisy.Task("raises", TOTAL, ONE, ONE, function, check_raises_on_block_2, max_retries=0)
    states = daisy.run_blockwise([task], run_dir="run", return_states=True)
    (failed,) = states["raises"].failed_blocks
    assert failed["block_id"] == 2
    assert "RuntimeError: cannot tell whether block 2 is done" in failed["error"]
    assert sorted(done_blocks("run", "raises")) == [0, 1, 3, 4, 5]
