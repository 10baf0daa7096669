"""Writes into chunked and sharded Zarr that lose nothing (issue 35): a
128×128 int32 Zarr v3 array in chunks of 8×8, 4 workers, every block
writing its id into its region, read back after the run.

Without ``writes`` two workers writing into one shard at once each write
back their own copy of it and one write is lost (about half the blocks
of this case, on every engine); with ``writes=[array]`` the driver hands
a shard to one worker at a time."""

import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import daisy_rs as daisy
from conftest import assert_nothing_left_in, events, wait_for

SHAPE = (128, 128)
RUNS = 20


def make_array(path, chunks=(8, 8), shards=(64, 64)):
    return zarr.create_array(
        store=str(path), shape=SHAPE, chunks=chunks, shards=shards, dtype="int32", fill_value=0
    )


def writer(path):
    """A process function writing block id + 1 into its write region."""

    def write(block):
        array = zarr.open_array(str(path), mode="r+")
        array[block.write_roi.to_slices()] = block.block_id[1] + 1

    return write


def task(task_id, path, block=8, total=SHAPE, offset=(0, 0), **options):
    return daisy.Task(
        task_id,
        daisy.Roi(offset, total),
        daisy.Roi((0, 0), (block, block)),
        daisy.Roi((0, 0), (block, block)),
        process_function=writer(path),
        read_write_conflict=False,
        max_workers=4,
        **options,
    )


def lost_blocks(path, tasks):
    """Blocks of ``tasks`` whose region does not hold their value."""
    data = zarr.open_array(str(path), mode="r")[:]
    lost = 0
    for t in tasks:
        size = t.write_roi.shape
        for y in range(t.total_roi.offset[0], t.total_roi.end[0] - size[0] + 1, size[0]):
            for x in range(t.total_roi.offset[1], t.total_roi.end[1] - size[1] + 1, size[1]):
                roi = daisy.Roi((y, x), size)
                block = daisy.Block(t.total_roi, roi, roi, task_id=t.task_id)
                lost += int(np.any(data[roi.to_slices()] != block.block_id[1] + 1))
    return lost


def run_and_count(workdir, n, make_tasks, chunks=(8, 8), shards=(64, 64)):
    path = workdir / f"out{n}.zarr"
    make_array(path, chunks, shards)
    tasks = make_tasks(path)
    assert daisy.run_blockwise(tasks, run_dir=f"run{n}")
    return lost_blocks(path, tasks)


def test_without_writes_a_sharded_array_loses_blocks(workdir):
    """The failure the rest prevents: shown so that a test passing with
    ``writes`` means something on this machine."""
    lost = [run_and_count(workdir, n, lambda p: [task("write", p)]) for n in range(3)]
    assert max(lost) > 0, f"no run lost a block: {lost}"


@pytest.mark.parametrize(
    "case",
    ["sharded", "unsharded, blocks splitting chunks", "two tasks writing one array"],
)
def test_with_writes_no_block_is_lost_over_20_runs(workdir, case):
    def sharded(path):
        return [task("write", path, writes=[zarr.open_array(str(path))])]

    def split(path):
        # Blocks of 12 on chunks of 8: neighbours write halves of chunks.
        return [task("write", path, block=12, total=(120, 120), writes=path, share_chunks=True)]

    def two_tasks(path):
        # Interleaved rows of blocks: every shard is written by both.
        top = task("even", path, total=(128, 64), writes=[str(path)])
        bottom = task("odd", path, total=(128, 64), offset=(0, 64), writes=[str(path)])
        return [top, bottom]

    make, shards = {
        "sharded": (sharded, (64, 64)),
        "unsharded, blocks splitting chunks": (split, None),
        "two tasks writing one array": (two_tasks, (64, 64)),
    }[case]
    lost = [run_and_count(workdir, n, make, shards=shards) for n in range(RUNS)]
    assert lost == [0] * RUNS


