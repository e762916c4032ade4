"""The recipe of one diagnosis: estimator inputs in, every result out, in a fixed order.

Pure: :func:`analyze` takes the :class:`~l4_plugin.analysis.tables.JobData` of the failed job and
the :class:`~l4_plugin.analysis.tables.BaselinePool`, builds the inputs of the estimators of
:mod:`l4_plugin.analysis` (cross-job filter, spatial, peers, silence, stage, iterations,
stragglers, slowdown), runs them, gathers the evidence heuristics of
:mod:`l4_plugin.analysis.evidence` and fuses everything. Every tuning constant is a field of
:class:`~l4_plugin.analysis.params.AnalysisOptions`. The cluster is read before
(:mod:`l4_plugin.diagnosis.queries`) and written after (``annotations``); nothing here does I/O.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from l4_plugin.analysis.crossjob import CrossJobFilter
from l4_plugin.analysis.evidence import (
    PORT_ERROR,
    at_stage_start,
    discounts,
    event_stats,
    killed_on,
    lexicon_priors,
    named_causes,
    record_terms,
    symptoms,
    teardown,
    telling_consequences,
    timed_in_stage,
)
from l4_plugin.analysis.failing_stage import StageReader, failing_stage, last_marker
from l4_plugin.analysis.fusion import Fusion, consequences_of
from l4_plugin.analysis.hang import HangResult
from l4_plugin.analysis.hang import analyse as analyse_hang
from l4_plugin.analysis.lexicon import Term, default_lexicon
from l4_plugin.analysis.memory import Hog, outsiders
from l4_plugin.analysis.params import AnalysisOptions
from l4_plugin.analysis.peers import AddressBook, PeerResult, name_peers
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
from l4_plugin.analysis.tables import BaselinePool, JobData
from l4_plugin.analysis.temporal import (
    IterationAnalyzer,
    SlowdownDetector,
    StageAnalyzer,
    StragglerDetector,
    progress_templates,
)
from l4_plugin.analysis.versions import OddVersion, odd_versions
from l4_plugin.records import PRE_TRAINING_STAGES, STAGE_ORDER, is_error, is_flagged

__all__ = ["Analysis", "analyze", "cross_job"]


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
    #: What the ranks' Flight Recorder traces and stacks say (None: the job left none).
    hang: HangResult | None = None
    #: Nodes whose out-of-memory report shows another's process holding the most memory.
    outsiders: Mapping[str, Hog] = field(default_factory=dict)
    #: The marker the job printed last (node, template; ``failing_stage.last_marker``).
    last_marker: tuple[str, str] | None = None


def _periodic(data: JobData, tid: str) -> bool:
    info = data.templates.get(tid)
    return info is not None and info.stage in ("training", "checkpointing")


# How strongly a line that shows a node's odd version is evidence for itself (with the filter's
# "odd-version", about as much as an absent line that sets its node apart).
_ODD_VERSION_PRIOR = 0.6


def _filtered(
    data: JobData, events: tuple[EventStat, ...], pool: BaselinePool, options: AnalysisOptions
) -> tuple[FilterResult, tuple[OddVersion, ...]]:
    """The cross-job filter's result, with the lines that show a node's odd version kept, and
    those odd versions."""
    odd = odd_versions(data.version_lines)
    return _with_odd_versions(cross_job(data, events, pool, options), odd), odd


def _with_odd_versions(crossjob: FilterResult, odd: Sequence[OddVersion]) -> FilterResult:
    """The filter's result with the lines that show a node's odd version kept (the baselines
    print the same line, with the common version)."""
    kept = crossjob.kept_ids
    extra = {o.template_id for o in odd} - kept
    if not extra:
        return crossjob
    return replace(
        crossjob,
        kept=tuple(
            sorted(
                (*crossjob.kept, *(KeptTemplate(t, "odd-version", 1.0) for t in extra)),
                key=lambda k: k.template_id,
            )
        ),
        dropped=tuple(d for d in crossjob.dropped if d.template_id not in extra),
    )


def _hardware(terms: Mapping[str, Term]) -> frozenset[str]:
    """The templates whose words name a device's, a link's or a node's fault."""
    return frozenset(
        t for t, term in terms.items() if term.says_cause and term.category.startswith("hardware/")
    )


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
        # (a line naming its node, found in baselines run on other nodes by its host-blind text)
        row = pool.stats.get(e.template_id) or pool.stats.get(pool.aliases.get(e.template_id, ""))
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
            if n in row:  # not the job's own files
                counts[row[n], j] = c
    weights = np.array([1.0 if e.template_id in kept else 0.0 for e in events])
    spatial = SpatialAnalyzer(
        method=options.spatial_method,
        random_state=options.random_state,
        n_attributions=options.n_attributions,
    )
    spatial.fit(
        counts,
        nodes,
        [e.template_id for e in events],
        [e.level for e in events],
        template_weights=weights,
    )
    return spatial.result_, counts


