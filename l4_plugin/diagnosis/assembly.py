"""One diagnosis as data: the report, the HTML report's extras, and the findings.

ARCHITECTURE.md, *The report*, describes the first.

The :class:`~l4_plugin.report.model.Report` is the contract (``l4 diagnose --json``, written by
its ``to_json``); :class:`ReportExtras` feeds the plots of the HTML report; the
:class:`~l4_plugin.records.Finding` list is what goes to ``l4-annotations``. All three are built
from the same :class:`~l4_plugin.analysis.recipe.Analysis`, so the terminal, the JSON, the HTML
and the dashboards never disagree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from l4_plugin.analysis.hang import collectives_apart
from l4_plugin.analysis.lexicon import default_lexicon
from l4_plugin.analysis.recipe import Analysis
from l4_plugin.analysis.tables import JobData, JobDoc
from l4_plugin.analysis.verdict import VerdictEvent, VerdictNode, VerdictRule, decide
from l4_plugin.diagnosis.hangs import report_hang
from l4_plugin.diagnosis.iterations import periodic, report_iterations
from l4_plugin.ingest.stages import default_stage_rules
from l4_plugin.records import Finding, Verdict
from l4_plugin.report.extras import (
    IterationPoint,
    NodeEventMatrix,
    ReportExtras,
)
from l4_plugin.report.model import (
    Report,
    ReportEvent,
    ReportFiltering,
    ReportIteration,
    ReportNode,
    ReportRuleMatch,
    ReportSlowdown,
    ReportSpatial,
    ReportStraggler,
)
from l4_plugin.rules.engine import RuleMatch
from l4_plugin.store.fields import source_field

_HEAT_NODES = 30
_HEAT_EVENTS = 20
_MAX_DROPPED = 200


@dataclass(frozen=True)
class Diagnosis:
    """A finished diagnosis: the §6 report, the HTML extras and the annotation findings."""

    job: JobDoc
    report: Report
    extras: ReportExtras
    findings: tuple[Finding, ...]
    template_texts: Mapping[str, str]


def iso(value: float | None, unit: str = "ts") -> str | None:
    """ISO-8601 UTC of an epoch-seconds value (None for positions or unknown times)."""
    if value is None or unit != "ts" or not math.isfinite(value):
        return None
    return datetime.fromtimestamp(value, UTC).isoformat(timespec="milliseconds")


# What CUDA and c10 append to every error: hints, never what went wrong.
_BOILERPLATE = re.compile(
    r"CUDA kernel errors might be asynchronously reported|"
    r"For debugging consider passing CUDA_LAUNCH_BLOCKING|Compile with `?TORCH_USE_CUDA_DSA"
)


def without_boilerplate(message: str) -> str:
    """A record's lines less the hints every CUDA error appends (kept when that is all)."""
    lines = message.split("\n")
    kept = [line for line in lines if not _BOILERPLATE.search(line)]
    return "\n".join(kept) if kept else message


def _sample(
    tid: str, samples: Mapping[str, Mapping[str, Any]], data: JobData
) -> tuple[str, str | None]:
    src = samples.get(tid)
    if src is not None:
        message = str(source_field(src, "message") or "")
        return without_boilerplate(message), source_field(src, "host.name")
    info = data.templates.get(tid)
    return (without_boilerplate(info.message) if info else ""), None


def report_events(
    data: JobData, analysis: Analysis, samples: Mapping[str, Mapping[str, Any]]
) -> tuple[ReportEvent, ...]:
    """The fused events, ranked, each with one sample line (cause-telling lines preferred)."""
    texts = {tid: info.text for tid, info in data.templates.items()}
    # A template's first statistic gives its stage (built in reverse so the first one is kept).
    stages = {e.template_id: e.stage for e in reversed(analysis.events)}
    out = []
    for ev in analysis.fusion.events:
        sample, sample_node = _sample(ev.template_id, samples, data)
        out.append(
            ReportEvent(
                template_id=ev.template_id,
                template=texts.get(ev.template_id, ""),
                sample=sample,
                sample_node=sample_node,
                score=round(ev.score, 4),
                nodes=tuple(ev.nodes),
                count=ev.count,
                first_seen=iso(ev.first_seen, data.time_unit),
                level=ev.level,
                stage=stages.get(ev.template_id),
                reasons=tuple(ev.reasons),
            )
        )
    onset = _slowdown_line(data, analysis, out)
    if onset is not None:
        # (second: what slowed the job down, when a line says, stays first; a thermal report
        # the kernel rate-limits may be printed long after the throttling began. First when
        # the lead's words are only a consequence: the teardown of a job that ran into its
        # time limit says nothing of why it was slow)
        at = 0 if out and _says_nothing(out[0]) else min(1, len(out))
        score = out[min(at, len(out) - 1)].score if out else 1.0
        out.insert(at, replace(onset, score=score))
    return tuple(out)


