"""Python tasks whose workers are cluster jobs: through the real local
SLURM (sbatch job arrays) and through the LSF stand-in that forwards to
it. Each runs every block once and leaves no job queued."""

import json
import os
import shutil
import subprocess
import sys
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


def test_a_python_task_runs_two_workers_per_sbatch_job_as_job_steps(workdir, slurm):
    launcher = {"kind": "sbatch", "time": "00:10:00", "workers_per_job": 2}
    assert daisy.run_blockwise(chained("pysteps"), resources={"cpu": 4}, run_dir="run", launcher=launcher)
    assert_every_block_ran_once("pysteps")
    connected = [e for e in events("run") if e.get("event") == "worker_connected"]
    steps = [e["job"] for e in connected]
    assert steps and all("." in step for step in steps), f"each worker is a job step: {steps}"
    jobs = job_ids("run")
    assert len(set(jobs)) * 2 == len(jobs), f"two workers per job: {jobs}"
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


def test_daisy_1x_spawn_pattern_through_sbatch_wait(workdir, slurm):
    """A worker function that submits `sbatch --wait` jobs whose script
    calls daisy.Client(), as daisy 1.x cluster scripts and volara's
    SlurmWorker do: the jobs are served as the workers that submitted
    them, and `import daisy` is daisy_rs inside the jobs too."""
    (workdir / "child.py").write_text(
        "import os, daisy\n"
        "assert daisy.__name__ == 'daisy_rs'\n"
        "client = daisy.Client()\n"
        "while True:\n"
        "    with client.acquire_block() as block:\n"
        "        if block is None:\n"
        "            break\n"
        "        open(f'out/{block.block_id[1]}', 'w').write(os.environ['SLURM_JOB_ID'])\n"
    )
    (workdir / "main.py").write_text(
        "import subprocess, sys, os\n"
        "import daisy\n"
        "os.makedirs('out')\n"
        "def submit():\n"
        "    subprocess.run(['sbatch', '--wait', '--time', '00:05:00', '-o', 'job-%j.out',\n"
        "                    '--wrap', f'{sys.executable} child.py'], check=True)\n"
        "task = daisy.Task('sb', daisy.Roi((0,), (8,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),\n"
        "                  submit, read_write_conflict=False, max_workers=2)\n"
        "assert daisy.run_blockwise([task], run_dir='run')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DAISY_CONTEXT"}
    env["DAISY_RS_AS_DAISY"] = "1"
    done = subprocess.run([sys.executable, "main.py"], cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    written = {p.name: p.read_text() for p in (workdir / "out").iterdir()}
    assert sorted(written, key=int) == [str(i) for i in range(8)]
    jobs = set(written.values())
    assert 1 <= len(jobs) <= 2, f"blocks ran in the submitted jobs: {jobs}"
    connected = [e for e in events("run") if e.get("event") == "worker_connected"]
    assert len(connected) == 2, "the jobs were no workers of their own"
    wait_until_no_job_left(sorted(jobs))
