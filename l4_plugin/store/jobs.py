"""The ``l4-jobs`` document: one typed record of a job, its reads and its optimistic update.

A job document says what the job is (id, status, configuration fingerprint), what its last
ingest found (``JobSummary``: nodes, sizes, per-template statistics), the state of its ingest
generations (``IngestState``, see :mod:`l4_plugin.store.generations`) and the service's claim on
its analysis (``AnalysisClaim``, see :mod:`l4_plugin.service.claims`). Every module that reads or
writes the document goes through this one: :class:`JobRecord` is the document
(``from_source`` / ``to_source``), :func:`get_job` and :func:`find_jobs` the reads used today,
:func:`update_job` the read-modify-write under optimistic concurrency (``if_seq_no`` /
``if_primary_term``) that ingest, the diagnosis and the service share.

Fields the record does not know (written by another tool or a newer L4) are kept in
``JobRecord.extra`` and written back unchanged, so ``to_source(from_source(s))`` loses nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from l4_plugin.errors import ConflictError
from l4_plugin.store import fields as F
from l4_plugin.store.base import Store, VersionedDoc
from l4_plugin.store.fields import source_field

_WRITE_TRIES = 8
TIMESTAMP = "@timestamp"


def job_doc_id(job_id: str) -> str:
    """The ``_id`` of a job's ``l4-jobs`` document."""
    return hashlib.sha1(job_id.encode()).hexdigest()


def _tuple(value: Any) -> tuple[Any, ...] | None:
    return tuple(value) if isinstance(value, list | tuple) else None


def _stats(value: Any) -> dict[str, tuple[int, int]] | None:
    if not isinstance(value, Mapping):
        return None
    pairs = {str(k): v for k, v in value.items() if isinstance(v, list | tuple) and len(v) == 2}
    return {k: (v[0], v[1]) for k, v in pairs.items()}


def _dict(value: Any) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, Mapping) else None


def _out(value: Any) -> Any:
    """A record value as the document holds it (tuples are JSON lists)."""
    if isinstance(value, tuple):
        return [v.to_json() if isinstance(v, AttemptSpan) else v for v in value]
    if isinstance(value, dict) and value and all(isinstance(v, tuple) for v in value.values()):
        return {k: list(v) for k, v in value.items()}
    return value


