"""Ingest generations: which of a job's documents are a complete ingest, and which to ignore.

Every ingest of a job writes a new *generation*: its rollups and kept lines carry
``l4.generation`` and have it in their ``_id`` (with the job and what the document is about), so a
re-ingest never overwrites the documents of the complete generation it replaces. The job's
``l4-jobs`` document says which generation is complete:

=========================  ========================================================================
``l4.ingest.state``        ``done`` (the last ingest completed) or ``writing`` (an ingest began and
                           has not completed: it is running, or it died)
``l4.ingest.generation``   the last complete generation: the only one anything reads
``l4.ingest.writing.*``    the generation being written: ``generation``, ``started``, ``files``,
                           ``owner`` (host:pid)
``l4.ingest.sequence``     how many ingests began: orders generations (``00000007.3fa2c1``)
=========================  ========================================================================

``begin`` and ``complete`` are conditional writes of the job document (``update_job``), so the
switch from one complete generation to the next is one atomic document write. A crash before it
leaves the old generation complete and readable; a crash after it leaves the new one. What a dead
ingest wrote is never read (readers filter on the complete generation, :func:`scope`) and is
deleted by the next ingest of the job: ``begin`` deletes the job's generations older than its own
other than the complete one, ``complete`` deletes every older generation. Liveness is never
guessed: the newest ``begin`` wins, so an older ingest still running when a newer one began finds
at its ``complete`` that it was superseded, deletes what it wrote and fails.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from l4_plugin.errors import ConflictError, IngestError
from l4_plugin.store import fields as F
from l4_plugin.store.base import Store
from l4_plugin.store.fields import source_field
from l4_plugin.store.jobs import JobRecord, create_job, update_job

STATE = F.INGEST_STATE
GENERATION = F.INGEST_GENERATION
SOURCE = F.INGEST_SOURCE
SEQUENCE = F.INGEST_SEQUENCE
WRITING = F.INGEST_WRITING
DOC_FIELD = F.GENERATION
# A generation that matches no document: the scope of a job with no complete ingest.
_NONE = "-"

Query = dict[str, Any]


def complete_generation(source: Mapping[str, Any]) -> str | None:
    """The job's last complete generation (None: no ingest of it ever completed)."""
    value = source_field(source, GENERATION)
    return str(value) if value else None


def writing(source: Mapping[str, Any]) -> dict[str, Any] | None:
    """The generation being written (``generation``, ``started``, ``files``, ``owner``), if any.

    The record itself says so, not ``l4.ingest.state`` (which other writers of the job document,
    e.g. progress reports, may set): ``complete`` removes it.
    """
    value = source_field(source, WRITING)
    return dict(value) if isinstance(value, Mapping) else None


def scope(job_id: str, source: Mapping[str, Any] | None) -> Query:
    """The clause that restricts ``l4-events`` / ``l4-lines`` to the job's complete generation.

    ``source`` is the job's ``l4-jobs`` document (None when there is none). Without a complete
    generation: nothing when an ingest began (``writing``), else every document of the job
    (documents written by hand, e.g. a rule's embedded tests).
    """
    job = {"term": {F.JOB_ID: job_id}}
    generation = complete_generation(source) if source is not None else None
    if generation is None and source is not None and _begun(source):
        generation = _NONE
    if generation is None:
        return job
    return {"bool": {"filter": [job, {"term": {DOC_FIELD: generation}}]}}


def _begun(source: Mapping[str, Any]) -> bool:
    """An ingest began on this job (it may not have completed)."""
    return writing(source) is not None or source_field(source, STATE) not in (None, "done")


def _older(
    job_id: str, generation: str, *, keep: str | None = None, old: str | None = None
) -> Query:
    """Documents of the job written by generations that began before ``generation``, except
    ``keep``; ``old`` is the complete generation ``generation`` replaces (an ingest by an L4
    before generations were ordered named it by a hash, which does not sort)."""
    should: list[Query] = [{"range": {DOC_FIELD: {"lt": generation}}}]
    if old is not None:
        should.append(_is(old))
    must_not = [_is(generation)] + ([_is(keep)] if keep is not None else [])
    return {
        "bool": {
            "filter": [{"term": {F.JOB_ID: job_id}}],
            "must_not": must_not,
            "should": should,
            "minimum_should_match": 1,
        }
    }


