"""``l4-annotations``: the one place that writes and reads what a diagnosis concludes.

One document per finding (ARCHITECTURE.md, *Documents*), its ``_id`` derived from the job, the
kind and what the finding is about, so re-analysing a job overwrites its annotations; a write
then deletes the job's annotations it did not produce (of one kind, for the service's watch of a
running job, which writes rule matches only), so the index holds exactly the latest analysis.
The ``summary`` annotation carries the whole report (``details``), which ``l4 report`` reads.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from l4_plugin.records import Finding
from l4_plugin.store import fields as F
from l4_plugin.store.base import Store
from l4_plugin.store.fields import source_field


@dataclass(frozen=True, slots=True)
class Annotation:
    """A finding and what its document says besides: the template's text, a Discover link,
    the matched rule's title, category and severity, and free ``details``."""

    finding: Finding
    template_text: str | None = None
    discover_url: str | None = None
    rule: Mapping[str, str] | None = None
    details: Mapping[str, Any] | None = None


def annotation_id(job_id: str, kind: str, key: str) -> str:
    """Deterministic ``_id`` of the annotation about ``key`` (a template, node, rule…) of a job."""
    return hashlib.sha1(f"{job_id}\x1f{kind}\x1f{key}".encode()).hexdigest()


def annotation_document(
    annotation: Annotation, *, analyzer_version: str, created_ms: int
) -> dict[str, Any]:
    """The ``l4-annotations`` source of one annotation (dotted ECS / ``l4.*`` keys)."""
    finding = annotation.finding
    doc: dict[str, Any] = {
        "@timestamp": created_ms,
        "message": finding.explanation[:8191],
        F.JOB_ID: finding.job_id,
        F.ANNOTATION_KIND: finding.kind,
        F.ANNOTATION_KEY: finding.key,
        F.ANNOTATION_SCORE: float(finding.score),
        F.ANNOTATION_RANK: int(finding.rank),
        F.ANNOTATION_REASONS: list(finding.reasons),
        F.ANNOTATION_NODES: list(finding.nodes),
        F.ANALYZER_VERSION: analyzer_version,
        F.REVIEW_STATE: finding.review,
    }
    if finding.nodes:
        doc["host.name"] = finding.nodes[0]
    if finding.template_id is not None:
        doc[F.TEMPLATE_ID] = finding.template_id
    if annotation.template_text is not None:
        doc[F.TEMPLATE_TEXT] = annotation.template_text[:8191]
    if finding.iteration is not None:
        doc[F.ITERATION] = finding.iteration
    if finding.stage is not None:
        doc[F.STAGE] = finding.stage
    if finding.rule_id is not None:
        doc[F.RULE_ID] = finding.rule_id
        for key, value in (annotation.rule or {}).items():
            doc[f"{F.RULE}.{key}"] = value
    if annotation.discover_url:
        doc[F.ANNOTATION_DISCOVER_URL] = annotation.discover_url
    if annotation.details:
        doc[F.ANNOTATION_DETAILS] = dict(annotation.details)
    return doc


def write_annotations(
    store: Store,
    job_id: str,
    annotations: Sequence[Annotation],
    *,
    analyzer_version: str,
    only_kind: str | None = None,
) -> int:
    """Write a job's annotations and delete its others (of ``only_kind``, if given) that this
    write did not produce; returns the documents written."""
    now = int(time.time() * 1000)
    docs = [
        (
            annotation_id(job_id, a.finding.kind, a.finding.key),
            annotation_document(a, analyzer_version=analyzer_version, created_ms=now),
        )
        for a in annotations
    ]
    index = store.names.annotations
    written = store.bulk_index(index, docs, refresh=True) if docs else 0
    scope: list[dict[str, Any]] = [{"term": {F.JOB_ID: job_id}}]
    if only_kind is not None:
        scope.append({"term": {F.ANNOTATION_KIND: only_kind}})
    store.delete_by_query(
        index, {"bool": {"filter": scope, "must_not": [{"ids": {"values": [d for d, _ in docs]}}]}}
    )
    store.refresh(index)
    return written


def read_details(store: Store, job_id: str, kind: str, key: str) -> Mapping[str, Any] | None:
    """The ``details`` of one annotation of a job (None when there is no such annotation)."""
    doc = store.get(store.names.annotations, annotation_id(job_id, kind, key))
    if doc is None:
        return None
    return source_field(doc.source, F.ANNOTATION_DETAILS) or {}


def annotated_rules(store: Store, job_id: str) -> set[str]:
    """The rules whose match the job's annotations hold."""
    index = store.names.annotations
    if not store.count(index):
        return set()
    body = {
        "size": 1000,
        "_source": [F.RULE_ID],
        "query": {
            "bool": {
                "filter": [
                    {"term": {F.JOB_ID: job_id}},
                    {"term": {F.ANNOTATION_KIND: "rule_match"}},
                ]
            }
        },
    }
    hits = store.search(index, body)["hits"]["hits"]
    return {str(source_field(h["_source"], F.RULE_ID)) for h in hits}
