"""A restarted job (torchrun ``--log-dir`` attempt folders) ingested and diagnosed attempt by
attempt: every document carries its attempt, each attempt has its own iterations, the report
leads with the right attempt and reads the culprits across attempts."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from l4_plugin.diagnosis import diagnose_job
from l4_plugin.ingest.jobdir import scan
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.ingest.sources import file_streams
from l4_plugin.ingest.workers import scan_streams
from l4_plugin.report.html import render_html
from l4_plugin.report.terminal import render_terminal
from l4_plugin.store import Store, jobs
from l4_plugin.store import fields as F

ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
REALRUNS = Path(__file__).resolve().parents[1] / "realruns" / "cases"


def _rank_log(start: int, steps: range, fail: str | None) -> str:
    lines = [f"2024-05-01 10:{start:02d}:00,000 INFO rank0 train: resuming"]
    lines += [
        f"2024-05-01 10:{start:02d}:{i:02d},000 INFO rank0 train: step {i} loss 0.5" for i in steps
    ]
    if fail:
        lines.append(f"2024-05-01 10:{start:02d}:59,000 ERROR rank0 train: {fail}")
    return "\n".join(lines) + "\n"


def _agent_log(starts: list[int]) -> str:
    lines = []
    for k, minute in enumerate(starts):
        lines.append(
            f"I0501 10:{minute:02d}:00.000000 7 torch/distributed/elastic/agent/server/api.py:"
            f"525] [default] Rendezvous complete for workers. Result:"
        )
        lines.append(f"  restart_count={k}")
        lines.append(
            f"E0501 10:{minute:02d}:59.500000 7 torch/distributed/elastic/multiprocessing/api.py:"
            "1002] failed (exitcode: 1) local_rank: 0 (pid: 11) of binary: python3"
        )
    return "\n".join(lines) + "\n"


def _restarted_job(root: Path, *, second: str, culprit2: str) -> Path:
    """Two nodes, two attempts: attempt 0 trains steps 1-20 and n2 fails; attempt 1 resumes at
    step 11 and ``culprit2`` fails with ``second``."""
    (root).mkdir(parents=True)
    (root / "job.yaml").write_text("id: restarted-1\nstatus: failed\nconfig:\n  model: m\n")
    for node in ("n1", "n2"):
        for k, (minute, steps) in enumerate(((1, range(1, 21)), (3, range(11, 16)))):
            fail = None
            if k == 0 and node == "n2":
                fail = ECC
            if k == 1 and node == culprit2:
                fail = second
            d = root / node / "logs" / "job1_x" / f"attempt_{k}" / "0"
            d.mkdir(parents=True)
            (d / "stdout.log").write_text(_rank_log(minute, steps, fail))
        (root / node / "torchrun.log").write_text(_agent_log([1, 3]))
    return root


def test_every_document_carries_its_attempt(tmp_path: Path, store: Store) -> None:
    job = _restarted_job(tmp_path / "j", second=ECC, culprit2="n2")
    ingest_job(store, job)
    record = jobs.get_job(store, "restarted-1")
    assert record is not None and record.summary.attempts is not None
    spans = {a.attempt: a for a in record.summary.attempts}
    assert set(spans) == {0, 1} and spans[0].nodes == ("n1", "n2") and spans[1].trained
    store.refresh(store.names.events)
    for attempt in (0, 1):
        query = {"bool": {"filter": [{"term": {F.ATTEMPT: attempt}}]}}
        assert store.count(store.names.events, query) > 0
    missing = {"bool": {"must_not": {"exists": {"field": F.ATTEMPT}}}}
    assert store.count(store.names.events, missing) == 0
    # The agent's log is read once per attempt: its restart_count=1 line is attempt 1's.
    body = {"size": 10, "query": {"match_phrase": {"message": "restart_count=1"}}}
    hits = store.search(store.names.lines, body)["hits"]["hits"]
    assert hits and all(h["_source"][F.ATTEMPT] == 1 for h in hits)


def test_the_same_node_each_time_is_evicted_with_high_confidence(
    tmp_path: Path, store: Store
) -> None:
    job = _restarted_job(tmp_path / "j", second=ECC, culprit2="n2")
    ingest_job(store, job)
    report = diagnose_job(store, "restarted-1", rules=[]).report
    assert report.attempts is not None
    assert report.attempts.lead == 1 and report.attempts.why == "attempt 1 is the last"
    assert report.attempts.bound == ("n2",)
    assert [a.attempt for a in report.attempts.attempts] == [0, 1]
    assert all(a.culprits == ("n2",) for a in report.attempts.attempts)
    assert report.verdict is not None and "n2" in report.verdict.evict
    assert report.verdict.confidence >= 0.95
    # The lead attempt's iterations (it resumed at step 11), after where the failure first
    # struck, in attempt 0 (after step 20: 21).
    assert [(i.iteration, i.why) for i in report.iterations] == [(21, "attempt"), (16, "failure")]
    assert "the failure first struck in attempt 0" in report.notes
    text = io.StringIO()
    render_terminal(report, Console(file=text, width=200, color_system=None))
    assert "Attempts (2): this report is attempt 1's" in text.getvalue()
    assert "n2 is the culprit in every attempt (0, 1)" in text.getvalue()
    assert 'id="attempts"' in render_html(report)


def test_a_restart_that_fails_to_start_leads_with_the_attempt_before(
    tmp_path: Path, store: Store
) -> None:
    job = _restarted_job(tmp_path / "j", second="", culprit2="")
    for node in ("n1", "n2"):  # attempt 1 fails while connecting, before any step
        (job / node / "logs" / "job1_x" / "attempt_1" / "0" / "stdout.log").write_text(
            "2024-05-01 10:03:00,000 ERROR rank0 train: RuntimeError: Gloo connectFullMesh "
            "failed with timed out connecting: SO_ERROR: Connection refused\n"
        )
    ingest_job(store, job)
    report = diagnose_job(store, "restarted-1", rules=[]).report
    assert report.attempts is not None and report.attempts.lead == 0
    assert "attempt 1 failed while starting again" in report.attempts.why
    assert report.nodes[0].node == "n2"


def test_each_attempt_keeps_its_own_transitions_whatever_scanned_the_one_before(
    tmp_path: Path,
) -> None:
    """A scanner hands each timeline transition on once; attempt 1 resumes at step 11, which
    attempt 0 reached too, and its timeline must still hold steps 11 to 15 (a scanner that had
    carried them for attempt 0 must carry them again for attempt 1)."""
    job = _restarted_job(tmp_path / "j", second=ECC, culprit2="n2")
    found = scan(job)
    for workers in (1, 2):
        scanned = scan_streams(file_streams(found.files), LineParser(), workers=workers)
        steps = {it for stage, it, _ in scanned.timelines[1].marks if stage == "training"}
        assert set(range(11, 16)) <= steps, (workers, sorted(s for s in steps if s is not None))
        first = {it for stage, it, _ in scanned.timelines[0].marks if stage == "training"}
        assert set(range(1, 21)) <= first, workers


def test_a_restart_that_fails_to_start_on_one_node_names_the_culprit_the_lead_did_not(
    store: Store,
) -> None:
    """A real run (tests/realruns, node-cut-off-restarts: three namespaces under torchrun,
    cn-e13's link cut in training, one restart): in training every rank timed out waiting
    alike, no node standing out; on restart cn-e13 could not reach the master ("No route to
    host"). The lead is still the training attempt; its culprit and its category are the
    node's that stayed at fault."""
    case = REALRUNS / "node-cut-off-restarts"
    job_id = ingest_job(store, case / "failed").job.id
    base_id = ingest_job(store, case / "baseline-1", status="succeeded").job.id
    report = diagnose_job(store, job_id, rules=[], baselines=[base_id]).report
    assert report.attempts is not None and report.attempts.lead == 0
    rows = {a.attempt: a for a in report.attempts.attempts}
    assert rows[0].culprits == () and rows[1].culprits == ("cn-e13",)
    assert report.verdict is not None
    assert (report.verdict.category, report.verdict.evict) == ("hardware/network", ("cn-e13",))
    assert report.verdict.blame == "infrastructure" and report.verdict.restart == "after-eviction"
    assert report.verdict.why[0].startswith("attempt 1 failed while starting again on cn-e13")
    assert report.nodes[0].node == "cn-e13"
    assert "culprit-of-attempt:1" in report.nodes[0].reasons
    assert report.stage == "training"
