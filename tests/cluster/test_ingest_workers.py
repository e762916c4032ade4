"""Ingest on several worker processes gives the documents of one process, byte for byte."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from l4_plugin.diagnosis import diagnose_job
from l4_plugin.errors import StoreError
from l4_plugin.ingest import lanes as lanes_mod
from l4_plugin.ingest import owners, procs, spill, workers
from l4_plugin.ingest.jobdir import JobMeta, discover
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.pipeline import ingest_job, record_progress
from l4_plugin.ingest.scanner import Scanner, node_runs
from l4_plugin.ingest.sources import file_streams
from l4_plugin.ingest.workers import ScanProgress, scan_streams
from l4_plugin.ingest.writer import BulkWriter
from l4_plugin.service.registry import job_state, register_job
from l4_plugin.store import IndexNames, OpenSearchStore, Store
from l4_simulate import simulate
from tests.rollup_views import rollups_view

# Fields that say when a document was written, not what it is about.
_WHEN = {"@timestamp", "l4.ingest.updated", "l4.job.registered", "l4.ingest.progress"}
_GENERATION = {
    "l4.generation",
    "l4.ingest.generation",
    "l4.ingest.sequence",
    "l4.ingest.started",
    "l4.ingest.writing",
}


def _dump(store: Store) -> str:
    """Every document of the job's indices, sorted by index and content, as one JSON text.

    Each ingest writes a generation of its own (``store.generations``: a counter and a random
    suffix, part of the ids), so ids and generation fields are left out of the comparison."""
    out: dict[str, list[Any]] = {}
    for index in (
        store.names.events,
        store.names.lines,
        store.names.templates,
        store.names.jobs,
    ):
        store.refresh(index)
        hits = store.search(index, {"size": 10_000, "sort": [{"_id": "asc"}]})["hits"]["hits"]
        docs = []
        for hit in hits:
            src = {k: v for k, v in hit["_source"].items() if k not in _GENERATION}
            if index in (store.names.templates, store.names.jobs):
                src = {k: v for k, v in src.items() if k not in _WHEN}
            docs.append(json.dumps(src, sort_keys=True))
        out[index.removeprefix(store.names.prefix)] = sorted(docs)
    return json.dumps(out, sort_keys=True)


def _job(tmp_path: Path) -> Path:
    simulate(tmp_path, nodes=6, iterations=40, fault="nccl-ib-error", seed=5, baselines=0)
    job = tmp_path / "job"
    # Lines whose kinds a later file meets first on another worker, a traceback chain and a
    # timeless error run in a marker-less file: the merge has to put them where one process does.
    extra = job / "node-zz"
    extra.mkdir()
    (extra / "rank0.log").write_text(
        "2026-01-01 00:00:00 INFO starting\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "ValueError: bad value 3\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 5, in <module>\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "some timeless error: Error: disk full\n"
        "2026-01-01 00:00:09 INFO done\n"
    )
    (extra / "rank1.log").write_text("ValueError: bad value 17\nsome timeless error: Error: x\n")
    return job


def test_one_two_three_workers_write_identical_documents(
    osmem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path)
    dumps, reports = [], []
    for n in (1, 2, 3):
        # Small batches (one or two nodes): the lanes interleave and finish out of order.
        monkeypatch.setattr(workers, "BATCH_FILES", n - 1 or 1)
        dump, report = _ingested(osmem_url, f"tw{n}-{tmp_path.name[-12:]}-l4-", job, workers=n)
        dumps.append(dump)
        reports.append(report)
    assert '"events": ["{' in dumps[0]  # the job was written
    assert dumps[1] == dumps[0]
    assert dumps[2] == dumps[0]
    assert reports[1] == reports[0]
    assert reports[2] == reports[0]


def _ingested(url: str, prefix: str, job: Path, **kwargs: Any) -> tuple[str, str]:
    """Every document of the job ingested with ``kwargs``, and its diagnosis (as JSON)."""
    store = OpenSearchStore(url, IndexNames(prefix))
    store.install_templates()
    try:
        summary = ingest_job(store, job, job_id="j", status="failed", **kwargs)
        if kwargs.get("workers"):
            assert summary.workers == kwargs["workers"]
        assert list(summary.steps) == ["discovery", "scan", "build", "send", "finish"]
        assert all(v >= 0 for v in summary.steps.values())
        assert sum(summary.steps.values()) <= summary.seconds  # discovery included
        report = diagnose_job(store, "j", rules=[], write=False).report.to_json()
        report.pop("timings", None)
        return _dump(store), json.dumps(report, sort_keys=True, default=str)
    finally:
        store.drop_indices()
        store.close()


def _held() -> int:
    """In a Dask worker: how many lanes' states it holds."""
    return len(owners._HELD)


