"""Real runs (``tests/realruns/cases``) as torchrun's stdout alone: each node's ``torchrun.log``
(the agent's lines and every rank's through ``--tee 3``), without the ``--log-dir`` files and
the dumps a platform may not collect (``benchmarks/relayout_runs.py`` writes whole corpora so).
Without the dumps, the failure's own words and who printed them first must name the culprit."""

from __future__ import annotations

import shutil
from pathlib import Path

from l4_plugin.diagnosis import diagnose_job
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.report.model import Report
from l4_plugin.store import Store

REALRUNS = Path(__file__).resolve().parents[1] / "realruns" / "cases"


def _stdout_only(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    shutil.copy(src / "job.yaml", dst / "job.yaml")
    for log in sorted(src.glob("*/torchrun.log")):
        (dst / log.parent.name).mkdir()
        shutil.copy(log, dst / log.parent.name / "torchrun.log")
    return dst


def _diagnosed(store: Store, tmp_path: Path, case: str) -> Report:
    failed = _stdout_only(REALRUNS / case / "failed", tmp_path / "failed")
    base = _stdout_only(REALRUNS / case / "baseline-1", tmp_path / "baseline-1")
    job_id = ingest_job(store, failed).job.id
    base_id = ingest_job(store, base, status="succeeded").job.id
    return diagnose_job(store, job_id, rules=[], baselines=[base_id]).report


def test_a_killed_dataloader_worker_leads_on_the_node_that_printed_it_first(
    store: Store, tmp_path: Path
) -> None:
    """trn-u2's DataLoader worker was killed (SIGKILL); as the job tore down, trn-u3's workers
    were stopped by SIGTERM and its iterator printed "Exception ignored in: …" (Python's
    unraisable hook) and its own "killed by signal: Terminated": one template with trn-u2's
    line, printed later. The node that printed it first is the culprit, its words the
    category; the teardown's ignored exception is a consequence."""
    report = _diagnosed(store, tmp_path, "dataloader-worker-killed")
    assert report.verdict is not None
    assert report.verdict.category == "platform", report.verdict.why
    assert report.nodes[0].node == "trn-u2", report.nodes[:3]
    assert "lead-event" in report.nodes[0].reasons
    assert report.stage == "data_loading"


def test_a_node_standing_out_by_its_teardowns_lost_store_is_no_culprit(
    store: Store, tmp_path: Path
) -> None:
    """cn-p32 read a corrupt shard and failed first; cn-p33's agent printed more lines than
    the others only as the job tore down (its store connection lost, with C++ stacks). Those
    consequences do not set cn-p33 apart: cn-p32 is the culprit, cn-p33 not evicted."""
    report = _diagnosed(store, tmp_path, "corrupt-data-shard")
    assert report.verdict is not None
    assert report.nodes[0].node == "cn-p32", report.nodes[:3]
    assert "cn-p33" not in report.verdict.evict, report.verdict.why


def test_a_teardowns_dataloader_stack_does_not_say_where_the_job_failed(
    store: Store, tmp_path: Path
) -> None:
    """A straggler ran the job into its wall-clock limit; torchrun's SIGTERM stopped the
    DataLoader workers and their iterators printed tracebacks in dataloader.py: a teardown,
    not a failure in data loading. The job failed in training."""
    report = _diagnosed(store, tmp_path, "straggler")
    assert report.stage == "training"
    # what it printed says only that it slowed down, then was torn down: a slow machine's
    assert report.events[0].reasons == ("slowdown-line:8",), report.events[0]
    assert report.verdict is not None and report.verdict.category == "hardware/node"


def test_ranks_whose_collectives_timed_out_in_different_calls_are_the_users_code(
    store: Store, tmp_path: Path
) -> None:
    """One rank skipped an all_reduce: its peers timed out waiting in it, the rank itself in
    the barrier it went on to. Without Flight Recorder's traces, the ranks' tracebacks say
    they called different collectives: the user's code."""
    report = _diagnosed(store, tmp_path, "skip-collective")
    assert report.verdict is not None
    assert report.verdict.category == "user/code", report.verdict.why
    assert any("all_reduce, barrier" in w for w in report.verdict.why), report.verdict.why
