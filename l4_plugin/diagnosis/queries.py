"""The queries of a diagnosis: what the analyses need from the cluster (the I/O edge).

Read with aggregations over ``l4-events``; every public function is named for the query it runs
(``read_*`` one job's documents or tables, ``find_*`` a search).

A job's rollups are reduced by the cluster to a few small tables — node × template, node × stage,
iteration × template, node × iteration and, for the baseline pool, job × template — each walked
with a paginated ``composite`` aggregation (``Store.composite``), so a 2,000-node × 2,000-template
job never needs ``search.max_buckets`` above its default. Nothing here scans raw lines; the tables
are turned into the estimators' inputs by :mod:`l4_plugin.analysis.recipe`; the tables' types are
in :mod:`l4_plugin.analysis.tables`.

Times are epoch seconds. Lines logged before a file's first timestamp carry no time in their
rollup; they get their node's earliest time (they are start-up lines), except the lines of kernel
and system logs, agents' logs and the job's own files, whose time stays unknown
(``_fill_missing_times``). A job with no timestamp at all is ordered by line position instead
(``time_unit`` ``position``): enough for "which came first" on one node, not across nodes.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from l4_plugin.analysis.clock import (
    CLOCK_STEPS,
    periodic_steps,
    resumed_step,
    stated_pace,
    stated_step,
    stated_times,
)
from l4_plugin.analysis.tables import BaselinePool, Cell, JobAttempt, JobData, JobDoc, TemplateInfo
from l4_plugin.analysis.temporal import progress_templates
from l4_plugin.errors import AnalysisError
from l4_plugin.ingest.masking import default_masker
from l4_plugin.ingest.stages import default_stage_rules
from l4_plugin.records import host_blinder, host_shapes, is_flagged, level_label, may_name_a_node
from l4_plugin.store import Store, generations, jobs
from l4_plugin.store import fields as F
from l4_plugin.store.events import JobEvents, Key, Metric, template_totals
from l4_plugin.store.fields import source_field
from l4_plugin.store.jobs import JobRecord
from l4_plugin.store.lines import JobLines
from l4_plugin.traces import JobDumps

_PAGE = 50_000


def job_scope(job: JobDoc) -> dict[str, Any]:
    """The query clause selecting a job's documents: its complete generation, or (for a JobDoc
    built by hand) every document of the job."""
    return job.scope or {"term": {F.JOB_ID: job.id}}


def _seconds(value: Any) -> float | None:
    return float(value) / 1000.0 if isinstance(value, int | float) else None


def job_doc(record: JobRecord) -> JobDoc:
    """What the analyses need of a job document (``analysis`` never reads the store)."""
    summary = record.summary
    stats = summary.template_stats
    progress = summary.progress_nodes
    return JobDoc(
        id=record.id,
        status=record.status_or_unknown,
        fingerprint=str(record.fingerprint or ""),
        nodes=tuple(str(n) for n in summary.nodes or ()),
        lines=int(summary.lines or 0),
        start_ts=_seconds(summary.start_ts),
        end_ts=_seconds(summary.end_ts),
        config=dict(record.config or {}),
        template_stats=(
            {t: (int(n), int(k)) for t, (n, k) in stats.items()} if stats is not None else None
        ),
        iterations=_int_or_none(summary.iterations),
        system_logs=_bool_or_none(summary.system_logs),
        system_templates=frozenset(summary.system_templates or ()),
        aux_templates=(
            frozenset(summary.aux_templates) if summary.aux_templates is not None else None
        ),
        progress_nodes=frozenset(str(n) for n in progress) if progress is not None else None,
        cut_files=tuple(str(c) for c in summary.cut_files or ()),
        generation=record.ingest.generation or None,
        scope=generations.scope(record.id, record.to_source()),
        dumps=JobDumps.from_json(summary.dumps),
        attempts=tuple(
            JobAttempt(a.attempt, a.nodes, _seconds(a.start_ts), _seconds(a.end_ts), a.trained)
            for a in summary.attempts or ()
        ),
    )


def attempt_job(job: JobDoc, attempt: int) -> JobDoc:
    """``job`` narrowed to one of its attempts: its documents (and those that belong to no
    attempt: the job's own files), nodes, time span and dumps."""
    span = next((a for a in job.attempts if a.attempt == attempt), None)
    dumps = job.dumps
    if dumps is not None:
        dumps = replace(
            dumps,
            traces=tuple(t for t in dumps.traces if t.attempt in (attempt, None)),
            stacks=tuple(s for s in dumps.stacks if s.attempt in (attempt, None)),
        )
    mine = {
        "bool": {
            "should": [
                {"term": {F.ATTEMPT: attempt}},
                {"bool": {"must_not": {"exists": {"field": F.ATTEMPT}}}},
            ],
            "minimum_should_match": 1,
        }
    }
    return replace(
        job,
        nodes=span.nodes if span is not None else job.nodes,
        start_ts=span.start_ts if span is not None else job.start_ts,
        end_ts=span.end_ts if span is not None else job.end_ts,
        dumps=dumps,
        attempt=attempt,
        scope={"bool": {"filter": [job_scope(job), mine]}},
    )


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _bool_or_none(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def read_job(store: Store, job_id: str) -> JobDoc:
    """The job's ``l4-jobs`` document; ``AnalysisError`` naming the job when it is not there."""
    record = jobs.get_job(store, job_id)
    if record is None:
        raise AnalysisError(
            f"job {job_id!r} is not in the cluster (no document in {store.names.jobs}) — "
            "hint: ingest it first (`l4 ingest DIR`), or use `l4 diagnose DIR`"
        )
    writing = record.ingest.writing
    if writing is not None and not record.ingest.generation:
        started = writing.get("started")
        when = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started / 1000))
            if isinstance(started, int | float)
            else "?"
        )
        raise AnalysisError(
            f"job {job_id!r} has no complete ingest: the ingest that began at {when} "
            f"(generation {writing.get('generation')}, by {writing.get('owner')}) has not "
            "completed — hint: wait for it, or ingest again (`l4 ingest DIR`, `l4 diagnose DIR`)"
        )
    return job_doc(record)