def _says_nothing(event: ReportEvent) -> bool:
    """Whether the lexicon read ``event``'s words as a consequence or a handled condition."""
    return any(r in ("consequence-words", "benign-words") for r in event.reasons)


def _slowdown_line(
    data: JobData, analysis: Analysis, events: Sequence[ReportEvent]
) -> ReportEvent | None:
    """The progress line where the job's slowdown began (its stated time per iteration is the
    slowdown's evidence: a straggler that holds every rank back, a job that then runs into its
    time limit, prints no error), as an event; None: no slowdown, no such line, or its template
    is an event already."""
    slow = analysis.slowdown
    if slow is None:
        return None
    stating = {n for n, _ in data.node_iteration_seconds}
    progress = periodic(data)
    rows = [
        (b, node, tid, t, line)
        for node, tid, b, t, line in data.progress_lines
        if b is not None and b >= slow.first_iteration and node in stating and tid in progress
    ]
    if not rows:
        return None
    _, node, tid, t, line = min(rows)
    if any(e.template_id == tid for e in events):
        return None
    return _progress_event(data, node, tid, t, line, f"slowdown-line:{slow.first_iteration}")


def _progress_event(
    data: JobData, node: str, tid: str, t: float, line: str, reason: str, stage: str = "training"
) -> ReportEvent:
    """A progress line (``JobData.progress_lines``' row) or a stage's marker as an event the
    report adds: no score of its own, ``reason`` its only reason."""
    cell = data.cells.get((node, tid))
    return ReportEvent(
        template_id=tid,
        template=data.templates[tid].text if tid in data.templates else "",
        sample=line,
        sample_node=node,
        score=0.0,
        nodes=(node,),
        count=cell.count if cell is not None else 1,
        first_seen=iso(t, data.time_unit) if math.isfinite(t) else None,
        level=None,
        stage=stage,
        reasons=(reason,),
    )


def decided(
    data: JobData,
    analysis: Analysis,
    samples: Mapping[str, Mapping[str, Any]],
    rule_matches: Sequence[RuleMatch],
) -> tuple[Verdict, tuple[ReportEvent, ...]]:
    """The verdict on the report's events (:func:`report_events`, :func:`decide_verdict`), and
    those events as the report shows them: the last progress line (with none, the last stage
    marker) added when the verdict names no cause (:func:`with_last_progress`)."""
    events = report_events(data, analysis, samples)
    verdict = decide_verdict(data, analysis, events, rule_matches)
    return verdict, with_last_progress(data, events, verdict, analysis.last_marker)


def with_last_progress(
    data: JobData,
    events: Sequence[ReportEvent],
    verdict: Verdict,
    marker: tuple[str, str] | None = None,
) -> tuple[ReportEvent, ...]:
    """``events`` and, when the verdict names no cause (a job that stopped without an error
    line: an early return, a quiet exit, a hang), the last progress line the job printed, last:
    where it stood when it ended; in a job that printed none, the last stage marker (``marker``:
    node, template — a rendezvous, a JIT build begun). Unchanged when a cause is named, neither
    is known, or that line's template is an event already."""
    if verdict.category != "unknown":
        return tuple(events)
    if data.progress_lines:
        node, tid, _, t, line = max(
            data.progress_lines, key=lambda r: (-1 if r[2] is None else r[2], r[3], r[0])
        )
        stage, reason = "training", "last-progress"
    elif marker is not None and marker in data.cells and marker[1] in data.templates:
        node, tid = marker
        t, line = data.cells[marker].last_ts, data.templates[tid].message
        stage, reason = data.templates[tid].stage or "init", "last-marker"
    else:
        return tuple(events)
    if any(e.template_id == tid for e in events):
        return tuple(events)
    return (*events, _progress_event(data, node, tid, t, line, reason, stage))


