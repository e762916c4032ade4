"""``l4 ingest --from-index``: raw lines that a platform already ships (Filebeat, Fluent Bit).

Many platforms ship every line of a job into their own indices, one document per line with the
line in ``message`` and the job, node and (often) rank in fields attached by the shipper (see
``ingest/filebeat.yml``, ``ingest/fluent-bit.conf``). This module turns such an index back into
``LogStream`` s — one per (node, file, rank) — so ``pipeline.ingest_streams`` produces exactly the
rollups a file ingest of the same files produces.

Reading: a composite aggregation lists the job's files, then each file is read in file order with
point in time + ``search_after`` (scroll where the cluster has no PIT). Within a file the order is
the byte offset (``log.offset``, set by Filebeat, or by Fluent Bit's ``Offset_Key``) when the
index has it, then the timestamp: a shipper's ``@timestamp`` is the time it *read* the line, with
ties at millisecond resolution, so only the offset reproduces the file order exactly.
A message holding several lines (a shipper's multiline join) is split back into its lines.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from l4_plugin.errors import IngestError
from l4_plugin.ingest.jobdir import STATUSES, JobMeta, fingerprint
from l4_plugin.ingest.pipeline import IngestSummary, Progress, ingest_streams
from l4_plugin.ingest.reader import Block
from l4_plugin.ingest.sources import LogStream
from l4_plugin.jobid import check_job_id
from l4_plugin.store import Store
from l4_plugin.store import fields as F
from l4_plugin.store.fields import source_field

PAGE_SIZE = 5000
PIT_KEEP_ALIVE = "5m"  # renewed by every page; covers the write phase between the two --full passes
_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RawFields:
    """Field names of a raw-log index (defaults: what ``ingest/filebeat.yml`` writes).

    ``rank`` None: the rank comes from the file name (``rank3.log``), as for a job directory.
    ``path`` / ``offset`` may be absent from the index: then one stream per (node, rank) and
    timestamp order.
    """

    job: str = F.JOB_ID
    node: str = "host.name"
    rank: str | None = F.RANK
    message: str = "message"
    timestamp: str = "@timestamp"
    path: str | None = "log.file.path"
    offset: str | None = "log.offset"


def resolve_fields(store: Store, pattern: str, fields: RawFields) -> RawFields:
    """Check the fields against the index mapping; use ``F.keyword`` where ``F`` is text.

    Job and node must exist; rank, path, offset and timestamp are optional and dropped when the
    index has no such field. Raises ``IngestError`` naming the pattern and the field.
    """
    wanted = [fields.job, fields.node, fields.message, fields.timestamp]
    wanted += [f for f in (fields.rank, fields.path, fields.offset) if f]
    types = store.field_types(pattern, [*wanted, *(f"{f}.keyword" for f in wanted)])
    if not types:
        raise IngestError(f"no index matches --from-index {pattern!r} (or it has no fields)")

    def keyword(name: str | None, what: str, required: bool) -> str | None:
        if name is None:
            return None
        have = types.get(name, set())
        if have and not have <= {"text", "match_only_text"}:
            return name
        if "keyword" in types.get(f"{name}.keyword", set()):
            return f"{name}.keyword"
        if required and have:
            raise IngestError(
                f"--{what}-field {name!r} of {pattern!r} is a text field without a .keyword "
                "sub-field; map it as keyword"
            )
        if required:
            raise IngestError(f"--{what}-field {name!r} is not a field of {pattern!r}")
        return None

    if fields.message not in types:
        raise IngestError(f"--message-field {fields.message!r} is not a field of {pattern!r}")
    return replace(
        fields,
        job=keyword(fields.job, "job", True) or fields.job,
        node=keyword(fields.node, "node", True) or fields.node,
        rank=keyword(fields.rank, "rank", False),
        path=keyword(fields.path, "path", False),
        offset=fields.offset if fields.offset in types else None,
        timestamp=fields.timestamp if fields.timestamp in types else "",
    )


def job_ids(store: Store, pattern: str, fields: RawFields) -> list[str]:
    """Every job id present in the raw index (``fields`` already resolved)."""
    buckets = store.composite(pattern, [{"job": {"terms": {"field": fields.job}}}])
    return [str(b["key"]["job"]) for b in buckets]


def index_streams(
    store: Store, pattern: str, fields: RawFields, job_id: str, pit_id: str | None
) -> tuple[list[LogStream], str]:
    """The job's files as streams (sorted like a job directory's) and their generation.

    The generation hashes every file's line count and last offset/timestamp: lines shipped since
    the last ingest change it, so the stale documents of the shorter copy are replaced.
    """
    sources: list[dict[str, Any]] = [{"node": {"terms": {"field": fields.node}}}]
    if fields.path:
        sources.append({"path": {"terms": {"field": fields.path, "missing_bucket": True}}})
    if fields.rank:
        sources.append({"rank": {"terms": {"field": fields.rank, "missing_bucket": True}}})
    aggs: dict[str, Any] = {}
    if fields.offset:
        aggs["last_offset"] = {"max": {"field": fields.offset}}
    if fields.timestamp:
        aggs["last_ts"] = {"max": {"field": fields.timestamp}}
    query = {"term": {fields.job: job_id}}
    h = hashlib.sha1()
    found: list[tuple[str, str | None, Any]] = []
    for b in store.composite(pattern, sources, query=query, aggs=aggs or None):
        key = b["key"]
        found.append((str(key["node"]), key.get("path"), key.get("rank")))
        extra = [b.get(a, {}).get("value") for a in ("last_offset", "last_ts")]
        h.update(json.dumps([key, b["doc_count"], extra], sort_keys=True, default=str).encode())
    streams: list[LogStream] = []
    for node, path, rank_value in found:
        rank = _rank(rank_value, path)
        filters: list[dict[str, Any]] = [query, {"term": {fields.node: node}}]
        must_not: list[dict[str, Any]] = []
        for field, value in ((fields.path, path), (fields.rank, rank_value)):
            if field:
                if value is None:
                    must_not.append({"exists": {"field": field}})
                else:
                    filters.append({"term": {field: value}})
        body: dict[str, Any] = {
            "query": {"bool": {"filter": filters, "must_not": must_not}},
            "sort": _sort(fields),
            "_source": [f for f in (fields.message, fields.offset) if f],
        }
        name = path if path else f"{node}/rank{rank}" if rank is not None else node
        streams.append(
            LogStream(node, rank, str(name), _reader(store, pattern, body, fields, pit_id))
        )
    streams.sort(
        key=lambda s: (s.node, s.rank is None, s.rank if s.rank is not None else -1, s.path)
    )
    return streams, h.hexdigest()[:16]


def _sort(fields: RawFields) -> list[dict[str, Any]]:
    sort: list[dict[str, Any]] = []
    if fields.offset:
        sort.append({fields.offset: {"order": "asc", "missing": "_first"}})
    if fields.timestamp:
        sort.append({fields.timestamp: {"order": "asc"}})
    return sort


def _rank(value: Any, path: str | None) -> int | None:
    if value is not None:
        try:
            return int(value)
        except (TypeError, ValueError):
            pass
    if path:
        m = _RANK.search(path.rsplit("/", 1)[-1])
        if m:
            return int(m.group(1))
    return None


def _reader(
    store: Store, pattern: str, body: dict[str, Any], fields: RawFields, pit_id: str | None
) -> Callable[[], Iterator[Block]]:
    def blocks() -> Iterator[Block]:
        lines: list[str] = []
        offsets: list[int | None] = []
        pages = store.search_after(
            pattern, body, page_size=PAGE_SIZE, keep_alive=PIT_KEEP_ALIVE, pit_id=pit_id
        )
        for hit in pages:
            src = hit.get("_source", {})
            message = source_field(src, fields.message)
            text = "" if message is None else str(message)
            offset = source_field(src, fields.offset) if fields.offset else None
            at = int(offset) if isinstance(offset, int | float) else None
            if "\r" in text:
                text = text.replace("\r", "")
            if "\x00" in text:
                text = text.replace("\x00", "")
            if text.endswith("\n"):
                text = text[:-1]
            for part in text.split("\n"):
                lines.append(part)
                offsets.append(at)
                if at is not None:
                    at += len(part.encode("utf-8", "replace")) + 1
            if len(lines) >= PAGE_SIZE:
                yield Block(lines, offsets=offsets)
                lines, offsets = [], []
        if lines:
            yield Block(lines, offsets=offsets)

    return blocks


def ingest_index(
    store: Store,
    pattern: str,
    fields: RawFields,
    *,
    job_id: str | None = None,
    status: str | None = None,
    config: dict[str, str] | None = None,
    baseline_templates: set[str] | None = None,
    full: bool = False,
    progress: Progress | None = None,
) -> list[IngestSummary]:
    """Ingest one job (``job_id``) or every job of a raw-log index; one summary per job."""
    st = (status or "unknown").lower()
    if st not in STATUSES:
        raise IngestError(f"invalid job status — {st!r} — one of {', '.join(STATUSES)}")
    resolved = resolve_fields(store, pattern, fields)
    ids = [job_id] if job_id is not None else job_ids(store, pattern, resolved)
    if not ids:
        raise IngestError(f"no jobs in {pattern!r}: no document has a {fields.job!r} field")
    flat = dict(config or {})
    summaries: list[IngestSummary] = []
    for jid in ids:
        jid = check_job_id(jid, "--job-id" if job_id else f"{pattern} {fields.job}", IngestError)
        # One point in time per job: both passes of --full read the same snapshot.
        pit_id = store.open_pit(pattern, PIT_KEEP_ALIVE)
        try:
            streams, generation = index_streams(store, pattern, resolved, jid, pit_id)
            if not streams:
                raise IngestError(f"no lines of job {jid!r} in {pattern!r} ({resolved.job}={jid})")
            meta = JobMeta(jid, st, flat, fingerprint(flat))
            summaries.append(
                ingest_streams(
                    store,
                    meta,
                    streams,
                    generation,
                    where=f"{pattern} ({resolved.job}={jid})",
                    baseline_templates=baseline_templates,
                    full=full,
                    progress=progress,
                )
            )
        finally:
            if pit_id is not None:
                store.close_pit(pit_id)
    return summaries