def find_jobs(
    store: Store, *, fingerprint: str, status: str, exclude: Collection[str] = ()
) -> list[JobDoc]:
    """Jobs of one configuration fingerprint and status, sorted by id: those with documents to
    compare with (not purged by retention, not only ever begun), but for ``exclude``."""
    found = jobs.find_jobs(store, fingerprint=fingerprint, status=status, exclude=exclude)
    return [job_doc(r) for r in found]


def _walk(
    store: Store,
    sources: list[dict[str, Any]],
    query: dict[str, Any],
    aggs: dict[str, Any] | None = None,
) -> Iterator[dict[str, Any]]:
    yield from store.composite(store.names.events, sources, query=query, aggs=aggs, page_size=_PAGE)


def _terms(name: str, field_name: str, *, missing: bool = False) -> dict[str, Any]:
    terms: dict[str, Any] = {"field": field_name}
    if missing:
        terms["missing_bucket"] = True
    return {name: {"terms": terms}}


def _value(bucket: dict[str, Any], name: str) -> Any:
    return bucket.get(name, {}).get("value")


def read_job_tables(store: Store, job: JobDoc) -> JobData:
    """Read every table the analyses need for ``job`` (see the module docstring): its documents,
    or one attempt's for a job narrowed by ``attempt_job`` (``job_scope``)."""
    query = job_scope(job)
    if not store.count(store.names.events, query):
        raise AnalysisError(
            f"job {job.id!r} has no event rollups in {store.names.events} — hint: re-ingest it"
        )
    events = JobEvents(store, query)
    cells, stage_first = _node_template_cells(events)
    templates = _template_infos(events)
    _read_exemplars(store, query, templates)
    stage_spans = _stage_spans(events)
    iteration_cells, iteration_spans = _iteration_cells(events)
    node_iteration_start, node_iteration_seconds, node_last_iteration = _node_iterations(events)
    time_unit = "ts" if any(c.first_ts < math.inf for c in cells.values()) else "position"
    if time_unit != "ts":
        stage_first = {}
    aux = job.aux_templates if job.aux_templates is not None else job.system_templates
    _fill_missing_times(cells, time_unit, aux)
    nodes = sorted({n for n, _ in cells} | set(job.nodes))
    lines = JobLines(store, query)
    announcements, peer_lines = _read_address_lines(events, lines, templates, nodes)
    return JobData(
        job=job,
        time_unit=time_unit,
        cells=cells,
        templates=dict(templates),
        stage_spans=stage_spans,
        iteration_cells=iteration_cells,
        iteration_spans=iteration_spans,
        node_iteration_start=node_iteration_start,
        node_last_iteration=node_last_iteration,
        stage_first=stage_first,
        node_iteration_seconds=node_iteration_seconds,
        announcements=announcements,
        peer_lines=peer_lines,
        state_lines=_read_state_lines(events, lines, templates),
        memory_lines=_read_memory_lines(events, lines, templates),
        version_lines=_read_version_lines(events, templates, cells),
        progress_lines=_read_progress_lines(events, templates, cells),
        **_read_steps(lines, templates, iteration_cells, iteration_spans, cells),
        variants=_read_variants(lines, templates),
    )


