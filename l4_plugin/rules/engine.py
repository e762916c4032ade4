"""Matching rules against one job in the cluster: aggregated facts in, ``RuleMatch`` records out.

Per job, not per rule: the expensive ``message`` values of every rule (``contains``, ``re``,
leading wildcards) are first resolved to the exact distinct lines they match in the job
(``l4_plugin.rules.resolver``: a token prefilter plus a ``terms``/``include`` aggregation, a few
requests in all), so every selection compiles to cheap term look-ups. Then one ``composite``
aggregation over ``host.name`` on ``l4-lines`` (restricted to the job and to lines matching at
least one selection of any rule) returns, per node and per distinct selection query, the number of
lines and the first/last ``@timestamp``. ``silence`` selections read ``l4-events``: the job's last
``l4.last_ts``, the nodes active near the end, and the last time of the others. Each rule's
condition is evaluated per node (``scope: node``) or on the job-wide sums (``scope: job``);
``window`` and ``max_node_fraction`` are then applied, and one ``top_hits`` search fetches sample
lines for every matched rule at once. No raw line is scanned in Python.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from l4_plugin.errors import StoreError
from l4_plugin.records import Finding, is_job_node
from l4_plugin.rules.compiler import (
    MATCH_NOTHING,
    Query,
    job_filter,
    selection_query,
    template_text_query,
)
from l4_plugin.rules.condition import SelectionFacts, Truth, evaluate, positive
from l4_plugin.rules.port import RuleStorePort
from l4_plugin.rules.render import render
from l4_plugin.rules.resolver import MessageResolver, TextValue, needs_resolution
from l4_plugin.rules.rule import FieldMatcher, Rule
from l4_plugin.rules.schema import SEVERITIES
from l4_plugin.store import fields as F
from l4_plugin.store import generations
from l4_plugin.store.events import JobEvents, Key, Metric
from l4_plugin.store.lines import JobLines

_NODE_SOURCE = [{"node": {"terms": {"field": "host.name"}}}]
# One page for jobs of up to this many nodes: every page re-runs the query and aggregations.
_NODE_PAGE = 5000
_MAX_SAMPLE_NODE_FILTER = 1024
_DEFAULT_CONFIDENCE = {"cause": 0.9, "symptom": 0.5}
_DRAFT_FACTOR = 0.6


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """One rule that matched a job, with its rendered diagnosis and remediation."""

    rule_id: str
    title: str
    category: str
    severity: str
    role: str
    status: str
    nodes: tuple[str, ...]
    first_ts: float | None
    counts: dict[str, int]
    node_counts: dict[str, int]
    samples: dict[str, tuple[dict[str, Any], ...]]
    diagnosis: str
    remediation: str
    confidence: float
    total_nodes: int = 0
    silent_nodes: tuple[str, ...] = ()
    references: tuple[str, ...] = field(default=())
    evict: bool | None = None

    def to_report(self) -> dict[str, Any]:
        """The ``rule_matches`` entry of the report's JSON plus the extra facts.

        (ARCHITECTURE.md, *The report*.)
        """
        return {
            "rule": self.rule_id,
            "title": self.title,
            "category": self.category,
            "severity": self.severity,
            "role": self.role,
            "confidence": self.confidence,
            "nodes": list(self.nodes),
            "first_seen": _iso(self.first_ts),
            "counts": dict(self.counts),
            "samples": {k: list(v) for k, v in self.samples.items()},
            "diagnosis": self.diagnosis,
            "remediation": self.remediation,
            "references": list(self.references),
        }

    def to_finding(self, job_id: str, rank: int) -> Finding:
        """The ``l4-annotations`` record (kind ``rule_match``) for this match."""
        return Finding(
            job_id=job_id,
            kind="rule_match",
            key=self.rule_id,
            score=self.confidence,
            rank=rank,
            explanation=self.diagnosis,
            nodes=self.nodes,
            rule_id=self.rule_id,
            reasons=(self.role, self.category, self.severity),
        )


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _seconds(value: object) -> float | None:
    return float(value) / 1000.0 if isinstance(value, int | float) else None


def _aggregate(facts: Iterable[SelectionFacts]) -> SelectionFacts:
    items = [f for f in facts if f.count > 0]
    firsts = [f.first_ts for f in items if f.first_ts is not None]
    lasts = [f.last_ts for f in items if f.last_ts is not None]
    return SelectionFacts(
        count=sum(f.count for f in items),
        nodes=len(items),
        first_ts=min(firsts) if firsts else None,
        last_ts=max(lasts) if lasts else None,
    )


class JobFacts:
    """Cluster look-ups for one job, cached across the rules matched against it."""

    def __init__(
        self,
        store: RuleStorePort,
        job_id: str,
        *,
        resolve_messages: bool = True,
        scope: Query | None = None,
        nodes: Sequence[str] | None = None,
    ) -> None:
        self.store = store
        self.job_id = job_id
        self._job: tuple[dict[str, Any] | None] | None = None
        # The job's documents of its last complete ingest generation (``store.generations``)
        self.scope = scope if scope is not None else generations.scope(job_id, self._job_source())
        self._templates: dict[FieldMatcher, list[str]] = {}
        self._last_ts: dict[str, float] | None = None
        self._total: int | None = None
        self._facts: dict[str, dict[str, SelectionFacts]] = {}
        self._samples: dict[str, tuple[dict[str, Any], ...]] = {}
        self.planning: list[Query] | None = None
        # The node list the ingest recorded, when the caller read the job's document already
        self._registered: tuple[list[str] | None] | None = (
            None if nodes is None else ([str(n) for n in nodes] or None,)
        )
        self._silent: dict[float, dict[str, float]] = {}
        self.lines = JobLines(store, self.scope)
        self.messages = (
            MessageResolver(store, store.names.lines, self.scope) if resolve_messages else None
        )

    def resolve_messages(self, rules: Iterable[Rule]) -> None:
        """Resolve the expensive ``message`` values of all ``rules`` at once."""
        if self.messages is None:
            return
        self.messages.resolve(
            TextValue.of(m.kind, v, m.cased)
            for rule in rules
            for selection in rule.selections.values()
            for alt in selection.alternatives
            for m in alt
            for v in m.values
            if isinstance(v, str) and needs_resolution(m.field, m.kind, v)
        )

    def message_values(
        self, matcher: FieldMatcher, value: str | int | float
    ) -> Sequence[str] | None:
        """Exact matching ``message`` values of a resolved value, else None (direct query)."""
        if self.messages is None or not isinstance(value, str):
            return None
        if not needs_resolution(matcher.field, matcher.kind, value):
            return None
        tv = TextValue.of(matcher.kind, value, matcher.cased)
        if self.messages.lookup(tv) is None and tv not in self.messages.resolved:
            self.messages.resolve([tv])
        return self.messages.lookup(tv)

    def template_ids(self, matcher: FieldMatcher) -> list[str]:
        """Ids of the templates (``l4-templates``) whose text the matcher accepts."""
        if matcher not in self._templates:
            buckets = self.store.composite(
                self.store.names.templates,
                [{"id": {"terms": {"field": F.TEMPLATE_ID}}}],
                query=template_text_query(matcher),
            )
            self._templates[matcher] = [str(b["key"]["id"]) for b in buckets]
        return self._templates[matcher]

    def _events_last(self, query: Query) -> dict[str, float]:
        """Each node's last ``l4.last_ts`` in the rollups ``query`` selects."""
        rows = JobEvents(self.store, query, page_size=_NODE_PAGE).table(
            [Key("node", "host.name")], {"last": Metric("max", F.LAST_TS)}
        )
        out: dict[str, float] = {}
        for row in rows:
            ts = _seconds(row.values["last"])
            if ts is not None:
                out[str(row.key["node"])] = ts
        return out

    def node_last_ts(self) -> dict[str, float]:
        """Last time each node logged: ``l4-events`` rollups, or ``l4-lines`` if there are none."""
        if self._last_ts is None:
            last = self._events_last(self.scope)
            if not last:
                lines = self.lines.node_last_ms(_NODE_PAGE)
                last = {node: ms / 1000.0 for node, ms in lines.items()}
            self._last_ts = last
        return self._last_ts

    def _registered_nodes(self) -> list[str] | None:
        """The node list the ingest recorded on the job's ``l4-jobs`` document, if any."""
        if self._registered is None:
            self._registered = (self._read_registered_nodes(),)
        return self._registered[0]

    def _job_source(self) -> dict[str, Any] | None:
        """The job's ``l4-jobs`` document (None without one), read once."""
        if self._job is None:
            body = {"size": 1, "query": job_filter(self.job_id)}
            try:
                hits = self.store.search(self.store.names.jobs, body)["hits"]["hits"]
            except StoreError:
                hits = []  # no l4-jobs index (lines written by another tool): no record
            self._job = (dict(hits[0].get("_source", {})) if hits else None,)
        return self._job[0]

    def _read_registered_nodes(self) -> list[str] | None:
        src = self._job_source()
        if src is None:
            return None
        nodes = src.get(F.JOB_NODES, src.get(F.ROOT, {}).get("job", {}).get("nodes"))
        return [str(n) for n in nodes] if isinstance(nodes, list) and nodes else None

    def total_nodes(self) -> int:
        """Nodes that logged anything in the job: the ingest's record, else rollups and lines."""
        if self._total is None:
            registered = self._registered_nodes()
            if registered is not None:
                self._total = len(registered)
                return self._total
            nodes = set(self.node_last_ts())
            for bucket in self.store.composite(
                self.store.names.lines,
                _NODE_SOURCE,
                query=self.scope,
                page_size=_NODE_PAGE,
            ):
                nodes.add(str(bucket["key"]["node"]))
            self._total = len(nodes)
        return self._total

    def silent_nodes(self, min_gap: float) -> dict[str, float]:
        """Nodes whose last line is at least ``min_gap`` seconds before the job's last line.

        With the ingest's node list, only the job's end (one sorted hit) and the nodes active
        in the last ``min_gap`` (a range query) are looked up, then the last time of the few
        remaining nodes; otherwise every node's last time (a composite over ``l4-events``).
        """
        if min_gap not in self._silent:
            found = self._find_silent(min_gap)
            self._silent[min_gap] = {n: t for n, t in found.items() if not is_job_node(n)}
        return self._silent[min_gap]

    def _find_silent(self, min_gap: float) -> dict[str, float]:
        registered = self._registered_nodes()
        end = self._events_end_ms() if registered is not None else None
        if registered is None or end is None:
            return self._silent_from_all(min_gap)
        cutoff = end - min_gap * 1000.0
        late = {"range": {F.LAST_TS: {"gt": int(cutoff)}}}
        latest = self._events_last({"bool": {"filter": [self.scope, late]}})
        active = {n for n, ts in latest.items() if ts > int(cutoff) / 1000.0}  # a pack's nodes
        quiet = [n for n in registered if n not in active]
        if not quiet:
            return {}
        if len(quiet) > _MAX_SAMPLE_NODE_FILTER:
            return self._silent_from_all(min_gap)
        named = {"terms": {"host.name": quiet}}
        last = self._events_last({"bool": {"filter": [self.scope, named]}})
        return {
            node: ts for node, ts in last.items() if node in quiet and end / 1000.0 - ts >= min_gap
        }

    def _events_end_ms(self) -> float | None:
        """The job's last ``l4.last_ts`` in ``l4-events`` (epoch ms), None without rollups."""
        body = {
            "size": 1,
            "query": {"bool": {"filter": [self.scope, {"exists": {"field": F.LAST_TS}}]}},
            "sort": [{F.LAST_TS: {"order": "desc"}}],
            "_source": False,
        }
        try:
            hits = self.store.search(self.store.names.events, body)["hits"]["hits"]
        except StoreError:
            return None
        value = hits[0].get("sort", [None])[0] if hits else None
        return float(value) if isinstance(value, int | float) and value > 0 else None

    def _silent_from_all(self, min_gap: float) -> dict[str, float]:
        last = self.node_last_ts()
        if len(last) < 2:
            return {}
        end = max(last.values())
        return {node: ts for node, ts in last.items() if end - ts >= min_gap}

    def prefetch(self, queries: Iterable[Query]) -> None:
        """Per-node facts of many selection queries in one paginated composite aggregation."""
        keys = {_query_key(q): q for q in queries if q != MATCH_NOTHING}
        live = {k: q for k, q in keys.items() if k not in self._facts}
        if not live:
            return
        for key, per_node in self.lines.node_facts(live, page_size=2000).items():
            self._facts[key] = {
                node: SelectionFacts(f.count, 1, _seconds(f.first_ms), _seconds(f.last_ms))
                for node, f in per_node.items()
            }

    def node_facts(self, queries: Mapping[str, Query]) -> dict[str, dict[str, SelectionFacts]]:
        """Per node, per selection: count and first/last time of the matching lines."""
        self.prefetch(queries.values())
        per_node: dict[str, dict[str, SelectionFacts]] = {}
        for name, query in queries.items():
            if query == MATCH_NOTHING:
                continue
            for node, node_facts in self._facts[_query_key(query)].items():
                per_node.setdefault(node, {})[name] = node_facts
        return per_node

    def samples(
        self, queries: Mapping[str, Query], nodes: Sequence[str]
    ) -> dict[str, tuple[dict[str, Any], ...]]:
        """Earliest lines per selection on the matched nodes (``[]``: no node restriction).

        Unrestricted samples are cached per query, so rules sharing a selection share one
        look-up; while ``planning`` is a list, the queries are only collected there (empty
        samples are returned) so that ``prefetch_samples`` can fetch them all at once.
        """
        live = {name: q for name, q in queries.items() if q != MATCH_NOTHING}
        if not live:
            return {}
        scope = list(nodes) if len(nodes) <= _MAX_SAMPLE_NODE_FILTER else []
        if scope:
            if self.planning is not None:
                return {}
            found = self.lines.samples(live, scope)
            return {name: _sample_rows(found[name]) for name in live}
        keys = {name: _query_key(q) for name, q in live.items()}
        if self.planning is not None:
            self.planning.extend(q for name, q in live.items() if keys[name] not in self._samples)
            return {}
        self.prefetch_samples(live.values())
        return {name: self._samples[keys[name]] for name in live}

    def prefetch_samples(self, queries: Iterable[Query]) -> None:
        """Unrestricted samples of many selection queries in one search."""
        todo = {_query_key(q): q for q in queries if q != MATCH_NOTHING}
        todo = {k: q for k, q in todo.items() if k not in self._samples}
        if not todo:
            return
        found = self.lines.samples(todo, [])
        for key in todo:
            self._samples[key] = _sample_rows(found[key])


