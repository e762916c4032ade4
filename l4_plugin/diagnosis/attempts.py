"""A restarted job diagnosed attempt by attempt, and the report that leads with one of them.

Each attempt's documents are read and analysed on their own (``queries.attempt_job``); their
outcomes go to :func:`l4_plugin.analysis.attempts.across`, which picks the attempt the report
leads with and reads the culprits across attempts. The lead attempt gets the whole diagnosis
(rules, sample lines, annotations); the report adds the ``attempts`` section and, when every
attempt names the same node, evicts it with high confidence; when the lead names no culprit and
a restart that failed while starting names the node of a hardware fault, that node is the
culprit and the fault its (``AcrossAttempts.still``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from l4_plugin.analysis.attempts import (
    BOUND_CONFIDENCE,
    AcrossAttempts,
    AttemptOutcome,
    first_struck,
)
from l4_plugin.analysis.recipe import Analysis
from l4_plugin.analysis.tables import JobData, JobDoc
from l4_plugin.analysis.verdict import VerdictNode, blame_of, culprits
from l4_plugin.diagnosis.assembly import iso
from l4_plugin.records import Verdict
from l4_plugin.report.attempts import ReportAttempt, ReportAttempts
from l4_plugin.report.model import Report, ReportIteration, ReportNode

#: How much a verdict's confidence drops when each attempt names another node.
UNBOUND_FACTOR = 0.8


def outcome(data: JobData, analysis: Analysis, report: Report) -> AttemptOutcome:
    """What one attempt's diagnosis found (``report`` built from its own documents)."""
    attempt = data.job.attempt if data.job.attempt is not None else 0
    nodes = [VerdictNode(n.node, n.score, n.reasons) for n in analysis.fusion.nodes]
    span = next((a for a in data.job.attempts if a.attempt == attempt), None)
    return AttemptOutcome(
        attempt=attempt,
        stage=report.stage,
        culprits=culprits(nodes),
        category=report.verdict.category if report.verdict is not None else "unknown",
        first_ts=data.job.start_ts,
        last_ts=data.job.end_ts,
        nodes=tuple(data.nodes),
        trained=span is not None and span.trained,
        iteration=report.iterations[0].iteration if report.iterations else None,
    )


def silent_outcome(job: JobDoc) -> AttemptOutcome:
    """An attempt that left files but no line (its workers died before printing)."""
    attempt = job.attempt if job.attempt is not None else 0
    return AttemptOutcome(
        attempt, None, (), "unknown", job.start_ts, job.end_ts, job.nodes, printed=False
    )


def with_attempts(
    report: Report, found: AcrossAttempts, outcomes: Sequence[AttemptOutcome]
) -> Report:
    """The lead attempt's report with the ``attempts`` section, its own row taken from the
    report itself (its verdict had the rules), and the verdict read across attempts."""
    rows = []
    for o in sorted(outcomes, key=lambda o: o.attempt):
        if o.attempt == found.lead and report.verdict is not None:
            o = replace(o, category=report.verdict.category, stage=report.stage)
        rows.append(
            ReportAttempt(
                o.attempt,
                o.stage,
                o.category,
                o.culprits,
                o.nodes,
                _iso(o.first_ts),
                _iso(o.last_ts),
            )
        )
    section = ReportAttempts(found.lead, found.why, found.bound, found.note, tuple(rows))
    notes = (f"attempt {found.lead} leads: {found.why}", *report.notes)
    category = report.verdict.category if report.verdict is not None else "unknown"
    first = first_struck(found, outcomes, category)
    iterations = report.iterations
    if first is not None and first.iteration is not None:
        # (where the fault bound to its node first struck leads; the lead attempt's own follow)
        began = ReportIteration(first.iteration, 1.0, "attempt", None, None, (), ())
        iterations = (began, *(i for i in iterations if i.iteration != first.iteration))
        notes = (*notes, f"the failure first struck in attempt {first.attempt}")
    report = replace(
        report,
        attempts=section,
        verdict=_verdict(report.verdict, found),
        notes=notes,
        iterations=iterations,
    )
    return _still(report, found.still)


def _still(report: Report, still: AttemptOutcome | None) -> Report:
    """The lead's report with the node a later start-up failure names as the culprit: the
    verdict takes that attempt's category and evicts the node, which leads the ranking (the
    lead named none and evicted nothing)."""
    verdict = report.verdict
    if still is None or verdict is None or verdict.evict:
        return report
    named = ", ".join(still.culprits)
    why = (
        f"attempt {still.attempt} failed while starting again on {named} ({still.category}): "
        "the fault stayed on that node",
        *verdict.why,
    )
    verdict = replace(
        verdict,
        category=still.category,
        blame=blame_of(still.category),
        evict=still.culprits,
        restart="after-eviction",
        why=why,
    )
    first = [n for n in report.nodes if n.node in still.culprits]
    moved = tuple(
        ReportNode(n.node, n.score, n.events, (*n.reasons, f"culprit-of-attempt:{still.attempt}"))
        for n in first
    )
    nodes = (*moved, *(n for n in report.nodes if n.node not in still.culprits))
    return replace(report, verdict=verdict, nodes=nodes)


def _iso(ts: float | None) -> str | None:
    return None if ts is None or not math.isfinite(ts) else iso(ts)


def _verdict(verdict: Verdict | None, found: AcrossAttempts) -> Verdict | None:
    """A node every attempt names is evicted with high confidence (when the fault is the
    infrastructure's: a user's code fails on whatever node runs it); other nodes each time lower
    the confidence (the fault is not bound to a node)."""
    if verdict is None or not found.note:
        return verdict
    why = (*verdict.why, found.note)
    if found.bound and verdict.blame == "infrastructure":
        evict = tuple(dict.fromkeys((*verdict.evict, *found.bound)))
        confidence = max(verdict.confidence, BOUND_CONFIDENCE)
        restart = "after-eviction"
        return replace(verdict, evict=evict, confidence=confidence, restart=restart, why=why)
    return replace(verdict, confidence=round(verdict.confidence * UNBOUND_FACTOR, 3), why=why)
