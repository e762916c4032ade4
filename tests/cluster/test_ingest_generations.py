"""Crash consistency of a re-ingest: ``kill -9`` of a real ``l4 ingest`` process at many points.

A job directory grows (a node's log files appear) and is ingested again; the process is killed
with SIGKILL before its N-th write request (``L4_TEST_STALL_AFTER_WRITES`` makes it hang there;
``L4_TEST_BULK_DOCS`` makes a small job take many bulk requests). Whatever N, what the analyses
read afterwards is exactly one complete generation, the old or the new, with the exact document
counts of an ingest that was not interrupted; ``l4 diagnose`` ingests the directory again instead
of calling it already in the cluster, and leaves exactly the new generation in the indices.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from l4_plugin.diagnosis.preparation import already_ingested, prepare
from l4_plugin.diagnosis.queries import find_jobs, job_scope, read_job, read_job_tables
from l4_plugin.errors import AnalysisError, IngestError, StoreError
from l4_plugin.ingest.jobdir import scan
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.rules.engine import JobFacts
from l4_plugin.service import claims
from l4_plugin.service.registry import job_state
from l4_plugin.store import IndexNames, OpenSearchStore, Store, generations, jobs
from l4_plugin.store.base import BULK_DOCS_ENV, STALL_ENV
from l4_plugin.store.jobs import job_doc_id, update_job
from l4_simulate import simulate

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "l4_plugin.cli"]
BULK_DOCS = "40"
_prefixes = iter(range(10**6))


@dataclass(frozen=True)
class Counts:
    """What one complete generation of the job holds."""

    events: int
    lines: int
    lines_total: int  # sum of the rollups' l4.count
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Dirs:
    old: Path
    new: Path
    job_id: str


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> Dirs:
    """The same job twice: ``old`` lacks the log files of its last node, ``new`` has them all."""
    out = tmp_path_factory.mktemp("grow")
    truth = simulate(out, nodes=4, iterations=30, fault="nccl-ib-error", seed=1, baselines=0)
    new = out / "job"
    last = sorted({p.name.split("-rank")[0] for p in new.glob("*-rank*.log")})[-1]
    old = out / "old"
    shutil.copytree(new, old)
    for path in old.glob(f"{last}-rank*.log"):
        path.unlink()
    return Dirs(old, new, truth.job_id)


def _store(url: str) -> Store:
    s = OpenSearchStore(url, IndexNames(f"g{os.getpid()}-{next(_prefixes)}-l4-"))
    s.install_templates()
    return s


@pytest.fixture
def fresh(osmem_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Stores with a prefix of their own (many bulk requests per write, as the killed ingest)."""
    monkeypatch.setenv(BULK_DOCS_ENV, BULK_DOCS)
    made: list[Store] = []

    def make() -> Store:
        s = _store(osmem_url)
        made.append(s)
        return s

    yield make
    for s in made:
        s.drop_indices()
        s.close()


def _job(store: Store, job_id: str) -> dict[str, Any]:
    doc = store.get(store.names.jobs, job_doc_id(job_id))
    assert doc is not None
    return doc.source


def read_counts(store: Store, job_id: str) -> Counts:
    """What the analyses read of the job (its complete generation)."""
    data = read_job_tables(store, read_job(store, job_id))
    scope = job_scope(data.job)
    return Counts(
        events=store.count(store.names.events, scope),
        lines=store.count(store.names.lines, scope),
        lines_total=sum(c.count for c in data.cells.values()),
        nodes=tuple(data.nodes),
    )


def all_docs(store: Store, job_id: str) -> tuple[int, int]:
    """Every document of the job in the indices, whatever its generation."""
    job = {"term": {"l4.job.id": job_id}}
    return store.count(store.names.events, job), store.count(store.names.lines, job)


@dataclass(frozen=True)
class Reference:
    old: Counts
    new: Counts
    writes: int  # write requests of the re-ingest


