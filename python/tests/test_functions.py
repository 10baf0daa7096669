"""Process functions and worker functions, through real drivers and real
Python workers: every block runs, blocks carry daisy's ids and ROIs,
failures are retried and then orphan what depends on them, and problems
are refused before anything starts."""

import json
import threading

import pytest

import daisy_rs as daisy
from blocks import out_dir
from conftest import done_blocks, events


def grid_task(task_id, process_function, shape=(40, 40), **kwargs):
    return daisy.Task(
        task_id,
        total_roi=daisy.Roi((0, 0), shape),
        read_roi=daisy.Roi((0, 0), (12, 12)),
        write_roi=daisy.Roi((1, 1), (10, 10)),
        process_function=process_function,
        **kwargs,
    )


def ran(task_id=None):
    """Block ids of the runs recorded by blocks.touch, one per run."""
    names = [p.name.split("-") for p in out_dir().glob("*")] if out_dir().exists() else []
    return sorted(int(n[1]) for n in names if task_id is None or n[0] == task_id)


def expected_blocks(task):
    """The blocks daisy's rules give the task: every write ROI in the
    total write region, with daisy's block ids."""
    blocks = {}
    for x in range(0, 30, 10):
        for y in range(0, 30, 10):
            read = daisy.Roi((x, y), (12, 12))
            write = daisy.Roi((x + 1, y + 1), (10, 10))
            block = daisy.Block(task.total_roi, read, write, task_id=task.task_id)
            blocks[block.block_id[1]] = (read, write)
    return blocks


def test_a_process_function_runs_every_block_once_with_daisys_ids_and_rois(workdir):
    from blocks import touch

    task = grid_task("touch", touch, max_workers=2)
    assert daisy.run_blockwise([task], run_dir="run")
    expected = expected_blocks(task)
    assert ran("touch") == sorted(expected)
    for path in out_dir().glob("*"):
        block_id = int(path.name.split("-")[1])
        read, write = expected[block_id]
        assert path.read_text() == f"{read}|{write}"
    assert sorted(done_blocks("run", "touch")) == sorted(expected)


def test_a_function_given_by_reference_is_imported_by_workers(workdir):
    task = grid_task("touch", "blocks:touch", max_workers=2)
    assert daisy.run_blockwise([task], run_dir="run")
    assert len(ran("touch")) == 9


def test_a_worker_function_loads_once_and_serves_many_blocks(workdir):
    def start_worker():
        import os

        from blocks import serve, touch

        loads = out_dir().parent / "loads"
        loads.mkdir(exist_ok=True)
        (loads / str(os.getpid())).write_text("model loaded")
        serve(touch)

    task = grid_task("serve", start_worker, max_workers=2)
    assert daisy.run_blockwise([task], run_dir="run")
    assert ran("serve") == sorted(expected_blocks(task))
    loads = list((workdir / "loads").iterdir())
    assert 1 <= len(loads) <= 2, "one load per worker process"


def test_failures_are_retried_then_orphan_downstream_blocks(workdir):
    def fail_on_block_0(block):
        from blocks import touch

        touch(block)
        if block.block_id[1] == 0:
            raise ValueError(f"bad voxels in {block.write_roi}")

    upstream = grid_task("up", fail_on_block_0, max_retries=1)
    downstream = grid_task("down", "blocks:touch")
    states = daisy.run_blockwise(upstream + downstream, run_dir="run", return_states=True)
    assert ran("up").count(0) == 2, "tried once and retried once"
    assert states["up"].failed_count == 1
    assert states["down"].orphaned_count >= 1
    assert states["down"].completed_count + states["down"].orphaned_count == 9
    failed = states["up"].failed_blocks[0]
    assert failed["block_id"] == 0
    assert "ValueError: bad voxels in [1:11, 1:11]" in failed["error"], failed["error"]
    # status points at the file holding the whole traceback: the Python
    # worker's own stderr
    assert "ValueError: bad voxels" in open(failed["log"]).read(), failed["log"]
    assert not daisy.run_blockwise(upstream + downstream, run_dir="run"), "failures make it False"