def test_blocks_splitting_chunks_are_refused_without_share_chunks(workdir):
    path = workdir / "out.zarr"
    make_array(path, shards=None)
    split = task("split", path, block=12, total=(120, 120), writes=path)
    with pytest.raises(Exception) as refused:
        daisy.run_blockwise([split], run_dir="run")
    message = str(refused.value)
    assert 'task "split"' in message, message
    assert "100 of 100 blocks write parts of chunks" in message, message
    assert "write_roi shape of [16, 16] aligns" in message, message
    assert zarr.open_array(str(path))[:].max() == 0, "nothing ran"


def test_writes_names_what_it_cannot_use(workdir):
    with pytest.raises(TypeError, match="'t': writes takes paths, zarr arrays"):
        task("t", workdir / "x.zarr", writes=[42])
    in_memory = zarr.create_array(store=zarr.storage.MemoryStore(), shape=(4,), dtype="int32")
    with pytest.raises(ValueError, match="not stored on the local file system"):
        task("t", workdir / "x.zarr", writes=in_memory)
    missing = task("t", workdir / "x.zarr", writes=workdir / "nowhere.zarr")
    with pytest.raises(Exception, match="nowhere.zarr does not exist"):
        daisy.run_blockwise([missing], run_dir="run")


WORKER_COMMAND = """
import json, sys
import zarr
array = zarr.open_array(sys.argv[1], mode="r+")
for line in sys.stdin:
    block = json.loads(line)
    roi = block["write_roi"]
    region = tuple(slice(o, o + s) for o, s in zip(roi["offset"], roi["shape"]))
    array[region] = block["block_id"] + 1
    print(json.dumps({"block_id": block["block_id"], "ok": True}), flush=True)
"""


def pipeline_file(workdir, path, max_workers):
    (workdir / "writer.py").write_text(WORKER_COMMAND)
    command = [sys.executable, str(workdir / "writer.py"), str(path)]
    (workdir / "p.toml").write_text(
        f"""name = "p"
[resources]
cpu = 4
[[task]]
id = "write"
total_roi = {{ offset = [0, 0], shape = [128, 128] }}
read_roi = {{ offset = [0, 0], shape = [8, 8] }}
write_roi = {{ offset = [0, 0], shape = [8, 8] }}
read_write_conflict = false
requires = {{ cpu = 1 }}
max_workers = {max_workers}
writes = ["out.zarr"]
command = [{", ".join(f'"{c}"' for c in command)}]
"""
    )
    return workdir / "p.toml"


def driver():
    return str(Path(sys.executable).parent / "daisy-rs-driver")


def test_a_pipeline_file_with_a_worker_command_loses_nothing(workdir):
    path = workdir / "out.zarr"
    make_array(path)
    pipeline = pipeline_file(workdir, path, max_workers=4)
    plan = subprocess.run([driver(), "plan", str(pipeline)], capture_output=True, text=True)
    assert "4 shards written: at most 4 blocks at once" in plan.stdout, plan.stdout + plan.stderr
    run = subprocess.run([driver(), "run", str(pipeline)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    connected = [e for e in events(workdir / "daisy_run" / "p") if e.get("event") == "worker_connected"]
    assert len(connected) == 4, "one worker per shard"
    tasks = [task("write", path)]
    assert lost_blocks(path, tasks) == 0


def test_hand_started_workers_lose_nothing(workdir):
    path = workdir / "out.zarr"
    make_array(path)
    pipeline = pipeline_file(workdir, path, max_workers=0)
    driver_process = subprocess.Popen(
        [driver(), "run", str(pipeline)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    workers = []
    try:
        commands = workdir / "daisy_run" / "p" / "worker-commands.txt"
        wait_for("the driver to write how to start a worker", commands.exists)
        line = next(l for l in commands.read_text().splitlines() if "write" in l and not l.startswith("#"))
        argv = shlex.split(line.split(":", 1)[1] if line.startswith("write:") else line)
        workers = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(4)]
        assert driver_process.wait(timeout=600) == 0, driver_process.stdout.read().decode()
        for worker in workers:
            assert worker.wait(timeout=60) == 0
    finally:
        for process in [driver_process, *workers]:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert lost_blocks(path, [task("write", path)]) == 0
    assert_nothing_left_in(workdir)
