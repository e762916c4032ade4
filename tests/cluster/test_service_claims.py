"""Claims, job registration and the service tasks, in process, against the session osmem server.

The process-level behaviour (two services, kill -9, outages, SIGTERM) is in test_service.py.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from l4_plugin import cli
from l4_plugin.config import Settings, load_settings
from l4_plugin.diagnosis import ANALYZER_VERSION
from l4_plugin.diagnosis.storage import record_analysis
from l4_plugin.errors import ConfigError, StoreError
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.rules import load_rules
from l4_plugin.service import Service, claims, setup_logging, tasks
from l4_plugin.service.claims import ClaimPolicy
from l4_plugin.service.health import Metrics
from l4_plugin.service.registry import job_state, register_job, set_status
from l4_plugin.store import Store, connect
from l4_plugin.store.jobs import JobRecord, job_doc_id, update_job
from l4_simulate import simulate


def policy(owner: str, *, lease: float = 60.0, attempts: int = 3) -> ClaimPolicy:
    return ClaimPolicy(
        owner=owner, lease_seconds=lease, max_attempts=attempts, analyzer_version=ANALYZER_VERSION
    )


def put_job(store: Store, job_id: str, **fields: Any) -> None:
    doc = {
        "l4.job.id": job_id,
        "l4.job.status": "failed",
        "l4.ingest.state": "done",
        "l4.job.registered": claims.now_ms(),
    }
    doc.update(fields)
    store.put(store.names.jobs, job_doc_id(job_id), doc, refresh=True)


def source(store: Store, job_id: str) -> dict[str, Any]:
    doc = store.get(store.names.jobs, job_doc_id(job_id))
    assert doc is not None
    return doc.source


def test_version_order() -> None:
    assert claims.version_older(None, "l4-0.1.0")
    assert claims.version_older("l4-0.9.2", "l4-0.10.0")
    assert not claims.version_older("l4-0.10.0", "l4-0.9.2")
    assert not claims.version_older("l4-0.1.0", "l4-0.1.0")


def test_discovery_finds_exactly_the_due_jobs(store: Store) -> None:
    p = policy("a")
    now = claims.now_ms()
    put_job(store, "new")
    put_job(store, "released", **{claims.STATE: "pending", claims.ATTEMPTS: 1})
    put_job(
        store,
        "retry",
        **{claims.STATE: "failed", claims.ATTEMPTS: 1, claims.VERSION: ANALYZER_VERSION},
    )
    put_job(
        store,
        "exhausted",
        **{claims.STATE: "failed", claims.ATTEMPTS: 3, claims.VERSION: ANALYZER_VERSION},
    )
    put_job(store, "outdated", **{claims.STATE: "done", claims.VERSION: "l4-0.0.1"})
    put_job(store, "newer", **{claims.STATE: "done", claims.VERSION: "l4-99.0.0"})
    put_job(store, "current", **{claims.STATE: "done", claims.VERSION: ANALYZER_VERSION})
    put_job(
        store,
        "expired",
        **{
            claims.STATE: "running",
            claims.LEASE: now - 1000,
            claims.OWNER: "x",
            claims.ATTEMPTS: 1,
        },
    )
    put_job(
        store,
        "leased",
        **{
            claims.STATE: "running",
            claims.LEASE: now + 60_000,
            claims.OWNER: "x",
            claims.ATTEMPTS: 1,
        },
    )
    put_job(store, "succeeded", **{"l4.job.status": "succeeded"})
    put_job(store, "running", **{"l4.job.status": "running"})
    put_job(store, "not-ingested", **{"l4.ingest.state": "running"})
    found = dict(claims.find_pending(store, p, limit=100))
    assert found == {
        "new": "new",
        "released": "released",
        "retry": "retry",
        "outdated": "outdated",
        "expired": "lease-expired",
    }


def test_claim_is_exclusive_and_a_lease_can_be_taken_over(store: Store) -> None:
    put_job(store, "j")
    a, b = policy("a", lease=0.3), policy("b", lease=0.3)
    first = claims.claim(store, "j", a).claim
    assert first is not None and first.attempt == 1 and first.reason == "new"
    assert claims.claim(store, "j", b).claim is None
    assert claims.renew(store, first, a) == "renewed"
    time.sleep(0.4)
    taken = claims.claim(store, "j", b).claim
    assert taken is not None and taken.previous_owner == "a" and taken.attempt == 2
    assert claims.renew(store, first, a) == "lost"  # a learns that it lost the job
    assert not claims.release(store, first)  # and cannot give back what it no longer holds
    claims.finish(store, taken, b)
    assert claims.renew(store, taken, b) == "ended"
    src = source(store, "j")
    assert src[claims.STATE] == "done" and src[claims.VERSION] == ANALYZER_VERSION
    assert claims.OWNER not in src and claims.LEASE not in src and src[claims.ATTEMPTS] == 2
    assert claims.claim(store, "j", a).claim is None


def test_a_diagnosis_inside_a_claim_leaves_the_result_to_the_claim_holder(store: Store) -> None:
    # The service's diagnose task writes annotations (which record the analysis) before it calls
    # finish; the job must not read "done" while it still names an owner in between.
    put_job(store, "held")
    p = policy("svc")
    held = claims.claim(store, "held", p).claim
    assert held is not None
    record_analysis(store, "held", analyzer_version=ANALYZER_VERSION)
    src = source(store, "held")
    assert src[claims.STATE] == "running" and src[claims.OWNER] == "svc"
    assert claims.renew(store, held, p) == "renewed"
    claims.finish(store, held, p)
    src = source(store, "held")
    assert src[claims.STATE] == "done" and claims.OWNER not in src
    # Without a claim (a CLI `l4 analyze`), the diagnosis records its state itself.
    put_job(store, "cli")
    record_analysis(store, "cli", analyzer_version=ANALYZER_VERSION)
    assert source(store, "cli")[claims.STATE] == "done"


def test_concurrent_claims_one_winner(store: Store) -> None:
    put_job(store, "race")
    won: list[str] = []
    barrier = threading.Barrier(6)

    def contender(name: str) -> None:
        barrier.wait()
        if claims.claim(store, "race", policy(name)).claim is not None:
            won.append(name)

    threads = [threading.Thread(target=contender, args=(f"s{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert source(store, "race")[claims.OWNER] == won[0]


def test_failures_are_retried_a_bounded_number_of_times(store: Store) -> None:
    put_job(store, "bad")
    p = policy("a", attempts=2)
    first = claims.claim(store, "bad", p).claim
    assert first is not None
    assert not claims.fail(store, first, p, "AnalysisError: boom")
    bad = JobRecord.from_source(source(store, "bad"))
    assert claims.pending_reason(bad, p, claims.now_ms()) == "retry"
    second = claims.claim(store, "bad", p).claim
    assert second is not None and second.attempt == 2
    assert claims.fail(store, second, p, "AnalysisError: boom again")
    src = source(store, "bad")
    assert src[claims.STATE] == "failed" and src[claims.ERROR] == "AnalysisError: boom again"
    assert claims.claim(store, "bad", p).claim is None
    # A job whose every claimer died (lease expired at the last attempt) is given up too.
    put_job(
        store,
        "crashy",
        **{claims.STATE: "running", claims.LEASE: 1, claims.OWNER: "x", claims.ATTEMPTS: 2},
    )
    outcome = claims.claim(store, "crashy", p)
    assert outcome.claim is None and outcome.gave_up and "x" in outcome.gave_up
    assert source(store, "crashy")[claims.STATE] == "failed"


def test_release_gives_the_attempt_back(store: Store) -> None:
    put_job(store, "r")
    p = policy("a")
    held = claims.claim(store, "r", p).claim
    assert held is not None
    assert claims.release(store, held)
    src = source(store, "r")
    assert src[claims.STATE] == "pending" and src[claims.ATTEMPTS] == 0
    assert claims.OWNER not in src
    again = claims.claim(store, "r", p).claim
    assert again is not None and again.attempt == 1 and again.reason == "released"


def test_register_and_change_status(store: Store) -> None:
    state, created = register_job(store, "p1", "running", fingerprint="fp")
    assert created and state.status == "running" and state.fingerprint == "fp"
    state, created = register_job(store, "p1", "running")
    assert not created and state.fingerprint == "fp"
    # The service's fields survive a status change.
    update_job(store, "p1", lambda s: {**s, claims.CHECKPOINT: 5})
    state = set_status(store, "p1", "failed")
    assert state.status == "failed" and source(store, "p1")[claims.CHECKPOINT] == 5
    assert job_state(store, "p1").status == "failed"
    with pytest.raises(ConfigError, match=r"job 'nope' is not registered in .*jobs — hint"):
        set_status(store, "nope", "failed")
    with pytest.raises(ConfigError, match=r"invalid job status 'crashed' — expected one of"):
        register_job(store, "p1", "crashed")


# -- tasks in process ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    simulate(out, nodes=4, iterations=30, fault="nccl-ib-error", seed=1, baselines=0)
    return out / "job"


def serving(settings: Settings, **service: Any) -> Settings:
    """``settings`` with these values of its ``service:`` section."""
    return settings.model_copy(update={"service": settings.service.model_copy(update=service)})


def context(store: Store, settings: Settings, **service: Any) -> tasks.TaskContext:
    p = policy("test")
    return tasks.TaskContext(
        store,
        serving(settings, **service),
        p,
        load_rules(),
        Metrics(p.owner, store.display_url),
        logging.getLogger("test.l4.service"),
        threading.Event(),
    )


def annotations(store: Store, job_id: str) -> list[dict[str, Any]]:
    store.refresh(store.names.annotations)
    if not store.count(store.names.annotations):
        return []
    body = {"size": 1000, "query": {"term": {"l4.job.id": job_id}}}
    return [h["_source"] for h in store.search(store.names.annotations, body)["hits"]["hits"]]


def test_watch_annotates_a_running_job_once_per_new_data(
    store: Store, settings: Settings, sim: Path
) -> None:
    summary = ingest_job(store, sim, job_id="run-1", status="running")
    ctx = context(store, settings)
    assert tasks.watch(ctx) == 1
    found = annotations(store, "run-1")
    assert found and {a["l4.annotation.kind"] for a in found} == {"rule_match"}
    assert "ib-port-error-async-event" in {a["l4.rule.id"] for a in found}
    src = source(store, "run-1")
    assert src[claims.CHECKPOINT] == src["l4.job.end_ts"]
    assert claims.STATE not in src  # watching does not count as an analysis
    assert tasks.watch(ctx) == 0  # nothing new since the checkpoint
    # New, later events move the mark: the job is matched again.
    update_job(store, "run-1", lambda s: {**s, "l4.job.end_ts": s["l4.job.end_ts"] + 1})
    announced = ctx.metrics.counters["watch_matches"]
    assert announced == len(found)
    assert tasks.watch(ctx) == 1
    # Matched again, but no rule is new to the job: nothing announced twice.
    assert summary.lines > 0 and ctx.metrics.counters["watch_matches"] == announced


def test_an_analysis_that_raises_is_recorded_and_the_next_job_goes_on(
    store: Store, settings: Settings, sim: Path
) -> None:
    put_job(store, "empty")  # registered and "ingested", but no rollups at all
    ingest_job(store, sim, job_id="good", status="failed")
    ctx = context(store, settings, max_attempts=2)
    assert tasks.discover(ctx) == 2
    assert tasks.diagnose(ctx) == 2
    bad = source(store, "empty")
    assert bad[claims.STATE] == "failed" and bad[claims.ATTEMPTS] == 1
    assert bad[claims.ERROR].startswith("AnalysisError: job 'empty' has no event rollups")
    assert source(store, "good")[claims.STATE] == "done"
    assert ctx.metrics.counters["jobs_failed"] == 1
    assert ctx.metrics.counters["jobs_diagnosed"] == 1
    assert {a["l4.annotation.kind"] for a in annotations(store, "good")} >= {"summary", "node"}


def test_retention_deletes_rollups_and_lines_keeps_annotations(
    store: Store, settings: Settings, sim: Path
) -> None:
    ingest_job(store, sim, job_id="old", status="failed")
    ingest_job(store, sim, job_id="young", status="failed")
    ctx = context(store, settings, retention_days=7, rules=False)
    tasks.discover(ctx)
    tasks.diagnose(ctx)
    kept = len(annotations(store, "old"))
    assert kept > 0
    month_ago = claims.now_ms() - 30 * tasks.DAY_MS
    update_job(store, "old", lambda s: {**s, "l4.ingest.updated": month_ago})
    assert tasks.retention(ctx) == 1
    for index in (store.names.events, store.names.lines):
        store.refresh(index)
        assert store.count(index, {"term": {"l4.job.id": "old"}}) == 0
        assert store.count(index, {"term": {"l4.job.id": "young"}}) > 0
    assert len(annotations(store, "old")) == kept
    src = source(store, "old")
    assert src["l4.retention.deleted_docs"] > 0 and src["l4.retention.purged"] > month_ago
    assert tasks.retention(ctx) == 0  # purged once


def test_once_mode_runs_each_task_once_and_exits(settings: Settings, sim: Path) -> None:
    store = connect(settings)
    store.install_templates()
    try:
        ingest_job(store, sim, job_id="once", status="failed")
        service = Service(serving(settings, rules=False), setup_logging(json_lines=True), once=True)
        assert service.run() == 0
        assert source(store, "once")[claims.STATE] == "done"
        snapshot = service.metrics.snapshot()
        assert snapshot["counters"]["jobs_diagnosed"] == 1
        assert {"discover", "diagnose"} <= set(snapshot["tasks"])
    finally:
        store.drop_indices()
        store.close()


def test_once_mode_with_an_unreachable_cluster_fails(tmp_path: Path) -> None:
    settings = load_settings(None, es_url="http://127.0.0.1:9", state_dir=tmp_path)
    service = Service(serving(settings, rules=False), setup_logging(json_lines=False), once=True)
    with pytest.raises(StoreError, match=r"cannot connect to http://127\.0\.0\.1:9"):
        service.run()


def run_cli(*args: str) -> int:
    """``l4 ARGS`` in process (each run has its own settings; SIGTERM handler restored)."""
    previous = signal.getsignal(signal.SIGTERM)
    try:
        return cli.main(list(args))
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_job_register_and_status_commands(
    store: Store, osmem_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ("--es-url", osmem_url, "--index-prefix", store.names.prefix, "job")
    assert run_cli(*base, "register", "cli-1", "--status", "running", "--fingerprint", "f1") == 0
    out = capsys.readouterr().out
    assert f"registered in {store.names.jobs}" in out
    assert "job cli-1: status running, ingest not ingested, analysis not analysed" in out
    assert run_cli(*base, "status", "cli-1", "failed") == 0
    assert "job cli-1: status failed" in capsys.readouterr().out
    assert source(store, "cli-1")["l4.job.fingerprint"] == "f1"
    assert run_cli(*base, "status", "cli-2") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: job 'cli-2' is not registered in") and err.count("\n") == 1
    assert run_cli(*base, "status", "cli-1", "exploded") == 2
    assert "'exploded' is not one of 'running', 'failed'" in capsys.readouterr().err


def test_health_port_in_use_is_a_one_line_error(settings: Settings) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        serve = serving(settings, rules=False, health_port=port)
        service = Service(serve, setup_logging(json_lines=False), once=True)
        with pytest.raises(ConfigError, match=rf"health endpoint on 127\.0\.0\.1:{port}: .*in use"):
            service.run()
