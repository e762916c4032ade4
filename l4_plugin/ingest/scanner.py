"""One scanner of a job's files: read, decompress, mask, deduplicate and scan them into rollups.

A ``Scanner`` lives in one process for one ingest (a lane's, ``owners``; or this process's) and
scans whole runs of a node's files into a ``NodeRollup`` whose line kinds are its own parser's:
masking and the stage rules' verdicts are cached per distinct kind for its life, and the kinds
are handed to the reducer by their masked line (``parser.KindSpec``), which runs Drain over them
in job order (``workers``).
"""

from __future__ import annotations

import gc
import os
import re
import resource
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from l4_plugin.errors import FileCutError, IngestError
from l4_plugin.ingest.attempts import split_unit
from l4_plugin.ingest.header import parse_time, stated_zone, zone_free
from l4_plugin.ingest.jobdir import is_system_log
from l4_plugin.ingest.logfile import LogFile, Route, Split
from l4_plugin.ingest.parser import KindSpec, LineKind, LineParser, kind_spec
from l4_plugin.ingest.rollup import (
    Chunk,
    FilePartial,
    Group,
    KindCache,
    NodeRollup,
    kept_like_errors,
)
from l4_plugin.ingest.sources import LogStream, bounded_blocks
from l4_plugin.ingest.stages import default_stage_rules
from l4_plugin.ingest.timeline import UNPLACED, MarkKey, Timeline
from l4_plugin.limits import MAX_LINE_CHARS, ReadLimits
from l4_plugin.records import is_job_node

FEED_LINES = 65_536
#: Kinds of files (``LogFile.kind``) that are no rank's own output: a launcher agent's log, a
#: file of the job's own. Their templates make the job document's ``aux_templates``.
AUX_KINDS = ("agent", "job")
#: (folded key, masked line) pairs: masks one scanner's regexes computed, for the others.
Masks = list[tuple[str, str]]


def chunks(
    stream: LogStream,
    parser: LineParser,
    problems: list[str] | None,
    long_lines: set[int],
    cut: list[str] | None = None,
) -> Iterator[Chunk]:
    """Feed a stream's blocks to the parser; damage is reported to ``problems`` (None: ignored),
    a file cut at a read limit (``FileCutError``) to ``cut`` (``FileCutError.cut``) if given."""
    pos = 0
    try:
        for block in stream.open():
            chunk = block.lines
            digit_keys = block.digit_keys()
            for start in range(0, len(chunk), FEED_LINES):
                lines = chunk[start : start + FEED_LINES]  # a copy: cut below, never the block's
                keys = None
                if block.cut:  # one line, longer than the reader keeps: the rest was read past
                    size = f"{block.cut:,} bytes"
                    _truncated(stream, lines, 0, pos, size, problems, long_lines)
                if digit_keys is not None:
                    whole = start == 0 and len(chunk) <= FEED_LINES
                    keys = digit_keys if whole else digit_keys[start : start + FEED_LINES]
                if lines and max(map(len, lines)) > MAX_LINE_CHARS:
                    keys = None  # those of the whole lines
                    for i, line in enumerate(lines):
                        if len(line) > MAX_LINE_CHARS:
                            size = f"{len(line)} characters"
                            _truncated(stream, lines, i, pos + i, size, problems, long_lines)
                pos += len(lines)
                kinds, keys = parser.feed_keyed(lines, keys)
                yield lines, kinds, block, start, keys
    except FileCutError as exc:
        if cut is not None:
            cut.append(exc.cut)
        elif problems is not None:
            problems.append(str(exc))
    except IngestError as exc:
        if problems is not None:
            problems.append(str(exc))


def _truncated(
    stream: LogStream,
    lines: list[str],
    i: int,
    pos: int,
    size: str,
    problems: list[str] | None,
    long_lines: set[int],
) -> None:
    """Cut ``lines[i]``, the file's line ``pos + 1``, to ``MAX_LINE_CHARS``: one warning."""
    long_lines.add(pos + 1)
    if problems is not None:
        problems.append(f"{stream.path}:{pos + 1}: line of {size} truncated to {MAX_LINE_CHARS}")
    lines[i] = lines[i][:MAX_LINE_CHARS]


