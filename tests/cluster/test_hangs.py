"""A hung job with Flight Recorder traces and py-spy stacks, ingested and diagnosed end to end:
the dumps kept on the job document, the report's hang section, the culprit ranked first, the
terminal and HTML renderings, and a planted pickle refused without running."""

from __future__ import annotations

import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

from rich.console import Console

from l4_plugin.diagnosis import diagnose_job
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.report.html import render_html
from l4_plugin.report.model import Report
from l4_plugin.report.terminal import render_terminal
from l4_plugin.store import Store, jobs

T0 = 1_714_557_600  # 2024-05-01 10:00:00 UTC


def _entry(seq: int, op: str) -> dict[str, Any]:
    """A gloo Flight Recorder entry as torch 2.13 writes it: scheduled, no times but creation."""
    return {
        "record_id": seq - 1,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": op,
        "time_created_ns": (T0 + seq) * 10**9,
        "input_sizes": [[2]],
        "input_dtypes": ["Float"],
        "output_sizes": [[2]],
        "output_dtypes": ["Float"],
        "state": "scheduled",
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": True,
        "timeout_ms": 30000,
        "is_p2p": False,
    }


def _trace(last: int) -> bytes:
    return pickle.dumps(
        {
            "version": "2.10",
            "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1, 2, 3, 4, 5]"}},
            "comm_lib_version": "",
            "pg_status": {
                "0": {
                    "last_enqueued_collective": last,
                    "last_started_collective": -1,
                    "last_completed_collective": last,
                }
            },
            "entries": [_entry(s, "gloo:all_reduce") for s in range(1, last + 1)],
        }
    )


def _stack(rank: int, frames: list[str]) -> str:
    body = "\n".join(f"    {f}" for f in frames)
    return (
        f"Process {1000 + rank}: /usr/bin/python3 -u train.py\n"
        "Python v3.11.7 (/usr/bin/python3)\n\n"
        f'Thread {1000 + rank} (idle): "MainThread"\n{body}\n'
    )


WAIT = ["_engine_run_backward (torch/autograd/graph.py:979)", "train (train.py:261)"]
STUCK = [
    "_PollLikeSelector.select (selectors.py:415)",
    "_MultiProcessingDataLoaderIter._next_data (torch/utils/data/dataloader.py:1505)",
    "train (train.py:254)",
]


def _log(host: str, rank: int, stuck: bool) -> str:
    lines = [
        f"2024-05-01 10:00:{i:02d},000 INFO {host} rank{rank} step {i} loss 0.5" for i in range(9)
    ]
    if not stuck:
        lines.append(
            f"2024-05-01 10:00:40,000 ERROR {host} rank{rank} RuntimeError: Timed out waiting "
            "30000ms for recv operation to complete"
        )
    return "\n".join(lines) + "\n"


def _hung_job(root: Path, *, planted: bool = False) -> Path:
    root.mkdir(parents=True)
    (root / "job.yaml").write_text("id: hung-1\nstatus: failed\nconfig:\n  model: m\n")
    for k, host in enumerate(("n1", "n2", "n3")):
        for local in (0, 1):
            rank = 2 * k + local
            stuck = rank == 3
            (root / host / "attempt_0" / str(local)).mkdir(parents=True)
            (root / host / "attempt_0" / str(local) / "stdout.log").write_text(
                _log(host, rank, stuck)
            )
            (root / host / "fr").mkdir(exist_ok=True)
            (root / host / "fr" / f"fr_trace_rank_{rank}").write_bytes(_trace(7 if stuck else 8))
            (root / host / "stacks").mkdir(exist_ok=True)
            (root / host / "stacks" / f"rank{rank}.txt").write_text(
                _stack(rank, STUCK if stuck else WAIT)
            )
    if planted:

        class Boom:
            def __reduce__(self) -> tuple[Any, tuple[str]]:
                return (os.system, (f"touch {root}/pwned",))

        (root / "n1" / "fr" / "fr_trace_rank_9").write_bytes(pickle.dumps(Boom()))
    return root


def test_a_hang_is_diagnosed_from_its_dumps(tmp_path: Path, store: Store) -> None:
    job = _hung_job(tmp_path / "hung", planted=True)
    summary = ingest_job(store, job)
    assert not (job / "pwned").exists()
    assert any("fr_trace_rank_9 not read: not a plain pickle" in p for p in summary.problems)
    record = jobs.get_job(store, "hung-1")
    assert record is not None and record.summary.dumps is not None
    assert len(record.summary.dumps["traces"]) == 6 and len(record.summary.dumps["stacks"]) == 6

    report = diagnose_job(store, "hung-1", rules=[]).report
    assert report.nodes[0].node == "n2"
    assert {"collective-behind:8", "stack-apart:_PollLikeSelector.select"} <= set(
        report.nodes[0].reasons
    )
    assert report.hang is not None
    (finding,) = report.hang.collectives
    assert (finding.kind, finding.seq, finding.op) == ("behind", 8, "gloo:all_reduce")
    assert finding.ranks_behind == (3,) and finding.culprit_nodes == ("n2",)
    assert {r.rank: r.seq for r in finding.ranks} == {0: 8, 1: 8, 2: 8, 3: 7, 4: 8, 5: 8}
    assert report.hang.stacks[0].odd is not None and report.hang.stacks[0].odd.ranks == (3,)
    assert report.verdict is not None and report.verdict.category == "hardware/storage"
    assert any("the ranks' dumps" in w for w in report.verdict.why)

    raw = json.loads(json.dumps(report.to_json()))
    assert list(raw).index("hang") == list(raw).index("verdict") + 1
    assert Report.from_json(raw) == report
    out = io.StringIO()
    render_terminal(report, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "never enqueued it: ranks 3 → n2" in text
    assert (
        "#7 gloo:all_reduce completed: rank 3 | #8 gloo:all_reduce completed: ranks 0-2,4-5" in text
    )
    html = render_html(report)
    assert 'id="plot-hang-0"' in html and "rank 3: #7 gloo:all_reduce completed" in html


def test_a_job_without_dumps_has_no_hang_section(tmp_path: Path, store: Store) -> None:
    job = _hung_job(tmp_path / "plain")
    for host in ("n1", "n2", "n3"):
        for sub in ("fr", "stacks"):
            for f in (job / host / sub).iterdir():
                f.unlink()
    ingest_job(store, job)
    record = jobs.get_job(store, "hung-1")
    assert record is not None and record.summary.dumps is None
    report = diagnose_job(store, "hung-1", rules=[]).report
    assert report.hang is None and "hang" not in report.to_json()