def _slowdown(analysis: Analysis) -> ReportSlowdown | None:
    slow = analysis.slowdown
    if slow is None:
        return None
    return ReportSlowdown(
        from_iteration=slow.first_iteration,
        reference_seconds=round(slow.reference, 4),
        ratio=round(slow.ratio, 3),
        events=tuple(slow.events),
        nodes=tuple(slow.nodes),
    )


def decide_verdict(
    data: JobData,
    analysis: Analysis,
    events: Sequence[ReportEvent],
    rule_matches: Sequence[RuleMatch],
) -> Verdict:
    """The verdict (``analysis.verdict.decide``) on the ranked events as the report shows them
    (template and sample line), the ranked nodes and the rule matches; confidence rounded."""
    fusion = analysis.fusion
    fused = {ev.template_id: ev for ev in fusion.events}
    decided = decide(
        [
            VerdictEvent(
                text=f"{e.template}\n{e.sample}",
                nodes=tuple(ev.nodes) if ev is not None else e.nodes,
                reasons=tuple(ev.reasons) if ev is not None else e.reasons,
                score=ev.score if ev is not None else e.score,
            )
            for e in events
            # (an event the report adds, the line where a slowdown began, speaks for itself)
            for ev in (fused.get(e.template_id),)
        ],
        [VerdictNode(n.node, n.score, n.reasons) for n in fusion.nodes],
        [
            VerdictRule(m.rule_id, m.category, m.role, m.nodes, m.confidence, m.evict)
            for m in rule_matches
        ],
        default_lexicon(),
        len(data.nodes),
        hang=_hang_hint(analysis, data),
        outsiders={node: hog.why for node, hog in analysis.outsiders.items()},
        stage=analysis.fusion.stage,
        finished=finished_nodes(data),
        asked_nodes=asked_nodes(data.job.config),
    )
    return replace(decided, confidence=round(decided.confidence, 3))


#: Configuration keys (the last part of a dotted one) that give how many nodes the launcher
#: waits for: torchrun's ``--nnodes`` ("4", or "MIN:MAX"), DeepSpeed's ``--num_nodes``,
#: Accelerate's ``num_machines``, an elastic minimum. A scheduler's own count (``nodes``) is
#: what it allocated, not what the launcher waits for.
_ASKED_NODES_KEYS = frozenset({"nnodes", "num_nodes", "num_machines", "min_nodes"})
_ASKED = re.compile(r"\s*(\d{1,6})\s*(?::\s*\d{1,6}\s*)?")


def asked_nodes(config: Mapping[str, Any]) -> int | None:
    """The nodes the job's launcher configuration waits for (the minimum of "MIN:MAX"); None
    when it does not say or says it twice differently."""
    found = {
        int(m.group(1))
        for key, value in config.items()
        if str(key).rsplit(".", 1)[-1].lower() in _ASKED_NODES_KEYS
        and (m := _ASKED.fullmatch(str(value))) is not None
    }
    return found.pop() if len(found) == 1 else None


def finished_nodes(data: JobData) -> dict[str, str]:
    """Nodes whose ranks printed the end of their training (a shutdown marker: "training
    finished", "after training is done"), each with that line's template text."""
    rules = default_stage_rules()
    ends = {
        tid: info.text
        for tid, info in data.templates.items()
        if rules.marker_stage(info.text) == "shutdown"
    }
    out: dict[str, str] = {}
    for node, tid in sorted(data.cells):
        if tid in ends:
            out.setdefault(node, ends[tid])
    return out


def _hang_hint(analysis: Analysis, data: JobData) -> tuple[str, float, str] | None:
    """What the ranks' dumps say of the fault's category, if anything; else what their
    tracebacks do: collectives that timed out in different calls (``hang.collectives_apart``,
    over each timed-out record's copies)."""
    hang = analysis.hang
    if hang is not None and hang.category is not None:
        return hang.category, hang.confidence, f"the ranks' dumps: {hang.why}"
    records = [
        text
        for tid, info in data.templates.items()
        for text in (info.message, *data.variants.get(tid, ()))
    ]
    apart = collectives_apart(records)
    if not apart:
        return None
    calls = ", ".join(apart)
    said = f"the ranks' tracebacks: their collectives timed out in different calls ({calls})"
    return "user/code", 0.6, said


def _filtering(analysis: Analysis) -> ReportFiltering:
    crossjob = analysis.crossjob
    kept = len(crossjob.kept)
    dropped = len(crossjob.dropped)
    return ReportFiltering(
        no_baseline=crossjob.no_baseline,
        templates=kept + dropped,
        kept=kept,
        dropped=dropped,
        lines_dropped=sum(
            e.count for e in analysis.events if e.template_id not in crossjob.kept_ids
        ),
    )


