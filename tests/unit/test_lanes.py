"""Where an ingest's tasks run (``ingest/lanes.py``): no server, no Dask cluster."""

from __future__ import annotations

import subprocess
import sys

import pytest

from l4_plugin.errors import IngestError
from l4_plugin.ingest.lanes import InlineExecutor, open_lanes


def test_dask_is_imported_only_when_a_scheduler_is_given() -> None:
    code = (
        "import sys, l4_plugin.cli.main, l4_plugin.ingest.pipeline, l4_plugin.ingest.lanes;"
        "print(sorted(m for m in ('dask', 'distributed') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_scheduler_without_dask_installed_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # what an import then finds: nothing
    with (
        pytest.raises(
            IngestError, match=r"dask is not installed \(pip install 'l4-plugin\[dask\]'\)"
        ),
        open_lanes(2, "tcp://scheduler:8786"),
    ):
        pass


def test_one_worker_is_this_process_and_its_tasks_run_when_submitted() -> None:
    with open_lanes(1) as lanes:
        [lane] = lanes
        assert isinstance(lane.executor, InlineExecutor) and lane.where == "this process"
        ran: list[int] = []
        done = lane.executor.submit(ran.append, 3)
        assert done.done() and ran == [3]
        failed = lane.executor.submit(int, "x")
        with pytest.raises(ValueError, match="invalid literal"):
            failed.result()