def _delete(store: Store, query: Query) -> int:
    """Delete the matching documents of ``l4-events`` and ``l4-lines`` (a count first: most
    calls find nothing, and a delete-by-query refreshes the index twice)."""
    return sum(
        store.delete_by_query(index, query)
        for index in (store.names.events, store.names.lines)
        if store.count(index, query)
    )


def begin(store: Store, job_id: str, *, files: int, new_job: Mapping[str, Any]) -> str:
    """Record that an ingest of ``job_id`` starts writing; returns its generation.

    ``new_job`` are the fields of a job document created now (the job's first ingest). What dead
    ingests of the job left behind (older generations, not the complete one) is deleted.
    """
    now = int(time.time() * 1000)
    picked: list[str] = []
    kept: list[str | None] = [None]

    def change(source: dict[str, Any]) -> dict[str, Any]:
        kept[0] = complete_generation(source)
        sequence = int(source_field(source, SEQUENCE) or 0) + 1
        generation = f"{sequence:08d}.{secrets.token_hex(3)}"
        picked[:] = [generation]
        source[STATE] = "writing"
        source[SEQUENCE] = sequence
        source[WRITING] = {
            "generation": generation,
            "started": now,
            "files": files,
            "owner": f"{socket.gethostname()}:{os.getpid()}",
        }
        return source

    if update_job(store, job_id, change) is None:
        fresh = change({**new_job, F.JOB_REGISTERED: now})
        try:
            create_job(store, JobRecord.from_source(fresh), refresh=True)
        except ConflictError:  # created meanwhile (a registration, another ingest)
            update_job(store, job_id, change)
    generation = picked[0]
    _delete(store, _older(job_id, generation, keep=kept[0]))
    return generation


def complete(
    store: Store,
    job_id: str,
    generation: str,
    build: Callable[[dict[str, Any]], dict[str, Any]],
) -> JobRecord:
    """Make ``generation`` the job's complete one, then delete every older generation; returns
    the job document as written.

    ``build`` gets the current job document and returns the new one (ingest's summary of the
    generation, with what it keeps of the old document). ``IngestError`` when a newer ingest of
    the job began meanwhile: this generation's documents are deleted, the newer one wins.
    """
    superseded: list[dict[str, Any]] = []
    replaced: list[str | None] = [None]

    def change(source: dict[str, Any]) -> dict[str, Any] | None:
        superseded.clear()
        replaced[0] = complete_generation(source)
        mine = writing(source)
        if mine is None or mine.get("generation") != generation:
            superseded.append(mine or {})
            return None
        new = build(source)
        new[STATE] = "done"
        new[GENERATION] = generation
        new[SEQUENCE] = source_field(source, SEQUENCE)
        new[F.INGEST_STARTED] = mine.get("started")
        new.pop(WRITING, None)
        return new

    doc = update_job(store, job_id, change)
    if doc is None:
        _delete(store, {"bool": {"filter": [{"term": {F.JOB_ID: job_id}}, _is(generation)]}})
        other = superseded[0].get("generation") if superseded else None
        raise IngestError(
            f"ingest of job {job_id!r} superseded: a newer ingest of it "
            + (f"(generation {other}) " if other else "")
            + "began while this one was writing; what this one wrote was deleted"
        )
    _delete(store, _older(job_id, generation, old=replaced[0]))
    return JobRecord.from_source(doc.source)


def purge(store: Store, job_id: str) -> int:
    """Delete every rollup and kept line of the job, of any generation (retention); returns how
    many documents went. The job document says so (``jobs.record_purge``)."""
    query = {"term": {F.JOB_ID: job_id}}
    indices = (store.names.events, store.names.lines)
    return sum(store.delete_by_query(index, query) for index in indices)


def sweep(store: Store, job_id: str, source: Mapping[str, Any]) -> int:
    """Delete what generations older than the complete one left (an ingest that died after
    its ``complete`` write, before its clean-up); returns how many documents went."""
    generation = complete_generation(source)
    if generation is None or writing(source) is not None:
        return 0
    return _delete(store, _older(job_id, generation))


def _is(generation: str) -> Query:
    return {"term": {DOC_FIELD: generation}}
