"""Index documents built from the shared records: the one place that knows the annotation layout.

``l4-annotations`` (ARCHITECTURE.md, *Documents*): one document per finding, ``_id`` derived
from the job, the kind and what the finding is about, so re-analysing a job overwrites its
annotations.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from l4_plugin.records import Finding
from l4_plugin.store import fields as F


def job_doc_id(job_id: str) -> str:
    """The ``_id`` of a job's ``l4-jobs`` document."""
    return hashlib.sha1(job_id.encode()).hexdigest()


def source_field(source: Mapping[str, Any], name: str) -> Any:
    """A field of a ``_source``, written with dotted keys (as L4 writes) or as nested objects."""
    if name in source:
        return source[name]
    node: Any = source
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def annotation_id(job_id: str, kind: str, key: str) -> str:
    """Deterministic ``_id`` of the annotation about ``key`` (a template, node, rule…) of a job."""
    return hashlib.sha1(f"{job_id}\x1f{kind}\x1f{key}".encode()).hexdigest()


def annotation_document(
    finding: Finding,
    *,
    analyzer_version: str,
    created_ms: int,
    template_text: str | None = None,
    discover_url: str | None = None,
    rule: Mapping[str, str] | None = None,
    details: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``l4-annotations`` source of one finding (dotted ECS / ``l4.*`` keys)."""
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
    if template_text is not None:
        doc[F.TEMPLATE_TEXT] = template_text[:8191]
    if finding.iteration is not None:
        doc[F.ITERATION] = finding.iteration
    if finding.stage is not None:
        doc[F.STAGE] = finding.stage
    if finding.rule_id is not None:
        doc[F.RULE_ID] = finding.rule_id
        for key, value in (rule or {}).items():
            doc[f"{F.RULE}.{key}"] = value
    if discover_url:
        doc[F.ANNOTATION_DISCOVER_URL] = discover_url
    if details:
        doc[F.ANNOTATION_DETAILS] = dict(details)
    return doc