def test_a_dask_cluster_writes_the_documents_of_local_processes(
    osmem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same ingest on a ``distributed.LocalCluster`` of two worker processes (one thread
    each: two lanes) writes every document the local processes write, and the same report; a
    re-ingest there leaves one generation (nothing lost or doubled); progress is reported as the
    lanes' digests come; the workers keep nothing of the ingest after it."""
    distributed = pytest.importorskip("distributed")
    job = _job(tmp_path)
    monkeypatch.setattr(workers, "BATCH_FILES", 1)  # a node per batch: both lanes get some
    local = _ingested(osmem_url, f"tdl-{tmp_path.name[-12:]}-l4-", job, workers=2)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        store = OpenSearchStore(osmem_url, IndexNames(f"tdd-{tmp_path.name[-12:]}-l4-"))
        store.install_templates()
        try:
            seen: list[ScanProgress] = []
            for _ in range(2):  # the second: a re-ingest, a new generation
                summary = ingest_job(
                    store, job, job_id="j", status="failed", scheduler=address, progress=seen.append
                )
                assert summary.workers == 2
            on_dask = _dump(store)
            report = diagnose_job(store, "j", rules=[], write=False).report.to_json()
            report.pop("timings", None)
        finally:
            store.drop_indices()
            store.close()
        with distributed.Client(address) as client:
            held = client.run(_held)  # what each worker still holds of the ingest
    assert on_dask == local[0] and '"events": ["{' in on_dask
    assert json.dumps(report, sort_keys=True, default=str) == local[1]
    assert seen and seen[-1].files_done == seen[-1].files == summary.files
    assert len(held) == 2 and set(held.values()) == {0}


def test_read_limits_hold_on_a_dask_cluster(osmem_url: str, tmp_path: Path) -> None:
    """A compression bomb and a line without end, read by a Dask cluster's workers: cut as
    local processes cut them, with the same warnings (``tests/cluster/test_security.py``)."""
    distributed = pytest.importorskip("distributed")
    from tests.cluster.test_security import _hostile_files

    job = _hostile_files(tmp_path / "job")
    seen = []
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        for where in ({"workers": 2}, {"scheduler": cluster.scheduler_address}):
            store = OpenSearchStore(osmem_url, IndexNames(f"tb{len(seen)}-{tmp_path.name[-9:]}-"))
            store.install_templates()
            try:
                summary = ingest_job(store, job, job_id="h", **where)  # type: ignore[arg-type]
            finally:
                store.drop_indices()
                store.close()
            assert len(summary.cut_files) == 1 and "compression bomb" in summary.cut_files[0]
            seen.append((summary.cut_files, sorted(summary.problems), summary.lines))
    assert seen[0] == seen[1]


def test_kinds_reach_drain_in_job_order_whatever_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path)
    monkeypatch.setattr(workers, "BATCH_FILES", 1)
    orders = []
    for n in (1, 3):
        parser = LineParser()
        seen: list[ScanProgress] = []
        result = scan_streams(file_streams(discover(job)), parser, workers=n, progress=seen.append)
        assert result.workers == n
        done = [p.files_done for p in seen]
        assert done == sorted(set(done)) and done[-1] == seen[-1].files
        assert seen[-1].bytes_done == seen[-1].bytes > 0
        orders.append([k.key for k in parser.kinds])
    assert orders[0] == orders[1]