def _node_last(data: JobData) -> dict[str, float]:
    """Each node's last line time of its ranks' own output (``_activity``)."""
    last: dict[str, float] = {}
    aux = _aux(data)
    for (node, tid), cell in data.cells.items():
        if tid not in aux:
            last[node] = max(last.get(node, -math.inf), cell.last_ts)
    return last


def _aux(data: JobData) -> frozenset[str]:
    """Templates that say nothing of whether a node's training processes still ran: what
    only kernel and system logs, launcher agents and the job's own files printed (a node's
    kernel log that ends early, or its agent's teardown after its ranks hung, is no sign of
    life or death of its ranks)."""
    if data.job.aux_templates is not None:
        return data.job.aux_templates
    return data.job.system_templates


def _loud_ends(
    data: JobData,
    events: tuple[EventStat, ...],
    kept: frozenset[str],
    last: dict[str, float],
    options: AnalysisOptions,
) -> set[str]:
    """Nodes whose logging (``last``: each node's last line) ended with an error of their own
    (kept by cross-job filtering)."""
    aux = _aux(data)  # an agent's report of its ranks' death is not their own last word
    errors = {
        e.template_id
        for e in events
        if e.template_id in kept and is_error(e.level) and e.template_id not in aux
    }
    last_error: dict[str, float] = {}
    for (node, tid), cell in data.cells.items():
        if tid in errors:
            last_error[node] = max(last_error.get(node, -math.inf), cell.last_ts)
    return {n for n, t in last_error.items() if t >= last[n] - options.loud_end_seconds}


#: torchelastic's agent on a worker that exited (``api.py``: "failed (exitcode: -6) local_rank:
#: 6 (pid: …) of binary: …"): the worker died, and the agent, alive, said so.
_AGENT_REPORT = re.compile(r"failed \(exitcode: ")


def _reported_dead(data: JobData, last: dict[str, float], options: AnalysisOptions) -> set[str]:
    """Nodes whose launcher agent reported a worker's death right after the node's ranks
    stopped printing (within ``loud_end_seconds`` of ``last``): they died loudly, whatever time
    their own last words took (a rank's abort on stderr with no stamp of its own takes the
    stamp before it, printed at start-up). A hung rank's agent reports it only when the job is
    torn down, long after, with every other node's agent; an agent that reported its worker's
    death well before the other nodes' agents did (by more than ``loud_end_seconds``) saw it
    die on its own, before any teardown, however long its ranks had been quiet (a rank that
    prints no progress of its own)."""
    reports = {t for t, info in data.templates.items() if _AGENT_REPORT.search(info.text)}
    first = _first_reports(data, reports, last.keys())
    out: set[str] = set()
    # (the others' median, leaving the node out where there are few; among many, every node's)
    everyone = float(np.median(list(first.values()))) if first else math.inf
    for node, at in first.items():
        if len(first) > _FEW_REPORTS:
            teardown = everyone
        else:
            others = [t for n, t in first.items() if n != node]
            teardown = float(np.median(others)) if others else math.inf
        if at <= last[node] + options.loud_end_seconds or at + options.loud_end_seconds < teardown:
            out.add(node)
    return out


#: Agents' reports below which a node's own is left out of the others' median.
_FEW_REPORTS = 50

#: torchelastic's agent starting its workers (``elastic/agent/server/api.py``: "[default]
#: starting workers for entrypoint: python", "… Rendezvous'ing worker group", "… Starting
#: worker group"; ``launcher/api.py``: "Starting elastic_operator with launch configs:"): it
#: runs on every node of a torchrun job and logs its start-up there. At torchrun's default log
#: level (WARNING) those lines are not printed; what is, on every node that starts more than
#: one worker without ``OMP_NUM_THREADS`` set, is ``run.py``'s warning "Setting
#: OMP_NUM_THREADS environment variable for each process to be 1 in default, …".
_AGENT = re.compile(
    r"\] (?:starting workers for entrypoint|Rendezvous'ing worker group|Starting worker group)"
    r"|Starting elastic_operator with launch configs"
    r"|Setting OMP_NUM_THREADS environment variable for each process"
)
#: What a living agent prints when the job is torn down (``multiprocessing/api.py``): it stops
#: its workers ("Sending process 2932826 closing signal SIGTERM") or reports one dead.
_TEARDOWN = re.compile(r"closing signal SIG|failed \(exitcode: ")


