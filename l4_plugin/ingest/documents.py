"""One node's documents: its ``l4-events`` rollups and its ``l4-lines`` kept lines.

Built where the node's rollup is (a lane's process, ``owners``), from the rollup and what the
whole job says (``DocContext``: the templates' totals and node counts, the iteration buckets, the
placed timeline, the clock's year), which the reducer works out from the lanes' digests
(``context``). A node's documents depend on nothing else, so any split of the nodes over any
number of processes writes the same documents.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from l4_plugin.ingest.attempts import split_unit
from l4_plugin.ingest.header import parse_local
from l4_plugin.ingest.parser import LineKind
from l4_plugin.ingest.rollup import (
    RARE_SAMPLE,
    Group,
    KeptLine,
    NodeRollup,
    kept_like_errors,
    time_ref,
)
from l4_plugin.ingest.timeline import UNPLACED, Timeline
from l4_plugin.records import Level, Template, numbers_blanked
from l4_plugin.store import fields as F
from l4_plugin.store import jobs

# Running (sum in ns, lines) of an event document's iteration durations while groups merge into it;
# replaced by their mean, ``l4.iteration_seconds``, just before the documents are written.
_SECONDS = "_seconds"
TAIL_ITERATIONS = 32  # the last iterations of a job keep one bucket each
MAX_COARSE_BUCKETS = 64  # earlier iterations share buckets: keeps the index compact
# Kept lines of a template below the error level, per node (the event documents keep every count):
REPEAT_KEPT = 16  # a node's repeated template keeps its first and its last REPEAT_KEPT lines
MAJORITY = 0.9  # a template this share of the job's nodes prints (at least 2) ...
MAJORITY_KEPT = RARE_SAMPLE  # ... keeps this many lines per node: it is no node's own anomaly
Doc = tuple[str, dict[str, Any]]  # (``_id``, ``_source``) of a document to write


def doc_id(*parts: object) -> str:
    return hashlib.sha1("\x1f".join(str(p) for p in parts).encode()).hexdigest()


_UNSEEN = object()


class Clock:
    """Timestamps of the reference lines, parsed once each, in the job's ``year`` for year-less
    formats (``context.job_year``) and its ``zone`` (seconds east of UTC) for stamps that state
    none (``scanner.zone_of``; 0: read as UTC). Picklable: it travels to the lanes with the
    job's context; ``cache`` (epoch milliseconds, or None, by reference line: what ``ms``
    returns) is emptied after each node (references are a node's own lines). ``_placed`` reads
    it directly and calls ``ms`` only for a line it does not hold."""

    def __init__(self, year: int, zone: int = 0) -> None:
        self.year = year
        self.zone = zone
        self.cache: dict[str, int | None] = {}

    def __getstate__(self) -> tuple[int, int]:
        return self.year, self.zone

    def __setstate__(self, state: tuple[int, int]) -> None:
        self.year, self.zone = state
        self.cache = {}

    def ms(self, ref: str | None, *, cache: bool = True) -> int | None:
        """Epoch milliseconds of a reference line; ``cache=False`` for one-off lines (--full)."""
        if ref is None:
            return None
        if ref in self.cache:
            return self.cache[ref]
        ts = parse_local(ref, self.year, self.zone)
        ms = int(ts * 1000) if isinstance(ts, float) else None
        if cache:
            self.cache[ref] = ms
        return ms

    def seconds(self, ref: str | None, *, cache: bool = True) -> float | None:
        """The same time in seconds (what the job timeline works in)."""
        ms = self.ms(ref, cache=cache)
        return ms / 1000.0 if ms is not None else None


def this_year() -> int:
    """The year a job whose references carry none is read in."""
    return time.gmtime().tm_year


@dataclass(frozen=True, slots=True)
class Buckets:
    """Map an iteration to (bucket start, span): exact in the tail (the last
    ``TAIL_ITERATIONS`` of the job), coarse before it (at most ``MAX_COARSE_BUCKETS``)."""

    first: int | None  # the job's first placed iteration
    tail_start: int = 0
    width: int = 1
    #: What ``__call__`` returned, by iteration: every node of a job asks about the same ones.
    memo: dict[int, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, last_iterations: list[int], first_iteration: int | None) -> Buckets:
        """The buckets of a job whose nodes' last iterations and first one are these."""
        if not last_iterations or first_iteration is None:
            return cls(None)
        tail_start = max(last_iterations) - TAIL_ITERATIONS + 1
        width = max(1, math.ceil((tail_start - first_iteration) / MAX_COARSE_BUCKETS))
        return cls(first_iteration, tail_start, width)

    def __call__(self, it: int) -> tuple[int, int]:
        first = self.first
        if first is None or it >= self.tail_start or self.width == 1:
            return it, 1
        start = first + ((it - first) // self.width) * self.width
        return start, min(self.width, self.tail_start - start)


@dataclass(frozen=True)
class DocContext:
    """What building one node's documents needs of the whole job."""

    job_id: str
    generation: str
    clock: Clock
    timeline: Timeline  # resolved
    bucket_of: Buckets
    totals: dict[str, int]
    rare_limit: int  # a template printed at most this often keeps every line
    baseline_templates: set[str] | None
    names_a_node: frozenset[str]  # templates whose lines may name a node: kept whole
    majority: frozenset[str]  # templates (naming no node) that nearly every node prints
    fold: bool = True  # fold a majority template's lines of several ranks (not with --full)
    #: A restarted job's timeline per attempt (resolved), which its units' lines are placed on.
    attempts: Mapping[int, Timeline] = field(default_factory=dict)

    def timeline_of(self, unit: str) -> Timeline:
        """The timeline a unit's lines are placed on: its attempt's, else the job's."""
        attempt = split_unit(unit)[1]
        return self.attempts.get(attempt, self.timeline) if attempt is not None else self.timeline


#: A group of a node as its documents see it (``_placed``): its kind, the group, the stage and
#: iteration the job's timeline places it in, its iteration bucket (first iteration or None,
#: span), its first and last times, and ``moved``: the time a timeless run took from a stamped
#: line (its kept lines').
_Placed = tuple[
    LineKind, Group, str, int | None, int | None, int, int | None, int | None, int | None
]


def _placed(ctx: DocContext, node: str, rollup: NodeRollup) -> Iterator[_Placed]:
    """Each group of a node, placed and timed.

    Most of a node's groups are a marker kind's iterations, two reference lines each, read
    here without a call each where the clock's cache of the node's references holds them; the
    buckets are remembered per iteration (``Buckets.memo``), and ``Timeline.refine`` is asked
    only about an iteration the job saved a checkpoint at (``Timeline.saves``):
    ``tests/unit/test_documents.py`` checks each against the plain calls."""
    clock = ctx.clock
    times, year, zone = clock.cache, clock.year, clock.zone
    timeline = ctx.timeline_of(node)
    saves = timeline.saves
    bucket_of = ctx.bucket_of
    buckets = bucket_of.memo
    for (kind, stage, it), group in rollup.groups.items():
        ref = group.first_ts_ref
        if ref in times:
            first_ms = times[ref]
        elif ref is None:
            first_ms = None
        else:  # ``Clock.ms``, inlined
            ts = parse_local(ref, year, zone)
            first_ms = times[ref] = int(ts * 1000) if isinstance(ts, float) else None
        ref = group.last_ts_ref
        if ref in times:
            last_ms = times[ref]
        elif ref is None:
            last_ms = None
        else:
            ts = parse_local(ref, year, zone)
            last_ms = times[ref] = int(ts * 1000) if isinstance(ts, float) else None
        moved: int | None = None
        if stage.startswith(UNPLACED):
            first_ms, last_ms, moved = _moved(clock, rollup, it, group, first_ms, last_ms)
            stage, it = timeline.place(
                stage[1:], first_ms / 1000.0 if first_ms is not None else None
            )
        elif it in saves and first_ms is not None:
            stage = timeline.refine(stage, it, first_ms / 1000.0)
        if it is None:
            yield kind, group, stage, it, None, 0, first_ms, last_ms, moved
            continue
        bucket = buckets.get(it)
        if bucket is None:
            bucket = buckets[it] = bucket_of(it)
        yield kind, group, stage, it, bucket[0], bucket[1], first_ms, last_ms, moved


def _moved(
    clock: Clock,
    rollup: NodeRollup,
    it: int | None,
    group: Group,
    first_ms: int | None,
    last_ms: int | None,
) -> tuple[int | None, int | None, int | None]:
    """An unplaced group's (first ms, last ms, moved): ``moved`` is the time a timeless run
    took from its next stamp's line (``time_ref``), which its kept lines carry too."""
    ref = time_ref(rollup, it, group)
    if ref is group.first_ts_ref:
        return first_ms, last_ms, None
    first_ms = moved = clock.ms(ref)
    after = it is not None and ref is rollup.runs[-1 - it].after
    if first_ms is not None and after:
        # Printed before the stamped line whose time it takes: a millisecond earlier
        # keeps the two in the order they were written.
        first_ms = moved = first_ms - 1
    last_ms = max(last_ms or 0, first_ms or 0) or None
    return first_ms, last_ms, moved


def rare_limit(nodes: int) -> int:
    """How often a template may be printed in a job of ``nodes`` nodes and still be rare: every
    line of a rare template is written to ``l4-lines``, whatever its level."""
    return max(20, nodes)


def keeps_all(ctx: DocContext, kind: LineKind, template: Template) -> bool:
    """Whether every kept line of the template's groups becomes an ``l4-lines`` document.

    The scanners rely on it: without baselines they keep no samples of a kind below the keep
    level once they have counted more than ``rare_limit`` of its lines (``workers.Scanner``).
    Another reason to write such a template's lines must be known to them too."""
    return (
        kept_like_errors(kind)
        or ctx.totals[template.id] <= ctx.rare_limit
        or (ctx.baseline_templates is not None and template.id not in ctx.baseline_templates)
    )


class _Kept(NamedTuple):
    """A kept line on its way to ``l4-lines``: trimmed and folded before it is a document."""

    ms: int | None
    line: KeptLine
    level: str | None
    stage: str
    it: int | None
    folded: int = 0  # lines of other ranks it stands for (``_fold_ranks``)
    until: int | None = None  # the last of them, when later


def _kept_lines(
    ctx: DocContext, kind: LineKind, stage: str, it: int | None, group: Group, moved: int | None
) -> list[_Kept]:
    """A group's kept lines, with their times."""
    ms = ctx.clock.ms
    return [
        _Kept(moved if moved is not None else ms(k.ts_ref), k, kind.level, stage, it)
        for k in group.kept
    ]


def _line_doc(ctx: DocContext, node: str, template_id: str, k: _Kept) -> Doc:
    """The ``l4-lines`` document of a kept line."""
    kept = k.line
    doc: dict[str, Any] = {
        "message": kept.message,
        "host.name": node,
        "log.file.path": kept.path,
        F.JOB_ID: ctx.job_id,
        F.TEMPLATE_ID: template_id,
        F.STAGE: k.stage,
        F.LINE: kept.line,
        F.GENERATION: ctx.generation,
    }
    if k.ms is not None:
        doc["@timestamp"] = k.ms
    if k.level:
        doc["log.level"] = k.level
    if kept.rank is not None:
        doc[F.RANK] = kept.rank
    if k.it is not None:
        doc[F.ITERATION] = k.it
    if kept.flags:
        doc[F.FLAGS] = list(kept.flags)
    if kept.offset is not None:
        doc["log.offset"] = kept.offset
    if k.folded:
        doc[F.FOLDED] = k.folded
    if k.until is not None:
        doc[F.UNTIL] = k.until
    return doc_id(ctx.job_id, ctx.generation, node, kept.path, kept.line), doc


def _trim_kept(
    ctx: DocContext, template_id: str, lines: list[_Kept], below_error: bool
) -> list[_Kept]:
    """One node's kept lines of a template, as written to ``l4-lines``.

    Error lines and lines without a level are all kept (up to ``MAX_KEPT_PER_GROUP`` per group:
    the last line of a C++ exception has none), but a template nearly every node prints has the
    lines of its several ranks folded into one (``_fold_ranks``). Below the error level, such a
    template keeps ``MAJORITY_KEPT`` lines per node, and a template the node repeats (a
    power-cap warning every minute for hours) its first and last ``REPEAT_KEPT``; the event
    documents still count every line. A line that may name a peer (an address or a host name
    in its template: ``records.may_name_a_node``) is never dropped nor folded: the peers'
    analysis reads them.
    """
    if template_id in ctx.names_a_node:
        return lines
    majority = template_id in ctx.majority
    if majority and ctx.fold:
        lines = _fold_ranks(lines)
    if not below_error or (not majority and len(lines) <= 2 * REPEAT_KEPT):
        return lines
    lines = sorted(lines, key=_line_order)
    if majority:
        return lines[:MAJORITY_KEPT]
    return lines[:REPEAT_KEPT] + lines[-REPEAT_KEPT:]


def _fold_ranks(lines: list[_Kept]) -> list[_Kept]:
    """A majority template's lines of one node, those of its several ranks folded into one.

    The ranks of a node that print the same line of a template nearly every node prints (the
    watchdog cascade on every rank, a warning each rank prints once) say nothing one rank's
    line does not: lines of one stage, iteration and level whose messages differ only in
    their digits (rank numbers, times) and that come from different ranks fold into the
    earliest, which records how many it stands for (``l4.folded``) and when the last of them
    was printed (``l4.until``, when later). A rank's k-th such line folds with the other
    ranks' k-th. The earliest is a timed line if any is: an untimed line takes no time from
    the others. Counts of rules stay those of the raw lines (``l4.folded`` is added); lines
    without a rank (the launcher, the kernel) are never folded.
    """
    if len(lines) < 2:
        return lines
    rounds: dict[tuple[Any, ...], list[_Kept]] = {}
    seen: dict[tuple[Any, ...], int] = defaultdict(int)
    out: list[_Kept] = []
    for k in sorted(lines, key=_timed_first):
        rank = k.line.rank
        if rank is None:
            out.append(k)
            continue
        key = (k.stage, k.it, k.level, k.line.flags, numbers_blanked(k.line.message))
        nth = seen[(*key, rank)]
        seen[(*key, rank)] = nth + 1
        rounds.setdefault((*key, nth), []).append(k)
    for same in rounds.values():
        head = same[0]
        if len(same) > 1:
            last = max((k.ms or 0 for k in same[1:]), default=0)
            until = last if last > (head.ms or 0) else None
            head = head._replace(folded=len(same) - 1, until=until)
        out.append(head)
    return out


def _timed_first(k: _Kept) -> tuple[bool, int, str, int]:
    """Timed lines in time order, then untimed ones: a folded line's time is its earliest."""
    return (k.ms is None, k.ms or 0, k.line.path, k.line.line)


def _line_order(k: _Kept) -> tuple[int, str, int]:
    """Kept lines in time order (untimed first), then by file and line."""
    return (k.ms or 0, k.line.path, k.line.line)


def node_documents(
    ctx: DocContext, node: str, rollup: NodeRollup
) -> tuple[list[Doc], list[Doc], list[Doc]]:
    """One node's ``l4-events`` rollups and ``l4-lines`` kept lines: (events, lines, shared).

    Groups of the same template, stage and iteration bucket merge into one event document (the
    node is in its key, so a node's event documents are complete here). ``shared`` are the
    kept lines below the error level of a template nearly every node prints: the write step
    packs those of many nodes into one document (``store/line_packs.py``).
    """
    merged: dict[tuple[str, str, str, int | None], dict[str, Any]] = {}
    kept: dict[str, list[_Kept]] = {}
    below_error: dict[str, bool] = {}
    writes: dict[LineKind, tuple[bool, bool]] = {}  # ``_writes`` of each kind
    for kind, group, stage, it, start, span, first_ms, last_ms, moved in _placed(ctx, node, rollup):
        template = kind.template
        assert template is not None
        key = (node, template.id, stage, start)
        doc = merged.get(key)
        if doc is None:
            merged[key] = _event_doc(
                ctx.job_id, node, template, kind, stage, start, span, group, first_ms, last_ms,
                ctx.generation,
            )  # fmt: skip
        else:
            _merge(doc, group, first_ms, last_ms)
        keeps, below = writes.get(kind) or writes.setdefault(kind, _writes(ctx, kind, template))
        if keeps:
            kept.setdefault(template.id, []).extend(_kept_lines(ctx, kind, stage, it, group, moved))
            below_error[template.id] = below_error.get(template.id, True) and below
    lines: list[Doc] = []
    shared: list[Doc] = []
    for tid, ks in kept.items():
        below = below_error[tid]
        # The majority never holds a template that may name a node (``doc_context``).
        out = shared if ctx.fold and below and tid in ctx.majority else lines
        out.extend(_line_doc(ctx, node, tid, k) for k in _trim_kept(ctx, tid, ks, below))
    events = [
        (doc_id(ctx.job_id, ctx.generation, *key), _finish_event(d)) for key, d in merged.items()
    ]
    host, attempt = split_unit(node)
    if attempt is not None:  # the unit is a node's lines of one attempt
        for _, doc in (*events, *lines, *shared):
            doc["host.name"] = host
            doc[F.ATTEMPT] = attempt
    return events, lines, shared


def _writes(ctx: DocContext, kind: LineKind, template: Template) -> tuple[bool, bool]:
    """Whether a kind's kept lines are written (``keeps_all``), and whether its level is below
    the error level (it says so; a line without a level may be an error)."""
    level = Level.parse(kind.level)
    return keeps_all(ctx, kind, template), level is not None and not level.is_error


def _finish_event(doc: dict[str, Any]) -> dict[str, Any]:
    """An event document as written: ranks sorted, the iteration durations' mean."""
    doc[F.RANKS] = sorted(doc[F.RANKS])
    doc[F.COUNT_ALL] = doc[F.COUNT]
    if _SECONDS in doc:
        total_ns, n = doc.pop(_SECONDS)
        doc[F.ITERATION_SECONDS] = total_ns / n / 1e9
    return doc


@dataclass
class EventTotals:
    """What the job document says of the event documents written: ranks and time span."""

    ranks: set[int] = field(default_factory=set)
    first: int | None = None  # the earliest first time
    last: int | None = None  # the latest last time
    #: Per attempt of a restarted job: its nodes and the time span of its documents.
    attempts: dict[int, jobs.AttemptSpan] = field(default_factory=dict)

    def add(self, events: list[Doc]) -> None:
        """Count a node's event documents in."""
        for _, d in events:
            self.ranks.update(d[F.RANKS])
            first, last = d.get(F.FIRST_TS), d.get(F.LAST_TS)
            if first is not None and (self.first is None or first < self.first):
                self.first = first
            if last is not None and (self.last is None or last > self.last):
                self.last = last
            if d.get(F.ATTEMPT) is not None:
                k = d[F.ATTEMPT]
                span = self.attempts.get(k) or jobs.AttemptSpan(k)
                self.attempts[k] = span.add(d["host.name"], first, last)

    def merge(self, other: EventTotals) -> None:
        """Count another lane's event documents in."""
        self.ranks |= other.ranks
        for first in (other.first,) if other.first is not None else ():
            self.first = first if self.first is None else min(self.first, first)
        for last in (other.last,) if other.last is not None else ():
            self.last = last if self.last is None else max(self.last, last)
        for k, theirs in other.attempts.items():
            span = self.attempts.get(k)
            if span is None:
                self.attempts[k] = theirs
                continue
            for node in theirs.nodes:
                span = span.add(node, theirs.start_ts, theirs.end_ts)
            self.attempts[k] = span


def _event_doc(
    job_id: str,
    node: str,
    template: Template,
    kind: LineKind,
    stage: str,
    start: int | None,
    span: int,
    group: Group,
    first_ms: int | None,
    last_ms: int | None,
    generation: str,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "message": group.message[:8191],
        "host.name": node,
        "log.file.path": group.path,
        F.JOB_ID: job_id,
        F.TEMPLATE_ID: template.id,
        F.TEMPLATE_TEXT: template.text,
        F.COUNT: group.count,
        F.FIRST_POS: group.first_pos,
        F.LAST_POS: group.last_pos,
        F.RANKS: set(group.ranks),
        F.STAGE: stage,
        F.GENERATION: generation,
        F.BUCKET: f"it:{start}+{span}" if start is not None else f"stage:{stage}",
    }
    if kind.level:
        doc["log.level"] = kind.level
    if start is not None:
        doc[F.ITERATION] = start
        doc[F.ITERATION_SPAN] = span
    if group.seconds_n:
        doc[_SECONDS] = (group.seconds_ns, group.seconds_n)
    if first_ms is not None:
        doc["@timestamp"] = doc[F.FIRST_TS] = first_ms
    if last_ms is not None:
        doc[F.LAST_TS] = last_ms
    return doc


def _merge(doc: dict[str, Any], group: Group, first_ms: int | None, last_ms: int | None) -> None:
    doc[_COUNT] += group.count
    if group.seconds_n:
        total_ns, n = doc.get(_SECONDS, (0, 0))
        doc[_SECONDS] = (total_ns + group.seconds_ns, n + group.seconds_n)
    doc[_RANKS] |= group.ranks
    if group.first_pos < doc[_FIRST_POS]:
        doc[_FIRST_POS] = group.first_pos
    if group.last_pos > doc[_LAST_POS]:
        doc[_LAST_POS] = group.last_pos
    if first_ms is not None:
        have = doc.get(_FIRST_TS)
        if have is None or first_ms < have:
            doc["@timestamp"] = doc[_FIRST_TS] = first_ms
    if last_ms is not None:
        have = doc.get(_LAST_TS)
        if have is None or last_ms > have:
            doc[_LAST_TS] = last_ms


# The fields ``_merge`` updates, as module constants: it runs for most groups of a node.
_COUNT, _RANKS, _FIRST_POS, _LAST_POS = F.COUNT, F.RANKS, F.FIRST_POS, F.LAST_POS
_FIRST_TS, _LAST_TS = F.FIRST_TS, F.LAST_TS
