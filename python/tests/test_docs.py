"""The complete example of docs/python.md runs as it stands."""

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def test_the_migration_guides_example_runs(workdir):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    example = next(b for b in blocks if b.startswith("# docs/python.md example"))
    (workdir / "example.py").write_text(example)
    for attempt in ("first run", "resumed run"):
        done = subprocess.run(
            [sys.executable, "example.py"], cwd=workdir, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"{attempt}:\n{done.stdout}\n{done.stderr}"
    assert "TaskState('label': 16/16 done" in done.stdout, done.stdout
    assert "TaskState('check': 16/16 done" in done.stdout, done.stdout