def test_a_block_marked_failed_without_raising_fails(workdir):
    def mark_failed(block):
        block.status = daisy.BlockStatus.FAILED

    task = grid_task("m", mark_failed, max_retries=0, read_write_conflict=False)
    states = daisy.run_blockwise([task], run_dir="run", return_states=True)
    assert states["m"].failed_count == 9
    assert "set the block's status to FAILED" in states["m"].failed_blocks[0]["error"]


def test_check_function_skips_blocks_it_says_are_done(workdir):
    from blocks import touch

    def already_done(block):
        return block.block_id[1] % 2 == 0

    task = grid_task("c", touch, check_function=already_done)
    state = daisy.run_blockwise([task], run_dir="run", return_states=True)["c"]
    assert (state.completed_count, state.skipped_count) == (9, 5), "as daisy counts them"
    assert all(block_id % 2 == 1 for block_id in ran("c"))
    assert len(done_blocks("run", "c")) == 9


def test_a_second_run_resumes_and_skips_done_blocks(workdir):
    from blocks import touch

    task = grid_task("r", touch)
    assert daisy.run_blockwise([task], run_dir="run")
    assert daisy.run_blockwise([task], run_dir="run")
    assert len(ran("r")) == 9, "the second run ran nothing"


def test_serial_runs_call_the_original_function_in_this_process(workdir):
    seen = []
    lock = threading.Lock()  # unpicklable: proves nothing was pickled

    def record(block):
        with lock:
            seen.append(block.block_id[1])

    task = grid_task("s", record)
    assert daisy.run_blockwise([task], multiprocessing=False, run_dir="run")
    assert sorted(seen) == sorted(expected_blocks(task))
    assert sorted(done_blocks("run", "s")) == sorted(seen)


@pytest.mark.parametrize("multiprocessing", [True, False])
def test_progress_and_summary_false_print_nothing(workdir, capfd, monkeypatch, multiprocessing):
    from blocks import touch

    monkeypatch.setenv("DAISY_STATUS_EVERY", "0s")  # a progress line per update
    task = grid_task("quiet", touch)
    run = daisy.run_blockwise
    assert run([task], multiprocessing, run_dir="run", progress=False, summary=False)
    assert capfd.readouterr().out == ""
    assert sorted(done_blocks("run", "quiet")) == sorted(expected_blocks(task))


@pytest.mark.parametrize("multiprocessing", [True, False])
def test_summary_false_leaves_out_the_summary_only(workdir, capfd, monkeypatch, multiprocessing):
    from blocks import touch

    monkeypatch.setenv("DAISY_STATUS_EVERY", "0s")
    assert daisy.run_blockwise([grid_task("t", touch)], multiprocessing, run_dir="run", summary=False)
    out = capfd.readouterr().out
    assert " blocks run in " not in out
    assert ("[    0s] t " if multiprocessing else "progress: 9 blocks run") in out


def test_a_function_that_cannot_be_pickled_is_refused_naming_what_it_captured(workdir):
    lock = threading.Lock()

    def guarded(block):
        with lock:
            pass

    with pytest.raises(TypeError) as refused:
        daisy.run_blockwise([grid_task("p", guarded)], run_dir="run")
    assert "task 'p': its process_function cannot be sent to workers" in str(refused.value)
    assert "lock (lock)" in str(refused.value)
    assert not (workdir / "run" / "events.jsonl").exists()


def test_every_validation_problem_is_listed_in_one_exception(workdir):
    bad = daisy.Task(
        "bad",
        total_roi=daisy.Roi((0, 0), (40, 40)),
        read_roi=daisy.Roi((0, 0), (12, 12)),
        write_roi=daisy.Roi((1, 1), (10, 10)),
        process_function="blocks:touch",
        max_retries=-1,
        requires={"gpu": 2},
    )
    with pytest.raises(daisy.PipelineError) as refused:
        daisy.run_blockwise([bad], resources={"gpu": 1}, run_dir="run")
    problems = refused.value.problems
    assert len(problems) >= 2, problems
    assert any("max_retries" in p for p in problems), problems
    assert any("gpu" in p for p in problems), problems


def test_a_worker_that_cannot_import_the_function_gives_up_without_burning_retries(workdir):
    task = grid_task("imp", "no_such_module_anywhere:process", max_worker_restarts=1)
    with pytest.raises(daisy.TaskAbandoned, match="'imp'") as raised:
        daisy.run_blockwise([task], run_dir="run")
    states = raised.value.states
    assert states["imp"].abandoned
    assert "No module named 'no_such_module_anywhere'" in states["imp"].abandon_reason
    failed = [e for e in events("run") if e.get("event") == "block_failed"]
    assert failed == [], "no block was tried"


