"""What ``l4 rules new --from-job`` drafts from: a job's diagnosis, read back from the cluster.

The diagnosis of a job lives in ``l4-annotations`` (ARCHITECTURE.md, *Documents*): ``event``
annotations ranked by
``l4.annotation.rank`` (template id and text, nodes, explanation), ``stage`` and ``node``
annotations. ``job_diagnosis_facts`` turns the top events into the ``diagnosis_facts`` that
``draft_rule`` takes, with a sample line and level per event from ``l4-lines``/``l4-templates``.
A job without annotations (not analysed yet) falls back to its kept ERROR-level lines in
``l4-lines``: the error templates of the job, rarest first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from l4_plugin.errors import L4Error, StoreError
from l4_plugin.records import Level
from l4_plugin.rules.compiler import job_filter
from l4_plugin.rules.port import RuleStorePort
from l4_plugin.store import fields as F
from l4_plugin.store import generations
from l4_plugin.store.fields import source_field
from l4_plugin.store.lines import JobLines

MAX_EVENTS = 3
ERROR_LEVELS = tuple(level.name for level in Level if level.is_error)
_WORD = re.compile(r"[a-z][a-z0-9]+")


@dataclass(frozen=True, slots=True)
class JobDiagnosis:
    """The facts for ``draft_rule`` and where they came from."""

    facts: dict[str, Any]
    source: Literal["annotations", "lines"]


def _hits(store: RuleStorePort, index: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    if not store.count(index, body.get("query")):
        return []
    try:
        return list(store.search(index, body)["hits"]["hits"])
    except StoreError as exc:
        raise L4Error(f"cannot read {index}: {exc}") from None


def job_known(store: RuleStorePort, job_id: str) -> bool:
    """Whether any L4 index holds a document of the job."""
    names = store.names
    indices = (names.jobs, names.lines, names.events, names.annotations)
    return any(store.count(index, job_filter(job_id)) for index in indices)


def require_job(store: RuleStorePort, job_id: str) -> None:
    """Raise a one-line error naming the indices when the job is unknown."""
    if not job_known(store, job_id):
        names = store.names
        raise L4Error(
            f"unknown job {job_id!r} — no document in {names.jobs}, {names.lines}, "
            f"{names.events} or {names.annotations} — hint: ingest it first (`l4 ingest DIR`)"
        )


def _scope(store: RuleStorePort, job_id: str) -> dict[str, Any]:
    """The job's lines of its last complete ingest generation (``store.generations``)."""
    hits = _hits(store, store.names.jobs, {"size": 1, "query": job_filter(job_id)})
    return generations.scope(job_id, hits[0].get("_source", {}) if hits else None)


def _template(store: RuleStorePort, template_id: str) -> dict[str, Any]:
    body = {"size": 1, "query": {"term": {F.TEMPLATE_ID: template_id}}}
    hits = _hits(store, store.names.templates, body)
    return dict(hits[0].get("_source", {})) if hits else {}


def _first_line(store: RuleStorePort, job_id: str, template_id: str) -> dict[str, Any]:
    """The job's earliest kept line of the template, as one node's line."""
    lines = JobLines(store, _scope(store, job_id))
    fields = ["message", "log.level", F.STAGE, "host.name"]
    try:
        return lines.first_line({"term": {F.TEMPLATE_ID: template_id}}, fields)
    except StoreError as exc:
        raise L4Error(f"cannot read {store.names.lines}: {exc}") from None


def _event(
    store: RuleStorePort, job_id: str, template_id: str, text: str | None, nodes: list[str]
) -> dict[str, Any] | None:
    template = _template(store, template_id)
    text = text or source_field(template, F.TEMPLATE_TEXT)
    if not isinstance(text, str) or not text:
        return None
    line = _first_line(store, job_id, template_id)
    event: dict[str, Any] = {"template": text, "template_id": template_id, "nodes": nodes}
    level = source_field(template, F.TEMPLATE_LEVEL) or source_field(line, "log.level")
    if isinstance(level, str) and level:
        event["level"] = level
    sample = source_field(line, "message")
    if isinstance(sample, str) and sample:
        event["sample"] = sample
    stage = source_field(line, F.STAGE)
    if isinstance(stage, str) and stage:
        event["stage"] = stage
    if not nodes and isinstance(source_field(line, "host.name"), str):
        event["nodes"] = [source_field(line, "host.name")]
    return event