def _unreported(data: JobData, last: dict[str, float]) -> dict[str, tuple[float, tuple[str, ...]]]:
    """Nodes whose launcher agent ran (it logged its start-up) and said nothing when the job
    was torn down, where most of the other nodes' agents stopped or reported their workers: the
    machine died with its processes (a kernel panic, a power loss), and no line of its own
    says so. Node → (when the others' agents first reported, the report templates). A hung
    rank's agent lives on and reports at the teardown with the others. A node whose lines never
    got past start-up is left out: a job that fails while starting fails on every node within
    seconds, and what tears it down (srun's ``--kill-on-bad-exit``, a PyTorchJob's clean-up of
    its pods) kills the processes still starting before their agent reports."""
    agents = {t for t, info in data.templates.items() if _AGENT.search(info.text)}
    reports = {t for t, info in data.templates.items() if _TEARDOWN.search(info.text)}
    if not agents or not reports:
        return {}
    ran = {n for (n, t) in data.cells if t in agents}
    first = _first_reports(data, reports, ran)
    starting = _only_starting(data)
    quiet = sorted(n for n in ran if n not in first and n in last and n not in starting)
    if len(first) < 2 or 2 * len(first) <= len(ran) or not quiet:
        return {}
    at = min(first.values())
    said = tuple(sorted({t for (n, t) in data.cells if t in reports and n in first}))
    return {n: (at, said) for n in quiet if last[n] <= at}


def _only_starting(data: JobData) -> set[str]:
    """The nodes whose every line is of a start-up stage (``PRE_TRAINING_STAGES``)."""
    stages: dict[str, set[str]] = {}
    for node, stage in data.stage_spans:
        stages.setdefault(node, set()).add(stage)
    return {n for n, st in stages.items() if st <= PRE_TRAINING_STAGES}


def _first_reports(
    data: JobData, reports: Collection[str], among: Collection[str]
) -> dict[str, float]:
    """Each node of ``among``'s first line of the ``reports`` templates (an agent's report of
    its workers), where it printed one with a time."""
    first: dict[str, float] = {}
    for (node, tid), cell in data.cells.items():
        if tid in reports and node in among and math.isfinite(cell.first_ts):
            first[node] = min(cell.first_ts, first.get(node, math.inf))
    return first


def _silence(
    data: JobData,
    events: tuple[EventStat, ...],
    nodes: list[str],
    kept: frozenset[str],
    peers: PeerResult | None,
    options: AnalysisOptions,
    ends: frozenset[str] = frozenset(),
) -> SilenceResult:
    """Nodes whose own logging stopped while the job went on (:mod:`~l4_plugin.analysis.silence`),
    less those that ended with an error of their own (they died loudly: their error says why),
    plus nodes the peers' failure evidence names that printed nothing from before a witness
    spoke on: a node lost seconds before its peers give up is as silent as one lost an hour
    before; and nodes whose launcher agent died with them (``_unreported``). ``ends``: the
    templates of the job's teardown (``evidence.teardown``)."""
    result = _silence_detector(data, events, nodes, ends)
    if data.time_unit != "ts":
        return result
    last = _node_last(data)
    loud = (
        _loud_ends(data, events, kept, last, options)
        | killed_on(data)  # (the node lives on and says why its process died)
        | _reported_dead(data, last, options)
    )
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
        # (a witness's NCCL warning has no stamp of its own: it takes its process's last one,
        # the earliest it can have been printed; one witness after the node's last line shows
        # the node had gone quiet by then)
        if said and last[named.node] <= max(said):
            silent.append(
                SilentNode(
                    node=named.node,
                    score=options.named_silent_score * named.share,
                    last_ts=last[named.node],
                    last_iteration=data.node_last_iteration.get(named.node),
                    lag_seconds=min(said) - last[named.node],
                    lag_iterations=None,
                    missing_periodic=(),
                    missing_new=named.templates,
                )
            )
    for node, (at, reports) in _unreported(data, last).items():
        if node not in found and node not in loud and node not in {s.node for s in silent}:
            silent.append(
                SilentNode(
                    node=node,
                    score=options.named_silent_score,
                    last_ts=last[node],
                    last_iteration=data.node_last_iteration.get(node),
                    lag_seconds=at - last[node],
                    lag_iterations=None,
                    missing_periodic=(),
                    missing_new=reports,
                )
            )
    silent.sort(key=lambda s: (-s.score, s.node))
    return replace(result, silent=tuple(silent), stopped=stopped)


def _silence_detector(
    data: JobData, events: tuple[EventStat, ...], nodes: list[str], ends: frozenset[str]
) -> SilenceResult:
    """Silent nodes judged among peers of the same role: nodes whose ranks print iteration
    lines against each other, the quiet ones (earlier pipeline stages, ranks other than 0)
    against each other; a role with a single node is judged against every node. A teardown's
    line (``ends``: a stop signal received, the launcher stopping its workers) that the node
    printed too is nothing it stopped printing: it was there to be torn down, and its copy,
    without a stamp of its own, took the last one its stream had."""
    progress = data.job.progress_nodes
    groups = (
        [sorted(n for n in nodes if n in progress), sorted(n for n in nodes if n not in progress)]
        if progress
        else [nodes]
    )
    groups = [g for g in groups if g]
    whole = _silence_among(data, events, nodes, progress)
    silent = whole.silent
    if len(groups) > 1 and all(len(g) >= 2 for g in groups):
        parts = [_silence_among(data, events, g, progress) for g in groups]
        silent = tuple(
            sorted((s for p in parts for s in p.silent), key=lambda s: (-s.score, s.node))
        )
    silent = _ended_with_the_job(silent, ends)
    return replace(whole, silent=_stopped_printing(silent, progress, nodes))


