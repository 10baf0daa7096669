"""The Python `Task` and the pipeline file's ``[[task]]`` table are one
schema: every field the driver declares (read from its serde derive) has
a `Task` argument or is filled by `run_blockwise`, and a value the
driver's rules refuse is named as the `Task` argument it came from."""

import inspect
import json

import pytest

import daisy_rs as daisy
from daisy_rs import _native, _pipeline_spec


def task_arguments():
    """Every argument `Task` takes, by position or by keyword."""
    parameters = [
        *inspect.signature(daisy.Task.__init__).parameters.values(),
        *inspect.signature(daisy.Task._configure).parameters.values(),
    ]
    rest = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return {p.name for p in parameters if p.kind not in rest and p.name != "self"}


def test_every_task_field_of_the_pipeline_file_has_a_python_counterpart():
    arguments = task_arguments()
    accounted = arguments | set(_pipeline_spec.FILLED_BY_PYTHON) | set(_pipeline_spec.NOT_FOR_PYTHON)
    forgotten = [field for field in _native.TASK_FIELDS if field not in accounted]
    assert not forgotten, (
        f"the driver's [[task]] fields {forgotten} have no Task argument: add one to "
        "Task._configure, kept as the attribute of its name (_pipeline_spec._task_table "
        "writes it from there), or list them in FILLED_BY_PYTHON or NOT_FOR_PYTHON"
    )
    assert "max_workers" in _native.TASK_FIELDS and "id" in _native.TASK_FIELDS
    stale = set(_pipeline_spec.FILLED_BY_PYTHON) | set(_pipeline_spec.NOT_FOR_PYTHON)
    assert stale <= set(_native.TASK_FIELDS) - arguments, "mapped: a field the driver dropped, or a Task argument"


def line_task(task_id, **options):
    return daisy.Task(
        task_id,
        total_roi=daisy.Roi((0,), (40,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function="blocks:touch",
        **options,
    )


def test_a_refused_task_argument_is_named_as_python_gave_it(workdir):
    tasks = [
        line_task("predict", max_retries=-1, prefetch=500),
        line_task("other", retry_backoff=60, retry_backoff_max=1),
    ]
    with pytest.raises(ValueError) as refused:
        daisy.run_blockwise(tasks, run_dir="run")
    assert isinstance(refused.value, daisy.PipelineError)
    assert refused.value.problems == [
        "Task('predict', max_retries=-1): max_retries is not a whole number from 0 to 4294967295",
        "Task('predict', prefetch=500): prefetch is not a whole number from 0 to 64",
        # A rule between two fields names both as the table holds them.
        "Task('other', retry_backoff_max=1): retry_backoff_max = \"1s\" is shorter than retry_backoff = \"1m\"",
    ]
    assert not (workdir / "run").exists(), "refused before anything was written"


def test_retry_backoff_max_reaches_the_driver(workdir):
    task = line_task("capped", retry_backoff=0.5, retry_backoff_max=2)
    assert daisy.run_blockwise([task], run_dir="run")
    [written] = (workdir / "run" / "python").glob("pipeline-*.json")
    [table] = json.loads(written.read_text())["task"]
    assert (table["retry_backoff"], table["retry_backoff_max"]) == ("500ms", "2000ms")