_NODE = Key("node", "host.name")
_TEMPLATE = Key("t", F.TEMPLATE_ID)
_STAGE = Key("st", F.STAGE)
_ITERATION = Key("it", F.ITERATION)


def _node_template_cells(
    events: JobEvents,
) -> tuple[dict[tuple[str, str], Cell], dict[tuple[str, str, str], float]]:
    """Node × template cells, and each template's first time per (node, stage)."""
    cells: dict[tuple[str, str], Cell] = {}
    stage_first: dict[tuple[str, str, str], float] = {}
    for row in events.table(
        [_NODE, _TEMPLATE, _STAGE],
        {
            "n": Metric("sum", F.COUNT),
            "f": Metric("min", F.FIRST_TS),
            "l": Metric("max", F.LAST_TS),
            "p": Metric("min", F.FIRST_POS),
        },
    ):
        key, v = row.key, row.values
        node, tid = str(key["node"]), str(key["t"])
        f, last = _seconds(v["f"]), _seconds(v["l"])
        cell = cells.get((node, tid))
        if cell is None:
            cell = cells[(node, tid)] = Cell()
        cell.count += int(v["n"] or 0)
        cell.first_ts = min(cell.first_ts, f if f is not None else math.inf)
        cell.last_ts = max(cell.last_ts, last if last is not None else -math.inf)
        cell.first_pos = min(cell.first_pos, float(v["p"] or 0.0))
        if f is not None:
            stage_first[(node, tid, str(key["st"]))] = f
    return cells, stage_first


def _template_infos(events: JobEvents) -> dict[str, TemplateInfo]:
    """Per template, how many of its lines carried each level and each stage."""
    templates: dict[str, TemplateInfo] = defaultdict(TemplateInfo)
    for row in events.table(
        [_TEMPLATE, Key("lvl", "log.level", missing=True), Key("st", F.STAGE, missing=True)],
        {"n": Metric("sum", F.COUNT)},
    ):
        info = templates[str(row.key["t"])]
        n = int(row.values["n"] or 0)
        level = level_label(row.key.get("lvl"))
        if level is not None:
            info.levels[level] = info.levels.get(level, 0) + n
        if row.key.get("st") is not None:
            stage = str(row.key["st"])
            info.stages[stage] = info.stages.get(stage, 0) + n
    return templates


def _stage_spans(events: JobEvents) -> dict[tuple[str, str], tuple[float, float, float, float]]:
    """(node, stage) → first and last time (NaN when none), first and last position."""
    stage_spans: dict[tuple[str, str], tuple[float, float, float, float]] = {}
    for row in events.table(
        [_NODE, _STAGE],
        {
            "f": Metric("min", F.FIRST_TS),
            "l": Metric("max", F.LAST_TS),
            "fp": Metric("min", F.FIRST_POS),
            "lp": Metric("max", F.LAST_POS),
        },
    ):
        v = row.values
        fs, ls = _seconds(v["f"]), _seconds(v["l"])
        stage_spans[(str(row.key["node"]), str(row.key["st"]))] = (
            fs if fs is not None else math.nan,
            ls if ls is not None else math.nan,
            float(v["fp"] or 0.0),
            float(v["lp"] or 0.0),
        )
    return stage_spans


def _iteration_cells(
    events: JobEvents,
) -> tuple[dict[tuple[int, str], tuple[float, int]], dict[int, int]]:
    """(iteration bucket, template) → (first time, count), and each bucket's span."""
    iteration_cells: dict[tuple[int, str], tuple[float, int]] = {}
    iteration_spans: dict[int, int] = {}
    for row in events.table(
        [_ITERATION, _TEMPLATE],
        {
            "f": Metric("min", F.FIRST_TS),
            "n": Metric("sum", F.COUNT),
            "s": Metric("max", F.ITERATION_SPAN),
        },
    ):
        it = int(row.key["it"])
        f = _seconds(row.values["f"])
        iteration_cells[(it, str(row.key["t"]))] = (
            f if f is not None else math.inf,
            int(row.values["n"] or 0),
        )
        iteration_spans[it] = max(iteration_spans.get(it, 1), int(row.values["s"] or 1))
    return iteration_cells, iteration_spans


