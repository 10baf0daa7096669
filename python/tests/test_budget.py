"""The seed's resource-budget matrix through the Python API: peaks of
connected workers, replayed from each run's events, never exceed
max_workers or the budget, and tasks on disjoint resources run side by
side."""

import pytest

import daisy_rs as daisy
from blocks import nap
from conftest import concurrency, peak


def task(task_id, blocks, max_workers, requires=None, upstream=None):
    return daisy.Task(
        task_id,
        total_roi=daisy.Roi((0,), (blocks,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=nap,
        max_workers=max_workers,
        requires=requires,
        upstream_tasks=upstream,
        batch_size=1,
    )


def of(task_id):
    return lambda snapshot: snapshot.get(task_id, 0)


def total(snapshot):
    return sum(snapshot.values())


def test_max_workers_caps_concurrency_without_requires(workdir):
    assert daisy.run_blockwise([task("a", 24, 3)], run_dir="run")
    assert peak(concurrency("run"), of("a")) == 3


def test_resource_budget_caps_one_task_below_max_workers(workdir):
    assert daisy.run_blockwise([task("a", 12, 8, {"cpu": 1})], resources={"cpu": 2}, run_dir="run")
    assert peak(concurrency("run"), of("a")) == 2


def test_two_tasks_share_a_resource(workdir):
    tasks = [task("a", 12, 4, {"cpu": 1}), task("b", 12, 4, {"cpu": 1})]
    assert daisy.run_blockwise(tasks, resources={"cpu": 4}, run_dir="run")
    history = concurrency("run")
    assert peak(history, total) == 4
    assert peak(history, of("a")) >= 1 and peak(history, of("b")) >= 1


def test_disjoint_resources_run_in_parallel(workdir):
    tasks = [task("a", 32, 4, {"cpu": 1}), task("b", 16, 2, {"gpu": 1})]
    assert daisy.run_blockwise(tasks, resources={"cpu": 4, "gpu": 2}, run_dir="run")
    history = concurrency("run")
    assert any(of("a")(s) == 4 and of("b")(s) == 2 for s in history), history


def test_requires_exceeds_budget_hard_errors(workdir):
    with pytest.raises(daisy.PipelineError) as refused:
        daisy.run_blockwise([task("predict", 4, 1, {"gpu": 8})], resources={"gpu": 1}, run_dir="run")
    expected = "Task('predict', requires={'gpu': 8}): requires {gpu: 8} but the global budget only has {gpu: 1}"
    assert any(expected in problem for problem in refused.value.problems), refused.value.problems
    assert not (workdir / "run" / "events.jsonl").exists(), "nothing started"


def test_chained_tasks_reassign_workers_when_upstream_drains(workdir):
    up = task("up", 9, 3, {"cpu": 1})
    down = task("down", 9, 3, {"cpu": 1})
    assert daisy.run_blockwise(up + down, resources={"cpu": 3}, run_dir="run")
    history = concurrency("run")
    assert peak(history, total) <= 3, history
    assert peak(history, of("down")) >= 2, f"the downstream task got the freed share: {history}"


def see_gpu_and_threads(block):
    """Writes what this block's worker was told: its GPUs and BLAS threads."""
    import os

    with open(f"seen-{block.block_id[1]}", "w") as seen:
        seen.write(f"{os.environ.get('CUDA_VISIBLE_DEVICES')} {os.environ.get('OPENBLAS_NUM_THREADS')}")


def test_listed_gpus_go_one_to_each_worker_with_its_thread_count(workdir, monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    predict = daisy.Task(
        "predict",
        total_roi=daisy.Roi((0,), (8,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=see_gpu_and_threads,
        max_workers=2,
        requires={"gpu": 1, "cpu": 2},
        batch_size=1,
    )
    assert daisy.run_blockwise([predict], resources={"gpu": [5, 7], "cpu": 4}, run_dir="run")
    seen = {(workdir / f"seen-{block}").read_text() for block in range(8)}
    assert seen <= {"5 2", "7 2"}, seen


def see_cores(block):
    """Writes the cores this block's worker may run on."""
    import os

    with open(f"cores-{block.block_id[1]}", "w") as seen:
        seen.write(",".join(map(str, sorted(os.sched_getaffinity(0)))))


def test_a_pinned_task_runs_each_worker_on_its_own_cores(workdir):
    pinned = daisy.Task(
        "pinned",
        total_roi=daisy.Roi((0,), (4,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=see_cores,
        max_workers=1,
        requires={"cpu": 1},
        pin=True,
    )
    assert daisy.run_blockwise([pinned], resources={"cpu": [0]}, run_dir="run")
    assert {(workdir / f"cores-{block}").read_text() for block in range(4)} == {"0"}