def _ended_with_the_job(
    silent: tuple[SilentNode, ...], ends: frozenset[str]
) -> tuple[SilentNode, ...]:
    """``silent`` without the teardown's templates among what each stopped printing."""
    return tuple(
        replace(s, missing_periodic=tuple(t for t in s.missing_periodic if t not in ends))
        for s in silent
    )


def _stopped_printing(
    silent: tuple[SilentNode, ...], progress: frozenset[str] | None, nodes: Sequence[str]
) -> tuple[SilentNode, ...]:
    """Of the nodes found silent, those whose silence shows: a node that printed progress; one
    that stopped printing what it printed before while its peers went on printing it (a rank's
    checkpoint lines); one of a few quiet nodes that did not print what the others printed at
    the end (every other rank's watchdog timeout). When half the nodes that print no progress
    of their own come out silent, their last lines say nothing of when they stopped: a Ray
    worker's only lines are start-up and a warning now and then, and its last words may be
    folded into another worker's line ("[repeated 3x across cluster]")."""
    if not progress:
        return silent
    quiet = [n for n in nodes if n not in progress]
    few = 2 * sum(s.node not in progress for s in silent) < len(quiet)
    return tuple(
        s for s in silent if s.node in progress or s.missing_periodic or (few and s.missing_new)
    )


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
    # When a node stopped: the last line of its ranks' own output, per stream that shows life
    aux = _aux(data)
    own = np.array([e.template_id not in aux for e in events], dtype=bool)
    activity = np.where(own[np.newaxis, :], last_seen, np.nan) if len(events) else last_seen
    last_ts = np.nanmax(np.where(np.isnan(activity), -np.inf, activity), axis=1)
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
    # (what the peers printed after a node stopped: their own lines with a time, not a kernel
    # log's or an agent's, nor lines whose time is unknown)
    missing = np.where(np.isfinite(activity), activity, np.nan)
    return detector.fit(
        nodes,
        last_ts=last_ts,
        last_iteration=None if np.isnan(last_it).all() else last_it,
        last_seen=missing,
        templates=[e.template_id for e in events],
    ).result_


# Reasons of ranked events that are not the failure itself.
_NOT_FAILING = ("cascade", "consequence-words", "benign-words")


def _failing_records(
    fusion: FusionResult, events: tuple[EventStat, ...], kept: frozenset[str]
) -> list[str]:
    """The failing records, most telling first: the ranked events that are neither the cascade
    nor read as a consequence or a handled condition, then every kept error in the order it was
    first printed."""
    ranked = [e.template_id for e in fusion.events if not any(r in _NOT_FAILING for r in e.reasons)]
    errors = sorted(
        (e for e in events if e.template_id in kept and is_error(e.level)),
        key=lambda e: (e.first if e.first is not None else math.inf, e.template_id),
    )
    return list(dict.fromkeys([*ranked, *(e.template_id for e in errors)]))


def _stage(data: JobData) -> StageResult | None:
    spans = []
    for (node, stage), (f, last, fp, lp) in data.stage_spans.items():
        if data.time_unit == "ts" and not (math.isnan(f) or math.isnan(last)):
            spans.append(StageSpan(node, stage, f, max(last, f)))
        else:
            spans.append(StageSpan(node, stage, fp, max(lp, fp)))
    if not spans:
        return None
    spans += [*_saves_over(spans), *_started_over(spans)] if data.time_unit == "ts" else []
    return StageAnalyzer(order=STAGE_ORDER, default=STAGE_ORDER[0]).fit(spans).result_


#: Start-up stages a node's last marker may be while the job trained on (its ranks print no
#: progress of their own).
_START_UP = ("init", "model_loading")


def _started_over(spans: list[StageSpan]) -> list[StageSpan]:
    """Training, for nodes whose last marker was a start-up stage's (``_START_UP``: Ray
    workers' "Loading checkpoint shards") before another node trained on: the job trained with
    them (a rank with no progress line of its own is not still starting up)."""
    trained = [s.last for s in spans if s.stage == "training"]
    if not trained:
        return []
    latest = max(trained)
    last: dict[str, StageSpan] = {}
    for span in spans:
        if span.node not in last or span.last > last[span.node].last:
            last[span.node] = span
    return [
        StageSpan(node, "training", span.last, math.nextafter(span.last, math.inf))
        for node, span in last.items()
        if span.stage in _START_UP and span.last < latest
    ]