@dataclass(slots=True)
class NodeDigest:
    """What the reducer learns of one node a lane scanned (the rollup stays in the lane):
    enough to run Drain in job order, to find the job's timeline and what every node's
    documents depend on (``context.survey``), and to report progress and problems."""

    node: str
    #: Every kind its files fed, by masked line, in first-seen order (the order Drain sees);
    #: ``specs`` the attributes of those new to its scanner.
    kinds: list[str]
    specs: list[KindSpec]
    #: Lines per kind in the rollup's groups (0: none: every line absorbed into a record), the
    #: kinds (indices into ``kinds``) with a group in a file that is no system log, and those
    #: with one in a rank's own output (neither an agent's nor the job's file, ``AUX_KINDS``).
    counts: list[int]
    rank_logs: list[int]
    from_workers: list[int]
    system_logs: bool
    #: Its timeline's transitions (those of its attempt's timeline, for a restarted job's unit).
    marks: list[tuple[MarkKey, str]]
    lines: int
    last_iteration: int | None
    first_iteration: int | None  # the first iteration a placed group has
    year: int | None  # of a time reference whose format carries its year
    #: Seconds east of UTC of the wall clock its stamps without a zone show (``zone_of``).
    zone: int | None
    problems: list[str]
    cut: list[str]
    files: int
    size: int
    #: The global ranks its groups name (a job's dumps are placed on the nodes by them).
    ranks: list[int]


@dataclass(slots=True)
class Scanned:
    """A run of one node's files scanned into a rollup, with the kinds in first-seen order."""

    rollup: NodeRollup
    order: dict[LineKind, None]
    problems: list[str]
    cut: list[str]
    aux_paths: frozenset[str] = frozenset()  # its files of ``AUX_KINDS``


