"""Runs as users live them: a worker started by hand, a run killed
half-way and started again, Ctrl-C in the Python session. Real scripts,
real processes; nothing is left running afterwards."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import assert_nothing_left_in, done_blocks, events, wait_for

SCRIPT = textwrap.dedent(
    """
    import sys
    import daisy_rs as daisy

    task = daisy.Task(
        "{task}",
        total_roi=daisy.Roi((0,), ({blocks},)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function="blocks:{function}",
        read_write_conflict=False,
        max_workers={workers},
        batch_size=1,
    )
    try:
        ok = daisy.run_blockwise([task], run_dir="run")
    except KeyboardInterrupt:
        print("interrupted")
        sys.exit(5)
    sys.exit(0 if ok else 1)
    """
)

TESTS_DIR = str(Path(__file__).resolve().parent)


def start_script(workdir, out, **fields):
    (workdir / "run.py").write_text(SCRIPT.format(**fields))
    env = {**os.environ, "TEST_OUT": out, "PYTHONPATH": TESTS_DIR}
    return subprocess.Popen(
        [sys.executable, "run.py"], cwd=workdir, env=env, start_new_session=True, stdout=subprocess.PIPE, text=True
    )


def ran(workdir, out):
    return sorted(int(p.name.split("-")[1]) for p in (workdir / out).glob("*"))


def test_a_hand_started_python_worker_serves_a_task(workdir):
    script = start_script(workdir, "out", task="hand", blocks=8, workers=0, function="touch")
    wait_for("context.json", lambda: (workdir / "run" / "context.json").exists())
    worker = subprocess.run(
        [sys.executable, "-m", "daisy_rs.worker", "--context-file", "run/context.json", "--task", "hand"],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": TESTS_DIR},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == 0, worker.stderr
    assert script.wait(timeout=120) == 0
    assert ran(workdir, "out") == list(range(8))
    connected = [e for e in events(workdir / "run") if e.get("event") == "worker_connected"]
    assert len(connected) == 1 and connected[0]["by_hand"] is True


def test_a_killed_run_resumes_without_losing_or_redoing_finished_blocks(workdir):
    script = start_script(workdir, "out1", task="slow", blocks=30, workers=2, function="slow_touch")
    wait_for("5 blocks done", lambda: len(done_blocks(workdir / "run", "slow")) >= 5)
    # The driver runs on a thread of the script's interpreter.
    os.kill(script.pid, signal.SIGKILL)
    script.wait(timeout=120)
    assert_nothing_left_in(workdir)
    first = set(done_blocks(workdir / "run", "slow"))

    again = start_script(workdir, "out2", task="slow", blocks=30, workers=2, function="slow_touch")
    assert again.wait(timeout=300) == 0
    second = set(ran(workdir, "out2"))
    assert not first & second, f"blocks done before ran again: {sorted(first & second)}"
    # A block marked done just before the kill may lack its event: the
    # marker is written first, and it alone decides what a resume skips.
    assert set(ran(workdir, "out1")) | second == set(range(30))


def test_ctrl_c_stops_the_run_and_leaves_nothing_running(workdir):
    script = start_script(workdir, "out", task="stop", blocks=200, workers=2, function="slow_touch")
    wait_for("2 blocks done", lambda: len(done_blocks(workdir / "run", "stop")) >= 2)
    os.killpg(script.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    output, _ = script.communicate(timeout=120)
    assert script.returncode == 5 and "interrupted" in output, output
    assert_nothing_left_in(workdir)
    finished = [e for e in events(workdir / "run") if e.get("event") == "run_finished"]
    assert finished and finished[-1]["completed"] is False


def test_sigterm_stops_the_run_as_ctrl_c_does(workdir):
    """A job's time limit or `kill`: the driver runs on a thread of the
    script's interpreter, and SIGTERM stops it cleanly."""
    script = start_script(workdir, "out", task="term", blocks=200, workers=2, function="slow_touch")
    wait_for("2 blocks done", lambda: len(done_blocks(workdir / "run", "term")) >= 2)
    os.kill(script.pid, signal.SIGTERM)
    output, _ = script.communicate(timeout=120)
    assert script.returncode == 5 and "interrupted" in output, output
    assert_nothing_left_in(workdir)
    finished = [e for e in events(workdir / "run") if e.get("event") == "run_finished"]
    assert finished and finished[-1]["completed"] is False


RE_RUN_SCRIPT = textwrap.dedent(
    """
    import sys
    import daisy_rs as daisy

    task = daisy.Task(
        "again",
        total_roi=daisy.Roi((0,), (40,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function="blocks:slow_touch_while_asked",
        read_write_conflict=False,
        max_workers=2,
        batch_size=1,
    )
    tracking = {{"run_dir": "run"}} if {tracked} else {{}}
    try:
        states = daisy.run_blockwise([task], return_states=True, **tracking)
    except KeyboardInterrupt:
        sys.exit(5)
    print("skipped", states["again"].skipped_count)
    """
)


@pytest.mark.parametrize("tracked", [False, True], ids=["tracking off", "tracking on"])
def test_an_interrupted_run_says_truly_whether_a_re_run_resumes_and_the_re_run_does(workdir, tracked):
    """Issue 38: with done tracking off (run_blockwise's default, as daisy
    2.0) a re-run starts over, and Ctrl-C must not promise a resume."""
    (workdir / "run.py").write_text(RE_RUN_SCRIPT.format(tracked=tracked))
    env = {**os.environ, "PYTHONPATH": TESTS_DIR}
    run_dir = workdir / ("run" if tracked else "daisy_run/again")

    def start(out, **more):
        return subprocess.Popen(
            [sys.executable, "run.py"], cwd=workdir, env={**env, "TEST_OUT": out, **more},
            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    first = start("out1", TEST_SLOW="1")
    wait_for("2 blocks done", lambda: len(done_blocks(run_dir, "again")) >= 2)
    os.killpg(first.pid, signal.SIGINT)
    output, errors = first.communicate(timeout=120)
    assert first.returncode == 5, output + errors
    assert_nothing_left_in(workdir)
    done_before = set(done_blocks(run_dir, "again"))

    again = start("out2")
    rerun_output, rerun_errors = again.communicate(timeout=300)
    assert again.returncode == 0, rerun_output + rerun_errors
    skipped = int(rerun_output.split("skipped ")[-1])
    ran_again = set(ran(workdir, "out2"))
    if tracked:
        assert "daisy-driver: stopping (a re-run resumes)" in errors, errors
        assert "interrupted: run the same command again to resume" in output, output
        assert skipped >= len(done_before) and not ran_again & done_before, rerun_output
    else:
        assert "daisy-driver: stopping (done tracking is off: a re-run starts over)" in errors, errors
        assert "running again starts over" in output and "tracking_path" in output, output
        assert "resumes" not in errors and "again to resume" not in output, output + errors
        assert skipped == 0 and ran_again == set(range(40)), rerun_output


def test_a_second_run_on_a_busy_run_directory_raises_and_leaves_the_first_alone(workdir):
    import pytest

    import daisy_rs as daisy

    script = start_script(workdir, "out", task="busy", blocks=40, workers=1, function="slow_touch")
    wait_for("1 block done", lambda: len(done_blocks(workdir / "run", "busy")) >= 1)
    second = daisy.Task(
        "busy",
        total_roi=daisy.Roi((0,), (40,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function="blocks:slow_touch",
        read_write_conflict=False,
    )
    with pytest.raises(daisy.RunError, match="did not run the pipeline"):
        daisy.run_blockwise([second], run_dir="run")
    os.killpg(script.pid, signal.SIGINT)
    script.communicate(timeout=120)
    assert_nothing_left_in(workdir)


SLOW_PIPELINE = """name = "slow"
[[task]]
id = "t"
total_roi = { offset = [0], shape = [200] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
read_write_conflict = false
block_command = ["sleep", "0.3"]
max_workers = 2
"""


def test_ctrl_c_ends_the_python_cli_with_130_and_one_line_not_a_traceback(workdir):
    (workdir / "slow.toml").write_text(SLOW_PIPELINE)
    driver = subprocess.Popen(
        [sys.executable, "-m", "daisy_rs.driver", "run", "slow.toml"],
        cwd=workdir, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    wait_for("2 blocks done", lambda: len(done_blocks(workdir / "daisy_run" / "slow", "t")) >= 2)
    os.killpg(driver.pid, signal.SIGINT)
    output, _ = driver.communicate(timeout=120)
    assert driver.returncode == 130, output
    assert "interrupted: run the same command again to resume" in output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert_nothing_left_in(workdir)


def test_ctrl_c_in_run_blockwise_raises_one_keyboard_interrupt(workdir):
    source = SCRIPT.replace("try:\n    ok = ", "ok = ").split("except KeyboardInterrupt")[0]
    source = textwrap.dedent(source.replace("\n        ok = daisy", "\nok = daisy"))
    (workdir / "run.py").write_text(source.format(task="uncaught", blocks=200, workers=2, function="slow_touch"))
    env = {**os.environ, "TEST_OUT": "out", "PYTHONPATH": TESTS_DIR}
    script = subprocess.Popen(
        [sys.executable, "run.py"], cwd=workdir, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    wait_for("2 blocks done", lambda: len(done_blocks(workdir / "run", "uncaught")) >= 2)
    os.killpg(script.pid, signal.SIGINT)
    _, errors = script.communicate(timeout=120)
    assert errors.count("Traceback (most recent call last)") == 1, errors
    assert errors.rstrip().endswith("KeyboardInterrupt"), errors
    assert_nothing_left_in(workdir)