def _saves_over(spans: list[StageSpan]) -> list[StageSpan]:
    """Training resumed after a save, for nodes whose last line was the save's: where another
    node trained again after its own save, a save that ended before that is over (a save is
    collective; DeepSpeed's "zero checkpoint saved" is the last line most Ray workers print
    before the job fails an hour on). A node whose save outlasted every resumption is left
    saving."""
    by_node: dict[str, dict[str, StageSpan]] = {}
    for span in spans:
        by_node.setdefault(span.node, {})[span.stage] = span
    resumed = [
        own["training"].last
        for own in by_node.values()
        if "training" in own
        and "checkpointing" in own
        and own["checkpointing"].last < own["training"].last
    ]
    if not resumed:
        return []
    latest = max(resumed)
    out = []
    for node, own in by_node.items():
        save = own.get("checkpointing")
        if save is None or save.last >= latest or max(s.last for s in own.values()) > save.last:
            continue
        out.append(StageSpan(node, "training", save.last, math.nextafter(save.last, math.inf)))
    return out


def _iteration_buckets(data: JobData, options: AnalysisOptions) -> list[int]:
    buckets = sorted(data.iteration_spans)
    exact = [b for b in buckets if data.iteration_spans[b] == 1]
    return exact if len(exact) >= options.min_exact_iterations else buckets


def _iterations(
    data: JobData, kept: frozenset[str], options: AnalysisOptions
) -> IterationResult | None:
    buckets = _iteration_buckets(data, options)
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


def _slowdown_onset(data: JobData) -> tuple[Slowdown, list[int], list[float]] | None:
    """Where the job slowed down (``SlowdownDetector``), with the buckets and their seconds per
    iteration it was judged on: the durations the iteration lines state, confirmed by the clock
    and not a rate averaged over a few stalls; without them, the clock alone."""
    per = bucket_medians(data.node_iteration_seconds)
    its = [b for b in sorted(data.iteration_spans) if b in per]
    if len(its) >= 5:
        found = SlowdownDetector().fit([per[b] for b in its], its).result_
        if found is None or not _slow_by_the_clock(data, len(its)):
            return None
        if _averaged_away(its, [per[b] for b in its]):
            return None
    else:
        # No stated durations (torchtitan states tokens per second, a print() loop nothing):
        # the job's clock alone, over two buckets, per progress line (``_line_weights``).
        per = (
            bucket_medians(_clock_paces(data, stride=2, weights=_line_weights(data)))
            if data.time_unit == "ts"
            else {}
        )
        its = [b for b in sorted(data.iteration_spans) if b in per]
        if len(its) < 5:
            return None
        found = SlowdownDetector().fit([per[b] for b in its], its).result_
        # The clock also slows in a job's last moments (retries before a link gives up, a
        # device failing): a slowdown it shows alone must last, not only precede the end.
        if (
            found is None
            or sum(b >= found.first_iteration for b in its) < _CLOCK_SUSTAIN
            or (found.ratio - 1.0) * found.reference < _CLOCK_RESOLUTION
        ):
            return None
    return found, its, [per[b] for b in its]


def _slowdown(
    data: JobData, kept: frozenset[str], n_nodes: int, options: AnalysisOptions
) -> Slowdown | None:
    """The job-wide slowdown (from the seconds per iteration its iteration lines state) and the
    events that start with it and keep up: first printed within one bucket of its onset, before
    the job's last bucket, in two buckets or more, by less than half of the nodes (a cause is
    local; the slowdown is not). Kernel and BMC lines carry no iteration: they count when printed
    only by nodes that have such events (by a few nodes, when no training line started with the
    slowdown), more than once, from about when the onset happened
    (:func:`_bucket_times`; without timestamps on iteration lines the estimate runs early,
    checkpoint saves are not in it, hence the wide margin after it)."""
    onset = _slowdown_onset(data)
    if onset is None:
        return None
    found, its, secs = onset
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
    if at:
        t_lo = at[lo] - options.slowdown_lead_seconds
        t_hi = (
            at[hi]
            + secs[its.index(hi)] * max(data.iteration_spans[hi], 1)
            + options.slowdown_tail_seconds
        )
        for tid, cells in nodes_of.items():
            if tid in first_bucket or tid in events or not local(tid):
                continue
            # With no training line starting with the slowdown, a kernel or BMC line of its own
            # may still (a CPU throttled by its temperature says so only there).
            if not (cells <= nodes if nodes else tid in system):
                continue
            first = min(data.cells[(n, tid)].first_ts for n in cells)
            last_ts = max(data.cells[(n, tid)].last_ts for n in cells)
            if t_lo <= first <= t_hi and last_ts > first:
                events.add(tid)
        if not nodes and events:
            nodes = set().union(*(nodes_of[t] for t in events))
    return replace(found, events=tuple(sorted(events)), nodes=tuple(sorted(nodes)))