def _annotations(store: RuleStorePort, job_id: str, kind: str, size: int) -> list[dict[str, Any]]:
    body = {
        "size": size,
        "query": {"bool": {"filter": [job_filter(job_id), {"term": {F.ANNOTATION_KIND: kind}}]}},
        "sort": [{F.ANNOTATION_RANK: {"order": "asc", "missing": "_last"}}],
    }
    return [dict(h.get("_source", {})) for h in _hits(store, store.names.annotations, body)]


def _from_annotations(store: RuleStorePort, job_id: str) -> dict[str, Any] | None:
    events: list[dict[str, Any]] = []
    for ann in _annotations(store, job_id, "event", 4 * MAX_EVENTS):
        template_id = source_field(ann, F.TEMPLATE_ID) or source_field(ann, F.ANNOTATION_KEY)
        if not isinstance(template_id, str):
            continue
        nodes = [str(n) for n in source_field(ann, F.ANNOTATION_NODES) or []]
        text = source_field(ann, F.TEMPLATE_TEXT)
        event = _event(store, job_id, template_id, text if isinstance(text, str) else None, nodes)
        if event is not None:
            explanation = source_field(ann, "message")
            if isinstance(explanation, str):
                event["explanation"] = explanation
            events.append(event)
        if len(events) == MAX_EVENTS:
            break
    if not events:
        return None
    facts: dict[str, Any] = {"job_id": job_id, "events": events}
    stages = _annotations(store, job_id, "stage", 1)
    stage = source_field(stages[0], F.STAGE) if stages else None
    if isinstance(stage, str) and stage:
        facts["stage"] = stage
    suspects = [
        str(n)
        for ann in _annotations(store, job_id, "node", 5)
        for n in (source_field(ann, F.ANNOTATION_NODES) or [])
    ]
    if suspects:
        facts["suspect_nodes"] = suspects
        for event in events:
            if not event["nodes"]:
                event["nodes"] = [suspects[0]]
    return facts


def _from_lines(store: RuleStorePort, job_id: str) -> dict[str, Any] | None:
    levels = {"terms": {"log.level": list(ERROR_LEVELS)}}
    query = {"bool": {"filter": [_scope(store, job_id), levels]}}
    body = {
        "size": 0,
        "query": query,
        "aggs": {
            "t": {
                # One shard per L4 index, so ascending counts are exact.
                "terms": {"field": F.TEMPLATE_ID, "size": 1000, "order": {"_count": "asc"}},
                "aggs": {
                    "first": {"min": {"field": "@timestamp"}},
                    "folded": {"sum": {"field": F.FOLDED}},  # lines of other ranks folded in
                    "nodes": {"terms": {"field": "host.name", "size": 20}},
                },
            }
        },
    }
    if not store.count(store.names.lines, query):
        return None
    buckets = store.search(store.names.lines, body)["aggregations"]["t"]["buckets"]
    # Rarest first (by raw lines); among equally rare templates, the earliest.
    buckets.sort(
        key=lambda b: (
            b["doc_count"] + (b.get("folded", {}).get("value") or 0),
            b["first"]["value"] if b["first"]["value"] is not None else float("inf"),
        )
    )
    events: list[dict[str, Any]] = []
    for bucket in buckets:
        nodes = [str(n["key"]) for n in bucket["nodes"]["buckets"]]
        event = _event(store, job_id, str(bucket["key"]), None, nodes)
        if event is not None:
            events.append(event)
        if len(events) == MAX_EVENTS:
            break
    return {"job_id": job_id, "events": events} if events else None


def job_diagnosis_facts(store: RuleStorePort, job_id: str) -> JobDiagnosis:
    """The top events of the job's diagnosis (annotations), else its rarest error lines."""
    require_job(store, job_id)
    facts = _from_annotations(store, job_id)
    if facts is not None:
        return JobDiagnosis(facts, "annotations")
    facts = _from_lines(store, job_id)
    if facts is not None:
        return JobDiagnosis(facts, "lines")
    raise L4Error(
        f"job {job_id!r} has no event annotations in {store.names.annotations} and no "
        f"ERROR-level lines in {store.names.lines} — nothing to draft a rule from — hint: "
        f"run `l4 diagnose` on it first"
    )


def suggested_rule_id(facts: Mapping[str, Any]) -> str:
    """A kebab-case id from the top event's words, e.g. ``draft-nccl-warn-net-ib``."""
    events = facts.get("events") or [{}]
    text = str(events[0].get("template", "")).lower()
    text = re.sub(r"<[^>]*>", " ", text)
    words = [w for w in _WORD.findall(text) if len(w) > 2][:5]
    return "-".join(["draft", *words]) if words else "draft-rule"