def test_names_daisy_has_and_this_engine_does_not_say_so(workdir):
    with pytest.raises(AttributeError, match="differs from daisy on purpose"):
        daisy.profile_block


@pytest.mark.parametrize("multiprocessing", [True, False])
@pytest.mark.parametrize("on_task", [True, False])
def test_what_each_function_block_cost_reaches_status(workdir, multiprocessing, on_task):
    import subprocess
    import sys

    from blocks import hold_memory

    task = grid_task("hold", hold_memory, max_workers=1, resource_tracking=on_task)
    assert daisy.run_blockwise(
        [task], run_dir="run", multiprocessing=multiprocessing, resource_tracking=not on_task
    )
    status = subprocess.run(
        [sys.executable, "-m", "daisy_rs.driver", "status", "--json", "run"],
        capture_output=True,
        check=True,
        text=True,
    )
    costs = json.loads(status.stdout)["tasks"][0]["costs"]
    assert costs["measured"] == 9
    measures = {m["measure"]: m for m in costs["measures"]}
    assert measures["peak_rss_bytes"]["max"] >= 40e6
    assert measures["io_write_bytes"]["median"] >= 1e6
    assert not any(name.startswith("gpu") for name in measures)


def test_a_block_past_its_timeout_fails_and_its_worker_is_replaced(workdir):
    task = daisy.Task(
        "hang",
        total_roi=daisy.Roi((0,), (6,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function="blocks:hang_on_block_0",
        read_write_conflict=False,
        timeout=1,
        max_retries=0,
        batch_size=1,
    )
    states = daisy.run_blockwise([task], run_dir="run", return_states=True)
    assert states["hang"].completed_count == 5
    assert states["hang"].failed_count == 1
    failed = states["hang"].failed_blocks[0]
    assert failed["block_id"] == 0 and "timed out after 1s" in failed["error"], failed
    gone = [e for e in events("run") if e.get("event") == "worker_gone"]
    assert len(gone) == 2 and all(e["clean"] for e in gone), gone


def test_daisy_names_left_out_on_purpose_say_why():
    with pytest.raises(AttributeError, match="differs from daisy on purpose: per-block measurements"):
        daisy.profile_block  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
        daisy.nonsense  # noqa: B018


def test_a_worker_function_that_fails_before_its_first_block_gives_up_with_the_reason(workdir):
    def start_worker():
        raise RuntimeError("model weights not found")

    with pytest.raises(daisy.TaskAbandoned, match="model weights not found") as raised:
        daisy.run_blockwise([grid_task("load", start_worker, max_workers=2)], run_dir="run", return_states=True)
    states = raised.value.states
    assert states["load"].abandoned
    assert "model weights not found" in states["load"].abandon_reason, states["load"].abandon_reason
    failed = [e for e in events("run") if e.get("event") == "block_failed"]
    assert failed == [], "no block was failed for it"


def line_task(task_id, blocks, **kwargs):
    from blocks import touch

    return daisy.Task(
        task_id,
        total_roi=daisy.Roi((0,), (blocks,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=touch,
        read_write_conflict=False,
        **kwargs,
    )


def test_a_skip_mask_skips_its_blocks_and_what_depends_on_them_runs(workdir):
    import numpy as np

    up = line_task("up", 8)
    mask = np.zeros(up.block_grid_shape, dtype=bool)
    mask[[1, 6]] = True
    up.skip_mask = mask
    down = line_task("down", 8, upstream_tasks=[up])
    states = daisy.run_blockwise([up, down], run_dir="run", return_states=True)
    assert len(ran("up")) == 6 and len(ran("down")) == 8
    assert states["up"].is_done() and states["up"].skipped_count == 2
    with pytest.raises(daisy.PipelineError) as refused:
        daisy.run_blockwise([line_task("bad", 8, skip_mask=np.zeros(5))], run_dir="run2")
    expected = "its shape [5] is not the task's block grid [8]"
    assert any(expected in problem for problem in refused.value.problems), refused.value.problems