def _slow_by_the_clock(data: JobData, stated: int) -> bool:
    """Whether the job's own clock agrees that it slowed down: the time between the starts of
    consecutive iteration buckets, per iteration (median over nodes). A stated duration may be
    an average since the start (tqdm's rate): one long checkpoint save lifts it for the rest of
    the job, while the clock shows one slow bucket and the old pace after it. True when the
    clock cannot tell: too few timed buckets, or fewer than half of the ``stated`` buckets
    (progress lines with no stamp of their own take a neighbour's, most buckets then start
    at the same moment as the one before and the few that advance say nothing of a pace)."""
    if data.time_unit != "ts":
        return True
    per = bucket_medians(_clock_paces(data))
    its = sorted(per)
    if len(its) < 5 or 2 * len(its) < stated:
        return True
    return SlowdownDetector().fit([per[b] for b in its], its).result_ is not None


#: Buckets (windows of two) from the onset to the end a slowdown seen by the clock alone lasts.
_CLOCK_SUSTAIN = 4
#: Seconds per iteration below which the clock alone tells no slowdown: stamps read in whole
#: seconds, and lines that borrow a neighbour's, cannot show a few hundredths.
_CLOCK_RESOLUTION = 0.05


#: Spans of readings at most over which an averaged rate's own durations are taken back out.
_AVERAGE_WINDOWS = 20