def _node_iterations(
    events: JobEvents,
) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], float], dict[str, int]]:
    """Per (node, iteration bucket) its first time and stated seconds per iteration, and the
    last iteration each node reached."""
    node_iteration_start: dict[tuple[str, int], float] = {}
    node_iteration_seconds: dict[tuple[str, int], float] = {}
    node_last_iteration: dict[str, int] = {}
    for row in events.table(
        [_NODE, _ITERATION],
        {
            "f": Metric("min", F.FIRST_TS),
            "s": Metric("max", F.ITERATION_SPAN),
            "d": Metric("max", F.ITERATION_SECONDS),
        },
    ):
        node, it = str(row.key["node"]), int(row.key["it"])
        f = _seconds(row.values["f"])
        if f is not None:
            node_iteration_start[(node, it)] = f
        d = row.values["d"]
        if isinstance(d, int | float) and math.isfinite(d) and d >= 0:
            node_iteration_seconds[(node, it)] = float(d)
        last = it + max(int(row.values["s"] or 1), 1) - 1
        node_last_iteration[node] = max(last, node_last_iteration.get(node, last))
    return node_iteration_start, node_iteration_seconds, node_last_iteration


# Template texts in which a node states its own addresses (NCCL bootstrap and its OOB
# interface, NCCL's socket transport, HCCL's local ip, torchrun's failure summary, Ray's raylet).
_ANNOUNCES = re.compile(
    r"Bootstrap\s*:\s*Using|\bOOB\s|NET/Socket\s*:\s*Using|\blocal[ _]?ip\b|^host\s*:"
    r"|\[state-dump\] Node name:|\bInitialConfigResources:",
    re.IGNORECASE,
)
_PEER_HITS = 5  # lines read per (node, template) that may name a peer


def _read_address_lines(
    events: JobEvents, lines: JobLines, templates: dict[str, TemplateInfo], nodes: Sequence[str]
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str, str], ...]]:
    """Announcements of own addresses, and warning/error lines that may name another node.

    A template may name a node when its text holds an address (``<IP>``) or a node's host
    name (digits are zeros in template text). Lines come from the rollups' exemplars and from
    the kept raw lines (several ranks of a node may name different peers).
    """
    announce = sorted(t for t, info in templates.items() if _ANNOUNCES.search(info.text))
    hosts = host_shapes(nodes)
    peer = sorted(
        t
        for t, info in templates.items()
        if is_flagged(info.level) and may_name_a_node(info.text, hosts)
    )
    announcements = [
        (node, messages[0]) for (node, _), messages in events.earliest_messages(announce, 1).items()
    ]
    said = [
        (node, tid, m)
        for found in (
            events.earliest_messages(peer, _PEER_HITS),
            lines.earliest_messages(peer, _PEER_HITS),
        )
        for (node, tid), messages in found.items()
        for m in messages
    ]
    return tuple(announcements), tuple(dict.fromkeys(said))


# Templates that say a link's state: NCCL's IB async events, a NIC's link down / up.
_LINK_STATE = re.compile(r"Got async event : port|\b[Ll]ink (?:is )?(?:[Dd]own|[Uu]p|<\*>)")
_STATE_HITS = 64  # lines per (node, template): a flap and its return, a few times over


def _read_state_lines(
    events: JobEvents, lines: JobLines, templates: dict[str, TemplateInfo]
) -> tuple[tuple[str, str, str], ...]:
    """The lines of link-state templates per node, earliest first: the kept raw lines, else the
    rollups' exemplars (``JobData.state_lines``)."""
    return _lines_of(events, lines, templates, _LINK_STATE, _STATE_HITS)


def _lines_of(
    events: JobEvents,
    lines: JobLines,
    templates: dict[str, TemplateInfo],
    pattern: re.Pattern[str],
    hits: int,
) -> tuple[tuple[str, str, str], ...]:
    """Up to ``hits`` lines per node of the templates whose text ``pattern`` finds, earliest
    first: the kept raw lines, else the rollups' exemplars ``(node, template, line)``."""
    tids = sorted(t for t, info in templates.items() if pattern.search(info.text))
    if not tids:
        return ()
    found = events.earliest_messages(tids, hits)
    found.update(lines.earliest_messages(tids, hits))
    return tuple((node, tid, m) for (node, tid), ms in sorted(found.items()) for m in ms)


# Templates of out-of-memory reports that come with a table of the node's memory users: the
# kernel's task table (joined to its "Tasks state" line), Ray's OutOfMemoryError.
_MEMORY_REPORT = re.compile(
    r"^Tasks state \(memory values in pages\)|OutOfMemoryError|^Memory on the node \(IP: "
)
_MEMORY_HITS = 4  # records per (node, template)


