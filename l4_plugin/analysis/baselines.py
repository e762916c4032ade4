"""The comparison methods of the paper's evaluation (§6), with the same output shape as fusion.

* :func:`error_time` — ERROR-level events nearest the failure time; nodes by their first error
  (earliest first), the paper's *Error_time*.
* :func:`error_count` — ERROR-level events and nodes by number of error lines, *Error_count*.
* :func:`iforest_all` — a classic unsupervised detector: an Isolation Forest on raw counts of all
  events, no cross-job filtering, no rarity; the events are the attributions of its suspects.

They exist to be beaten in the evaluation, and they share :class:`FusionResult` so one scorer reads
all methods.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from l4_plugin.analysis.results import EventStat, FusionResult, RankedEvent, RankedNode
from l4_plugin.analysis.spatial import SpatialAnalyzer
from l4_plugin.errors import AnalysisError
from l4_plugin.records import is_error


def _event(e: EventStat, score: float, reason: str) -> RankedEvent:
    return RankedEvent(
        template_id=e.template_id,
        score=round(score, 6),
        reasons=(reason,),
        nodes=tuple(sorted(e.first_seen, key=lambda n: (e.first_seen[n], n))),
        count=e.count,
        first_seen=e.first,
        level=e.level,
    )


def _result(
    events: list[RankedEvent], nodes: list[RankedNode], method: str, max_events: int
) -> FusionResult:
    return FusionResult(
        events=tuple(events[:max_events]),
        nodes=tuple(nodes),
        iterations=(),
        stage=None,
        silent_nodes=(),
        no_baseline=True,
        method=method,
        candidates=tuple(events),
    )


def _node_names(events: Sequence[EventStat], nodes: Sequence[str] | None) -> list[str]:
    names = set(nodes or ())
    for e in events:
        names |= set(e.first_seen)
    return sorted(names)


def error_time(
    events: Sequence[EventStat],
    nodes: Sequence[str] | None = None,
    failure_ts: float | None = None,
    tau: float = 300.0,
    max_events: int = 20,
) -> FusionResult:
    """*Error_time*: error events scored ``exp(-dt / tau)`` by how close their first occurrence is
    to ``failure_ts`` (default: the latest first occurrence of any event); nodes ranked by the
    time of their first error line, earliest first, error-free nodes last."""
    if tau <= 0:
        raise AnalysisError(f"baselines: tau must be > 0, got {tau!r}")
    errors = [e for e in events if is_error(e.level) and e.first is not None]
    if failure_ts is None:
        firsts = [e.first for e in events if e.first is not None]
        failure_ts = max(firsts) if firsts else 0.0
    ranked = sorted(
        (
            _event(e, math.exp(-abs(failure_ts - (e.first or 0.0)) / tau), "error-time")
            for e in errors
        ),
        key=lambda r: (-r.score, r.template_id),
    )
    first_error: dict[str, float] = {}
    for e in errors:
        for n, ts in e.first_seen.items():
            first_error[n] = min(ts, first_error.get(n, math.inf))
    names = _node_names(events, nodes)
    order = sorted(names, key=lambda n: (first_error.get(n, math.inf), n))
    total = len(order)
    ranked_nodes = [
        RankedNode(
            node=n,
            score=round((total - k) / total, 6) if n in first_error else 0.0,
            reasons=("error-time",) if n in first_error else (),
            events=tuple(e.template_id for e in errors if n in e.first_seen)[:5],
        )
        for k, n in enumerate(order)
    ]
    return _result(ranked, ranked_nodes, "error_time", max_events)


def error_count(
    events: Sequence[EventStat], nodes: Sequence[str] | None = None, max_events: int = 20
) -> FusionResult:
    """*Error_count*: error events and nodes ranked by their number of error lines (score = count
    over the largest count)."""
    errors = [e for e in events if is_error(e.level)]
    top = max((e.count for e in errors), default=0)
    ranked = sorted(
        (_event(e, e.count / top if top else 0.0, "error-count") for e in errors),
        key=lambda r: (-r.score, r.template_id),
    )
    per_node: dict[str, int] = {}
    for e in errors:
        for n, c in e.counts.items():
            per_node[n] = per_node.get(n, 0) + c
    best = max(per_node.values(), default=0)
    ranked_nodes = sorted(
        (
            RankedNode(
                node=n,
                score=round(per_node.get(n, 0) / best, 6) if best else 0.0,
                reasons=("error-count",) if per_node.get(n) else (),
                events=tuple(e.template_id for e in errors if e.counts.get(n))[:5],
            )
            for n in _node_names(events, nodes)
        ),
        key=lambda r: (-r.score, r.node),
    )
    return _result(ranked, ranked_nodes, "error_count", max_events)


def iforest_all(
    events: Sequence[EventStat],
    nodes: Sequence[str] | None = None,
    random_state: int | None = 0,
    n_estimators: int = 200,
    max_events: int = 20,
) -> FusionResult:
    """An Isolation Forest on raw per-node counts of all events (no filtering, no rarity): nodes by
    forest score, events by their attribution weight on the forest's suspect nodes."""
    names = _node_names(events, nodes)
    if not names:
        raise AnalysisError("baselines: no nodes to rank")
    col = {e.template_id: j for j, e in enumerate(events)}
    row = {n: i for i, n in enumerate(names)}
    counts = np.zeros((len(names), len(events)))
    for e in events:
        for n, c in e.counts.items():
            counts[row[n], col[e.template_id]] = c
    spatial = (
        SpatialAnalyzer(
            method="iforest",
            normalization="count",
            n_estimators=n_estimators,
            random_state=random_state,
        )
        .fit(counts, names, [e.template_id for e in events], [e.level for e in events])
        .result_
    )
    by_id = {e.template_id: e for e in events}
    weight: dict[str, float] = {}
    suspects = set(spatial.suspects)
    for ns in spatial.nodes:
        if ns.node in suspects:
            for a in ns.attributions:
                if a.direction == "excess":
                    weight[a.template_id] = max(weight.get(a.template_id, 0.0), a.weight * ns.score)
    top = max(weight.values(), default=0.0)
    ranked = sorted(
        (_event(by_id[t], w / top if top else 0.0, "iforest") for t, w in weight.items()),
        key=lambda r: (-r.score, r.template_id),
    )
    ranked_nodes = [
        RankedNode(
            node=ns.node,
            score=round(ns.score, 6),
            reasons=("iforest",) if ns.node in suspects else (),
            events=tuple(a.template_id for a in ns.attributions),
        )
        for ns in spatial.nodes
    ]
    return _result(ranked, ranked_nodes, "iforest_all", max_events)