def _averaged_away(its: list[int], rates: list[float]) -> bool:
    """Whether stated seconds per iteration that show a slowdown are a rate averaged since the
    start (tqdm's in a Ray or HF bar, read once per bucket) whose only slow iterations were a few
    stalls (checkpoint saves): such a rate jumps at a stall and falls back bucket after bucket.
    The iterations' own durations, taken back out of the average (``n·a(n) − m·a(m)`` over the
    ``n − m`` iterations between two readings), then show no slowdown. A rate that is no such
    average (a duration comes out at or below zero) is left as it is. The rate is printed
    rounded (tqdm: two decimals) and ``n·a(n)`` carries ``n`` times its rounding: between
    readings a step apart late in a run that outweighs the step itself, so the durations are
    taken over at most ``_AVERAGE_WINDOWS`` spans of readings. A reading numbered 0 (the bucket
    of the first steps) stands for no time spent (``0·a(0)``)."""
    readings = list(zip(its, rates, strict=True))
    stride = max(1, len(readings) // _AVERAGE_WINDOWS)
    readings = readings[::stride]
    own = []
    for (m, a_m), (n, a_n) in itertools.pairwise(readings):
        if n <= m:
            return False
        duration = (n * a_n - m * a_m) / (n - m)
        if duration <= 0:
            return False
        own.append(duration)
    at = [it for it, _ in readings[1:]]
    return len(own) >= 5 and SlowdownDetector().fit(own, at).result_ is None


def _clock_paces(
    data: JobData, stride: int = 1, weights: Mapping[int, float] | None = None
) -> dict[tuple[str, int], float]:
    """Seconds per iteration by the job's clock, per (node, bucket): from the start of the bucket
    to the start of the one ``stride`` buckets later, per iteration (``weights``: the
    iterations each bucket's lines stand for, ``_line_weights``, where every bucket between
    has one; else the buckets' numbers)."""
    per_node: dict[str, list[tuple[int, float]]] = {}
    for (node, b), ts in data.node_iteration_start.items():
        if math.isfinite(ts):
            per_node.setdefault(node, []).append((b, ts))
    paces: dict[tuple[str, int], float] = {}
    for node, starts in per_node.items():
        starts.sort()
        for k, ((b, t0), (b1, t1)) in enumerate(zip(starts, starts[stride:], strict=False)):
            between = [bk for bk, _ in starts[k : k + stride]]
            spent: float = b1 - b
            if weights and all(bk in weights for bk in between):
                spent = sum(weights[bk] for bk in between)
            if t1 > t0 and spent > 0:
                paces[(node, b)] = (t1 - t0) / spent
    return paces


def _line_weights(data: JobData) -> dict[int, float]:
    """How many iterations each bucket's progress lines stand for: its share of the job's
    progress lines (every rank's, of ``temporal.progress_templates``) times the iterations they
    cover. A bucket starts with its first progress line, which is not its first iteration:
    lines every 10 steps in buckets of 12 begin two buckets 20 or 30 steps apart, and the time
    between them, over 24 iterations, alternates between 0.8 and 1.2 of the pace; over the
    lines between them, it holds. Empty: no progress line."""
    progress = progress_templates(data.iteration_cells, data.iteration_spans)
    counts: dict[int, int] = {}
    for (b, tid), (_, n) in data.iteration_cells.items():
        if tid in progress and n > 0:
            counts[b] = counts.get(b, 0) + n
    covered = sum(max(data.iteration_spans.get(b, 1), 1) for b in counts)
    total = sum(counts.values())
    if not total:
        return {}
    return {b: n * covered / total for b, n in counts.items()}


def bucket_medians(per_node: dict[tuple[str, int], float]) -> dict[int, float]:
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
    start plus the stated durations before it (tqdm lines have no timestamp of their own): each
    judged bucket's duration over the iterations up to the next judged bucket (a bar drawn every
    50 iterations leaves every other bucket of 24 without a line, and without a duration)."""
    if data.time_unit != "ts":
        return {}
    median = bucket_medians(data.node_iteration_start)
    rising = [median[b] for b in its if b in median]
    steps = [y > x for x, y in itertools.pairwise(rising)]
    if len(rising) == len(its) and steps and sum(steps) >= 0.8 * len(steps):
        return median
    # (the training start of the nodes whose lines state the durations: a node that prints no
    # progress may see its first line of training only in the job's teardown)
    stating = {n for n, _ in data.node_iteration_seconds}
    spans = {n: v[0] for (n, st), v in data.stage_spans.items() if st == "training"}
    starts = [t for n, t in spans.items() if math.isfinite(t) and n in stating] or [
        t for t in spans.values() if math.isfinite(t)
    ]
    if not starts:
        return {}
    t = float(np.median(starts))
    at: dict[int, float] = {}
    for k, (b, sec) in enumerate(zip(its, secs, strict=True)):
        at[b] = t
        t += sec * (its[k + 1] - b if k + 1 < len(its) else max(data.iteration_spans[b], 1))
    return at


def _peers(
    data: JobData,
    events: tuple[EventStat, ...],
    kept: frozenset[str],
    stage: str | None,
    hardware: frozenset[str],
) -> PeerResult:
    """Which nodes the failure evidence names (:mod:`l4_plugin.analysis.peers`).

    Only warning and error lines that cross-job filtering kept are statements; once the job got
    past start-up, lines of the start-up stages are not (a rank retrying the rendezvous store
    names its host in every healthy run too). A node whose kernel or driver reported a fault of
    its own device or link (:func:`_faulted`) is no witness.
    """
    level = {e.template_id: e.level for e in events}
    where = {e.template_id: e.stage for e in events}
    late = stage is not None and stage not in PRE_TRAINING_STAGES

    def statement(tid: str) -> bool:
        if tid not in kept or not is_flagged(level.get(tid)):
            return False
        return not (late and where.get(tid) in PRE_TRAINING_STAGES)

    system = data.job.system_templates
    own = frozenset(
        t
        for t in hardware
        if t in kept
        and (
            t in system or PORT_ERROR.search(data.templates[t].text if t in data.templates else "")
        )
    )
    return name_peers(
        data.nodes,
        data.announcements,
        ((n, t, m) for n, t, m in data.peer_lines if statement(t)),
        faulted=_faulted(events, own, len(data.nodes)),
    )


def _faulted(events: Sequence[EventStat], own: frozenset[str], n_nodes: int) -> frozenset[str]:
    """The nodes that reported a fault of their own hardware: a template in ``own`` (a kernel's
    or driver's words of a device's, a link's or a node's fault; a program's report of its own
    device's event: not a consequence that names a remote one) printed on at most half the
    nodes (one printed everywhere is the job's, not a node's)."""
    out: set[str] = set()
    for e in events:
        if e.template_id in own and 2 * len(e.first_seen) <= n_nodes:
            out.update(e.first_seen)
    return frozenset(out)


def _notes(
    crossjob: FilterResult,
    spatial: SpatialResult,
    iterations: IterationResult | None,
    options: AnalysisOptions,
) -> tuple[str, ...]:
    """What the reader should know did not run, or ran on nothing to compare with."""
    notes: list[str] = []
    if crossjob.no_baseline:
        notes.append(
            "no baseline: no successful job of the same configuration, so cross-job filtering "
            "kept every event"
            if options.crossjob
            else "cross-job filtering disabled"
        )
    if not spatial.defined:
        notes.append(spatial.note)
    if iterations is None:
        notes.append("no iterations found: the temporal comparison of iterations did not run")
    return tuple(notes)


def _lexicon_evidence(
    data: JobData,
    terms: Mapping[str, Term],
    crossjob: FilterResult,
    options: AnalysisOptions,
    odd: Sequence[OddVersion] = (),
) -> tuple[dict[str, tuple[float, str]], dict[str, tuple[float, str]]]:
    """(priors, ordering) from the failure lexicon's words: the words order every diagnosis (a
    consequence after what explains it, a program's report of a hardware fault after the
    system log's); with nothing to compare with they are also evidence for a line, and so are
    decisive words (the scheduler's own reason for ending the job) always, and a line showing
    a node's ``odd`` version."""
    priors, consequences = lexicon_priors(terms, options)
    for tid, why in symptoms(data, terms, options).items():
        consequences.setdefault(tid, why)
    if not crossjob.no_baseline:
        priors = {t: p for t, p in priors.items() if terms[t].decisive}
    for o in odd:
        priors[o.template_id] = (_ODD_VERSION_PRIOR, f"odd-version:{o.node}")
    return priors, consequences


def analyze(
    data: JobData,
    pool: BaselinePool,
    options: AnalysisOptions,
    *,
    stages: StageReader | None = None,
) -> Analysis:
    """Run every analysis on one job and fuse the results (see the module docstring).

    ``stages`` reads the ingest's stage rules (passed in so that the analysis stays pure): the
    stage a failing record's stack frames or words name (:mod:`l4_plugin.analysis.failing_stage`);
    without it the stage is the markers' alone.
    """
    events = event_stats(data)
    nodes = data.nodes
    crossjob, odd = _filtered(data, events, pool, options)
    kept = crossjob.kept_ids
    spatial, matrix = _spatial(data, events, nodes, kept, options)
    stage = _stage(data)
    terms = record_terms(data, default_lexicon())
    peers = _peers(data, events, kept, stage.stage if stage else None, _hardware(terms))
    ends = teardown(terms)
    silence = _silence(data, events, nodes, kept, peers, options, ends) if len(nodes) >= 2 else None
    iterations = _iterations(data, kept, options)
    stragglers = _stragglers(data, nodes)
    slowdown = _slowdown(data, kept, len(nodes), options)
    priors, consequences = _lexicon_evidence(data, terms, crossjob, options, odd)
    events = _in_failing_stage(events, data, stage, options.root_window, consequences)
    hang = analyse_hang(data.job.dumps, nodes)
    against = discounts(data, stragglers, slowdown, events, kept, options, _hardware(terms))
    fusion = (
        Fusion(max_events=options.max_events, root_window=options.root_window)
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
            discounts=against,
            peers=peers,
            priors=priors,
            ordering=consequences,
            stack={o.node: o.why for o in odd},
            hang=hang.evidence if hang is not None else None,
            teardown=ends,
            named=named_causes(terms),
            telling=telling_consequences(terms),
        )
        .result_
    )
    # The stage the failing records' stacks and words name refines the markers'.
    fusion = _with_failing_stage(
        fusion, data, events, kept, stage, hang, stages, consequences_of(consequences)
    )
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
        notes=_notes(crossjob, spatial, iterations, options),
        matrix_templates=tuple(e.template_id for e in events),
        matrix=matrix,
        hang=hang,
        outsiders=outsiders(data.memory_lines, AddressBook(nodes, data.announcements).owner),
        last_marker=last_marker(data, stages),
    )