def _read_memory_lines(
    events: JobEvents, lines: JobLines, templates: dict[str, TemplateInfo]
) -> tuple[tuple[str, str, str], ...]:
    """The out-of-memory reports' records per node, earliest first (``JobData.memory_lines``)."""
    return _lines_of(events, lines, templates, _MEMORY_REPORT, _MEMORY_HITS)


# Templates that state a version: a banner's "nccl=…", "NCCL version …", "Driver Version: …".
_VERSIONED = re.compile(r"\b(?:nccl|torch|cuda|cudnn|driver|image)=|\bversion\b", re.IGNORECASE)
_VERSION_TEMPLATES = 32  # the most widely printed ones ...
_VERSION_CELLS = 16_384  # ... (node, template) pairs read at most: a few on a 5,000-node job


def _read_version_lines(
    events: JobEvents, templates: dict[str, TemplateInfo], cells: Mapping[tuple[str, str], Cell]
) -> tuple[tuple[str, str, str], ...]:
    """Each node's first line of the version-stating templates most nodes printed
    (``JobData.version_lines``)."""
    spread = Counter(t for _, t in cells)
    tids = [t for t, info in templates.items() if spread[t] >= 3 and _VERSIONED.search(info.text)]
    most = max(1, min(_VERSION_TEMPLATES, _VERSION_CELLS // max(len({n for n, _ in cells}), 1)))
    tids = sorted(sorted(tids, key=lambda t: (-spread[t], t))[:most])
    if not tids:
        return ()
    found = events.earliest_messages(tids, 1)
    return tuple((node, tid, ms[0]) for (node, tid), ms in sorted(found.items()) if ms)


# Templates of progress bars that show their elapsed time: tqdm's "<NUM>/<NUM> [<TS><<TS>, …".
_BAR = re.compile(r"<NUM>/<NUM> \[\S*<")
_PROGRESS_NODES = 8  # nodes whose progress lines are read: those that printed the most


def _read_progress_lines(
    events: JobEvents, templates: dict[str, TemplateInfo], cells: Mapping[tuple[str, str], Cell]
) -> tuple[tuple[str, str, int | None, float, str], ...]:
    """The progress line per iteration bucket and template, with its time, of the nodes that
    printed the most of them (few ranks print progress), of the bars that show their elapsed
    time and the templates that are iteration markers (``JobData.progress_lines``)."""
    rules = default_stage_rules()
    tids = {
        t
        for t, info in templates.items()
        if _BAR.search(info.text) or rules.role(info.text).iteration is not None
    }
    drawn: Counter[str] = Counter()
    for (node, tid), cell in cells.items():
        if tid in tids:
            drawn[node] += cell.count
    most = sorted(drawn.items(), key=lambda kv: (-kv[1], kv[0]))[:_PROGRESS_NODES]
    found = events.bucket_messages(sorted(tids), sorted(n for n, _ in most))
    rows = [(node, tid, it, ms / 1000.0, m) for node, tid, it, ms, m in found]
    return tuple(sorted(rows, key=lambda r: (r[0], r[1], -1 if r[2] is None else r[2], r[3])))


_VARIANTS = 16  # distinct copies of a record kept per template, earliest nodes first
_VARIANTS_PER_NODE = 4  # of each node's, the earliest


def _read_variants(
    lines: JobLines, templates: dict[str, TemplateInfo]
) -> dict[str, tuple[str, ...]]:
    """``JobData.variants``: each node's first copies of the warning and error records whose
    template holds a variable word or number (``<*>``, ``<NUM>``), where they differ from the
    exemplar: one node's DataLoader worker "killed by signal: Killed", the others' "Terminated"
    by the teardown; an agent's "failed (exitcode: -15)" for the worker it stopped, then, on the
    same node, "failed (exitcode: -9)" for the one that was killed."""
    tids = sorted(
        t
        for t, info in templates.items()
        if is_flagged(info.level) and ("<*>" in info.text or "<NUM>" in info.text)
    )
    out: dict[str, list[str]] = {}
    shapes: dict[str, set[str]] = {t: {_shape(templates[t].message)} for t in tids}
    found = lines.earliest_messages(tids, _VARIANTS_PER_NODE)
    for (_, tid), messages in sorted(found.items()):
        seen = out.setdefault(tid, [])
        for m in messages:
            shape = _shape(m)
            if shape not in shapes[tid] and len(seen) < _VARIANTS:
                shapes[tid].add(shape)
                seen.append(m)
    return {t: tuple(v) for t, v in out.items() if v}


#: What tells copies of a record apart without telling what happened: times, process ids and
#: other long numbers (an exit code, a local rank, a signal's number stay).
_IDENTIFIERS = re.compile(r"\d+(?:[:.]\d+)+|\d{3,}")


def _shape(message: str) -> str:
    return _IDENTIFIERS.sub("#", message)


# Templates whose lines may state a step (``clock.stated_step`` reads it): a checkpoint's
# "for step <NUM>", "global_step<NUM>", a path's "checkpoint-<NUM>", "at iteration <NUM>".
_STEP_STATED = re.compile(r"\bstep\b|global_step|[Cc]heckpoint|\biteration\b")
_STEP_LINES = 64  # the latest lines read


def _read_steps(
    lines: JobLines,
    templates: dict[str, TemplateInfo],
    iteration_cells: Mapping[tuple[int, str], tuple[float, int]],
    spans: Mapping[int, int],
    cells: Mapping[tuple[str, str], Cell],
) -> dict[str, Any]:
    """``JobData.step_lines``, ``step_counts`` and ``step_pace``: the latest stamped lines of
    the templates that state a step, not the progress lines themselves
    (``temporal.progress_templates``); the steps of the lines of such a template the index kept
    no copy of (``periodic_steps``); the seconds per step between the steps such templates
    state (one node's: every rank's copy of a line says nothing more), the saves' own time left
    out (``clock.stated_pace``; the templates that state the same steps, a save's first line
    and its last, taken together), the median over such series."""
    progress = progress_templates(iteration_cells, spans)
    tids = [
        t for t, info in templates.items() if _STEP_STATED.search(info.text) and t not in progress
    ]
    read = lines.latest_lines(sorted(tids), _STEP_LINES)
    # A run's start printed by every rank (a template the baselines print too, its lines not
    # kept): its exemplar, at its earliest time, says where training began.
    have = {tid for _, _, tid in read}
    for tid in tids:
        info = templates[tid]
        if tid not in have and resumed_step(info.message) is not None:
            first = min((c.first_ts for (_, t), c in cells.items() if t == tid), default=math.inf)
            if math.isfinite(first):
                read.append((first, info.message, tid))
    by_template: dict[str, list[tuple[float, int]]] = {}
    for t, message, tid in read:
        step = stated_step(message)
        if step is not None and math.isfinite(t):
            by_template.setdefault(tid, []).append((t, step))
    counts = []
    series: list[tuple[set[int], list[tuple[float, int]]]] = []
    # (a template numbered past the iterations the job printed counts something else:
    # DeepSpeed's micro-steps, "step=10400" in iteration 1300)
    printed = max((b + max(n, 1) for b, n in spans.items()), default=math.inf)
    for tid, seen in sorted(by_template.items()):
        on = [c for (_, t), c in cells.items() if t == tid]
        if len(on) != 1 or max(s for _, s in seen) > printed + CLOCK_STEPS:
            continue
        if (last := periodic_steps(seen, on[0])) is not None:
            counts.append(last)
            seen = [*seen, last]
        # (the templates that state the same steps are one series of saves: its first line
        # and its last; DeepSpeed's micro-steps are another)
        steps = {s for _, s in seen}
        joined = [g for g in series if g[0] & steps]
        for g in joined:
            series.remove(g)
            steps |= g[0]
            seen = [*seen, *g[1]]
        series.append((steps, seen))
    paces = [p for _, seen in series if (p := stated_pace(stated_times(seen))) is not None]
    return {
        "step_lines": tuple((t, m) for t, m, _ in read),
        "step_counts": tuple(counts),
        "step_pace": float(statistics.median(paces)) if paces else None,
    }


def _fill_missing_times(
    cells: dict[tuple[str, str], Cell], unit: str, system: frozenset[str] = frozenset()
) -> None:
    """Untimed cells of a rank's log take their node's earliest time (start-up lines printed
    before its first stamp); the lines of the other files (``aux``: kernel and system logs, an
    agent's, the job's own) without a wall-clock time (``dmesg``'s seconds since boot, a
    collector's relative ages, ``srun: error:`` lines) stay untimed: when they were printed is
    not known, and the node's start would make a failure's kernel error look like background."""
    if unit == "position":
        for c in cells.values():
            c.first_ts = c.first_pos
            c.last_ts = max(c.first_pos, c.last_ts if c.last_ts > -math.inf else c.first_pos)
        return
    earliest: dict[str, float] = {}
    for (node, _), c in cells.items():
        if c.first_ts < math.inf:
            earliest[node] = min(c.first_ts, earliest.get(node, math.inf))
    everyone = min(earliest.values())
    for (node, tid), c in cells.items():
        if c.first_ts == math.inf and tid not in system:
            c.first_ts = earliest.get(node, everyone)
        if c.last_ts == -math.inf:
            c.last_ts = c.first_ts


def _read_exemplars(store: Store, job: dict[str, Any], templates: dict[str, TemplateInfo]) -> None:
    """Template text and one exemplar line per template (one document each, any node)."""
    for b in _walk(
        store,
        [_terms("t", F.TEMPLATE_ID)],
        job,
        {
            "x": {
                "top_hits": {
                    "size": 1,
                    "sort": [{F.FIRST_TS: {"order": "asc", "missing": "_last"}}],
                    "_source": ["message", F.TEMPLATE_TEXT],
                }
            }
        },
    ):
        hits = b.get("x", {}).get("hits", {}).get("hits", [])
        if not hits:
            continue
        src = hits[0].get("_source", {})
        info = templates[str(b["key"]["t"])]
        info.text = str(source_field(src, F.TEMPLATE_TEXT) or "")
        info.message = str(source_field(src, "message") or "")


def read_pool_templates(store: Store, pool: Sequence[JobDoc]) -> set[str] | None:
    """Template ids the baseline pool printed, so ingest keeps the failed job's lines of every
    other template; None without a pool."""
    if not pool:
        return None
    scopes = [job_scope(j) for j in sorted(pool, key=lambda j: j.id)]
    return {
        str(b["key"]["t"])
        for b in _walk(
            store,
            [_terms("t", F.TEMPLATE_ID)],
            {"bool": {"should": scopes, "minimum_should_match": 1}},
        )
    }


def read_baseline_pool(store: Store, jobs: Sequence[JobDoc]) -> BaselinePool:
    """Per-template statistics over the baseline jobs (see :class:`BaselinePool`).

    Rates are per node, and per node per iteration reached (1 when the job had none), so a
    4-node 100-iteration rehearsal and a 256-node 10,000-iteration run compare. Each job's
    counts come from its ``l4-jobs`` document (ingest records them); jobs ingested before that
    are aggregated from their rollups.
    """
    if not jobs:
        return BaselinePool((), {})
    node_count: dict[str, int] = {j.id: max(len(j.nodes), 1) for j in jobs}
    work: dict[str, int] = {}
    per: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    missing = []
    for j in jobs:
        if j.template_stats is None or j.iterations is None:
            missing.append(j.id)
            continue
        work[j.id] = max(j.iterations, 1)
        for tid, (count, n_nodes) in j.template_stats.items():
            per[tid].append((j.id, count, n_nodes))
    if missing:
        _aggregate_pool_counts(store, missing, {j.id: job_scope(j) for j in jobs}, work, per)
    stats: dict[str, tuple[int, float, float, float]] = {}
    for tid, rows in per.items():
        fractions = [min(n_nodes / node_count[j], 1.0) for j, _, n_nodes in rows]
        per_node = sorted(count / node_count[j] for j, count, _ in rows)
        per_iteration = sorted(count / node_count[j] / work[j] for j, count, _ in rows)
        stats[tid] = (
            len(rows),
            sum(fractions) / len(jobs),
            per_node[len(per_node) // 2],
            per_iteration[len(per_iteration) // 2],
        )
    return BaselinePool(tuple(jobs), stats, _blind_templates(store, jobs, stats))


def host_spellings(nodes: Iterable[str]) -> frozenset[str]:
    """The job's host names as its templates spell them (each masked as a line's words are:
    "h100-x2" → "h0-x0", "node-17" → "node-<NUM>")."""
    masker = default_masker()
    return frozenset(masker.mask(n) for n in nodes)


def with_aliases(pool: BaselinePool, data: JobData) -> BaselinePool:
    """``pool`` with the job's templates that name its hosts aliased to the baseline templates
    whose host-blind text is theirs (``BaselinePool.aliases``)."""
    if not pool.blind:
        return pool
    blinder = host_blinder(host_spellings(data.nodes))
    aliases = {}
    for tid, info in data.templates.items():
        if tid in pool.stats:
            continue
        blind = blinder(info.text)
        held = pool.blind.get(blind) if blind != info.text else None
        if held is not None:
            aliases[tid] = held
    return replace(pool, aliases=aliases)


def _blind_templates(
    store: Store, jobs: Sequence[JobDoc], stats: Mapping[str, tuple[int, float, float, float]]
) -> dict[str, str]:
    """The pool's templates that name their job's hosts, by their host-blind text
    (``host_blinder`` of that job's nodes) → the template printed in the most baseline jobs."""
    blinders = {j.id: host_blinder(host_spellings(j.nodes)) for j in jobs}
    query = {"bool": {"should": [job_scope(j) for j in jobs], "minimum_should_match": 1}}
    out: dict[str, str] = {}
    aggs = {"x": {"top_hits": {"size": 1, "_source": [F.TEMPLATE_TEXT]}}}
    for b in _walk(store, [_terms("j", F.JOB_ID), _terms("t", F.TEMPLATE_ID)], query, aggs):
        hits = b.get("x", {}).get("hits", {}).get("hits", [])
        tid = str(b["key"]["t"])
        text = str(source_field(hits[0].get("_source", {}), F.TEMPLATE_TEXT) or "") if hits else ""
        blinder = blinders.get(str(b["key"]["j"]))
        blind = blinder(text) if blinder is not None else text
        if blind == text or tid not in stats:
            continue
        held = out.get(blind)
        if held is None or stats[tid][0] > stats[held][0]:
            out[blind] = tid
    return out


def _aggregate_pool_counts(
    store: Store,
    ids: list[str],
    scopes: dict[str, dict[str, Any]],
    work: dict[str, int],
    per: dict[str, list[tuple[str, int, int]]],
) -> None:
    """The template counts of baseline jobs without recorded stats, from their rollups."""
    query = {"bool": {"should": [scopes[j] for j in ids], "minimum_should_match": 1}}
    for j in ids:
        work[j] = 1
    for b in _walk(
        store,
        [_terms("j", F.JOB_ID)],
        {"bool": {"filter": [query, {"exists": {"field": F.ITERATION}}]}},
        {
            "lo": {"min": {"field": F.ITERATION}},
            "hi": {"max": {"field": F.ITERATION}},
        },
    ):
        lo, hi = _value(b, "lo"), _value(b, "hi")
        if lo is not None and hi is not None:
            work[str(b["key"]["j"])] = max(int(hi) - int(lo) + 1, 1)
    for tid, job_id, n, nodes in template_totals(store, query, page_size=_PAGE):
        per[tid].append((job_id, n, nodes))


_TELLING_CHOICES = 5  # lines of one node and template among which ``telling`` chooses


def find_sample_lines(
    store: Store,
    job: JobDoc,
    template_ids: Iterable[str],
    prefer_nodes: Sequence[str] = (),
    recent_from: float | None = None,
    telling: Callable[[str], bool] | None = None,
) -> dict[str, dict[str, Any]]:
    """One kept raw line (``l4-lines``) per template, earliest first, preferring the given nodes
    in their order: a template the most suspect node printed shows that node's line (the
    culprit's ``status=12`` rather than a neighbour's echo of it).

    With ``recent_from`` (epoch seconds: the last stretch of the job, where it failed), a node's
    line from that stretch is preferred to its older ones: a kernel that reported an unrelated
    hung task two days earlier names the task that hangs now in the same template.
    With ``telling``, of a node's first few lines of a template the first one it accepts is
    taken (a work request flushed because its queue pair was already in error says less than the
    retry-exceeded completion of the same template).
    Templates with no kept line are absent from the answer (the caller falls back on the rollup's
    exemplar message).
    """
    wanted = list(dict.fromkeys(template_ids))
    lines = JobLines(store, job_scope(job))
    if not wanted or not lines.any():
        return {}
    out: dict[str, dict[str, Any]] = {}
    preferred = list(prefer_nodes)
    # (filter, the nodes it asks for): a pack of several nodes reads as the line of one of them.
    passes: list[tuple[dict[str, Any] | None, list[str]]] = [
        ({"term": {"host.name": n}}, [n]) for n in preferred[:3]
    ]
    if preferred[3:]:
        passes.append(({"terms": {"host.name": preferred[3:]}}, preferred[3:]))
    recent: list[dict[str, Any] | None] = [None]
    if recent_from is not None and math.isfinite(recent_from):
        recent.insert(0, {"range": {"@timestamp": {"gte": int(recent_from * 1000)}}})
    for (node_filter, asked), time_filter in itertools.product([*passes, (None, [])], recent):
        todo = [t for t in wanted if t not in out]
        if not todo:
            break
        where = [{"terms": {F.TEMPLATE_ID: todo}}]
        where += [f for f in (node_filter, time_filter) if f is not None]
        size = 1 if telling is None else _TELLING_CHOICES
        for tid, sources in lines.earliest_by_template(where, size, asked).items():
            told = [x for x in sources if telling and telling(str(x.get("message") or ""))]
            out[tid] = (told or sources)[0]
    return out