@pytest.fixture(scope="module")
def reference(dirs: Dirs, osmem_url: str) -> Iterator[Reference]:
    """Counts of an uninterrupted ingest of ``old`` then re-ingest of ``new``."""
    before = os.environ.get(BULK_DOCS_ENV)
    os.environ[BULK_DOCS_ENV] = BULK_DOCS
    try:
        store = _store(osmem_url)
    finally:
        if before is None:
            os.environ.pop(BULK_DOCS_ENV)
        else:
            os.environ[BULK_DOCS_ENV] = before
    first = ingest_job(store, dirs.old)
    old = read_counts(store, dirs.job_id)
    assert (old.events, old.lines) == (first.events_docs, first.lines_docs)
    assert all_docs(store, dirs.job_id) == (old.events, old.lines)
    start = store._writes
    second = ingest_job(store, dirs.new)
    writes = store._writes - start
    new = read_counts(store, dirs.job_id)
    assert (new.events, new.lines) == (second.events_docs, second.lines_docs)
    assert all_docs(store, dirs.job_id) == (new.events, new.lines)
    assert len(new.nodes) == len(old.nodes) + 1 and new.lines_total > old.lines_total
    yield Reference(old, new, writes)
    store.drop_indices()
    store.close()


def kill_ingest(url: str, store: Store, job_dir: Path, after_writes: int) -> str:
    """Run ``l4 ingest`` as a process, SIGKILL it before its write request ``after_writes`` + 1;
    returns what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")}
    env.update({STALL_ENV: str(after_writes), BULK_DOCS_ENV: BULK_DOCS, "L4_MAX_RETRIES": "0"})
    cmd = [*CLI, "--es-url", url, "--index-prefix", store.names.prefix, "ingest", str(job_dir)]
    seen = b""
    deadline = time.monotonic() + 120
    # Leaving the block closes the pipes and waits for the process.
    with subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    ) as proc:
        assert proc.stderr is not None
        try:
            while b"l4-test: stalled" not in seen:
                line = proc.stderr.readline()
                if not line and proc.poll() is not None:
                    raise AssertionError(f"ingest ended (exit {proc.returncode}) before the stall")
                seen += line
                assert time.monotonic() < deadline, "no stall within 120 s"
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == -signal.SIGKILL
    return seen.decode(errors="replace")


def _kill_points(writes: int) -> list[int]:
    """Before anything, after the job document says 'writing', mid rollups, mid kept lines,
    before and right after the switch to the new generation, mid clean-up."""
    points = {0, 1, 3, 5, writes // 2, writes * 2 // 3, writes - 3, writes - 2, writes - 1}
    return sorted(p for p in points if 0 <= p < writes)


def test_kill_9_during_a_reingest_leaves_one_complete_generation(
    dirs: Dirs, reference: Reference, osmem_url: str, fresh: Any
) -> None:
    ref = reference
    assert ref.writes >= 12, "the re-ingest should take many write requests"
    for point in _kill_points(ref.writes):
        store = fresh()
        ingest_job(store, dirs.old)
        old_generation = generations.complete_generation(_job(store, dirs.job_id))
        said = kill_ingest(osmem_url, store, dirs.new, point)
        source = _job(store, dirs.job_id)
        switched = point >= ref.writes - 2  # the complete write went through
        where = f"killed before write {point + 1} of {ref.writes} ({said.strip()})"
        read = read_counts(store, dirs.job_id)
        assert read == (ref.new if switched else ref.old), where
        if switched:
            assert generations.complete_generation(source) != old_generation, where
            assert source[generations.STATE] == "done", where
        else:
            assert generations.complete_generation(source) == old_generation, where
            if point > 0:
                assert source[generations.STATE] == "writing", where
                record = jobs.get_job(store, dirs.job_id)
                assert not already_ingested(store, record, scan(dirs.new)), where
        # The fault rules read the same generation (the old one has no rollup of the last node).
        assert set(JobFacts(store, dirs.job_id).node_last_ts()) == set(read.nodes), where
        # What `l4 diagnose DIR` does first: ingest again unless the last ingest completed.
        again = prepare(store, dirs.new)
        assert (again.ingested is None) == switched, where
        assert read_counts(store, dirs.job_id) == ref.new, where
        assert all_docs(store, dirs.job_id) == (ref.new.events, ref.new.lines), where


def test_kill_9_of_a_first_ingest_is_never_diagnosed(
    dirs: Dirs, reference: Reference, osmem_url: str, fresh: Any
) -> None:
    store = fresh()
    kill_ingest(osmem_url, store, dirs.old, 5)
    source = _job(store, dirs.job_id)
    assert source[generations.STATE] == "writing"
    assert generations.complete_generation(source) is None
    with pytest.raises(AnalysisError, match="has no complete ingest: the ingest that began"):
        read_job_tables(store, read_job(store, dirs.job_id))
    state = job_state(store, dirs.job_id)
    assert state.generation is None and state.writing is not None
    assert state.writing["files"] == len(list(dirs.old.glob("*.log")))
    # The service does not pick it even once it is declared failed.
    policy = claims.ClaimPolicy("t", 60.0, 3, "l4-test")
    update_job(store, dirs.job_id, lambda s: {**s, "l4.job.status": "failed"})
    assert claims.find_pending(store, policy, limit=10) == []
    fingerprint = _job(store, dirs.job_id)["l4.job.fingerprint"]
    assert find_jobs(store, fingerprint=fingerprint, status="failed") == []  # nor a baseline
    assert prepare(store, dirs.old).ingested is not None
    assert [j.id for j in find_jobs(store, fingerprint=fingerprint, status="failed")] == [
        dirs.job_id
    ]
    assert read_counts(store, dirs.job_id) == reference.old
    assert all_docs(store, dirs.job_id) == (reference.old.events, reference.old.lines)
    assert [j for j, _ in claims.find_pending(store, policy, limit=10)] == [dirs.job_id]


def test_service_diagnoses_the_complete_generation_while_a_reingest_is_interrupted(
    dirs: Dirs, reference: Reference, osmem_url: str, fresh: Any
) -> None:
    store = fresh()
    ingest_job(store, dirs.old, status="failed")
    kill_ingest(osmem_url, store, dirs.new, reference.writes // 2)
    policy = claims.ClaimPolicy("t", 60.0, 3, "l4-test")
    assert [j for j, _ in claims.find_pending(store, policy, limit=10)] == [dirs.job_id]
    assert read_counts(store, dirs.job_id) == reference.old


def test_an_older_ingest_superseded_by_a_newer_one_deletes_what_it_wrote(
    dirs: Dirs, reference: Reference, fresh: Any
) -> None:
    store = fresh()
    ingest_job(store, dirs.old)
    job_id = dirs.job_id
    mine = generations.begin(store, job_id, files=1, new_job={})
    newer = generations.begin(store, job_id, files=1, new_job={})
    assert newer > mine
    doc = {"l4.job.id": job_id, "l4.generation": mine, "host.name": "n", "message": "m"}
    store.bulk_index(store.names.lines, [("x", doc)], refresh=True)
    with pytest.raises(IngestError, match="superseded: a newer ingest of it"):
        generations.complete(store, job_id, mine, lambda s: s)
    assert read_counts(store, job_id) == reference.old
    assert all_docs(store, job_id) == (reference.old.events, reference.old.lines)


def test_an_analysis_of_a_replaced_generation_leaves_the_job_due(
    dirs: Dirs, reference: Reference, fresh: Any
) -> None:
    store = fresh()
    ingest_job(store, dirs.old, status="failed")
    policy = claims.ClaimPolicy("t", 60.0, 3, "l4-test")
    held = claims.claim(store, dirs.job_id, policy).claim
    assert held is not None
    analysed = read_job_tables(store, read_job(store, dirs.job_id)).job.generation
    ingest_job(store, dirs.new, status="failed")  # completes while the analysis runs
    claims.finish(store, held, policy, generation=analysed)
    assert claims.find_pending(store, policy, limit=10) == [(dirs.job_id, "new")]
    assert read_counts(store, dirs.job_id) == reference.new


def test_setup_adds_the_generation_fields_to_a_jobs_index_of_an_older_l4(store: Store) -> None:
    index = store.names.jobs
    client: Any = store.client  # type: ignore[attr-defined]
    client.indices.delete_index_template(name=index)
    ingest = {"state": {"type": "keyword"}, "generation": {"type": "keyword"}}
    narrow = {
        "dynamic": "strict",
        "properties": {"l4": {"properties": {"ingest": {"properties": ingest}}}},
    }
    client.indices.create(index=index, body={"mappings": narrow})
    doc = {generations.STATE: "writing", generations.WRITING: {"generation": "00000001.abcdef"}}
    with pytest.raises(StoreError, match="rejected"):
        store.bulk_index(index, [("j", doc)])
    store.install_templates()
    store.bulk_index(index, [("j", {**doc, generations.SEQUENCE: 1})], refresh=True)
    assert store.count(index, {"term": {"l4.ingest.writing.generation": "00000001.abcdef"}}) == 1