def _with_failing_stage(
    fusion: FusionResult,
    data: JobData,
    events: tuple[EventStat, ...],
    kept: frozenset[str],
    stage: StageResult | None,
    hang: HangResult | None,
    stages: StageReader | None,
    consequences: frozenset[str] = frozenset(),
) -> FusionResult:
    """``fusion`` with the stage the failing records' stacks and words name (the fusion keeps
    judging "in the failing stage" by the lines' own stages), or the stack of a rank its peers
    wait for (the ranks' dumps): where a hung job stood. ``consequences``: the templates whose
    words are a consequence's."""
    printed_in = {e.template_id: e.stage for e in events}
    failing = _failing_records(fusion, events, kept)
    reported = failing_stage(data, stage, failing, stages, printed_in, consequences)
    reported = _stage_of_hang(hang, stages) or reported
    if reported is not None and reported != fusion.stage:
        return replace(fusion, stage=reported)
    return fusion


def _in_failing_stage(
    events: tuple[EventStat, ...],
    data: JobData,
    stage: StageResult | None,
    window: float,
    consequences: Mapping[str, object],
) -> tuple[EventStat, ...]:
    """The events' first occurrences taken within the markers' failing stage
    (``timed_in_stage``), and the errors printed as it began taken into it
    (``at_stage_start``; a consequence's words stay where they were printed)."""
    failing = stage.stage if stage else None
    events = timed_in_stage(events, data, failing)
    return at_stage_start(events, data, failing, window, frozenset(consequences))


def _stage_of_hang(hang: HangResult | None, stages: StageReader | None) -> str | None:
    """The stage the stack of a rank its peers wait for names (its DataLoader, a checkpoint
    save): where the job hung, whatever the waiting ranks' lines say."""
    if hang is None or not hang.stage_frames or stages is None:
        return None
    # (py-spy's frames come innermost first; the stage rules read a stack outermost first)
    return stages.stage_of_stack("\n".join(reversed(hang.stage_frames)))