def _sample_rows(sources: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The sample lines of one selection (each one node's line) as a rule's context shows them."""
    rows = []
    for src in sources:
        host = src.get("host", {}).get("name") if "host" in src else src.get("host.name")
        rank = src.get(F.ROOT, {}).get("rank") if F.ROOT in src else src.get(F.RANK)
        rows.append(
            {
                "message": src.get("message", ""),
                "node": host,
                "rank": rank,
                "timestamp": src.get("@timestamp"),
            }
        )
    return tuple(rows)


def _query_key(query: Query) -> str:
    """A short aggregation name that is the same for the same query (dedupes across rules)."""
    text = json.dumps(query, sort_keys=True, separators=(",", ":"))
    return "q" + hashlib.sha1(text.encode()).hexdigest()[:16]


def compile_rule(facts: JobFacts, rule: Rule) -> tuple[dict[str, Query], dict[str, float]]:
    """A rule's selection queries on ``l4-lines`` and its silence selections' minimum gaps."""
    queries: dict[str, Query] = {}
    silences: dict[str, float] = {}
    for name, selection in rule.selections.items():
        if selection.silence is not None:
            silences[name] = selection.silence.min_gap
            continue
        query = selection_query(selection, facts.template_ids, facts.message_values)
        if query is not None:
            queries[name] = query
    return queries, silences


_NONE = SelectionFacts()


def _window_ok(rule: Rule, truth: Truth) -> bool:
    if rule.window is None:
        return True
    span = truth.span
    return span is None or span <= rule.window


def _confidence(rule: Rule) -> float:
    base = rule.confidence if rule.confidence is not None else _DEFAULT_CONFIDENCE[rule.role]
    return round(base * (1.0 if rule.status == "confirmed" else _DRAFT_FACTOR), 3)


def _matched_nodes(
    rule: Rule, per_node: dict[str, dict[str, SelectionFacts]], evidence: set[str]
) -> dict[str, dict[str, SelectionFacts]] | None:
    """The nodes a rule matched, with their facts; None when the rule does not hold.

    ``scope: node`` evaluates the condition on every node; ``scope: job`` on the job-wide sums,
    and then names the nodes that printed evidence (the selections the condition relied on).
    """
    if rule.scope == "node":
        matched: dict[str, dict[str, SelectionFacts]] = {}
        for node, node_facts in per_node.items():
            truth = evaluate(rule.condition, node_facts)
            if truth.ok and _window_ok(rule, truth):
                matched[node] = node_facts
        return matched or None
    names = set(rule.selections)
    job = {n: _aggregate(f[n] for f in per_node.values() if n in f) for n in names}
    truth = evaluate(rule.condition, job)
    if not truth.ok or not _window_ok(rule, truth):
        return None
    return {
        node: node_facts
        for node, node_facts in per_node.items()
        if any(node_facts.get(n, SelectionFacts()).count for n in evidence)
    }


def _render_context(
    facts: JobFacts,
    rule: Rule,
    nodes: list[str],
    total: int,
    first_ts: float | None,
    sums: Mapping[str, SelectionFacts],
    samples: Mapping[str, tuple[dict[str, Any], ...]],
    silent_nodes: list[str],
) -> dict[str, Any]:
    """What a rule's ``diagnosis`` and ``remediation`` templates see (``rules/README.md``)."""
    return {
        "job_id": facts.job_id,
        "rule": {
            "id": rule.id,
            "title": rule.title,
            "category": rule.category,
            "severity": rule.severity,
            "role": rule.role,
        },
        "nodes": nodes,
        "node_count": len(nodes),
        "total_nodes": total,
        "first_ts": _iso(first_ts) or "unknown",
        "counts": {n: f.count for n, f in sums.items()},
        "node_counts": {n: f.nodes for n, f in sums.items()},
        "samples": {n: list(samples.get(n, ())) for n in rule.selections},
        "sample": {
            n: (samples[n][0]["message"] if samples.get(n) else "") for n in rule.selections
        },
        "silent_nodes": silent_nodes,
    }


def match_rule(
    facts: JobFacts,
    rule: Rule,
    compiled: tuple[dict[str, Query], dict[str, float]] | None = None,
) -> RuleMatch | None:
    """Evaluate one rule on one job; None when it does not match."""
    queries, silences = compiled if compiled is not None else compile_rule(facts, rule)
    per_node = facts.node_facts(queries)
    silent: set[str] = set()
    for name, gap in silences.items():
        for node, ts in facts.silent_nodes(gap).items():
            silent.add(node)
            per_node.setdefault(node, {})[name] = SelectionFacts(1, 1, ts, ts)
    evidence = positive(rule.condition)
    matched = _matched_nodes(rule, per_node, evidence)
    if matched is None:
        return None
    nodes = sorted(matched)
    total = facts.total_nodes()
    if rule.max_node_fraction is not None and len(nodes) > max(1.0, rule.max_node_fraction * total):
        return None
    sums = {n: _aggregate(f[n] for f in matched.values() if n in f) for n in rule.selections}
    firsts = [t for n in evidence if (t := sums[n].first_ts) is not None]
    first_ts = min(firsts) if firsts else None
    evidence_queries = {n: q for n, q in queries.items() if n in evidence}
    # Restricting samples to the matched nodes changes nothing when every node with evidence
    # matched (always so with scope: job); a long ``terms`` on host.name is costly, so skip it.
    with_evidence = {
        node for node, f in per_node.items() if any(f.get(n, _NONE).count for n in evidence_queries)
    }
    samples = facts.samples(evidence_queries, [] if with_evidence <= set(nodes) else nodes)
    silent_nodes = sorted(silent & set(nodes))
    context = _render_context(facts, rule, nodes, total, first_ts, sums, samples, silent_nodes)
    return RuleMatch(
        rule_id=rule.id,
        title=rule.title,
        category=rule.category,
        severity=rule.severity,
        role=rule.role,
        status=rule.status,
        nodes=tuple(nodes),
        first_ts=first_ts,
        counts=context["counts"],
        node_counts=context["node_counts"],
        samples=samples,
        diagnosis=render(rule.diagnosis, context) if rule.diagnosis else rule.description.strip(),
        remediation=render(rule.remediation, context),
        confidence=_confidence(rule),
        total_nodes=total,
        silent_nodes=tuple(silent_nodes),
        references=rule.references,
        evict=rule.evict,
    )


def sort_matches(matches: Iterable[RuleMatch]) -> list[RuleMatch]:
    """Causes before symptoms, then severity, confidence and earliest first occurrence."""
    return sorted(
        matches,
        key=lambda m: (
            m.role != "cause",
            -SEVERITIES.index(m.severity),
            -m.confidence,
            m.first_ts if m.first_ts is not None else float("inf"),
            m.rule_id,
        ),
    )


def match_job(
    store: RuleStorePort,
    job_id: str,
    rules: Sequence[Rule],
    *,
    resolve_messages: bool = True,
    scope: Query | None = None,
    nodes: Sequence[str] | None = None,
) -> list[RuleMatch]:
    """Match every rule against one job; return the matches, root causes first.

    ``resolve_messages=False`` sends every ``message`` value as its direct query (regexp,
    wildcard): same results, much slower on large indices; kept to test the resolution against.
    ``scope`` selects the job's documents (default: its last complete ingest generation) and
    ``nodes`` are the nodes its ``l4-jobs`` document lists: with both, the caller has read the
    document and it is not read again.
    """
    facts = JobFacts(store, job_id, resolve_messages=resolve_messages, scope=scope, nodes=nodes)
    facts.resolve_messages(rules)
    compiled = [compile_rule(facts, rule) for rule in rules]
    if resolve_messages:
        # All rules in one composite: cheap term look-ups. Direct regexp/wildcard queries are
        # left one rule per request, or a single request could run past the client timeout.
        facts.prefetch(q for queries, _ in compiled for q in queries.values())
        # A dry run (cached facts, no requests) collects the matched rules' sample queries.
        facts.planning = []
        for rule, c in zip(rules, compiled, strict=True):
            match_rule(facts, rule, c)
        planned, facts.planning = facts.planning, None
        facts.prefetch_samples(planned)
    found = [
        m
        for m in (match_rule(facts, rule, c) for rule, c in zip(rules, compiled, strict=True))
        if m is not None
    ]
    return sort_matches(found)
