"""One ``l4 diagnose`` reads each thing once and passes it down (issue 33, *one diagnosis path*).

Counted in this process while ``l4 diagnose JOB --baseline B1 --baseline B2`` runs on a job that
grew since its last diagnosis: each ``job.yaml`` is opened once, each job directory is listed
once, and each job's ``l4-jobs`` document is read once to know the job; the only other reads of
a document are those of the ingest's conditional writes (each write reads the version it
replaces, ``store.jobs.update_job``), so a job's reads are one plus its writes.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from l4_plugin.cli import main
from l4_plugin.config import Settings
from l4_plugin.ingest import jobdir
from l4_plugin.store import OpenSearchStore
from l4_plugin.store.jobs import job_doc_id
from l4_simulate import simulate


class Reads:
    """What one run read, by file, directory and job document."""

    def __init__(self) -> None:
        self.opened: Counter[str] = Counter()  # job.yaml files, by their directory
        self.scans: Counter[str] = Counter()  # jobdir.scan calls, by job directory
        self.listed: Counter[str] = Counter()  # Path.rglob over a job directory
        self.got: Counter[str] = Counter()  # get of an l4-jobs document, by job id
        self.found: Counter[str] = Counter()  # an l4-jobs search hit, by job id
        self.written: Counter[str] = Counter()  # writes of an l4-jobs document, by job id

    def clear(self) -> None:
        for counter in vars(self).values():
            counter.clear()


def _patch_everywhere(monkeypatch: pytest.MonkeyPatch, original: Any, wrapper: Any) -> None:
    """Replace ``original`` in every ``l4_plugin`` module that holds it, whatever its name."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("l4_plugin") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                monkeypatch.setattr(module, attr, wrapper)


def _path(value: Any) -> str:
    try:
        return str(Path(os.fspath(value)).resolve())
    except TypeError:
        return ""


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    seen = Reads()
    real_open, real_rglob, real_scan = builtins.open, Path.rglob, jobdir.scan

    def counted_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if _path(file).endswith("/job.yaml"):
            seen.opened[str(Path(_path(file)).parent)] += 1
        return real_open(file, *args, **kwargs)

    def counted_rglob(self: Path, pattern: str, *args: Any, **kwargs: Any) -> Any:
        seen.listed[_path(self)] += 1
        return real_rglob(self, pattern, *args, **kwargs)

    def counted_scan(job_dir: Path, *args: Any, **kwargs: Any) -> Any:
        seen.scans[_path(job_dir)] += 1
        return real_scan(job_dir, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counted_open)
    monkeypatch.setattr(io, "open", counted_open)
    monkeypatch.setattr(Path, "rglob", counted_rglob)
    _patch_everywhere(monkeypatch, real_scan, counted_scan)
    yield seen


@pytest.fixture
def counted_store(monkeypatch: pytest.MonkeyPatch, reads: Reads) -> Callable[[str], None]:
    """Count every read and write of an ``l4-jobs`` document by the store of prefix ``p``."""
    real_get, real_search, real_put = (
        OpenSearchStore.get,
        OpenSearchStore.search,
        OpenSearchStore.put,
    )
    ids: dict[str, str] = {}

    def watch(job_ids: str) -> None:
        ids.update({job_doc_id(j): j for j in job_ids.split()})

    def get(self: OpenSearchStore, index: str, doc_id: str) -> Any:
        if index == self.names.jobs:
            reads.got[ids.get(doc_id, doc_id)] += 1
        return real_get(self, index, doc_id)

    def search(self: OpenSearchStore, index: str, body: dict[str, Any], **kwargs: Any) -> Any:
        answer = real_search(self, index, body, **kwargs)
        if index == self.names.jobs:
            for hit in answer.get("hits", {}).get("hits", []):
                reads.found[str(hit.get("_source", {}).get("l4.job.id"))] += 1
        return answer

    def put(self: OpenSearchStore, index: str, doc_id: str, *args: Any, **kwargs: Any) -> Any:
        if index == self.names.jobs:
            reads.written[ids.get(doc_id, doc_id)] += 1
        return real_put(self, index, doc_id, *args, **kwargs)

    monkeypatch.setattr(OpenSearchStore, "get", get)
    monkeypatch.setattr(OpenSearchStore, "search", search)
    monkeypatch.setattr(OpenSearchStore, "put", put)
    return watch


def _job_id(job_dir: Path) -> str:
    for line in (job_dir / "job.yaml").read_text("utf-8").splitlines():
        if line.startswith("id:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise AssertionError(f"no id in {job_dir / 'job.yaml'}")


def test_one_diagnosis_of_a_grown_job_reads_each_thing_once(
    tmp_path: Path,
    settings: Settings,
    reads: Reads,
    counted_store: Callable[[str], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    simulate(tmp_path / "sim", nodes=4, iterations=30, fault="nccl-ib-error", seed=3)
    job = tmp_path / "sim" / "job"
    bases = sorted((tmp_path / "sim" / "baselines").iterdir())
    dirs = [job, *bases]
    ids = {d: _job_id(d) for d in dirs}
    counted_store(" ".join(ids.values()))
    out = tmp_path / "r.json"
    argv = ["--es-url", settings.es_url, "--index-prefix", settings.index_prefix, "diagnose"]
    argv += [str(job), *(a for b in bases for a in ("--baseline", str(b))), "--json", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    first = json.loads(out.read_text("utf-8"))
    assert first["baseline_jobs"] == sorted(ids[b] for b in bases)

    # The job grows (a running job's logs): one rank's log prints its last line once more.
    log = sorted(job.glob("*-rank0.log"))[0]
    with log.open("a", encoding="utf-8") as fh:
        fh.write(log.read_text("utf-8").splitlines()[-1] + "\n")
    reads.clear()
    assert main(argv) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert f"{ids[job]}: ingested" in err and "already in the cluster" in err

    for d in dirs:
        where = str(d.resolve())
        assert reads.opened[where] == 1, f"job.yaml of {d.name} opened {reads.opened[where]}x"
        assert reads.scans[where] == 1, f"{d.name} scanned {reads.scans[where]}x"
        assert reads.listed[where] == 1, f"{d.name} listed {reads.listed[where]}x"
        job_id = ids[d]
        # Read once to know the job; every other read is the one a conditional write makes.
        assert reads.got[job_id] == 1 + reads.written[job_id], (job_id, reads.got, reads.written)
        assert reads.found[job_id] == 0, f"{job_id} read again by a search"
    assert reads.written[ids[job]] >= 2  # the re-ingest began and completed
    assert all(reads.written[ids[b]] == 0 for b in bases)  # unchanged: not written
    assert json.loads(out.read_text("utf-8"))["baseline_jobs"] == first["baseline_jobs"]
