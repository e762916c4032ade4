"""The analyses on one job's aggregated tables: estimator inputs in, every result out.

Pure: :func:`analyze` takes the :class:`~l4_plugin.diagnosis.facts.JobData` of the failed job and
the :class:`~l4_plugin.diagnosis.facts.BaselinePool`, builds the inputs of the estimators of
:mod:`l4_plugin.analysis` (cross-job filter, spatial, silence, stage, iterations, stragglers),
runs them and fuses their results. The cluster is read before (``facts``) and written after
(``annotations``); nothing here does I/O.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field, replace

import numpy as np

from l4_plugin.analysis.crossjob import CrossJobFilter
from l4_plugin.analysis.fusion import Fusion, is_error, is_flagged
from l4_plugin.analysis.lexicon import Lexicon, default_lexicon
from l4_plugin.analysis.peers import PeerResult, name_peers
from l4_plugin.analysis.results import (
    BaselineStat,
    EventStat,
    FilterResult,
    FusionResult,
    IterationResult,
    JobTemplateStat,
    KeptTemplate,
    SilenceResult,
    SilentNode,
    Slowdown,
    SpatialResult,
    StageResult,
    StageSpan,
    StragglerResult,
)
from l4_plugin.analysis.silence import SilenceDetector
from l4_plugin.analysis.spatial import SpatialAnalyzer
from l4_plugin.analysis.temporal import (
    IterationAnalyzer,
    SlowdownDetector,
    StageAnalyzer,
    StragglerDetector,
)
from l4_plugin.diagnosis.facts import BaselinePool, JobData
from l4_plugin.ingest.stages import STAGE_ORDER, default_stage_rules

# Below this many exact (one-iteration) buckets the coarse early buckets are analysed too.
_MIN_EXACT_ITERATIONS = 8
# Kernel, BMC and Slurm lines carry no level; these words give them one.
_ERROR_WORDS = re.compile(
    r"\b(?:panic|fatal|error|errors|failed|failure|xid|uncorrectable|abort(?:ed|ing)?|killed|"
    r"segfault|exception|link down|not responding|machine check)\b",
    re.IGNORECASE,
)
_WARN_WORDS = re.compile(
    r"\b(?:warn(?:ing)?|timeout|timed out|down|retry|retrying|throttled|slowdown|corrected)\b",
    re.IGNORECASE,
)
# A recurring event counts as chronic (benign background) when it was already printed this
# many iteration buckets before the job's last one, in at least this many buckets.
_CHRONIC_LEAD = 3
_CHRONIC_BUCKETS = 3
_CHRONIC_FACTOR = 0.35
_LOW_INFO_FACTOR = 0.3
_WORD = re.compile(r"[A-Za-z]{2,}")
_MASKS = re.compile(r"<[A-Z_*]+>")
# A variable other than the rank (masked, or a number masking left as zeros: an error code, a
# version): the line states a fact of its own.
_FACT_MASK = re.compile(r"<(?!RANK>)[A-Z_*]+>|\d")
# An error type or a signal names what happened: a fact, not prose.
_ERROR_TYPE = re.compile(r"\w(?:Error|Exception|Failure)\b|\bSIG[A-Z]{2,}\b")
_BOILERPLATE_FACTOR = 0.4
_REACTION_FACTOR = 0.4
_REACTION_MIN = 0.5  # seconds after the node's first error: later than its own error block
_REACTION_MAX = 60.0
_BLOCK_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class AnalysisOptions:
    """Hyper-parameters of one diagnosis (defaults are the evaluated ones).

    ``crossjob`` False skips cross-job filtering (the ablation); ``spatial_method`` is
    ``combined`` or ``iforest`` (the paper's plain forest); ``dtw_backend`` ``numpy`` or
    ``tslearn``; ``filter_threshold`` is the fraction of baseline jobs a template must appear in
    to be normal.
    """

    crossjob: bool = True
    filter_threshold: float = 0.5
    spatial_method: str = "combined"
    dtw_backend: str = "numpy"
    window: int = 10
    sigma: float = 3.0
    random_state: int = 0
    max_events: int = 20


@dataclass(frozen=True, slots=True)
class Analysis:
    """Every intermediate result of one diagnosis, and the fused ranking."""

    events: tuple[EventStat, ...]
    nodes: tuple[str, ...]
    crossjob: FilterResult
    spatial: SpatialResult
    silence: SilenceResult | None
    stage: StageResult | None
    iterations: IterationResult | None
    stragglers: StragglerResult | None
    fusion: FusionResult
    slowdown: Slowdown | None = None
    peers: PeerResult | None = None
    notes: tuple[str, ...] = ()
    matrix_templates: tuple[str, ...] = ()
    matrix: np.ndarray | None = field(default=None, compare=False)


def inferred_level(text: str) -> str | None:
    """A level for a line that has none (kernel, BMC, Slurm): ERROR / WARN by its words.

    "Corrected" errors are warnings: a corrected PCIe error is the textbook benign anomaly.
    """
    if re.search(r"\bcorrected\b", text, re.IGNORECASE):
        return "WARN"
    if _ERROR_WORDS.search(text):
        return "ERROR"
    if _WARN_WORDS.search(text):
        return "WARN"
    return None


def _stage_at(data: JobData, node: str, ts: float) -> str | None:
    """The stage a node's training logs were in at ``ts``: the latest-starting span containing
    it, else (the line came after the node's last training line: a crash) the last span.

    ``init`` spans are left out: a node's kernel log sits in ``init`` from its first line to its
    last, so its span covers the whole job and says nothing about when a line was printed.
    """
    inside: tuple[float, str] | None = None
    before: tuple[float, str] | None = None
    for (n, stage), (first, last, _, _) in data.stage_spans.items():
        if n != node or stage == "init" or math.isnan(first):
            continue
        if first <= ts <= last and (inside is None or first > inside[0]):
            inside = (first, stage)
        if last <= ts and (before is None or last > before[0]):
            before = (last, stage)
    best = inside or before
    return best[1] if best else None


def event_stats(data: JobData) -> tuple[EventStat, ...]:
    """One :class:`EventStat` per template of the job: per-node first time and count.

    Lines without a level get one from their words (:func:`inferred_level`). Lines of files with
    no stage markers (kernel logs) sit in ``init`` for ingest; when such a line comes after its
    node's start-up, it gets the stage the node's training logs were in at that time.
    """
    first: dict[str, dict[str, float]] = {}
    counts: dict[str, dict[str, int]] = {}
    positions: dict[str, dict[str, float]] = {}
    for (node, tid), cell in data.cells.items():
        first.setdefault(tid, {})[node] = cell.first_ts
        counts.setdefault(tid, {})[node] = cell.count
        positions.setdefault(tid, {})[node] = cell.first_pos
    out = []
    for tid in sorted(first):
        info = data.templates.get(tid)
        level = info.level if info else None
        if level is None and info is not None:
            level = inferred_level(info.text or info.message)
        stage = info.stage if info else None
        if stage == "init" and data.time_unit == "ts":
            node, ts = min(first[tid].items(), key=lambda kv: (kv[1], kv[0]))
            stage = _stage_at(data, node, ts) or stage
        out.append(
            EventStat(
                template_id=tid,
                level=level,
                first_seen=first[tid],
                counts=counts[tid],
                stage=stage,
                positions=positions[tid],
            )
        )
    return tuple(out)


def _boilerplate(data: JobData) -> set[str]:
    """Explanatory prose printed as part of another line's block.

    After a watchdog timeout every rank prints "Watchdog caught collective operation timeout:
    WorkNCCL(SeqNum=…)" and, the same number of times in the same second, "To avoid data
    inconsistency, we are taking the entire process down." The second line states no fact of
    its own: it has no variable but the rank (no number, no error code), names no error type,
    and only ever appears beside the first. Lines printed on a single node are never
    boilerplate (a root cause's own lines).
    """
    per: dict[str, dict[str, tuple[int, float]]] = {}
    for (node, tid), cell in data.cells.items():
        per.setdefault(tid, {})[node] = (cell.count, cell.first_ts)
    groups: dict[tuple[tuple[str, int], ...], list[str]] = {}
    for tid, cells in per.items():
        if len(cells) >= 2:
            key = tuple(sorted((n, c) for n, (c, _) in cells.items()))
            groups.setdefault(key, []).append(tid)
    out: set[str] = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        first = {t: min(f for _, f in per[t].values()) for t in members}
        text = {t: data.templates[t].text if t in data.templates else "" for t in members}
        factual = [t for t in members if _FACT_MASK.search(text[t])]
        for t in members:
            if t in factual or _ERROR_TYPE.search(text[t]) or not _WORD.search(text[t]):
                continue
            if any(abs(first[f] - first[t]) <= _BLOCK_SECONDS for f in factual):
                out.add(t)
    return out


def discounts(
    data: JobData,
    stragglers: StragglerResult | None,
    slowdown: Slowdown | None = None,
    events: tuple[EventStat, ...] = (),
    kept: frozenset[str] = frozenset(),
) -> dict[str, tuple[float, str]]:
    """Evidence against events (see ``Fusion.fit``): chronic background, empty lines, reactions.

    *Chronic*: the template was printed in at least ``_CHRONIC_BUCKETS`` iteration buckets and
    already ``_CHRONIC_LEAD`` buckets before the job's last one — corrected PCIe errors,
    power-cap and slow-dataloader warnings repeated for hours are background, not the failure.
    Lines without iteration (kernel logs) are chronic when printed at least that many times
    and first before that bucket started. A straggler's own slowdown lines are exempt, and so are
    the lines that start with a job-wide slowdown: they recur because the cause does.
    *Boilerplate*: see :func:`_boilerplate`. *Low information*: a template with fewer than three
    words of text (``Last error:``, a stack frame); an empty one (a bare header) never counts.
    *Reaction*: see :func:`_reactions` (of ``events``, judged against the ``kept`` errors); the
    other reasons win where both apply.
    """
    out: dict[str, tuple[float, str]] = {}
    buckets = sorted(data.iteration_spans)
    slow = {s.node for s in stragglers.stragglers} if stragglers else set()
    per: dict[str, dict[str, tuple[int, float, float]]] = {}
    for (node, tid), cell in data.cells.items():
        per.setdefault(tid, {})[node] = (cell.count, cell.first_ts, cell.last_ts)
    if len(buckets) > _CHRONIC_LEAD:
        cutoff = buckets[-1 - _CHRONIC_LEAD]
        seen: dict[str, list[int]] = {}
        for it, tid in data.iteration_cells:
            seen.setdefault(tid, []).append(it)
        starts = [t for (_, it), t in data.node_iteration_start.items() if it == cutoff]
        cut_ts = min(starts) if starts and data.time_unit == "ts" else None
        onset = set(slowdown.events) if slowdown else set()
        for tid, cells in per.items():
            if (slow and set(cells) <= slow) or tid in onset:
                continue
            # Kernel / BMC lines are placed on iterations by their own clock: judged by time.
            its = None if tid in data.job.system_templates else seen.get(tid)
            if its is not None:
                chronic = len(its) >= _CHRONIC_BUCKETS and min(its) <= cutoff
            else:
                # Kernel / BMC lines carry no iteration: judge them by time.
                first = min(c[1] for c in cells.values())
                total = sum(c[0] for c in cells.values())
                chronic = cut_ts is not None and total >= _CHRONIC_BUCKETS and first < cut_ts
            if chronic:
                out[tid] = (_CHRONIC_FACTOR, "chronic-before-failure")
    for tid in _boilerplate(data):
        out.setdefault(tid, (_BOILERPLATE_FACTOR, "boilerplate-of-block"))
    for tid, info in data.templates.items():
        # The template text is authoritative once an exemplar was read: a bare header line
        # ("W0805 09:34:55.000000 55097 run.py:779] ") has an empty template, not its raw text.
        text = info.text if info.message else info.text or info.message
        if tid in out:
            continue
        if not text.strip():
            out[tid] = (0.0, "empty")
        elif len(_WORD.findall(_MASKS.sub(" ", text))) < 3:
            out[tid] = (_LOW_INFO_FACTOR, "low-information")
    for tid in _reactions(data, events, kept):
        out.setdefault(tid, (_REACTION_FACTOR, "reaction-to-error"))
    return out


def timed_in_stage(
    events: tuple[EventStat, ...], data: JobData, stage: str | None
) -> tuple[EventStat, ...]:
    """Events whose first occurrence is taken within the failing ``stage`` where they occur in it.

    The torchrun agent prints the same warning header at start-up and when it tears the job
    down; what matters for "which came first" near the failure is the occurrence in the stage
    the job failed in, not the one at start-up. Nodes that printed the template only outside
    that stage get the latest in-stage time, so they never make the event look earlier.
    """
    if stage is None or not data.stage_first:
        return events
    out = []
    for e in events:
        inside = {
            n: data.stage_first[(n, e.template_id, stage)]
            for n in e.first_seen
            if (n, e.template_id, stage) in data.stage_first
        }
        if not inside or inside == dict(e.first_seen):
            out.append(e)
            continue
        latest = max(inside.values())
        out.append(replace(e, first_seen={n: inside.get(n, latest) for n in e.first_seen}))
    return tuple(out)


def _periodic(data: JobData, tid: str) -> bool:
    info = data.templates.get(tid)
    return info is not None and info.stage in ("training", "checkpointing")


def cross_job(
    data: JobData, events: tuple[EventStat, ...], pool: BaselinePool, options: AnalysisOptions
) -> FilterResult:
    """Split the job's templates into kept and dropped against the baseline pool."""
    n_nodes = max(len(data.nodes), 1)
    work = float(max(data.iterations_reached, 1))
    stats = []
    base: dict[str, BaselineStat] = {}
    total = len(pool.jobs) if options.crossjob else 0
    for e in events:
        periodic = _periodic(data, e.template_id)
        rate = e.count / n_nodes / (work if periodic else 1.0)
        stats.append(JobTemplateStat(e.template_id, e.count, len(e.counts), rate))
        row = pool.stats.get(e.template_id)
        if row is not None and total:
            jobs, fraction, per_node, per_iteration = row
            base[e.template_id] = BaselineStat(
                jobs, total, fraction, per_iteration if periodic else per_node
            )
    result = (
        CrossJobFilter(threshold=options.filter_threshold)
        .fit(base, n_baseline_jobs=total)
        .transform(stats)
    )
    if total and pool.jobs and all(j.system_logs is False for j in pool.jobs):
        # No baseline came with kernel logs: a kernel line's absence from them proves nothing,
        # so such lines are kept without the absent-in-baseline evidence.
        result = replace(
            result,
            kept=tuple(
                KeptTemplate(k.template_id, "no-baseline", k.rate_ratio)
                if k.template_id in data.job.system_templates and k.reason == "absent-in-baseline"
                else k
                for k in result.kept
            ),
        )
    return result


def _spatial(
    data: JobData,
    events: tuple[EventStat, ...],
    nodes: list[str],
    kept: frozenset[str],
    options: AnalysisOptions,
) -> tuple[SpatialResult, np.ndarray]:
    row = {n: i for i, n in enumerate(nodes)}
    counts = np.zeros((len(nodes), len(events)))
    for j, e in enumerate(events):
        for n, c in e.counts.items():
            counts[row[n], j] = c
    weights = np.array([1.0 if e.template_id in kept else 0.0 for e in events])
    spatial = SpatialAnalyzer(
        method=options.spatial_method, random_state=options.random_state, n_attributions=12
    )
    spatial.fit(
        counts,
        nodes,
        [e.template_id for e in events],
        [e.level for e in events],
        template_weights=weights,
    )
    return spatial.result_, counts


# A node that printed an error of its own this close to its last line died loudly: it stopped,
# but it is not what "silent" warns of (a hung or dead rank that prints nothing).
_LOUD_END_SECONDS = 60.0
_NAMED_SILENT_SCORE = 0.9


def _node_last(data: JobData) -> dict[str, float]:
    """Each node's last line time."""
    last: dict[str, float] = {}
    for (node, _), cell in data.cells.items():
        last[node] = max(last.get(node, -math.inf), cell.last_ts)
    return last


def _loud_ends(
    data: JobData, events: tuple[EventStat, ...], kept: frozenset[str], last: dict[str, float]
) -> set[str]:
    """Nodes whose logging (``last``: each node's last line) ended with an error of their own
    (kept by cross-job filtering)."""
    errors = {e.template_id for e in events if e.template_id in kept and is_error(e.level)}
    last_error: dict[str, float] = {}
    for (node, tid), cell in data.cells.items():
        if tid in errors:
            last_error[node] = max(last_error.get(node, -math.inf), cell.last_ts)
    return {n for n, t in last_error.items() if t >= last[n] - _LOUD_END_SECONDS}


def _silence(
    data: JobData,
    events: tuple[EventStat, ...],
    nodes: list[str],
    kept: frozenset[str] = frozenset(),
    peers: PeerResult | None = None,
) -> SilenceResult:
    """Nodes whose own logging stopped while the job went on (:mod:`~l4_plugin.analysis.silence`),
    less those that ended with an error of their own (they died loudly: their error says why),
    plus nodes the peers' failure evidence names that printed nothing from before it on: a node
    lost seconds before its peers give up is as silent as one lost an hour before."""
    result = _silence_detector(data, events, nodes)
    if data.time_unit != "ts":
        return result
    last = _node_last(data)
    loud = _loud_ends(data, events, kept, last)
    silent = [s for s in result.silent if s.node not in loud]
    stopped = tuple(s for s in result.silent if s.node in loud)
    found = {s.node for s in silent}
    for named in peers.named if peers is not None else ():
        if named.node in found or named.node in loud or named.node not in last:
            continue
        said = [
            data.cells[(w, t)].first_ts
            for w in named.witnesses
            for t in named.templates
            if (w, t) in data.cells
        ]
        if said and last[named.node] <= min(said):
            silent.append(
                SilentNode(
                    node=named.node,
                    score=_NAMED_SILENT_SCORE * named.share,
                    last_ts=last[named.node],
                    last_iteration=data.node_last_iteration.get(named.node),
                    lag_seconds=min(said) - last[named.node],
                    lag_iterations=None,
                    missing_periodic=(),
                    missing_new=named.templates,
                )
            )
    silent.sort(key=lambda s: (-s.score, s.node))
    return replace(result, silent=tuple(silent), stopped=stopped)


def _silence_detector(
    data: JobData, events: tuple[EventStat, ...], nodes: list[str]
) -> SilenceResult:
    """Silent nodes judged among peers of the same role: nodes whose ranks print iteration
    lines against each other, the quiet ones (earlier pipeline stages, ranks other than 0)
    against each other; a role with a single node is judged against every node."""
    progress = data.job.progress_nodes
    groups = (
        [sorted(n for n in nodes if n in progress), sorted(n for n in nodes if n not in progress)]
        if progress
        else [nodes]
    )
    groups = [g for g in groups if g]
    if len(groups) == 1 or any(len(g) < 2 for g in groups):
        return _silence_among(data, events, nodes, progress)
    parts = [_silence_among(data, events, g, progress) for g in groups]
    silent = tuple(sorted((s for p in parts for s in p.silent), key=lambda s: (-s.score, s.node)))
    whole = _silence_among(data, events, nodes, progress)
    return replace(whole, silent=silent)


def _silence_among(
    data: JobData,
    events: tuple[EventStat, ...],
    nodes: list[str],
    progress: frozenset[str] | None,
) -> SilenceResult:
    row = {n: i for i, n in enumerate(nodes)}
    last_seen = np.full((len(nodes), len(events)), np.nan)
    col = {e.template_id: j for j, e in enumerate(events)}
    for (node, tid), cell in data.cells.items():
        if node in row:
            last_seen[row[node], col[tid]] = cell.last_ts
    last_ts = np.nanmax(np.where(np.isnan(last_seen), -np.inf, last_seen), axis=1)
    last_ts = np.where(np.isinf(last_ts), np.nan, last_ts)
    # The iteration a node reached counts for nodes that print iterations themselves; the
    # others' lines are placed on the job's timeline, which says nothing about them stopping.
    last_it = np.array(
        [
            float(data.node_last_iteration.get(n, math.nan))
            if progress is None or n in progress
            else math.nan
            for n in nodes
        ],
        dtype=np.float64,
    )
    detector = SilenceDetector()
    if data.time_unit != "ts":
        # Positions are per file: they say nothing about when a node stopped.
        return detector.fit(nodes, last_iteration=last_it).result_
    return detector.fit(
        nodes,
        last_ts=last_ts,
        last_iteration=None if np.isnan(last_it).all() else last_it,
        last_seen=last_seen,
        templates=[e.template_id for e in events],
    ).result_


def _stage_from_stack(
    data: JobData, stage: StageResult | None, events: tuple[EventStat, ...], kept: frozenset[str]
) -> StageResult | None:
    """When no rank printed a stage marker (every line in ``init``: a pasted excerpt), the
    earliest kept error record whose stack names a stage says where the job failed."""
    if stage is not None and (
        stage.stage != "init" or any(s != "init" for _, s in data.stage_spans)
    ):
        return stage
    rules = default_stage_rules()
    errors = sorted(
        (e for e in events if e.template_id in kept and is_error(e.level)),
        key=lambda e: (e.first if e.first is not None else math.inf, e.template_id),
    )
    for e in errors:
        info = data.templates.get(e.template_id)
        found = rules.stage_of_stack(f"{info.text}\n{info.message}") if info else None
        if found is not None:
            if stage is None:
                return StageResult(stage=found, order=STAGE_ORDER, nodes=(), lagging=())
            return replace(stage, stage=found, lagging=())
    return stage


def _stage(data: JobData) -> StageResult | None:
    spans = []
    for (node, stage), (f, last, fp, lp) in data.stage_spans.items():
        if data.time_unit == "ts" and not (math.isnan(f) or math.isnan(last)):
            spans.append(StageSpan(node, stage, f, max(last, f)))
        else:
            spans.append(StageSpan(node, stage, fp, max(lp, fp)))
    if not spans:
        return None
    return StageAnalyzer(order=STAGE_ORDER).fit(spans).result_


def _iteration_buckets(data: JobData) -> list[int]:
    buckets = sorted(data.iteration_spans)
    exact = [b for b in buckets if data.iteration_spans[b] == 1]
    return exact if len(exact) >= _MIN_EXACT_ITERATIONS else buckets


def _iterations(
    data: JobData, kept: frozenset[str], options: AnalysisOptions
) -> IterationResult | None:
    buckets = _iteration_buckets(data)
    if len(buckets) < 2:
        return None
    per: dict[int, list[tuple[float, str]]] = {b: [] for b in buckets}
    for (it, tid), (first, _count) in data.iteration_cells.items():
        if it in per and tid in kept:
            per[it].append((first, tid))
    sequences = [tuple(t for _, t in sorted(per[b])) for b in buckets]
    analyzer = IterationAnalyzer(
        window=options.window, sigma=options.sigma, backend=options.dtw_backend
    )
    return analyzer.fit(sequences, buckets).result_


def _stragglers(data: JobData, nodes: list[str]) -> StragglerResult | None:
    buckets = sorted(data.iteration_spans)
    if len(buckets) < 4 or len(nodes) < 3:
        return None
    durations = np.full((len(nodes), len(buckets) - 1), np.nan)
    for i, node in enumerate(nodes):
        for k in range(len(buckets) - 1):
            a = data.node_iteration_start.get((node, buckets[k]))
            b = data.node_iteration_start.get((node, buckets[k + 1]))
            if a is not None and b is not None and b >= a:
                durations[i, k] = (b - a) / max(data.iteration_spans[buckets[k]], 1)
    if np.isnan(durations).all():
        return None
    return StragglerDetector().fit(durations, nodes, buckets[:-1]).result_


def _slowdown(data: JobData, kept: frozenset[str], n_nodes: int) -> Slowdown | None:
    """The job-wide slowdown (from the seconds per iteration its iteration lines state) and the
    events that start with it and keep up: first printed within one bucket of its onset, before
    the job's last bucket, in two buckets or more, by less than half of the nodes (a cause is
    local; the slowdown is not). Kernel and BMC lines carry no iteration: they count when printed
    only by nodes that have such events, more than once, from about when the onset happened
    (:func:`_bucket_times`; without timestamps on iteration lines the estimate runs early,
    checkpoint saves are not in it, hence the wide margin after it)."""
    per = _bucket_medians(data.node_iteration_seconds)
    its = [b for b in sorted(data.iteration_spans) if b in per]
    if len(its) < 5:
        return None
    secs = [per[b] for b in its]
    found = SlowdownDetector().fit(secs, its).result_
    if found is None:
        return None
    k = its.index(found.first_iteration)
    lo, hi = its[max(0, k - 1)], its[min(len(its) - 1, k + 1)]
    last = max(data.iteration_spans)
    first_bucket: dict[str, int] = {}
    n_buckets: dict[str, int] = {}
    system = data.job.system_templates
    for it, tid in data.iteration_cells:
        if tid in system:
            # Kernel / BMC lines are placed on the job's timeline by their own clock, which
            # drifts from the ranks': judged by time below, with its margins.
            continue
        first_bucket[tid] = min(first_bucket.get(tid, it), it)
        n_buckets[tid] = n_buckets.get(tid, 0) + 1
    nodes_of: dict[str, set[str]] = {}
    for node, tid in data.cells:
        nodes_of.setdefault(tid, set()).add(node)

    def local(tid: str) -> bool:
        return tid in kept and 0 < len(nodes_of.get(tid, ())) < 0.5 * n_nodes

    events = {
        t
        for t, b in first_bucket.items()
        if lo <= b <= hi and b < last and n_buckets[t] >= 2 and local(t)
    }
    nodes = set().union(*(nodes_of[t] for t in events)) if events else set()
    at = _bucket_times(data, its, secs)
    if nodes and at:
        t_lo = at[lo] - 30.0
        t_hi = at[hi] + secs[its.index(hi)] * max(data.iteration_spans[hi], 1) + 120.0
        for tid, cells in nodes_of.items():
            if tid in first_bucket or tid in events or not local(tid) or not cells <= nodes:
                continue
            first = min(data.cells[(n, tid)].first_ts for n in cells)
            last_ts = max(data.cells[(n, tid)].last_ts for n in cells)
            if t_lo <= first <= t_hi and last_ts > first:
                events.add(tid)
    return replace(found, events=tuple(sorted(events)), nodes=tuple(sorted(nodes)))


def _reactions(data: JobData, events: tuple[EventStat, ...], kept: frozenset[str]) -> set[str]:
    """Lines a node prints in reaction to its own failure, not about it.

    When a worker dies, torchrun's agent on that node sends SIGTERM to the other local workers
    ("Sending process N closing signal SIGTERM") a moment later; Slurm says it waits for the job
    step to finish. Such a line is below ERROR level, printed by less than half of the nodes
    (a job-wide teardown is the cascade, reported as such), names no peer address (NCCL's "Got
    completion from peer <IP>" says where the failure is), and on every node that printed it
    first came ``_REACTION_MIN`` to ``_REACTION_MAX`` seconds after that node's first error (of
    the events cross-job filtering kept). A root cause's warning comes before the errors it
    causes, and a line of the same error block (same second) is not a reaction. Needs
    wall-clock times.
    """
    if data.time_unit != "ts":
        return set()
    n_nodes = max(len(data.nodes), 1)
    first_error: dict[str, float] = {}
    for e in events:
        if e.template_id in kept and is_error(e.level):
            for node, t in e.first_seen.items():
                first_error[node] = min(first_error.get(node, math.inf), t)
    out: set[str] = set()
    for e in events:
        if e.template_id not in kept or is_error(e.level) or not e.first_seen:
            continue
        info = data.templates.get(e.template_id)
        if len(e.first_seen) >= 0.5 * n_nodes or (info is not None and "<IP>" in info.text):
            continue
        if all(
            node in first_error
            and first_error[node] + _REACTION_MIN < t <= first_error[node] + _REACTION_MAX
            for node, t in e.first_seen.items()
        ):
            out.add(e.template_id)
    return out


def _bucket_medians(per_node: dict[tuple[str, int], float]) -> dict[int, float]:
    """The median over nodes of a (node, iteration bucket) → value table, per bucket (finite
    values only)."""
    per: dict[int, list[float]] = {}
    for (_, b), value in per_node.items():
        if math.isfinite(value):
            per.setdefault(b, []).append(value)
    return {b: float(np.median(v)) for b, v in per.items()}


def _bucket_times(data: JobData, its: list[int], secs: list[float]) -> dict[int, float]:
    """When each iteration bucket started: the median over nodes of its first line's time when
    iteration lines carry timestamps (the times rise from bucket to bucket), else the training
    start plus the stated durations before it (tqdm lines have no timestamp of their own)."""
    if data.time_unit != "ts":
        return {}
    median = _bucket_medians(data.node_iteration_start)
    rising = [median[b] for b in its if b in median]
    steps = [y > x for x, y in itertools.pairwise(rising)]
    if len(rising) == len(its) and steps and sum(steps) >= 0.8 * len(steps):
        return median
    starts = [v[0] for (_, st), v in data.stage_spans.items() if st == "training"]
    starts = [t for t in starts if math.isfinite(t)]
    if not starts:
        return {}
    t = float(np.median(starts))
    at: dict[int, float] = {}
    for b, sec in zip(its, secs, strict=True):
        at[b] = t
        t += sec * max(data.iteration_spans[b], 1)
    return at


_PRE_TRAINING = frozenset({"init", "data_loading", "model_loading"})
# With nothing to compare with, the failure lexicon's words are evidence: a line naming a known
# failure (weight w in the lexicon) gets w × _PRIOR_WEIGHT. The words of a consequence (a
# watchdog timeout, the launcher's teardown) rank the line later, with or without a baseline.
_PRIOR_WEIGHT = 0.6
_CASCADE_WORDS_FACTOR = 0.5
# A condition its own words say was handled (corrected, a software power cap) ranks after the
# failure, with or without a baseline.
_BENIGN_WORDS_FACTOR = 0.5


def lexicon_priors(
    data: JobData, lexicon: Lexicon
) -> tuple[dict[str, tuple[float, str]], dict[str, tuple[float, str]]]:
    """(priors, ordering) of the job's templates from the failure lexicon's words: evidence for
    a line naming a known failure, and the factor that ranks a consequence's words later.

    The words are those of the template and of its exemplar record
    (:meth:`~l4_plugin.analysis.lexicon.Lexicon.classify_record`).
    """
    priors: dict[str, tuple[float, str]] = {}
    against: dict[str, tuple[float, str]] = {}
    for tid, info in data.templates.items():
        term = lexicon.classify_record(f"{info.text}\n{info.message.strip()}")
        if term is None:
            continue
        if term.cascade:
            against[tid] = (_CASCADE_WORDS_FACTOR, "consequence-words")
        elif term.benign:
            against[tid] = (_BENIGN_WORDS_FACTOR, "benign-words")
        else:
            priors[tid] = (_PRIOR_WEIGHT * term.weight, f"failure-words:{term.category}")
    return priors, against


def _peers(
    data: JobData, events: tuple[EventStat, ...], kept: frozenset[str], stage: str | None
) -> PeerResult:
    """Which nodes the failure evidence names (:mod:`l4_plugin.analysis.peers`).

    Only warning and error lines that cross-job filtering kept are statements; once the job got
    past start-up, lines of the start-up stages are not (a rank retrying the rendezvous store
    names its host in every healthy run too).
    """
    level = {e.template_id: e.level for e in events}
    where = {e.template_id: e.stage for e in events}
    late = stage is not None and stage not in _PRE_TRAINING

    def statement(tid: str) -> bool:
        if tid not in kept or not is_flagged(level.get(tid)):
            return False
        return not (late and where.get(tid) in _PRE_TRAINING)

    return name_peers(
        data.nodes,
        data.announcements,
        ((n, t, m) for n, t, m in data.peer_lines if statement(t)),
    )


def analyze(data: JobData, pool: BaselinePool, options: AnalysisOptions) -> Analysis:
    """Run every analysis on one job and fuse the results (see the module docstring)."""
    events = event_stats(data)
    nodes = data.nodes
    notes: list[str] = []
    crossjob = cross_job(data, events, pool, options)
    if crossjob.no_baseline:
        notes.append(
            "no baseline: no successful job of the same configuration, so cross-job filtering "
            "kept every event"
            if options.crossjob
            else "cross-job filtering disabled"
        )
    kept = crossjob.kept_ids
    spatial, matrix = _spatial(data, events, nodes, kept, options)
    if not spatial.defined:
        notes.append(spatial.note)
    stage = _stage(data)
    # The stage the failing record's stack names, reported when no rank printed a marker; the
    # fusion keeps judging "in the failing stage" by the lines' own stages.
    reported = _stage_from_stack(data, stage, events, kept)
    peers = _peers(data, events, kept, stage.stage if stage else None)
    silence = _silence(data, events, nodes, kept, peers) if len(nodes) >= 2 else None
    iterations = _iterations(data, kept, options)
    if iterations is None:
        notes.append("no iterations found: the temporal comparison of iterations did not run")
    stragglers = _stragglers(data, nodes)
    slowdown = _slowdown(data, kept, len(nodes))
    events = timed_in_stage(events, data, stage.stage if stage else None)
    # The lexicon's words order every diagnosis (a consequence after what explains it); with
    # nothing to compare with they are also evidence for a line.
    priors, consequences = lexicon_priors(data, default_lexicon())
    if not crossjob.no_baseline:
        priors = {}
    fusion = (
        # Kernel and BMC clocks tick in whole seconds and drift from the ranks' clocks: "at the
        # same moment" is a few seconds wide.
        Fusion(max_events=options.max_events, root_window=5.0)
        .fit(
            events,
            nodes,
            crossjob=crossjob,
            spatial=spatial,
            silence=silence,
            iterations=iterations,
            stage=stage,
            stragglers=stragglers,
            slowdown=slowdown,
            discounts=discounts(data, stragglers, slowdown, events, kept),
            peers=peers,
            priors=priors,
            ordering=consequences,
        )
        .result_
    )
    if reported is not None and (stage is None or reported.stage != stage.stage):
        fusion = replace(fusion, stage=reported.stage)
    return Analysis(
        events=events,
        nodes=tuple(nodes),
        crossjob=crossjob,
        spatial=spatial,
        silence=silence,
        stage=stage,
        iterations=iterations,
        stragglers=stragglers,
        fusion=fusion,
        slowdown=slowdown,
        peers=peers,
        notes=tuple(notes),
        matrix_templates=tuple(e.template_id for e in events),
        matrix=matrix,
    )
