"""``ingest --from-index``: lines a shipper indexed give the same rollups as the files."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path
from typing import Any

import pytest

from l4_plugin.errors import IngestError
from l4_plugin.ingest import index_source
from l4_plugin.ingest.documents import doc_id as _doc_id
from l4_plugin.ingest.index_source import RawFields, ingest_index
from l4_plugin.ingest.jobdir import discover
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.store import Store
from l4_simulate import simulate


def ship(store: Store, index: str, job_dir: Path, job_id: str, *, multiline: bool = False) -> int:
    """Index every line of a job directory as Filebeat's filestream input would.

    One document per line: ``message`` without its newline, ``host.name`` (the node Filebeat
    runs on), ``log.file.path`` (absolute), ``log.offset`` (byte offset of the line), and the
    ``l4.job.id`` / ``l4.rank`` fields that ``ingest/filebeat.yml`` dissects from the path.
    ``@timestamp`` is the read time (the same for a whole file here: order must come from the
    offset). Documents are written in reverse so index order is not file order. ``multiline``
    joins tracebacks into one message, as a shipper's multiline setting does.
    """
    docs: list[tuple[str, dict[str, Any]]] = []
    for f in discover(job_dir):
        data = f.path.read_bytes()
        data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        offset = 0
        pending: dict[str, Any] | None = None
        for raw in data.split(b"\n")[:-1]:
            text = raw.decode("utf-8", "replace")
            body = text.split("]:", 1)[-1] if text.startswith("[") else text
            if multiline and pending is not None and body.startswith((" ", "\t")):
                pending["message"] += "\n" + text
                offset += len(raw) + 1
                continue
            doc: dict[str, Any] = {
                "@timestamp": "2026-01-01T00:00:00.000Z",
                "message": text,
                "host": {"name": f.node},
                "log": {"file": {"path": str(f.path)}, "offset": offset},
                "l4": {"job": {"id": job_id}},
                "input": {"type": "filestream"},
            }
            if f.rank is not None:
                doc["l4"]["rank"] = f.rank
            docs.append((hashlib.sha1(f"{f.path}:{offset}".encode()).hexdigest(), doc))
            pending = doc
            offset += len(raw) + 1
    store.bulk_index(index, reversed(docs), refresh=True)
    return len(docs)


def _node_file(path: str | list[str]) -> list[str] | list[list[str]]:
    """node/file of a path (the shipped copy and the job directory differ above them)."""
    if isinstance(path, list):
        return [p.rsplit("/", 2)[-2:] for p in path]
    return path.rsplit("/", 2)[-2:]


def _events(store: Store, job_id: str) -> dict[tuple[str, ...], dict[str, Any]]:
    res = store.search(
        store.names.events, {"size": 10000, "query": {"term": {"l4.job.id": job_id}}}
    )
    out = {}
    for hit in res["hits"]["hits"]:
        src = dict(hit["_source"])
        src.pop("l4.generation")  # each ingest is a generation of its own (and in the _id)
        src["log.file.path"] = _node_file(src["log.file.path"])
        if "l4.pack" in src:  # the healthy majority's rollups, packed (store/packs.py)
            src["l4.pack"]["paths"] = _node_file(src["l4.pack"]["paths"])
        key = tuple(str(src[k]) for k in ("host.name", "l4.template.id", "l4.stage", "l4.bucket"))
        assert key not in out
        out[key] = src
    return out


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_source, "PAGE_SIZE", 97)  # many pages per file


@pytest.mark.usefixtures("small_pages")
def test_index_ingest_equals_file_ingest(any_store: Store, tmp_path: Path) -> None:
    truth = simulate(tmp_path, nodes=2, iterations=12, fault="oom", seed=3, baselines=0)
    job = tmp_path / "job"
    jid = truth.job_id
    by_file = ingest_job(any_store, job)
    file_events = _events(any_store, jid)
    file_job = any_store.get(any_store.names.jobs, _doc_id(jid))
    raw = f"{any_store.names.prefix}raw-filebeat"
    assert ship(any_store, raw, job, jid) == by_file.lines
    [by_index] = ingest_index(any_store, raw, RawFields(), job_id=jid, status="failed")
    assert not by_index.problems and by_index.new_templates == 0
    assert (by_index.lines, by_index.nodes, by_index.files) == (
        by_file.lines,
        by_file.nodes,
        by_file.files,
    )
    assert by_index.events_docs == by_file.events_docs
    assert _events(any_store, jid) == file_events
    index_job = any_store.get(any_store.names.jobs, _doc_id(jid))
    assert file_job is not None and index_job is not None
    for key in ("l4.job.node_count", "l4.job.lines", "l4.job.ranks", "l4.job.start_ts"):
        assert index_job.source[key] == file_job.source[key], key
    # Kept lines name the shipped file and carry the shipper's offset.
    kept = any_store.search(
        any_store.names.lines,
        {"size": 5, "query": {"bool": {"filter": [{"term": {"l4.job.id": jid}}]}}},
    )["hits"]["hits"]
    assert kept and all(h["_source"]["log.file.path"].startswith("/") for h in kept)
    assert all("log.offset" in h["_source"] for h in kept)


@pytest.mark.usefixtures("small_pages")
def test_multiline_messages_are_split_back(store: Store, tmp_path: Path) -> None:
    truth = simulate(
        tmp_path, nodes=2, iterations=10, fault="oom", seed=3, baselines=0, ranks_per_node=2
    )
    job = tmp_path / "job"
    by_file = ingest_job(store, job)
    file_events = _events(store, truth.job_id)
    raw = f"{store.names.prefix}raw-multiline"
    shipped = ship(store, raw, job, truth.job_id, multiline=True)
    assert shipped < by_file.lines  # tracebacks were joined by the "shipper"
    [by_index] = ingest_index(store, raw, RawFields(), job_id=truth.job_id, full=True)
    assert by_index.lines == by_file.lines
    assert _events(store, truth.job_id) == file_events
    # --full from an index: every line once, at its offset inside the joined message's file.
    assert by_index.lines_docs == by_file.lines
    assert store.count(store.names.lines, {"term": {"l4.job.id": truth.job_id}}) == by_file.lines
    frames = store.search(
        store.names.lines,
        {"size": 5, "query": {"wildcard": {"message.keyword": "*]:  File *"}}},
    )["hits"]["hits"]
    assert frames  # traceback frames, which the shipper had joined into one message
    for hit in frames:
        src = hit["_source"]
        data = Path(src["log.file.path"]).read_bytes()
        data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        assert data[src["log.offset"] :].startswith(src["message"].encode())


def test_every_job_of_the_index_and_fields_from_the_path(store: Store, tmp_path: Path) -> None:
    # A Fluent Bit-like index: no offset, rank only in the file name, job in its own field.
    raw = f"{store.names.prefix}raw-fluentbit"
    docs = []
    for job in ("job-a", "job-b"):
        for i in range(30):
            docs.append(
                (
                    f"{job}-{i}",
                    {
                        "@timestamp": f"2026-01-01T00:00:{i:02d}.000Z",
                        "log": f"2024-05-03 10:00:{i:02d},000 INFO step {i}",
                        "kubernetes": {"host": "node-1"},
                        "job": job,
                        "file": f"/logs/{job}/node-1/rank3.log",
                    },
                )
            )
    store.bulk_index(raw, docs, refresh=True)
    fields = RawFields(
        job="job", node="kubernetes.host", rank=None, message="log", path="file", offset=None
    )
    summaries = ingest_index(store, raw, fields, status="running")
    assert sorted(s.job.id for s in summaries) == ["job-a", "job-b"]
    assert all(s.lines == 30 and s.nodes == 1 for s in summaries)
    hits = store.search(
        store.names.events,
        {"size": 10, "query": {"term": {"l4.job.id": "job-a"}}},
    )["hits"]["hits"]
    assert hits and all(h["_source"]["l4.ranks"] == [3] for h in hits)
    assert min(h["_source"]["l4.first_pos"] for h in hits) == 1


def test_bad_fields_are_one_line_errors(store: Store) -> None:
    raw = f"{store.names.prefix}raw-bad"
    store.bulk_index(raw, [("1", {"message": "x", "host": {"name": "n"}})], refresh=True)
    with pytest.raises(IngestError, match=r"no index matches --from-index"):
        ingest_index(store, f"{store.names.prefix}nothing-here", RawFields())
    with pytest.raises(IngestError, match=r"--job-field 'l4.job.id' is not a field of"):
        ingest_index(store, raw, RawFields())
    with pytest.raises(IngestError, match=r"--message-field 'msg' is not a field"):
        ingest_index(store, raw, RawFields(job="host.name", message="msg"))
    with pytest.raises(IngestError, match=r"no lines of job 'other'"):
        ingest_index(store, raw, RawFields(job="host.name"), job_id="other")


def test_cli_ingest_from_index_and_full(store: Store, tmp_path: Path) -> None:
    from tests.l4cli import run_l4

    env = {
        "L4_ES_URL": store.url,
        "L4_INDEX_PREFIX": store.names.prefix,
        "L4_STATE_DIR": str(tmp_path / "state"),
    }
    truth = simulate(
        tmp_path / "sim", nodes=2, iterations=10, fault="oom", seed=3, baselines=0, ranks_per_node=2
    )
    raw = f"{store.names.prefix}raw-cli"
    lines = ship(store, raw, tmp_path / "sim" / "job", "j-cli")
    res = run_l4("ingest", "--from-index", raw, "--job-id", "j-cli", "--status", "failed", env=env)
    assert res.returncode == 0, res.stderr
    assert "job j-cli (failed" in res.stdout and f"{lines:,} lines" in res.stdout
    res = run_l4("ingest", str(tmp_path / "sim" / "job"), "--full", env=env)
    assert res.returncode == 0, res.stderr
    assert f"{lines:,} raw lines" in res.stdout
    store.refresh(store.names.lines)
    assert store.count(store.names.lines, {"term": {"l4.job.id": truth.job_id}}) == lines
    res = run_l4("ingest", env=env)
    assert res.returncode == 2 and "give either JOB_DIR or --from-index" in res.stderr
    res = run_l4("ingest", "--from-index", raw, "--job-field", "nope", env=env)
    assert res.returncode == 1 and res.stderr.strip().startswith("error: --job-field 'nope'")