def _m(name: str, read: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """Metadata of a record attribute stored as document field ``name``, read by ``read``."""
    return {"name": name, "read": read}


class _Part:
    """Reading and writing the document fields a record part declares (``metadata['name']``)."""

    @classmethod
    def _read(cls, source: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            name = f.metadata.get("name")
            if name is None:
                continue
            value = source_field(source, name)
            read = f.metadata.get("read")
            values[f.name] = read(value) if read is not None and value is not None else value
        return values

    def _write(self, doc: dict[str, Any]) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            name = f.metadata.get("name")
            value = getattr(self, f.name)
            if name is not None and value is not None:
                doc[name] = _out(value)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The document fields this part owns."""
        return tuple(f.metadata["name"] for f in fields(cls) if "name" in f.metadata)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class AttemptSpan:
    """One attempt of a restarted job as its ingest found it (``l4.job.attempts``): the nodes
    that printed in it and the time span of its lines (ms since the epoch)."""

    attempt: int
    nodes: tuple[str, ...] = ()
    start_ts: int | None = None
    end_ts: int | None = None
    #: Whether a rank printed a progress line of its own in it (it got past start-up).
    trained: bool = False

    def add(self, node: str, first: int | None, last: int | None) -> AttemptSpan:
        """This span with a document of ``node`` from ``first`` to ``last`` counted in."""
        nodes = self.nodes if node in self.nodes else tuple(sorted((*self.nodes, node)))
        start = self.start_ts if first is None or (self.start_ts or first) < first else first
        end = self.end_ts if last is None or (self.end_ts or last) > last else last
        return AttemptSpan(self.attempt, nodes, start, end, self.trained)

    def to_json(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "attempt": self.attempt,
            "nodes": list(self.nodes),
            "start_ts": self.start_ts,
            "end_ts": self.end_ts,
            "trained": self.trained,
        }


def _spans(value: Any) -> tuple[AttemptSpan, ...] | None:
    if not isinstance(value, list | tuple):
        return None
    out = []
    for raw in value:
        if isinstance(raw, AttemptSpan):
            out.append(raw)
        elif isinstance(raw, Mapping) and isinstance(raw.get("attempt"), int):
            start, end = raw.get("start_ts"), raw.get("end_ts")
            out.append(
                AttemptSpan(
                    raw["attempt"],
                    tuple(str(n) for n in raw.get("nodes") or ()),
                    start if isinstance(start, int) else None,
                    end if isinstance(end, int) else None,
                    raw.get("trained") is True,
                )
            )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class JobSummary(_Part):
    """What the job's last complete ingest found (``l4.job.*`` sizes and statistics)."""

    nodes: tuple[str, ...] | None = field(default=None, metadata=_m(F.JOB_NODES, _tuple))
    # Nodes with a rank that printed iteration lines of its own: a node without one is quiet by
    # role (Megatron's earlier pipeline stages), not silent.
    progress_nodes: tuple[str, ...] | None = field(
        default=None, metadata=_m(F.JOB_PROGRESS_NODES, _tuple)
    )
    node_count: int | None = field(default=None, metadata=_m(F.JOB_NODE_COUNT))
    lines: int | None = field(default=None, metadata=_m(F.JOB_LINES))
    ranks: int | None = field(default=None, metadata=_m(F.JOB_RANKS))
    # Per template (occurrences, nodes): what a later diagnosis needs of this job as a baseline,
    # read with the job document instead of an aggregation over its rollups.
    template_stats: dict[str, tuple[int, int]] | None = field(
        default=None, metadata=_m(F.JOB_TEMPLATE_STATS, _stats)
    )
    iterations: int | None = field(default=None, metadata=_m(F.JOB_ITERATIONS))
    # Whether the job came with system logs, and which templates only they printed: a baseline
    # without kernel logs says nothing about a kernel line's absence.
    system_logs: bool | None = field(default=None, metadata=_m(F.JOB_SYSTEM_LOGS))
    system_templates: tuple[str, ...] | None = field(
        default=None, metadata=_m(F.JOB_SYSTEM_TEMPLATES, _tuple)
    )
    # Templates no rank's process printed (kernel, agent and the job's own files): what says
    # nothing of whether a node's training processes were still running.
    aux_templates: tuple[str, ...] | None = field(
        default=None, metadata=_m(F.JOB_AUX_TEMPLATES, _tuple)
    )
    # Files not read whole: skipped, or cut at a read limit (``cut_files``: "PATH: why").
    skipped_files: int | None = field(default=None, metadata=_m(F.JOB_SKIPPED_FILES))
    cut_files: tuple[str, ...] | None = field(default=None, metadata=_m(F.JOB_CUT_FILES, _tuple))
    start_ts: int | None = field(default=None, metadata=_m(F.JOB_START_TS))
    end_ts: int | None = field(default=None, metadata=_m(F.JOB_END_TS))
    # The Flight Recorder traces and py-spy stacks found beside the logs (``traces.JobDumps``
    # in its stored form): kept, not indexed.
    dumps: dict[str, Any] | None = field(default=None, metadata=_m(F.JOB_DUMPS, _dict))
    # A restarted job's attempts (``AttemptSpan``); None: it never restarted.
    attempts: tuple[AttemptSpan, ...] | None = field(
        default=None, metadata=_m(F.JOB_ATTEMPTS, _spans)
    )


@dataclass(frozen=True, slots=True)
class IngestState(_Part):
    """The state of the job's ingests (``l4.ingest.*``; see ``store.generations``)."""

    state: str | None = field(default=None, metadata=_m(F.INGEST_STATE))
    updated: int | None = field(default=None, metadata=_m(F.INGEST_UPDATED))
    files: int | None = field(default=None, metadata=_m(F.INGEST_FILES))
    source: str | None = field(
        default=None, metadata=_m(F.INGEST_SOURCE)
    )  # what the logs were (hash of names, sizes…)
    events_docs: int | None = field(default=None, metadata=_m(F.INGEST_EVENTS_DOCS))
    lines_docs: int | None = field(default=None, metadata=_m(F.INGEST_LINES_DOCS))
    progress: dict[str, Any] | None = field(default=None, metadata=_m(F.INGEST_PROGRESS, _dict))
    problems: str | None = field(default=None, metadata=_m(F.INGEST_PROBLEMS))
    generation: str | None = field(
        default=None, metadata=_m(F.INGEST_GENERATION)
    )  # the last complete one
    sequence: int | None = field(default=None, metadata=_m(F.INGEST_SEQUENCE))
    started: int | None = field(default=None, metadata=_m(F.INGEST_STARTED))
    writing: dict[str, Any] | None = field(default=None, metadata=_m(F.INGEST_WRITING, _dict))


@dataclass(frozen=True, slots=True)
class AnalysisClaim(_Part):
    """The service's claim on the job's analysis and its outcome (``l4.analysis.*``)."""

    state: str | None = field(default=None, metadata=_m(F.ANALYSIS_STATE))
    version: str | None = field(default=None, metadata=_m(F.ANALYSIS_VERSION))
    claimed_by: str | None = field(default=None, metadata=_m(F.ANALYSIS_CLAIMED_BY))
    lease_until: int | None = field(default=None, metadata=_m(F.ANALYSIS_LEASE_UNTIL))
    attempts: int | None = field(default=None, metadata=_m(F.ANALYSIS_ATTEMPTS))
    error: str | None = field(default=None, metadata=_m(F.ANALYSIS_ERROR))
    updated: int | None = field(default=None, metadata=_m(F.ANALYSIS_UPDATED))
    watch_checkpoint: int | None = field(default=None, metadata=_m(F.ANALYSIS_WATCH_CHECKPOINT))


@dataclass(frozen=True, slots=True)
class JobRecord(_Part):
    """The ``l4-jobs`` document of one job (see the module docstring).

    ``status`` is None when the document has none (a reader that needs one says ``unknown``);
    ``extra`` holds the fields this record does not know, written back as they were.
    """

    id: str = field(metadata={"name": F.JOB_ID, "read": str})
    status: str | None = field(default=None, metadata=_m(F.JOB_STATUS))
    fingerprint: str | None = field(default=None, metadata=_m(F.JOB_FINGERPRINT))
    config: dict[str, Any] | None = field(default=None, metadata=_m(F.JOB_CONFIG, _dict))
    # ``registered``: the document was created by ``l4 job register``
    origin: str | None = field(default=None, metadata=_m(F.JOB_SOURCE))
    registered: int | None = field(default=None, metadata=_m(F.JOB_REGISTERED))
    timestamp: int | None = field(default=None, metadata=_m(TIMESTAMP))
    purged: int | None = field(default=None, metadata=_m(F.RETENTION_PURGED))
    deleted_docs: int | None = field(default=None, metadata=_m(F.RETENTION_DELETED_DOCS))
    summary: JobSummary = field(default_factory=JobSummary)
    ingest: IngestState = field(default_factory=IngestState)
    analysis: AnalysisClaim = field(default_factory=AnalysisClaim)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_source(cls, source: Mapping[str, Any]) -> JobRecord:
        """The record of a ``_source`` (dotted keys as L4 writes them, or nested objects)."""
        values = cls._read(source)
        if values["id"] is None:
            values["id"] = ""
        known = set(_KNOWN)
        extra = {k: v for k, v in source.items() if k not in known and not _nested_known(k, v)}
        return cls(
            **values,
            summary=JobSummary(**JobSummary._read(source)),
            ingest=IngestState(**IngestState._read(source)),
            analysis=AnalysisClaim(**AnalysisClaim._read(source)),
            extra=extra,
        )

    def to_source(self) -> dict[str, Any]:
        """The document's ``_source``: dotted keys, absent values left out, ``extra`` kept."""
        doc: dict[str, Any] = {}
        self._write(doc)
        self.summary._write(doc)
        self.ingest._write(doc)
        self.analysis._write(doc)
        ordered = {k: doc[k] for k in sorted(doc, key=_ORDER.get)}  # type: ignore[arg-type]
        ordered.update(self.extra)
        return ordered

    @property
    def status_or_unknown(self) -> str:
        """``status``, or ``unknown`` for a document without one."""
        return self.status or "unknown"


# The order in which the fields appear in a written document (what ingest has always written).
_ORDER_NAMES = (
    F.JOB_ID,
    F.JOB_STATUS,
    F.JOB_FINGERPRINT,
    F.JOB_SOURCE,
    F.JOB_CONFIG,
    F.JOB_NODES,
    F.JOB_PROGRESS_NODES,
    F.JOB_NODE_COUNT,
    F.JOB_LINES,
    F.JOB_RANKS,
    F.INGEST_STATE,
    F.INGEST_UPDATED,
    F.INGEST_FILES,
    F.INGEST_SOURCE,
    F.INGEST_EVENTS_DOCS,
    F.INGEST_LINES_DOCS,
    F.JOB_REGISTERED,
    F.JOB_TEMPLATE_STATS,
    F.JOB_ITERATIONS,
    F.JOB_SYSTEM_LOGS,
    F.JOB_SYSTEM_TEMPLATES,
    F.JOB_AUX_TEMPLATES,
    F.JOB_SKIPPED_FILES,
    F.JOB_CUT_FILES,
    F.INGEST_PROGRESS,
    F.INGEST_PROBLEMS,
    TIMESTAMP,
    F.JOB_START_TS,
    F.JOB_END_TS,
    F.JOB_DUMPS,
    F.JOB_ATTEMPTS,
    *AnalysisClaim.names(),
    F.INGEST_GENERATION,
    F.INGEST_SEQUENCE,
    F.INGEST_STARTED,
    F.INGEST_WRITING,
    F.RETENTION_PURGED,
    F.RETENTION_DELETED_DOCS,
)
_ORDER = {name: i for i, name in enumerate(_ORDER_NAMES)}
_KNOWN = frozenset(
    JobRecord.names() + JobSummary.names() + IngestState.names() + AnalysisClaim.names()
)


def _nested_known(key: str, value: Any) -> bool:
    """A nested object (``{"l4": {...}}``) holding only fields the record reads: not extra."""
    if not isinstance(value, Mapping):
        return False
    return all(_nested_known(f"{key}.{k}", v) or f"{key}.{k}" in _KNOWN for k, v in value.items())


def job_identity(
    job_id: str, status: str, fingerprint: str | None, config: Mapping[str, Any] | None
) -> JobRecord:
    """The record of a job known only by what it is (no ingest, no analysis yet)."""
    return JobRecord(
        id=job_id,
        status=status,
        fingerprint=fingerprint,
        config=dict(config) if config is not None else None,
    )


# --- reads ---------------------------------------------------------------------------------------


def get_job(store: Store, job_id: str) -> JobRecord | None:
    """The job's document, or None when the job has none."""
    doc = store.get(store.names.jobs, job_doc_id(job_id))
    return JobRecord.from_source(doc.source) if doc is not None else None


def search_jobs(store: Store, body: Mapping[str, Any]) -> list[JobRecord]:
    """The documents a search body (query, size, sort) finds, in its order; none without the
    index."""
    if not store.count(store.names.jobs):
        return []
    hits = store.search(store.names.jobs, dict(body))["hits"]["hits"]
    return [JobRecord.from_source(hit["_source"]) for hit in hits]


def comparable_query(*, fingerprint: str, status: str) -> dict[str, Any]:
    """Jobs of one configuration fingerprint and status that have documents to compare with:
    neither purged by retention nor only ever begun (an ingest that never completed)."""
    return {
        "bool": {
            "filter": [
                {"term": {F.JOB_FINGERPRINT: fingerprint}},
                {"term": {F.JOB_STATUS: status}},
            ],
            "must_not": [
                {"exists": {"field": F.RETENTION_PURGED}},
                {
                    "bool": {
                        "filter": [{"exists": {"field": f"{F.INGEST_WRITING}.generation"}}],
                        "must_not": [{"exists": {"field": F.INGEST_GENERATION}}],
                    }
                },
            ],
        }
    }


def find_jobs(
    store: Store, *, fingerprint: str, status: str, exclude: Collection[str] = ()
) -> list[JobRecord]:
    """Jobs of one fingerprint and status with documents to compare with, sorted by id; those
    of ``exclude`` (jobs whose documents the caller has read already) are not read again."""
    query = comparable_query(fingerprint=fingerprint, status=status)
    if exclude:
        query["bool"]["must_not"].append({"terms": {F.JOB_ID: sorted(exclude)}})
    return sorted(search_jobs(store, {"size": 1000, "query": query}), key=lambda r: r.id)


def complete_clause() -> dict[str, Any]:
    """Jobs with a complete ingest generation (``store.generations``): what an analysis reads."""
    return {
        "bool": {
            "should": [
                {"term": {F.INGEST_STATE: "done"}},
                {"exists": {"field": F.INGEST_GENERATION}},
            ],
            "minimum_should_match": 1,
        }
    }


_REGISTERED_FIRST = [{F.JOB_REGISTERED: {"order": "asc", "unmapped_type": "date"}}]


def find_due(
    store: Store, *, max_attempts: int, analyzer_version: str, now: int, limit: int
) -> list[JobRecord]:
    """Failed jobs with a complete ingest whose analysis may be due (never analysed, released,
    a lease expired before ``now``, failed fewer than ``max_attempts`` times, or analysed by
    another analyzer version), oldest registration first; the claim decides on each."""
    state, attempts = F.ANALYSIS_STATE, F.ANALYSIS_ATTEMPTS
    query = {
        "bool": {
            "filter": [{"term": {F.JOB_STATUS: "failed"}}, complete_clause()],
            "should": [
                {"bool": {"must_not": [{"exists": {"field": state}}]}},
                {"term": {state: "pending"}},
                {
                    "bool": {
                        "filter": [
                            {"term": {state: "running"}},
                            {"range": {F.ANALYSIS_LEASE_UNTIL: {"lt": now}}},
                        ]
                    }
                },
                {
                    "bool": {
                        "filter": [
                            {"term": {state: "failed"}},
                            {"range": {attempts: {"lt": max_attempts}}},
                        ]
                    }
                },
                {
                    "bool": {
                        "filter": [{"terms": {state: ["done", "failed"]}}],
                        "must_not": [{"term": {F.ANALYSIS_VERSION: analyzer_version}}],
                    }
                },
            ],
            "minimum_should_match": 1,
        }
    }
    return search_jobs(store, {"size": limit, "query": query, "sort": _REGISTERED_FIRST})


def find_running(store: Store, *, limit: int) -> list[JobRecord]:
    """Running jobs with a complete ingest (what the service watches), oldest registration
    first."""
    query = {"bool": {"filter": [{"term": {F.JOB_STATUS: "running"}}, complete_clause()]}}
    return search_jobs(store, {"size": limit, "query": query, "sort": _REGISTERED_FIRST})


def find_ingested_before(store: Store, cutoff_ms: int, *, limit: int) -> list[JobRecord]:
    """Jobs last ingested before ``cutoff_ms`` whose documents are still there and whose
    analysis is not claimed or released (what retention may purge)."""
    query = {
        "bool": {
            "filter": [{"range": {F.INGEST_UPDATED: {"lt": cutoff_ms}}}],
            "must_not": [
                {"exists": {"field": F.RETENTION_PURGED}},
                {"terms": {F.ANALYSIS_STATE: ["running", "pending"]}},
            ],
        }
    }
    return search_jobs(store, {"size": limit, "query": query})


def get_versioned(store: Store, job_id: str) -> VersionedDoc | None:
    """The job's document with the version a conditional write (:func:`put_if_unchanged`)
    replaces; None when the job has none."""
    return store.get(store.names.jobs, job_doc_id(job_id))


# --- writes --------------------------------------------------------------------------------------


def create_job(store: Store, record: JobRecord, *, refresh: bool = False) -> VersionedDoc:
    """Write a new job document; ``ConflictError`` when the job has one already."""
    return store.put(
        store.names.jobs, job_doc_id(record.id), record.to_source(), create=True, refresh=refresh
    )


def put_if_unchanged(
    store: Store, doc: VersionedDoc, record: JobRecord, *, refresh: bool = False
) -> VersionedDoc:
    """Write ``record`` over ``doc`` only if the document is still the version read
    (``ConflictError`` otherwise)."""
    return store.put(
        store.names.jobs,
        doc.id,
        record.to_source(),
        if_seq_no=doc.seq_no,
        if_primary_term=doc.primary_term,
        refresh=refresh,
    )


def put_progress(store: Store, identity: JobRecord, progress: Mapping[str, Any]) -> None:
    """Write an ingest's progress into its job document, leaving every other field as it is
    (a new job gets ``identity``'s id and status with ``l4.ingest.state: running``); a concurrent
    write wins: the next report has it."""
    existing = store.get(store.names.jobs, job_doc_id(identity.id))
    try:
        if existing is None:
            fresh = JobRecord(
                id=identity.id,
                status=identity.status,
                ingest=IngestState(state="running", progress=dict(progress)),
            )
            create_job(store, fresh)
        else:
            record = JobRecord.from_source(existing.source)
            ingest = replace(record.ingest, progress=dict(progress))
            put_if_unchanged(store, existing, replace(record, ingest=ingest))
    except ConflictError:
        pass  # the job was registered or written meanwhile


def update_job(
    store: Store,
    job_id: str,
    change: Callable[[dict[str, Any]], dict[str, Any] | None],
) -> VersionedDoc | None:
    """Read-modify-write of a job's document under optimistic concurrency, on its ``_source``.

    ``change`` gets a copy of the current source and returns the new one, or None to leave the
    document alone; on a conflict the document is read again and ``change`` asked again. Returns
    the written document, or None when the job is absent or ``change`` declined.
    """
    for _ in range(_WRITE_TRIES):
        doc = store.get(store.names.jobs, job_doc_id(job_id))
        if doc is None:
            return None
        new = change(dict(doc.source))
        if new is None:
            return None
        try:
            return store.put(
                store.names.jobs,
                doc.id,
                new,
                if_seq_no=doc.seq_no,
                if_primary_term=doc.primary_term,
                refresh=True,
            )
        except ConflictError:
            continue
    raise ConflictError(
        f"write {store.names.jobs}/{job_doc_id(job_id)} (job {job_id}): still conflicting after "
        f"{_WRITE_TRIES} tries"
    )


def record_purge(store: Store, job_id: str, *, deleted: int, now: int) -> None:
    """Record on the job's document that retention deleted its ``deleted`` documents."""

    def change(source: dict[str, Any]) -> dict[str, Any]:
        source[F.RETENTION_PURGED] = now
        source[F.RETENTION_DELETED_DOCS] = deleted
        return source

    update_job(store, job_id, change)


def update_record(
    store: Store, job_id: str, change: Callable[[JobRecord], JobRecord | None]
) -> JobRecord | None:
    """:func:`update_job` on the typed record: ``change`` returns the new record or None."""

    def on_source(source: dict[str, Any]) -> dict[str, Any] | None:
        new = change(JobRecord.from_source(source))
        return new.to_source() if new is not None else None

    written = update_job(store, job_id, on_source)
    return JobRecord.from_source(written.source) if written is not None else None


__all__ = [
    "AnalysisClaim",
    "IngestState",
    "JobRecord",
    "JobSummary",
    "comparable_query",
    "complete_clause",
    "create_job",
    "find_due",
    "find_ingested_before",
    "find_jobs",
    "find_running",
    "get_job",
    "get_versioned",
    "job_doc_id",
    "job_identity",
    "put_if_unchanged",
    "put_progress",
    "record_purge",
    "search_jobs",
    "update_job",
    "update_record",
]