def build_report(
    data: JobData,
    analysis: Analysis,
    events: Sequence[ReportEvent],
    verdict: Verdict,
    *,
    baseline_jobs: Sequence[str],
    rule_matches: Sequence[RuleMatch],
    analyzer_version: str,
    timings: Mapping[str, float] | None = None,
) -> Report:
    """The report of one analysed job (ARCHITECTURE.md, *The report*), extra sections included:
    ``events`` are :func:`report_events`, ``verdict`` is :func:`decide_verdict`'s."""
    fusion = analysis.fusion
    stragglers = analysis.stragglers.stragglers if analysis.stragglers else ()
    return Report(
        job_id=data.job.id,
        status=data.job.status,
        stage=fusion.stage,
        baseline_jobs=tuple(baseline_jobs),
        # The rule engine owns the shape of a match's JSON; the report keeps it as written.
        rule_matches=tuple(ReportRuleMatch.from_json(m.to_report()) for m in rule_matches),
        events=tuple(events),
        nodes=tuple(
            ReportNode(n.node, round(n.score, 4), tuple(n.events), tuple(n.reasons))
            for n in fusion.nodes
        ),
        iterations=report_iterations(analysis, data),
        silent_nodes=tuple(fusion.silent_nodes),
        verdict=verdict,
        stragglers=tuple(
            ReportStraggler(s.node, s.first_iteration, round(s.slowdown, 3)) for s in stragglers
        ),
        slowdown=_slowdown(analysis),
        lagging_nodes=tuple(analysis.stage.lagging) if analysis.stage else (),
        filtering=_filtering(analysis),
        spatial=ReportSpatial(
            analysis.spatial.defined, analysis.spatial.method, tuple(analysis.spatial.suspects)
        ),
        # A file cut at a read limit (a compression bomb…) is named: the diagnosis lacks its rest.
        notes=(*analysis.notes, *(f"log file cut: {cut}" for cut in data.job.cut_files)),
        time_unit="timestamp" if data.time_unit == "ts" else "line position",
        analyzer_version=analyzer_version,
        timings={k: round(v, 3) for k, v in (timings or {}).items()},
        hang=report_hang(analysis.hang),
        attempts=None,
    )