def test_each_lane_owns_whole_nodes_and_digests_come_in_job_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path)
    monkeypatch.setattr(workers, "BATCH_FILES", 1)  # a batch per node (up to 4 files each)
    streams = file_streams(discover(job))
    owner: dict[str, int] = {}
    real = owners.scan_batch

    def spied(token: str, lane: int, tasks: Any, *rest: Any) -> Any:
        for t in tasks:
            assert owner.setdefault(t.node, lane) == lane  # a node's files in one lane
        return real(token, lane, tasks, *rest)

    monkeypatch.setattr(owners, "scan_batch", spied)
    # Two lanes in this process (a spy sees no other process's calls), each two tasks deep.
    lanes = [lanes_mod.Lane(i, lanes_mod.InlineExecutor(), 2, "test") for i in range(2)]
    try:
        result = workers.scan_lanes(lanes, "t", streams, LineParser())
    finally:
        for lane in lanes:
            owners.drop("t", lane.id)
    assert [d.node for d in result.digests] == list(dict.fromkeys(s.node for s in streams))
    assert set(owner.values()) == {0, 1}
    assert sum(d.files for d in result.digests) == len(streams)


def test_a_lane_learns_the_masks_other_lanes_computed(tmp_path: Path) -> None:
    job = _job(tmp_path)
    streams = file_streams(discover(job))
    sizes = [s.file.stat().st_size if s.file else 0 for s in streams]
    half = len(streams) // 2
    while streams[half].node == streams[half - 1].node:  # lanes scan whole nodes
        half += 1
    other = Scanner(share_masks=True)
    other.scan_all(streams[:half], sizes[:half])
    learnt = other.computed_masks()
    assert learnt and other.computed_masks() == []  # each mask is handed over once
    tasks = [workers._task(s, size) for s, size in zip(streams[half:], sizes[half:], strict=True)]
    try:
        report = owners.scan_batch("t", 0, tasks, learnt, None)
    finally:
        owners.drop("t", 0)
    assert report.masks and not {key for key, _ in report.masks} & {key for key, _ in learnt}
    alone = Scanner()
    rest, rest_sizes = streams[half:], sizes[half:]
    expected = []
    for a, b in node_runs(rest):
        expected.append(alone.digest(alone.scan_node(rest[a:b]), rest_sizes[a:b]))
    assert report.digests == expected


def test_a_lane_whose_first_line_of_a_kind_differs_is_rescanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two raw lines that mask alike but whose headers parse differently (month 13 is no date):
    # the kind's attributes must come from the job's first one, as in one process.
    job = tmp_path / "job"
    for node, text in (
        ("a", "2026-13-01 00:00:00 ERROR boom\n"),
        ("b", "2026-01-01 00:00:00 ERROR boom\n2026-13-01 00:00:00 ERROR boom\n"),
    ):
        (job / node).mkdir(parents=True)
        (job / node / "rank0.log").write_text(text)
    streams = file_streams(discover(job))
    one = LineParser()
    single = scan_streams(streams, one, workers=1)
    # Each node in a lane of its own: the second lane never saw node a's line.
    monkeypatch.setattr(workers, "BATCH_FILES", 1)
    two = LineParser()
    split = scan_streams(streams, two, workers=2)
    assert split.workers == 2 and split.rescanned == 1
    key = one.kinds[0].key
    assert two.masked_kinds[key].has_timestamp is one.masked_kinds[key].has_timestamp is False
    assert rollups_view(split.rollups) == rollups_view(single.rollups)


def test_bulk_writer_writes_every_batch_and_raises_a_rejection(store: Store) -> None:
    writer = BulkWriter(store, batch_docs=3, queued=1)
    for i in range(10):
        writer.add(store.names.templates, f"t{i}", {"l4.template.id": f"t{i}"})
    assert writer.close() == {store.names.templates: 10}
    store.refresh(store.names.templates)
    assert store.count(store.names.templates) == 10
    bad = BulkWriter(store, batch_docs=2)
    with pytest.raises(StoreError, match="rejected"):
        for i in range(6):  # the strict mapping refuses an unknown field
            bad.add(store.names.templates, f"x{i}", {"no.such.field": i})
        bad.close()
    assert not bad._thread.is_alive()


