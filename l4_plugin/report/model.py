"""The diagnosis report of ARCHITECTURE.md, *The report* as frozen, typed records.

:class:`Report` is what ``build_report`` returns and what the terminal, HTML, annotation, service
and CLI code read. Its JSON form — ``l4 diagnose --json``, the ``summary`` annotation, the input of
the evaluation scorer — is written by :meth:`Report.to_json` alone, key order included, and read
back (``l4 report``) by :meth:`Report.from_json`. Numbers are stored as they appear in the JSON
(already rounded), so ``Report.from_json(r.to_json()) == r``.

``from_json`` accepts a stored report that lacks keys (one written by an older analyzer): a missing
section reads as empty, a missing verdict or slowdown as ``None``. Values are kept as the JSON
holds them (an integer confidence stays an integer), so a stored report renders to the same JSON.
``hang`` (``report/hangs.py``) is written only for a job whose ranks left Flight Recorder traces
or stacks, ``attempts`` (``report/attempts.py``) only for a job that restarted: a job without
them has the JSON it always had.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from l4_plugin.records import Verdict
from l4_plugin.report.attempts import ReportAttempts
from l4_plugin.report.hangs import ReportHang

# A JSON object as ``json.loads`` gives it: the report's serialised form, nothing else.
Json = dict[str, Any]


def _strs(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    return tuple(raw.get(key) or ())


def _opt_str(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class ReportRuleMatch:
    """A fault rule that matched (``rule_matches``); the rule engine decides its contents."""

    rule: str
    title: str
    category: str
    severity: str
    role: str
    confidence: float
    nodes: tuple[str, ...]
    first_seen: str | None
    counts: Mapping[str, int]
    # Sample log documents per rule clause, as the store returned them.
    samples: Mapping[str, tuple[Mapping[str, Any], ...]]
    diagnosis: str
    remediation: str
    references: tuple[str, ...]

    def to_json(self) -> Json:
        """The ``rule_matches`` entry."""
        return {
            "rule": self.rule,
            "title": self.title,
            "category": self.category,
            "severity": self.severity,
            "role": self.role,
            "confidence": self.confidence,
            "nodes": list(self.nodes),
            "first_seen": self.first_seen,
            "counts": dict(self.counts),
            "samples": {k: [dict(s) for s in v] for k, v in self.samples.items()},
            "diagnosis": self.diagnosis,
            "remediation": self.remediation,
            "references": list(self.references),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportRuleMatch:
        """The inverse of :meth:`to_json`."""
        samples = raw.get("samples") or {}
        return cls(
            rule=str(raw.get("rule", "")),
            title=str(raw.get("title", "")),
            category=str(raw.get("category", "")),
            severity=str(raw.get("severity", "")),
            role=str(raw.get("role", "")),
            confidence=raw.get("confidence", 0.0),
            nodes=_strs(raw, "nodes"),
            first_seen=_opt_str(raw, "first_seen"),
            counts=dict(raw.get("counts") or {}),
            samples={k: tuple(v) for k, v in samples.items()},
            diagnosis=str(raw.get("diagnosis") or ""),
            remediation=str(raw.get("remediation") or ""),
            references=_strs(raw, "references"),
        )


@dataclass(frozen=True, slots=True)
class ReportEvent:
    """A failure-indicating event: its template, one sample line, score and where it occurs."""

    template_id: str
    template: str
    sample: str
    sample_node: str | None
    score: float
    nodes: tuple[str, ...]
    count: int
    first_seen: str | None
    level: str | None
    stage: str | None
    reasons: tuple[str, ...]

    def to_json(self) -> Json:
        """The ``events`` entry."""
        return {
            "template_id": self.template_id,
            "template": self.template,
            "sample": self.sample,
            "sample_node": self.sample_node,
            "score": self.score,
            "nodes": list(self.nodes),
            "count": self.count,
            "first_seen": self.first_seen,
            "level": self.level,
            "stage": self.stage,
            "reasons": list(self.reasons),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportEvent:
        """The inverse of :meth:`to_json`."""
        return cls(
            template_id=str(raw.get("template_id", "")),
            template=str(raw.get("template", "")),
            sample=str(raw.get("sample", "")),
            sample_node=_opt_str(raw, "sample_node"),
            score=raw.get("score", 0.0),
            nodes=_strs(raw, "nodes"),
            count=raw.get("count", 0),
            first_seen=_opt_str(raw, "first_seen"),
            level=_opt_str(raw, "level"),
            stage=_opt_str(raw, "stage"),
            reasons=_strs(raw, "reasons"),
        )


@dataclass(frozen=True, slots=True)
class ReportNode:
    """A node's suspicion score, the events that make it suspect, and why."""

    node: str
    score: float
    events: tuple[str, ...]
    reasons: tuple[str, ...]

    def to_json(self) -> Json:
        """The ``nodes`` entry."""
        return {
            "node": self.node,
            "score": self.score,
            "events": list(self.events),
            "reasons": list(self.reasons),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportNode:
        """The inverse of :meth:`to_json`."""
        return cls(
            node=str(raw.get("node", "")),
            score=raw.get("score", 0.0),
            events=_strs(raw, "events"),
            reasons=_strs(raw, "reasons"),
        )


@dataclass(frozen=True, slots=True)
class ReportIteration:
    """A suspect iteration: ``why`` is ``failure`` (where the best-ranked event began),
    ``dtw`` (departs from its predecessors), ``slowdown`` (where the job began to slow down) or
    ``last`` (the one after the last iteration printed, when nothing placed the failure) or
    ``clock`` (placed by a progress bar's clock when the progress lines have no time of their
    own, ``analysis.clock``) or ``attempt`` (a restarted job: where the same failure, bound to
    its node, first struck in an earlier attempt; ``analysis.attempts.first_struck``).

    ``slowdown`` (the job's slowdown ratio) is set, and written, only for a ``slowdown`` entry;
    ``distance`` and ``threshold`` are ``None`` there.
    """

    iteration: int
    score: float
    why: str
    distance: float | None
    threshold: float | None
    events: tuple[str, ...]
    missing_events: tuple[str, ...]
    slowdown: float | None = None

    def to_json(self) -> Json:
        """The ``iterations`` entry."""
        out: Json = {
            "iteration": self.iteration,
            "score": self.score,
            "why": self.why,
            "distance": self.distance,
            "threshold": self.threshold,
        }
        if self.slowdown is not None:
            out["slowdown"] = self.slowdown
        out["events"] = list(self.events)
        out["missing_events"] = list(self.missing_events)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportIteration:
        """The inverse of :meth:`to_json`."""
        return cls(
            iteration=raw.get("iteration", 0),
            score=raw.get("score", 0.0),
            why=str(raw.get("why", "dtw")),
            distance=raw.get("distance"),
            threshold=raw.get("threshold"),
            events=_strs(raw, "events"),
            missing_events=_strs(raw, "missing_events"),
            slowdown=raw.get("slowdown"),
        )


@dataclass(frozen=True, slots=True)
class ReportStraggler:
    """A node slower than its peers from ``from_iteration`` on (``slowdown`` × the median)."""

    node: str
    from_iteration: int
    slowdown: float

    def to_json(self) -> Json:
        """The ``stragglers`` entry."""
        return {"node": self.node, "from_iteration": self.from_iteration, "slowdown": self.slowdown}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportStraggler:
        """The inverse of :meth:`to_json`."""
        return cls(str(raw.get("node", "")), raw.get("from_iteration", 0), raw.get("slowdown", 0.0))


@dataclass(frozen=True, slots=True)
class ReportSlowdown:
    """The whole job slows down from ``from_iteration`` on, ``ratio`` × its earlier pace."""

    from_iteration: int
    reference_seconds: float
    ratio: float
    events: tuple[str, ...]
    nodes: tuple[str, ...]

    def to_json(self) -> Json:
        """The ``slowdown`` object."""
        return {
            "from_iteration": self.from_iteration,
            "reference_seconds": self.reference_seconds,
            "ratio": self.ratio,
            "events": list(self.events),
            "nodes": list(self.nodes),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportSlowdown:
        """The inverse of :meth:`to_json`."""
        return cls(
            from_iteration=raw.get("from_iteration", 0),
            reference_seconds=raw.get("reference_seconds", 0.0),
            ratio=raw.get("ratio", 0.0),
            events=_strs(raw, "events"),
            nodes=_strs(raw, "nodes"),
        )


@dataclass(frozen=True, slots=True)
class ReportFiltering:
    """What cross-job filtering did: templates kept and dropped, log lines dropped with them."""

    no_baseline: bool = False
    templates: int = 0
    kept: int = 0
    dropped: int = 0
    lines_dropped: int = 0

    def to_json(self) -> Json:
        """The ``filtering`` object."""
        return {
            "no_baseline": self.no_baseline,
            "templates": self.templates,
            "kept": self.kept,
            "dropped": self.dropped,
            "lines_dropped": self.lines_dropped,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportFiltering:
        """The inverse of :meth:`to_json`."""
        return cls(
            no_baseline=bool(raw.get("no_baseline", False)),
            templates=raw.get("templates", 0),
            kept=raw.get("kept", 0),
            dropped=raw.get("dropped", 0),
            lines_dropped=raw.get("lines_dropped", 0),
        )


@dataclass(frozen=True, slots=True)
class ReportSpatial:
    """Whether spatial comparison was possible, its method and its short list of suspects."""

    defined: bool = False
    method: str = ""
    suspects: tuple[str, ...] = ()

    def to_json(self) -> Json:
        """The ``spatial`` object."""
        return {"defined": self.defined, "method": self.method, "suspects": list(self.suspects)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportSpatial:
        """The inverse of :meth:`to_json`."""
        return cls(
            bool(raw.get("defined", False)), str(raw.get("method", "")), _strs(raw, "suspects")
        )


@dataclass(frozen=True, slots=True)
class Report:
    """One diagnosis: verdict, rule matches, events, nodes, iterations, stage.

    ARCHITECTURE.md, *The report*, says who makes and who reads it.

    Lists are ranked, most suspect first. ``stage`` is the stage the job reached; ``time_unit``
    says whether ``first_seen`` values are times (``timestamp``) or line positions.
    """

    job_id: str
    status: str
    stage: str | None
    baseline_jobs: tuple[str, ...]
    rule_matches: tuple[ReportRuleMatch, ...]
    events: tuple[ReportEvent, ...]
    nodes: tuple[ReportNode, ...]
    iterations: tuple[ReportIteration, ...]
    silent_nodes: tuple[str, ...]
    verdict: Verdict | None
    #: What the ranks' Flight Recorder traces and stacks say (None: the job left none).
    hang: ReportHang | None
    #: A restarted job's attempts, each diagnosed on its own (None: one attempt).
    attempts: ReportAttempts | None
    stragglers: tuple[ReportStraggler, ...]
    slowdown: ReportSlowdown | None
    lagging_nodes: tuple[str, ...]
    filtering: ReportFiltering
    spatial: ReportSpatial
    notes: tuple[str, ...]
    time_unit: str
    analyzer_version: str
    timings: Mapping[str, float]

    def to_json(self) -> Json:
        """The JSON report: ``l4 diagnose --json``, the summary annotation, the scorer's input."""
        out: Json = {
            "job_id": self.job_id,
            "status": self.status,
            "stage": self.stage,
            "baseline_jobs": list(self.baseline_jobs),
            "rule_matches": [m.to_json() for m in self.rule_matches],
            "events": [e.to_json() for e in self.events],
            "nodes": [n.to_json() for n in self.nodes],
            "iterations": [i.to_json() for i in self.iterations],
            "silent_nodes": list(self.silent_nodes),
            "verdict": None if self.verdict is None else self.verdict.to_json(),
        }
        # After the verdict they explain; absent for a job without dumps and of one attempt
        # (its JSON unchanged).
        if self.hang is not None:
            out["hang"] = self.hang.to_json()
        if self.attempts is not None:
            out["attempts"] = self.attempts.to_json()
        return out | {
            "stragglers": [s.to_json() for s in self.stragglers],
            "slowdown": None if self.slowdown is None else self.slowdown.to_json(),
            "lagging_nodes": list(self.lagging_nodes),
            "filtering": self.filtering.to_json(),
            "spatial": self.spatial.to_json(),
            "notes": list(self.notes),
            "time_unit": self.time_unit,
            "analyzer_version": self.analyzer_version,
            "timings": dict(self.timings),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Report:
        """A report from its JSON (a stored ``summary`` annotation); missing keys read as empty."""
        verdict = raw.get("verdict")
        slowdown = raw.get("slowdown")
        hang = raw.get("hang")
        attempts = raw.get("attempts")
        return cls(
            job_id=str(raw.get("job_id", "unknown job")),
            status=str(raw.get("status", "unknown")),
            stage=_opt_str(raw, "stage"),
            baseline_jobs=_strs(raw, "baseline_jobs"),
            rule_matches=tuple(ReportRuleMatch.from_json(m) for m in raw.get("rule_matches") or ()),
            events=tuple(ReportEvent.from_json(e) for e in raw.get("events") or ()),
            nodes=tuple(ReportNode.from_json(n) for n in raw.get("nodes") or ()),
            iterations=tuple(ReportIteration.from_json(i) for i in raw.get("iterations") or ()),
            silent_nodes=_strs(raw, "silent_nodes"),
            verdict=Verdict.from_json(verdict) if verdict else None,
            hang=ReportHang.from_json(hang) if isinstance(hang, Mapping) else None,
            attempts=ReportAttempts.from_json(attempts) if isinstance(attempts, Mapping) else None,
            stragglers=tuple(ReportStraggler.from_json(s) for s in raw.get("stragglers") or ()),
            slowdown=ReportSlowdown.from_json(slowdown) if slowdown else None,
            lagging_nodes=_strs(raw, "lagging_nodes"),
            filtering=ReportFiltering.from_json(raw.get("filtering") or {}),
            spatial=ReportSpatial.from_json(raw.get("spatial") or {}),
            notes=_strs(raw, "notes"),
            time_unit=str(raw.get("time_unit", "timestamp")),
            analyzer_version=str(raw.get("analyzer_version", "")),
            timings=dict(raw.get("timings") or {}),
        )
