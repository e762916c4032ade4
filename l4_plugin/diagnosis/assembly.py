"""One diagnosis as data: the report, the HTML report's extras, and the findings.

ARCHITECTURE.md, *The report*, describes the first.

The :class:`~l4_plugin.report.model.Report` is the contract (``l4 diagnose --json``, written by
its ``to_json``); :class:`ReportExtras` feeds the plots of the HTML report; the
:class:`~l4_plugin.records.Finding` list is what goes to ``l4-annotations``. All three are built
from the same :class:`~l4_plugin.analysis.recipe.Analysis`, so the terminal, the JSON, the HTML
and the dashboards never disagree.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from l4_plugin.analysis.clock import BarClock, bar_clock, slowed_from, step_anchor
from l4_plugin.analysis.lexicon import default_lexicon
from l4_plugin.analysis.recipe import Analysis
from l4_plugin.analysis.results import Slowdown
from l4_plugin.analysis.tables import JobData, JobDoc, TemplateInfo
from l4_plugin.analysis.temporal import iteration_at, waited
from l4_plugin.analysis.verdict import VerdictEvent, VerdictNode, VerdictRule, decide
from l4_plugin.diagnosis.hangs import report_hang
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
        # the kernel rate-limits may be printed long after the throttling began)
        at = min(1, len(out))
        score = out[min(1, len(out) - 1)].score if out else 1.0
        out.insert(at, replace(onset, score=score))
    return tuple(out)


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
    periodic = _periodic(data)
    rows = [
        (b, node, tid, t, line)
        for node, tid, b, t, line in data.progress_lines
        if b is not None and b >= slow.first_iteration and node in stating and tid in periodic
    ]
    if not rows:
        return None
    _, node, tid, t, line = min(rows)
    if any(e.template_id == tid for e in events):
        return None
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
        stage="training",
        reasons=(f"slowdown-line:{slow.first_iteration}",),
    )


def _failure_iteration(data: JobData, analysis: Analysis) -> tuple[int, str] | None:
    """The iteration the job failed in: where the best-ranked event that has one was first
    printed (its bucket by the iteration lines, or placed by time on the job's timeline; within
    the bucket by the job's pace, ``temporal.iteration_at``)."""
    return _placed(data, _job_iteration_starts(data), _failure_cell(data, analysis))


def _placed(
    data: JobData, starts: dict[int, float], cell: tuple[int, str] | None
) -> tuple[int, str] | None:
    """The iteration of a failure's ``cell`` (bucket, template) within its bucket."""
    if cell is None:
        return None
    bucket, tid = cell
    return _within(data, starts, bucket, (tid,)), tid


def _failure_cell(data: JobData, analysis: Analysis) -> tuple[int, str] | None:
    """The bucket and template of the best-ranked event that has a bucket (its first)."""
    # Its first bucket by time; by number only where no copy has a time (a copy of the line
    # placed without one may sit in an early bucket).
    first: dict[str, int] = {}
    for (it, tid), _ in sorted(
        data.iteration_cells.items(),
        key=lambda kv: (not math.isfinite(kv[1][0]), kv[1][0], kv[0][0]),
    ):
        first.setdefault(tid, it)
    for event in analysis.fusion.events:
        tid = event.template_id
        if tid in first:
            return first[tid], tid
        stated = _stated_bucket(data, tid)
        if stated is not None:
            return stated, tid
    return None


def _stated_bucket(data: JobData, tid: str) -> int | None:
    """The bucket of the iteration a template's words state (``_STATED_ITERATION``), for a line
    nothing placed on the timeline (a rank that prints no progress of its own, no time)."""
    info = data.templates.get(tid)
    found = _STATED_ITERATION.search(info.message) if info is not None else None
    if found is None:
        return None
    number = int(found.group(1))
    below = [b for b in data.iteration_spans if b <= number]
    return max(below) if below else None


def _onset(data: JobData, starts: dict[int, float], bucket: int, tids: Sequence[str]) -> int:
    """The iteration a slowdown began in: where the first of the lines that started with it
    was printed, when that falls in its onset bucket or the next (the pace is judged over
    whole buckets; the line says when), else the onset bucket."""
    spans = data.iteration_spans
    after = sorted(b for b in spans if b > bucket)[:2]
    end = after[-1] + max(spans.get(after[-1], 1), 1) if after else math.inf
    first: tuple[float, int, str] | None = None
    for (it, tid), (ts, _) in data.iteration_cells.items():
        if (
            tid in tids
            and bucket <= it < end
            and math.isfinite(ts)
            and (first is None or (ts, it) < first[:2])
        ):
            first = (ts, it, tid)
    if first is None:
        return bucket
    return max(bucket, _within(data, starts, first[1], (first[2],)))


def _job_iteration_starts(data: JobData) -> dict[int, float]:
    """When each iteration bucket's first line was printed anywhere in the job."""
    starts: dict[int, float] = {}
    for (_, it), ts in data.node_iteration_start.items():
        starts[it] = min(ts, starts.get(it, math.inf))
    return starts


# An error that says which iteration it struck (Megatron-LM's result validation: "Rank 41,
# node n, device 1, iteration 794: Unexpected result tensor(nan, …)").
_STATED_ITERATION = re.compile(r"\biteration (\d+): ")


def _within(data: JobData, starts: dict[int, float], bucket: int, tids: Sequence[str]) -> int:
    """The iteration of ``bucket`` its events ``tids`` began in: the one an error among them
    states when it falls before the next bucket (its own words are exact), else by the job's
    pace (``temporal.iteration_at``)."""
    after = [b for b in data.iteration_spans if b > bucket]
    limit = min(after) if after else bucket + max(data.iteration_spans.get(bucket, 1), 1) * 100
    for t in tids:
        info = data.templates.get(t)
        found = _STATED_ITERATION.search(info.message) if info is not None else None
        if found is not None and bucket <= int(found.group(1)) < limit:
            return int(found.group(1))
    cells = data.iteration_cells
    first = min((cells[(bucket, t)][0] for t in tids if (bucket, t) in cells), default=math.inf)
    moment = min(first, _stalled(data, bucket))
    alive = _resumed(data, bucket, first if math.isfinite(first) else moment)
    return iteration_at(starts, data.iteration_spans, bucket, moment, alive)


def _resumed(data: JobData, bucket: int, until: float) -> float:
    """When the job was last seen going on in ``bucket`` before ``until``: the latest first
    time there of a checkpoint's lines (a save pauses the iterations: a minute's save is no ten
    iterations) or of a line it prints every interval (HF's loss line, printed after the bar
    whose line has no time of its own); -inf: none. Iterations are counted from there."""
    periodic = _periodic(data)
    resumed = -math.inf
    for (it, tid), (ts, _) in data.iteration_cells.items():
        if it == bucket and resumed < ts < until:
            info = data.templates.get(tid)
            if tid in periodic or (info is not None and _saves(info)):
                resumed = ts
    return resumed


def _periodic(data: JobData) -> frozenset[str]:
    """The templates printed in most iteration buckets (at least three): progress lines."""
    seen = Counter(tid for _, tid in data.iteration_cells)
    least = max(3, len(data.iteration_spans) / 2)
    return frozenset(t for t, n in seen.items() if n >= least)


def _saves(info: TemplateInfo) -> bool:
    """Whether a template's lines are a checkpoint's save: seen while saving, or a line that
    begins or completes one (``stages.yaml``; a rank that never printed the save's first line
    prints its last in whatever stage it was in)."""
    return info.stage == "checkpointing" or (
        default_stage_rules().role(info.text).stage == "checkpointing"
    )


def _stalled(data: JobData, bucket: int) -> float:
    """When the job stopped going forward in ``bucket``, as its timeouts tell: the earliest
    moment a timed-out wait began (the line's time less what it says it waited,
    ``temporal.waited``) that falls after the bucket's first line (inf: none says). A
    watchdog's line comes ten minutes or more after the job stopped; the wait it reports began
    where the job did."""
    if data.time_unit != "ts":
        return math.inf
    begun = min(
        (t for (_, b), t in data.node_iteration_start.items() if b == bucket), default=math.inf
    )
    waits = {t: w for t, info in data.templates.items() if (w := waited(info.message)) is not None}
    stalled = math.inf
    for (it, tid), (ts, _) in data.iteration_cells.items():
        wait = waits.get(tid)
        if wait is not None and it >= bucket and begun < ts - wait < stalled:
            stalled = ts - wait
    return stalled


def _iterations(analysis: Analysis, data: JobData) -> tuple[ReportIteration, ...]:
    fusion = analysis.fusion
    top = max((s.distance for s in fusion.iterations), default=0.0)
    starts = _job_iteration_starts(data)
    # Within a suspect iteration's bucket, the best-ranked event says where the failure struck
    # (its words may state the iteration); the bucket's new events may be its consequences.
    cell = _failure_cell(data, analysis) if analysis.slowdown is None else None
    iterations = [
        ReportIteration(
            iteration=_within(
                data,
                starts,
                s.iteration,
                (cell[1],) if cell is not None and cell[0] == s.iteration else s.new_events,
            ),
            score=round(s.distance / top, 4) if top > 0 else 0.0,
            why="dtw",
            distance=round(s.distance, 4),
            threshold=None if s.threshold is None else round(s.threshold, 4),
            events=tuple(s.new_events),
            missing_events=tuple(s.missing_events),
        )
        for s in fusion.iterations
    ]
    slow = analysis.slowdown
    if slow is None and _unplaced_progress(starts) and not _states_its_iteration(data, cell):
        # Progress lines with no time of their own: the lines' times place nothing; a bar's
        # clock says when the last one came, else the last one printed says where the job
        # stopped.
        return (*(_by_the_clock(data, cell) or _after_the_last(data)), *iterations)
    if slow is None:
        failed = _placed(data, starts, cell)
        if failed is None:
            return tuple(iterations) or _after_the_last(data)
        # Where the failure began, when no iteration departs from its predecessors (a hang's
        # last iteration, a crash in an iteration like the others); after them otherwise: the
        # best-ranked event may have begun earlier than the failure (a flapping link).
        it, tid = failed
        if any(s.iteration == it for s in iterations):
            return tuple(iterations)
        began = ReportIteration(
            iteration=it,
            score=1.0 if not iterations else 0.0,
            why="failure",
            distance=None,
            threshold=None,
            events=(tid,),
            missing_events=(),
        )
        return (*iterations, began)
    # Where the job started to slow down comes first: the DTW suspect is then mostly where
    # the slowed job finally failed.
    iterations = [it for it in iterations if it.iteration != slow.first_iteration] or iterations
    first = ReportIteration(
        iteration=_slowed_by_the_clock(data, slow)
        or _onset(data, starts, slow.first_iteration, slow.events),
        score=1.0,
        why="slowdown",
        distance=None,
        threshold=None,
        slowdown=round(slow.ratio, 3),
        events=tuple(slow.events),
        missing_events=(),
    )
    return (first, *iterations)


# Buckets that must be at hand to judge whether the job's progress lines carry time.
_FLAT_PAIRS = 4


def _unplaced_progress(starts: dict[int, float]) -> bool:
    """Whether the job's progress lines have no time of their own (``starts``: when each bucket
    began, ``_job_iteration_starts``): most consecutive buckets start no later than the one
    before (a rank's stdout flushed at exit gives every step the same stamp; a bar on stderr
    takes the last stamp before it, printed at start-up)."""
    times = [t for _, t in sorted(starts.items())]
    pairs = [b <= a for a, b in itertools.pairwise(times) if math.isfinite(a + b)]
    return len(pairs) >= _FLAT_PAIRS and sum(pairs) * 2 >= len(pairs)


def _states_its_iteration(data: JobData, cell: tuple[int, str] | None) -> bool:
    """Whether the best-ranked event with a bucket (``cell``: its bucket and template) states
    the iteration it struck."""
    info = data.templates.get(cell[1]) if cell is not None else None
    return info is not None and _STATED_ITERATION.search(info.message) is not None


def _after_the_last(data: JobData) -> tuple[ReportIteration, ...]:
    """The iteration after the last one the job printed, when nothing placed the failure on the
    timeline (progress on stdout with no time of its own, the errors on stderr): a job that
    stops in training stops in the iteration it never finished."""
    if not data.node_last_iteration:
        return ()
    last = max(data.node_last_iteration.values())
    return (
        ReportIteration(
            iteration=last + 1,
            score=1.0,
            why="last",
            distance=None,
            threshold=None,
            events=(),
            missing_events=(),
        ),
    )


# Iterations past the bar's last frame the clock may place a failure (a bar on stdout loses
# what its buffer held at a kill: a few dozen frames); further is a failure long after the job
# stopped going on (a hang that a later error ended), placed after the last frame instead.
_CLOCK_STEPS = 64


def _by_the_clock(data: JobData, cell: tuple[int, str] | None) -> tuple[ReportIteration, ...]:
    """The iteration a failure struck by the job's clock (:mod:`l4_plugin.analysis.clock`):
    from a point the job is known to have reached at a known time, counted at the job's pace
    to the moment the failure began (``_failure_moment``): its progress bar's last frame
    (within the interval the bar's lines came at, ``_clock_reach``); a job without such a bar,
    the latest step a stamped line states (a checkpoint's; within ``_CLOCK_STEPS``). Empty
    when neither places it after an iteration the job printed."""
    if cell is None or not data.node_last_iteration:
        return ()
    printed = max(data.node_last_iteration.values())
    clock = _began(data, bar_clock(data.progress_lines, _periodic(data)))
    # (a bar's own elapsed times first: its rate is an average over saves and slow starts)
    pace = (clock.pace if clock is not None else None) or _stated_pace(data)
    if pace is None:
        return ()
    # (a bar's frames say where the job stood better than a checkpoint's step does: where
    # there is a bar, the steps its lines state are left alone)
    anchor = step_anchor(data.step_lines, printed, _CLOCK_STEPS) if clock is None else None
    points = [(clock.last, _clock_reach(clock))] if clock is not None else []
    points += [] if anchor is None else [(anchor, _CLOCK_STEPS)]
    for (last, shown), reach in points:
        moment = _failure_moment(data, cell[1], shown)
        # A checkpoint's save after the point pauses the iterations for as long as it takes,
        # and whether it had ended when the job failed, no line says (the progress after it is
        # what is missing): the iteration after the last printed, then.
        if moment is None or _saving(data, shown, moment):
            continue
        steps = max(1, math.ceil((moment - shown) / pace))
        if steps <= reach and last + steps > printed:
            return (
                ReportIteration(
                    iteration=last + steps,
                    score=1.0,
                    why="clock",
                    distance=None,
                    threshold=None,
                    events=(cell[1],),
                    missing_events=(),
                ),
            )
    return ()


def _slowed_by_the_clock(data: JobData, slow: Slowdown) -> int | None:
    """The first slow iteration by the job's progress bar's clock (``clock.slowed_from``),
    when it falls no later than the onset the stated rates gave; None: no bar says."""
    clock = bar_clock(data.progress_lines, _periodic(data))
    if clock is None:
        return None
    found = slowed_from(clock, slow.reference, slow.first_iteration)
    return found if found is not None and found <= slow.first_iteration else None


def _began(data: JobData, clock: BarClock | None) -> BarClock | None:
    """``clock`` started no earlier than its node's last line that begins training before the
    bar's last frame ("***** Running training *****", Megatron's "training ...": the bar is
    drawn after it, and another file of the node may hold it)."""
    if clock is None:
        return None
    _, shown = clock.last
    rules = default_stage_rules()
    begun = clock.start
    for (node, tid), cell in data.cells.items():
        info = data.templates.get(tid) if node == clock.node else None
        if (
            info is None
            or rules.role(info.text).stage != "training"
            or rules.role(info.text).iteration
        ):
            continue
        for t in (cell.first_ts, cell.last_ts):
            if begun < t <= shown:
                begun = t
    return replace(clock, start=begun)


def _clock_reach(clock: BarClock) -> int:
    """How many iterations past its last frame a bar's clock may place a failure: within the
    interval its lines came at (Ray forwards a bar ten frames to a line; a bar drawn every
    iteration showed where the job stood, and its clock adds only the error of its start)."""
    (before, _), (last, _) = clock.frames[-2:]
    return last - before


def _stated_pace(data: JobData) -> float | None:
    """Seconds per iteration the job's last progress lines state (Megatron's "elapsed time per
    iteration", NeMo's "train_step_timing", tqdm's "s/it"): the median over its last
    buckets; None: they state none."""
    seconds = data.node_iteration_seconds
    if not seconds:
        return None
    buckets = sorted({b for _, b in seconds})[-_PACE_BUCKETS:]
    stated = [s for (_, b), s in seconds.items() if b in buckets and s > 0]
    return float(np.median(stated)) if stated else None


_PACE_BUCKETS = 5


def _saving(data: JobData, after: float, before: float) -> bool:
    """Whether a line of a checkpoint's save (``_saves``) was printed between ``after`` and
    ``before`` (a node's first or last of the template)."""
    for (_, t), c in data.cells.items():
        info = data.templates.get(t)
        if (
            info is not None
            and _saves(info)
            and (after < c.first_ts < before or after < c.last_ts < before)
        ):
            return True
    return False


def _failure_moment(data: JobData, tid: str, after: float) -> float | None:
    """When the failure began, no earlier than ``after``: the earliest of the best-ranked
    event's first time (template ``tid``) and the moments the job's timeouts say their waits
    began (``temporal.waited``); None when neither falls after ``after`` (the event came before
    the bar's last frame: it is not what stopped the job)."""
    firsts = [c.first_ts for (_, t), c in data.cells.items() if t == tid]
    waits = {t: w for t, info in data.templates.items() if (w := waited(info.message)) is not None}
    stalls = [ts - waits[t] for (_, t), (ts, _) in data.iteration_cells.items() if t in waits]
    moments = [m for m in (*firsts, *stalls) if math.isfinite(m) and m >= after]
    return min(moments) if moments else None


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
        hang=_hang_hint(analysis),
        outsiders={node: hog.why for node, hog in analysis.outsiders.items()},
    )
    return replace(decided, confidence=round(decided.confidence, 3))


def _hang_hint(analysis: Analysis) -> tuple[str, float, str] | None:
    """What the ranks' dumps say of the fault's category, if anything."""
    hang = analysis.hang
    if hang is None or hang.category is None:
        return None
    return hang.category, hang.confidence, hang.why


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
        iterations=_iterations(analysis, data),
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