def build_extras(
    data: JobData, analysis: Analysis, timings: Mapping[str, float] | None = None
) -> ReportExtras:
    """The plots' inputs: top nodes × top events heat map, iteration band, stages, dropped."""
    fusion = analysis.fusion
    matrix = None
    if analysis.matrix is not None and analysis.nodes:
        col = {t: j for j, t in enumerate(analysis.matrix_templates)}
        row = {n: i for i, n in enumerate(analysis.nodes)}
        tids = [e.template_id for e in fusion.events if e.template_id in col][:_HEAT_EVENTS]
        top_nodes = [n.node for n in fusion.nodes[:_HEAT_NODES]]
        if tids and top_nodes:
            sub = analysis.matrix[np.ix_([row[n] for n in top_nodes], [col[t] for t in tids])]
            matrix = NodeEventMatrix(
                nodes=tuple(top_nodes),
                template_ids=tuple(tids),
                counts=tuple(tuple(int(v) for v in r) for r in sub),
            )
    points: tuple[IterationPoint, ...] = ()
    if analysis.iterations is not None:
        points = tuple(
            IterationPoint(s.iteration, s.distance, s.threshold, s.suspect)
            for s in analysis.iterations.iterations
        )
    stage_per_node: dict[str, str] = {}
    order: tuple[str, ...] = ()
    if analysis.stage is not None:
        stage_per_node = {ns.node: ns.last_stage for ns in analysis.stage.nodes}
        order = analysis.stage.order
    counts = {e.template_id: e.count for e in analysis.events}
    dropped = sorted(analysis.crossjob.dropped, key=lambda d: -counts.get(d.template_id, 0))
    return ReportExtras(
        matrix=matrix,
        iterations=points,
        stage_per_node=stage_per_node,
        stage_order=order,
        dropped_templates=tuple(
            replace(
                d,
                text=data.templates[d.template_id].text if d.template_id in data.templates else "",
            )
            for d in dropped[:_MAX_DROPPED]
        ),
        no_baseline=analysis.crossjob.no_baseline,
        timings=dict(timings or {}),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def _event_text(ev: ReportEvent) -> str:
    where = ", ".join(ev.nodes[:3]) + (" …" if len(ev.nodes) > 3 else "")
    return (
        f"{ev.level or 'line'} {ev.template!r} on {len(ev.nodes)} node(s) ({where}), "
        f"{ev.count} time(s), first {ev.first_seen or 'at an unknown time'}; "
        f"why: {', '.join(ev.reasons)}"
    )


def _event_findings(report: Report) -> list[Finding]:
    return [
        Finding(
            job_id=report.job_id,
            kind="event",
            key=ev.template_id,
            score=float(ev.score),
            rank=k,
            explanation=_event_text(ev),
            template_id=ev.template_id,
            nodes=ev.nodes,
            stage=ev.stage,
            reasons=ev.reasons,
        )
        for k, ev in enumerate(report.events, 1)
    ]


def _node_findings(report: Report) -> list[Finding]:
    return [
        Finding(
            job_id=report.job_id,
            kind="node",
            key=n.node,
            score=float(n.score),
            rank=k,
            explanation=(
                f"node {n.node} ranks {k} of {len(report.nodes)} (score "
                f"{n.score:.2f}); why: {', '.join(n.reasons) or 'nothing stands out'}"
            ),
            nodes=(n.node,),
            reasons=n.reasons,
        )
        for k, n in enumerate(report.nodes, 1)
        if not (n.score <= 0 and k > 10)
    ]


def _iteration_text(it: ReportIteration) -> str:
    if it.why == "slowdown":
        return (
            f"the job runs {it.slowdown or 0.0:.2f}× slower from iteration {it.iteration} "
            f"on than before it; events that start with it: {len(it.events)}"
        )
    if it.why == "failure" and it.distance is None:
        return f"the failure began in iteration {it.iteration}: its first event was printed then"
    if it.why == "last":
        return f"the job stopped in iteration {it.iteration}: the one after the last it printed"
    if it.why == "clock":
        return (
            f"the failure began in iteration {it.iteration}: by the progress bar's clock, "
            "counted from its last frame at the bar's pace"
        )
    return (
        f"iteration {it.iteration} departs from the 10 before it (DTW "
        f"{it.distance or 0.0:.2f} > three-sigma {it.threshold}); new events: "
        f"{len(it.events)}, missing: {len(it.missing_events)}"
    )


def _iteration_findings(report: Report) -> list[Finding]:
    return [
        Finding(
            job_id=report.job_id,
            kind="iteration",
            key=str(it.iteration),
            score=float(it.score),
            rank=k,
            explanation=_iteration_text(it),
            iteration=int(it.iteration),
            reasons=tuple(f"new:{t}" for t in it.events[:10]),
        )
        for k, it in enumerate(report.iterations, 1)
    ]


def _verdict_finding(report: Report, verdict: Verdict) -> Finding:
    evict = verdict.evict
    return Finding(
        job_id=report.job_id,
        kind="verdict",
        key="verdict",
        score=float(verdict.confidence or 0.0),
        rank=1,
        explanation=(
            f"{verdict.category} fault ({verdict.blame}); evict "
            f"{', '.join(evict) if evict else 'no node'}; restart {verdict.restart}; "
            f"because {'; '.join(verdict.why) or 'nothing supports one'}"
        ),
        nodes=evict,
        stage=report.stage,
        reasons=(
            f"category:{verdict.category}",
            f"blame:{verdict.blame}",
            f"restart:{verdict.restart}",
        ),
    )


def findings(report: Report, rule_matches: Sequence[RuleMatch]) -> list[Finding]:
    """The annotation findings of one report: rule matches, events, nodes, iterations, stage."""
    job_id = report.job_id
    out: list[Finding] = [m.to_finding(job_id, k) for k, m in enumerate(rule_matches, 1)]
    out += _event_findings(report)
    out += _node_findings(report)
    out += _iteration_findings(report)
    if report.verdict is not None:
        out.append(_verdict_finding(report, report.verdict))
    if report.stage:
        out.append(
            Finding(
                job_id=job_id,
                kind="stage",
                key="stage",
                score=1.0,
                rank=1,
                explanation=f"the job failed in stage {report.stage}",
                stage=report.stage,
                nodes=report.lagging_nodes,
                reasons=tuple("lagging:" + n for n in report.lagging_nodes),
            )
        )
    return out