def test_bulk_writer_sends_at_once_to_an_idle_cluster_and_gathers_while_it_is_busy(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []
    real = store.bulk_index

    def slow(index: str, docs: Any, **kw: Any) -> int:
        docs = list(docs)
        sizes.append(len(docs))
        time.sleep(0.3)  # the cluster is busy with this request meanwhile
        return real(index, docs, **kw)

    monkeypatch.setattr(store, "bulk_index", slow)
    writer = BulkWriter(store, batch_docs=50, min_docs=5)
    for i in range(5):
        writer.add(store.names.templates, f"t{i}", {"l4.template.id": f"t{i}"})
    deadline = time.monotonic() + 5
    while not sizes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sizes == [5]  # an idle cluster gets the first documents without waiting for more
    for i in range(5, 105):
        writer.add(store.names.templates, f"t{i}", {"l4.template.id": f"t{i}"})
    assert writer.close() == {store.names.templates: 105}
    assert sizes[1:3] == [50, 50]  # a busy one: full batches


def test_progress_goes_to_the_job_document(store: Store, tmp_path: Path) -> None:
    register_job(store, "p", "running", fingerprint="fp1")
    meta = JobMeta("p", "unknown", {}, "fp0")
    record_progress(store, meta, ScanProgress("a.log", 3, 8, 1200, 300, 800, 1.5, 2))
    state = job_state(store, "p")
    assert state.status == "running" and state.fingerprint == "fp1"  # the rest is kept
    assert state.progress is not None
    assert state.progress["files_done"] == 3 and state.progress["eta_seconds"] == 2.5
    # A job nobody registered gets a document that says its ingest runs.
    record_progress(store, JobMeta("q", "failed", {}, "fp"), ScanProgress("", 1, 2, 5, 5, 9, 1, 1))
    assert job_state(store, "q").ingest == "running"
    # The finished ingest records its final figures.
    job = _job(tmp_path)
    summary = ingest_job(store, job, job_id="q", status="failed", workers=1)
    final = job_state(store, "q")
    assert final.ingest == "done" and final.progress is not None
    assert final.progress["files_done"] == final.progress["files"] == summary.files
    assert final.progress["lines"] == summary.lines


def test_cli_ingest_on_two_workers_with_full(store: Store, tmp_path: Path) -> None:
    from tests.l4cli import run_l4

    env = {
        "L4_ES_URL": store.url,
        "L4_INDEX_PREFIX": store.names.prefix,
        "L4_STATE_DIR": str(tmp_path / "state"),
    }
    simulate(tmp_path, nodes=2, iterations=10, fault="oom", seed=3, baselines=0)
    job = str(tmp_path / "job")
    res = run_l4("ingest", job, "--job-id", "c", "--full", "--workers", "2", env=env)
    assert res.returncode == 0, res.stderr
    lines = int(res.stdout.split(" lines in ")[0].rsplit(" ", 1)[1].replace(",", ""))
    assert f"{lines:,} raw lines" in res.stdout
    store.refresh(store.names.lines)
    assert store.count(store.names.lines, {"term": {"l4.job.id": "c"}}) == lines
    res = run_l4("job", "status", "c", env=env)
    assert res.returncode == 0 and "ingest done" in res.stdout, res.stdout
    res = run_l4("ingest", job, "--workers", "0", env=env)
    assert res.returncode == 2 and "--workers" in res.stderr


class _Throttling:
    """A tiny HTTP server that answers the first bulk request with ``status`` (429, or 503 from
    a cluster that is unavailable for a moment), the second with a per-document 429 for every
    other document, and accepts everything after that."""

    def __init__(self, status: int = 429) -> None:
        import http.server
        import threading

        self.bodies: list[list[dict[str, Any]]] = []
        outer = self
        first = status

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the stdlib's name for it
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                ops = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
                outer.bodies.append(ops)
                n = len(outer.bodies)
                if n == 1:
                    self._reply(first, {"error": {"type": "es_rejected_execution_exception"}})
                    return
                items = []
                for i, op in enumerate(ops[::2]):
                    status = 429 if n == 2 and i % 2 else 201
                    items.append({"index": {"_id": op["index"]["_id"], "status": status}})
                self._reply(200, {"took": 1, "errors": n == 2, "items": items})

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.parametrize("status", [429, 503])
def test_bulk_writes_are_retried_with_back_off_when_the_cluster_throttles(status: int) -> None:
    server = _Throttling(status)
    try:
        store = OpenSearchStore(server.url, IndexNames("l4-"), max_retries=3, retry_backoff=0.01)
        with BulkWriter(store, batch_docs=10) as writer:
            for i in range(6):
                writer.add("l4-events", f"d{i}", {"n": i})
            written = writer.close()
    finally:
        server.server.shutdown()
        server.server.server_close()
    assert written == {"l4-events": 6}
    ids = [[op["index"]["_id"] for op in ops[::2]] for ops in server.bodies]
    # The whole request again after its 429 / 503, then only the documents throttled one by one.
    assert ids == [[f"d{i}" for i in range(6)]] * 2 + [["d1", "d3", "d5"]]


def test_bulk_requests_are_sized_by_bytes() -> None:
    server = _Throttling()
    server.bodies.append([])  # past the throttled start: every request is accepted
    server.bodies.append([])
    try:
        store = OpenSearchStore(server.url, IndexNames("l4-"), retry_backoff=0.01)
        docs = [(f"d{i}", {"text": "x" * 1000}) for i in range(10)]
        assert store.bulk_index("l4-lines", docs, chunk_bytes=3000) == 10
    finally:
        server.server.shutdown()
        server.server.server_close()
    sizes = [len(ops) // 2 for ops in server.bodies[2:]]
    assert sum(sizes) == 10 and max(sizes) <= 3, sizes


def test_the_forkserver_preloads_the_l4_modules_the_parent_imported() -> None:
    """Workers forked from the server inherit them: their copy of the parent's main script (which
    multiprocessing runs in each of them) finds its L4 imports done."""
    preload = procs._preload()
    assert preload[0] == "l4_plugin.ingest.owners"
    assert "l4_plugin.ingest.pipeline" in preload and "l4_simulate" in preload
    assert all(m.partition(".")[0] in ("l4_plugin", "l4_simulate") for m in preload)
    # ... and, last, the one that builds a scanner's rules (never imported by L4 itself).
    assert preload[-1] == "l4_plugin.ingest.warm" and "l4_plugin.ingest.warm" not in sys.modules
    assert set(preload[:-1]) == {
        m for m in sys.modules if m.partition(".")[0] in ("l4_plugin", "l4_simulate")
    }
    assert len(preload) == len(set(preload))


def test_nodes_a_lane_keeps_on_disk_give_the_same_rollups_and_documents(
    osmem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its memory share a lane keeps the nodes it scans on disk (``spill``): read back,
    they are the same rollups and make the same documents (one lane in this process, so the
    share set here is the lane's)."""
    job = _job(tmp_path)
    streams = file_streams(discover(job))
    in_memory = scan_streams(streams, LineParser(), workers=1)
    kept, _ = _ingested(osmem_url, f"tsm-{tmp_path.name[-12:]}-l4-", job, workers=1)
    monkeypatch.setattr(owners, "HELD_BYTES", 0)
    spilled: list[int] = []
    real = spill.Spill.put

    def counted(self: spill.Spill, rollup: Any, parser: int) -> None:
        spilled.append(parser)
        real(self, rollup, parser)

    monkeypatch.setattr(spill.Spill, "put", counted)
    on_disk = scan_streams(streams, LineParser(), workers=1)
    assert len(spilled) == len(on_disk.rollups) > 1
    assert rollups_view(on_disk.rollups) == rollups_view(in_memory.rollups)
    written, _ = _ingested(osmem_url, f"tsd-{tmp_path.name[-12:]}-l4-", job, workers=1)
    assert written == kept and '"events": ["{' in kept


def test_a_restarted_job_writes_the_same_documents_on_any_lanes_and_on_dask(
    osmem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job of two attempts (attempt folders, and a launcher agent's log that holds both and is
    read as one stream per attempt: ``LogFile.attempt`` and ``.split`` travel with the lanes'
    tasks) gives the same documents, attempts and report on one lane, on two, and on a
    ``distributed.LocalCluster``."""
    from tests.cluster.test_attempts import ECC, _restarted_job

    job = _restarted_job(tmp_path / "r", second=ECC, culprit2="n1")
    monkeypatch.setattr(workers, "BATCH_FILES", 1)  # a unit per batch: both lanes get some
    name = tmp_path.name[-12:]
    one = _ingested(osmem_url, f"ta1-{name}-l4-", job, workers=1)
    written = json.loads(one[0])
    assert any(json.loads(d).get("l4.attempt") == 1 for d in written["events"])
    assert any("l4.job.attempts" in json.loads(d) for d in written["jobs"])
    assert _ingested(osmem_url, f"ta2-{name}-l4-", job, workers=2) == one
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        on_dask = _ingested(osmem_url, f"tad-{name}-l4-", job, scheduler=cluster.scheduler_address)
    assert on_dask == one
