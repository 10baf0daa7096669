"""run_blockwise(dashboard=...): the driver serves the live page while the
Python run goes; a block asks it over HTTP, as a script would."""

import json
import urllib.request
from pathlib import Path

import pytest

import daisy_rs as daisy


def ask_the_dashboard(block):
    """Block 0 reads the dashboard's URL from the run directory and asks
    it for the status, keeping the answer; the others do nothing."""
    if block.block_id[1] != 0:
        return
    url = Path("run/dashboard.url").read_text().strip()
    base, token = url.split("/?token=")
    with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=30) as answer:
        Path("seen.json").write_bytes(answer.read())


def task():
    return daisy.Task(
        "asked",
        total_roi=daisy.Roi((0,), (4,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=ask_the_dashboard,
        max_workers=1,
    )


def test_run_blockwise_serves_the_dashboard_while_it_runs(workdir, capfd):
    assert daisy.run_blockwise([task()], run_dir="run", dashboard="127.0.0.1:0")
    seen = json.loads(Path("seen.json").read_text())
    assert seen["running"] is True
    assert seen["tasks"][0]["id"] == "asked"
    assert "dashboard at http://127.0.0.1:" in capfd.readouterr().out
    assert not Path("run/dashboard.url").exists(), "gone with the run"


def test_a_serial_run_has_no_dashboard_to_serve(workdir):
    with pytest.raises(ValueError, match="needs multiprocessing=True"):
        daisy.run_blockwise([task()], multiprocessing=False, dashboard=True)
