"""Python tasks whose workers are cluster jobs: through the real local
SLURM (sbatch job arrays) and through the LSF stand-in that forwards to
it. Each runs every block once and leaves no job queued."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import daisy_rs as daisy
from conftest import done_blocks, events, requires

STANDIN = Path(__file__).resolve().parents[2] / "tests" / "lsf-standin"


@pytest.fixture
def slurm(monkeypatch):
    """A SLURM that answers, polled every second by the driver."""
    answered = shutil.which("sinfo") and subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0
    if not answered:
        requires("a SLURM (`sinfo -h` fails): start one with `bash ci/slurm/start-local-slurm.sh`")
    monkeypatch.setenv("DAISY_POLL_INTERVAL", "1s")


def chained(prefix):
    """Two chained 1-D tasks of 6 blocks, imported by the workers."""
    def task(name, upstream):
        return daisy.Task(
            f"{prefix}-{name}",
            total_roi=daisy.Roi((0,), (6,)),
            read_roi=daisy.Roi((0,), (1,)),
            write_roi=daisy.Roi((0,), (1,)),
            process_function="blocks:touch",
            read_write_conflict=False,
            max_workers=2,
            requires={"cpu": 1},
            upstream_tasks=upstream,
        )

    first = task("a", [])
    return [first, task("b", [first])]


def job_ids(run_dir):
    return [e["job"] for e in events(run_dir) if e.get("event") == "worker_submitted" and e.get("job")]


def wait_until_no_job_left(jobs, limit_s=120):
    arrays = sorted({job.split("_")[0].split("[")[0] for job in jobs})
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        queue = subprocess.run(
            ["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(arrays)], capture_output=True, text=True
        )
        if not queue.stdout.strip():
            return
        time.sleep(0.5)
    pytest.fail(f"jobs still queued after {limit_s} s: {queue.stdout}")


def assert_every_block_ran_once(prefix):
    for name in ("a", "b"):
        assert sorted(done_blocks("run", f"{prefix}-{name}")) == list(range(6))


def test_a_python_task_runs_as_sbatch_job_arrays(workdir, slurm):
    launcher = {"kind": "sbatch", "time": "00:10:00"}
    assert daisy.run_blockwise(chained("pysb"), resources={"cpu": 4}, run_dir="run", launcher=launcher)
    assert_every_block_ran_once("pysb")
    jobs = job_ids("run")
    assert jobs and all("_" in job for job in jobs), f"workers are array elements: {jobs}"
    wait_until_no_job_left(jobs)


def test_a_python_task_runs_through_the_lsf_stand_in(workdir, slurm, monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDIN}:{os.environ['PATH']}")
    monkeypatch.setenv("LSF_STANDIN_DIR", str(workdir / "lsf-state"))
    launcher = {"kind": "bsub", "time": "00:10:00"}
    assert daisy.run_blockwise(chained("pylsf"), resources={"cpu": 4}, run_dir="run", launcher=launcher)
    assert_every_block_ran_once("pylsf")
    lsf_jobs = job_ids("run")
    assert lsf_jobs, "workers were submitted through bsub"
    slurm_ids = []
    for job_file in (workdir / "lsf-state" / "jobs").glob("*/job.json"):
        slurm_ids.append(str(json.loads(job_file.read_text())["slurm_id"]))
    wait_until_no_job_left(slurm_ids)