class Scanner:
    """Scans runs of a node's files into rollups: one per lane (or one in this process).

    Masking and the stage rules' verdicts are cached per distinct kind for the scanner's life,
    across files; ``reported`` remembers which kinds' attributes already went to the reducer.
    It must scan its runs in job order: a kind's attributes and a timeline transition travel
    with its first run only.
    """

    def __init__(
        self,
        pinned: dict[str, LineKind] | None = None,
        rare_limit: int | None = None,
        *,
        share_masks: bool = False,
    ) -> None:
        self.parser = LineParser(mine=False, pinned=pinned)
        # ``share_masks``: the masks this scanner computes are logged for the other scanners of
        # the job (``computed_masks``), so that a line every node prints is not masked once per
        # scanner (masking is most of what two scanners would both pay for such a line).
        if share_masks:
            self.parser.mask_log = []
        self.rules = default_stage_rules()
        self.cache = KindCache()
        # ``rare_limit``: a template printed at most this often in the job is rare, and only a
        # rare one's lines below the keep level are written (``documents.keeps_all``, in a job
        # ingested without baselines). A kind this scanner has counted more lines of is no
        # rare template's: its groups stop keeping sample lines (None: they always keep them).
        self.rare_limit = rare_limit
        self.counted: dict[LineKind, int] = {}
        self.reported: set[str] = set()
        # Timeline transitions this scanner's partials already carried. The reducer merges
        # partials in job order and keeps a transition's first time, so a later partial of the
        # same scanner need not carry it again (every node of a job goes through the same
        # iterations: most marks would otherwise travel once per node). Per attempt: each attempt
        # of a restarted job has a timeline of its own (``attempts``).
        self.marked: set[tuple[int | None, MarkKey]] = set()
        self.worker = os.getpid()

    def scan_node(self, streams: list[LogStream]) -> Scanned:
        """Consecutive files of one node into one rollup, as one process would scan them."""
        rollup = NodeRollup(streams[0].node, self.rules, Timeline(), self.cache)
        problems: list[str] = []
        cut: list[str] = []
        order: dict[LineKind, None] = {}
        for stream in streams:
            long_lines: set[int] = set()

            def tracked(
                stream: LogStream = stream, long_lines: set[int] = long_lines
            ) -> Iterator[Chunk]:
                for chunk in chunks(stream, self.parser, problems, long_lines, cut):
                    order.update(dict.fromkeys(chunk[1]))
                    yield chunk

            try:
                rollup.scan(stream.path, stream.rank, tracked(), long_lines)
            except OSError as exc:
                problems.append(f"cannot read {stream.path}: {exc.strerror}")
        if self.rare_limit is not None:
            self._drop_samples(rollup, self.rare_limit)
        aux = frozenset(s.path for s in streams if s.kind in AUX_KINDS)
        return Scanned(rollup, order, problems, cut, aux)

    def new_marks(
        self, node: str, marks: Iterable[tuple[MarkKey, str]]
    ) -> list[tuple[MarkKey, str]]:
        """The transitions of the timeline of ``node``'s attempt this scanner has not handed on
        yet (then it has)."""
        marked, attempt = self.marked, split_unit(node)[1]
        out = [mark for mark in marks if (attempt, mark[0]) not in marked]
        marked.update((attempt, key) for key, _ in out)
        return out

    def new_specs(self, order: Iterable[LineKind]) -> list[KindSpec]:
        """The attributes of the kinds this scanner has not reported yet (then it has)."""
        reported = self.reported
        specs = [kind_spec(k) for k in order if k.key not in reported]
        reported.update(spec[0] for spec in specs)
        return specs

    def scan(self, streams: list[LogStream], sizes: list[int]) -> FilePartial:
        """Consecutive files of one node into one partial rollup (problems and kinds new to
        this scanner included): what a lane hands over when its rollups are gathered."""
        done = self.scan_node(streams)
        part = done.rollup.partial(done.order)
        part.marks = self.new_marks(part.node, part.marks)
        part.problems = done.problems
        part.cut = done.cut
        part.worker = self.worker
        part.size = sum(sizes)
        part.files = len(streams)
        part.specs = self.new_specs(done.order)
        return part

    def digest(self, done: Scanned, sizes: list[int]) -> NodeDigest:
        """What the reducer learns of a node scanned here (``NodeDigest``)."""
        rollup = done.rollup
        index = {kind: i for i, kind in enumerate(done.order)}
        counts = [0] * len(index)
        rank_logs: set[int] = set()
        workers: set[int] = set()
        job_node = is_job_node(rollup.node)
        system: dict[str, bool] = {}
        shipped = False  # a kernel line came with the ranks' output
        first: int | None = None
        ranks: set[int] = set()
        for (kind, stage, it), group in rollup.groups.items():
            i = index[kind]
            counts[i] += group.count
            ranks.update(group.ranks)
            path = group.path
            in_system = system.get(path)
            if in_system is None:
                in_system = system[path] = is_system_log(path)
            # (a kernel line a collector shipped with the ranks' output is the system log's)
            kernel = kind.emitter == "kernel"
            shipped = shipped or kernel
            if not in_system and not kernel:
                rank_logs.add(i)
                if path not in done.aux_paths and not job_node:
                    workers.add(i)
            if it is not None and not stage.startswith(UNPLACED):
                first = it if first is None else min(first, it)
        year = year_of(rollup)
        return NodeDigest(
            rollup.node,
            [k.key for k in done.order],
            self.new_specs(done.order),
            counts,
            sorted(rank_logs),
            sorted(workers),
            shipped or any(system.values()),
            self.new_marks(rollup.node, rollup.timeline.marks.items()),
            rollup.lines,
            rollup.last_iteration,
            first,
            year,
            zone_of(rollup, year),
            done.problems,
            done.cut,
            len(sizes),
            sum(sizes),
            sorted(ranks),
        )

    def _drop_samples(self, rollup: NodeRollup, limit: int) -> None:
        """Count the rollup's lines per kind; the groups of a kind below the keep level that
        this scanner has now counted more than ``limit`` lines of drop their sample lines (the
        job prints it more often still), and its later groups keep none (``KindCache.frequent``).
        What the documents hold is the same: such lines are never written."""
        counted = self.counted
        for (kind, _, _), group in rollup.groups.items():
            counted[kind] = counted.get(kind, 0) + group.count
        frequent = self.cache.frequent
        for kind in {kind for kind, _, _ in rollup.groups}:
            if kind not in frequent and counted[kind] > limit and not kept_like_errors(kind):
                frequent.add(kind)
        for (kind, _, _), group in rollup.groups.items():
            if kind in frequent and group.kept:
                group.kept = []

    def computed_masks(self) -> Masks:
        """The masks this scanner's regexes computed since the last call (``share_masks``)."""
        log = self.parser.mask_log
        if not log:
            return []
        self.parser.mask_log = []
        return log

    def scan_all(self, streams: list[LogStream], sizes: list[int]) -> list[FilePartial]:
        """Consecutive files, one partial per run of files of the same node."""
        cpu = time.process_time()  # per batch: the clock is a system call
        with gc_paused():
            out = [self.scan(streams[a:b], sizes[a:b]) for a, b in node_runs(streams)]
        if out:
            out[0].cpu = time.process_time() - cpu
            out[0].rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return out


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (the state before is restored after).

    A scan creates hundreds of thousands of long-lived groups and kept lines, and unpickling
    the workers' partials as many again; each of CPython's collections triggered on the way
    walks the ever larger heap. On the realistic benchmark that was 15% of a worker's scan and
    four fifths of the reducer's unpickling, while the scan leaves no cyclic garbage (none found
    by a ``gc.collect()`` after it): everything it drops is freed by reference counting.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            # Everything the block allocated is still in the youngest generation: the first
            # collection after ``enable`` would walk it all (0.14 s per million lines scanned).
            # Moved to the oldest generation instead, it is examined at the next full
            # collection only, like any long-lived object (nothing is frozen for good).
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def node_runs(streams: Sequence[LogStream | Task]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of consecutive streams of the same node."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(streams) + 1):
        if i == len(streams) or streams[i].node != streams[start].node:
            runs.append((start, i))
            start = i
    return runs


@dataclass(frozen=True, slots=True)
class Task:
    """One file of a batch, as a lane's process opens it (``task_stream``): what a
    ``LogStream`` of ``sources.file_streams`` holds, less its reader (not picklable)."""

    node: str
    rank: int | None
    path: str
    file: str
    size: int
    host: str | None = None
    limits: ReadLimits | None = None
    route: Route | None = None
    kind: str = "rank"  # ``LogFile.kind``
    attempt: int | None = None  # ``LogFile.attempt`` and ``LogFile.split``
    split: Split | None = None


def task_stream(task: Task) -> LogStream:
    """The stream a worker reads: the same confinement, size limit and host filter as
    ``sources.file_streams`` in the parent."""
    path = Path(task.file)
    file = LogFile(
        path,
        task.path,
        task.node,
        task.rank,
        "rank",
        task.host,
        route=task.route,
        attempt=task.attempt,
        split=task.split,
    )
    return LogStream(
        task.node,
        task.rank,
        task.path,
        lambda: bounded_blocks(file, task.limits),
        path,
        task.host,
        task.limits,
        route=task.route,
        kind=task.kind,
        attempt=task.attempt,
        split=task.split,
    )


def year_of(rollup: NodeRollup) -> int | None:
    """The year of the first time reference of the rollup (one per kind, in first-seen order)
    whose format carries its own year; None when none does. The job's clock reads year-less
    formats in the year the job's references give (``documents.Clock``)."""
    for _, ref in _kind_references(rollup):
        a, b = parse_time(ref, 2000), parse_time(ref, 2001)
        if a is not None and a == b:
            return time.gmtime(a).tm_year
    return None


def _kind_references(rollup: NodeRollup) -> Iterator[tuple[Group, str]]:
    """The first group of each kind that has a time reference, with it, in first-seen order
    (a kind's first group holds its first line)."""
    seen: set[object] = set()
    for (kind, _, _), group in rollup.groups.items():
        ref = group.first_ts_ref
        if kind in seen or ref is None:
            continue
        seen.add(kind)
        yield group, ref


#: How near the wall clock of a stamp stating a zone the next stamp of its file stating none must
#: be, read in that zone, for the file to show which zone its unzoned stamps are in.
ZONE_NEAR = 900.0
_OFFSET = re.compile(r"\d\d:\d\d(?:[.,]\d+)?[+-]\d\d:?\d\d(?!\d)")


def zone_of(rollup: NodeRollup, year: int | None) -> int | None:
    """Seconds east of UTC of the wall clock the node's stamps without a zone were printed in,
    when one of its files shows it; else None (they are read as UTC).

    A file shows it when a stamp stating a zone other than UTC (a Slurm task banner's
    ``[2025-10-24T16:49:58-07:00]``) has, next to it in the file, a stamp stating none that reads
    as that zone's wall clock (``[NeMo W 2025-10-24 16:50:07 …]``: within ``ZONE_NEAR`` of
    16:49:58) and not as UTC. The first time reference of each kind is looked at (the first
    group of a kind holds its first line), the stamp nearest the stated one by line."""
    if year is None:
        year = time.gmtime().tm_year
    stated: list[tuple[str, int, float, int]] = []
    free: dict[str, list[tuple[int, str]]] = {}
    for group, ref in _kind_references(rollup):
        if zone_free(ref, year):
            free.setdefault(group.path, []).append((group.first_pos, ref))
        elif _OFFSET.search(ref) is not None:
            ts, east = stated_zone(ref, year)
            if ts is not None and east:
                stated.append((group.path, group.first_pos, ts, east))
    for path, pos, ts, east in stated:
        near = min(free.get(path, ()), key=lambda p: abs(p[0] - pos), default=None)
        if near is None:
            continue
        utc = parse_time(near[1], year)
        if utc is None:
            continue
        if abs(utc - (ts + east)) <= ZONE_NEAR:
            return east
    return None
