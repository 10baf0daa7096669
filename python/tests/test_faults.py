"""Faults a user meets, through real drivers and workers: blocks whose
code kills their worker are blamed on the block, not on the task."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import daisy_rs as daisy
from blocks import crash_on_blocks_2_and_5, take_one_block_and_return
from conftest import events

ROOT = Path(__file__).resolve().parents[2]


def line_task(task_id, blocks, function, **kwargs):
    one = daisy.Roi((0,), (1,))
    return daisy.Task(
        task_id, daisy.Roi((0,), (blocks,)), one, one, function, read_write_conflict=False, **kwargs
    )


def test_a_block_that_kills_its_worker_fails_alone_and_the_task_completes(workdir):
    task = line_task("crashy", 40, crash_on_blocks_2_and_5, max_workers=2, max_retries=1, max_worker_restarts=1)
    state = daisy.run_blockwise([task], run_dir="run", return_states=True)["crashy"]
    assert not state.abandoned, state.abandon_reason
    assert (state.completed_count, state.failed_count, state.orphaned_count) == (38, 2, 0)
    errors = {f["block_id"]: f["error"] for f in state.failed_blocks}
    assert sorted(errors) == [2, 5]
    assert "died while running this block: exited with code 3" in errors[2], errors[2]
    assert "block 2 gives up" in errors[2], "its stderr's tail"
    assert "died while running this block: killed by SIGSEGV" in errors[5], errors[5]
    attempts = [e["block_id"] for e in events("run") if e.get("event") == "block_failed"]
    assert sorted(attempts) == [2, 2, 5, 5], "each tried once more, as max_retries says"


def test_a_task_id_that_cannot_name_a_directory_is_refused_at_task_in_python_terms():
    one = daisy.Roi((0,), (1,))
    with pytest.raises(ValueError) as refused:
        daisy.Task("my task/2", one, one, one, lambda block: None)
    message = str(refused.value)
    assert message.startswith("Task('my task/2', ...): a task id names the task's directories"), message
    assert "holds ' ' '/'" in message and "Use e.g. 'my_task_2'" in message, message
    assert "[[task]]" not in message


def test_requires_without_a_budget_names_run_blockwises_resources(workdir):
    task = line_task("needy", 4, lambda block: None, requires={"cpu": 1})
    with pytest.raises(ValueError, match=r"run_blockwise\(resources=\.\.\.\) has no 'cpu': pass resources=\{'cpu': 1"):
        daisy.run_blockwise([task], run_dir="run")


def test_the_pip_installed_cli_runs_a_block_command_pipeline_with_no_rust_binary_anywhere(tmp_path):
    shutil.copytree(ROOT / "examples" / "demo", tmp_path / "examples" / "demo")
    bin_dir = Path(sys.executable).parent
    # Only the virtual environment and the system's programs: no
    # daisy-worker or daisy-driver a cargo build made.
    env = {k: v for k, v in os.environ.items() if k not in ("DAISY_WORKER_BIN", "DAISY_RS_AS_DAISY")}
    env["PATH"] = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    for directory in env["PATH"].split(os.pathsep):
        assert not (Path(directory) / "daisy-worker").exists(), directory
    run = subprocess.run(
        [str(bin_dir / "daisy-rs-driver"), "run", "examples/demo/demo.toml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    verify = subprocess.run(
        [sys.executable, "examples/demo/verify.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    started = [e for e in events(tmp_path / "daisy_run" / "demo") if e.get("event") == "worker_connected"]
    assert started, "workers ran the blocks"


def test_a_pickled_functions_traceback_names_its_file_and_line(workdir):
    def process(block):
        raise ValueError(f"bad voxels in block {block.block_id[1]}")

    line = process.__code__.co_firstlineno + 1
    task = line_task("traced", 1, process, max_retries=0)
    state = daisy.run_blockwise([task], run_dir="run", return_states=True)["traced"]
    error = state.failed_blocks[0]["error"]
    assert f'File "{__file__}", line {line}, in process' in error, error
    assert 'raise ValueError(f"bad voxels in block' in error, "the line's source"
    assert "<dynamic-code>" not in error


def test_a_worker_function_that_returns_early_fails_no_block_it_never_took(workdir):
    task = line_task("early", 40, take_one_block_and_return, batch_size=4, max_retries=0)
    state = daisy.run_blockwise([task], run_dir="run", return_states=True)["early"]
    assert (state.completed_count, state.failed_count) == (40, 0), state.failed_blocks
