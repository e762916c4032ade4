"""The reads and the optimistic update of ``store/jobs.py`` against a real osmem-server."""

from __future__ import annotations

from dataclasses import replace

import pytest

from l4_plugin.errors import ConflictError
from l4_plugin.store import Store, jobs
from l4_plugin.store import fields as F
from l4_plugin.store.jobs import IngestState, JobRecord, job_doc_id


def test_create_get_find_and_update(store: Store) -> None:
    assert jobs.get_job(store, "a") is None
    assert jobs.find_jobs(store, fingerprint="fp", status="succeeded") == []
    for job_id in ("b", "a"):
        record = replace(
            jobs.job_identity(job_id, "succeeded", "fp", {"k": "v"}),
            ingest=IngestState(state="done", generation="00000001.abcdef"),
        )
        jobs.create_job(store, record, refresh=True)
    with pytest.raises(ConflictError):
        jobs.create_job(store, JobRecord(id="a"))
    got = jobs.get_job(store, "a")
    assert got is not None and got.config == {"k": "v"} and got.ingest.generation
    assert [r.id for r in jobs.find_jobs(store, fingerprint="fp", status="succeeded")] == ["a", "b"]
    # A purged job, and one whose only ingest never completed, have nothing to compare with.
    jobs.update_record(store, "b", lambda r: replace(r, purged=1))
    jobs.create_job(
        store,
        replace(
            jobs.job_identity("c", "succeeded", "fp", {}),
            ingest=IngestState(state="writing", writing={"generation": "00000001.aaaaaa"}),
        ),
        refresh=True,
    )
    assert [r.id for r in jobs.find_jobs(store, fingerprint="fp", status="succeeded")] == ["a"]
    # update_record changes what it is asked to; declining writes nothing.
    written = jobs.update_record(store, "a", lambda r: replace(r, status="failed"))
    assert written is not None and written.status == "failed" and written.config == {"k": "v"}
    assert jobs.update_record(store, "a", lambda r: None) is None
    assert jobs.update_record(store, "nope", lambda r: r) is None


def test_put_if_unchanged_and_progress(store: Store) -> None:
    jobs.put_progress(store, JobRecord(id="p", status="failed"), {"files": 2})
    record = jobs.get_job(store, "p")
    assert record is not None and record.ingest.state == "running"
    assert record.ingest.progress == {"files": 2}
    doc = store.get(store.names.jobs, job_doc_id("p"))
    assert doc is not None
    jobs.put_if_unchanged(store, doc, replace(record, fingerprint="x"), refresh=True)
    with pytest.raises(ConflictError):  # the version read is gone
        jobs.put_if_unchanged(store, doc, record)
    jobs.put_progress(store, JobRecord(id="p"), {"files": 3})
    again = jobs.get_job(store, "p")
    assert again is not None and again.fingerprint == "x" and again.status == "failed"
    assert again.ingest.progress == {"files": 3}
    raw = store.get(store.names.jobs, job_doc_id("p"))
    assert raw is not None and raw.source[F.JOB_STATUS] == "failed"
