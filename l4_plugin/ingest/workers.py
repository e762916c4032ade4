"""Scanning a job's files on every core: one partial rollup per file, merged in job order.

``N`` scanners (``--workers N``): ``N - 1`` worker processes and the calling process. Each reads,
decompresses, masks, deduplicates and scans whole files into ``FilePartial`` s (per-file
rollups whose line kinds are named by their masked line), with the attributes of every kind it
saw first (``KindSpec``). The reducer, in the calling process, takes the partials in job order
(files sorted by node, rank, path), adopts each file's new kinds into the one ``LineParser``
that runs Drain — so Drain sees the distinct lines in the order a single process would — and
merges the partials into the node rollups and the job timeline. Whenever the next partial in
job order is not ready, the calling process scans the next batch itself instead of waiting
(``_partials``): a core is never left to a process that only waits, and what it scans is never
pickled. The scanners hand each other the masks their regexes computed (``Masks``), so that a
line the job prints on every node is masked about once, not once per scanner.
One worker or sixteen, any scheduling: the same templates, ids and rollups.

A kind's attributes (level, emitter, body…) come from the first raw line that masked to it. A
scanner's first raw line of a masked line is the job's first one unless another scanner's
earlier file had it; in the rare case the two raw lines disagree (their headers parse
differently), the reducer notices and scans the scanner's affected files again in its own
process, with the job's kinds pinned (``LineParser(pinned=…)``), so the result stays what one
process would give.
"""

from __future__ import annotations

import gc
import os
import pickle
import resource
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

from l4_plugin.errors import FileCutError, IngestError
from l4_plugin.ingest import procs
from l4_plugin.ingest.attempts import split_unit
from l4_plugin.ingest.logfile import LogFile, Route, Split
from l4_plugin.ingest.parser import LineKind, LineParser, kind_spec
from l4_plugin.ingest.rollup import Chunk, FilePartial, KindCache, NodeRollup, kept_like_errors
from l4_plugin.ingest.sources import LogStream, bounded_blocks
from l4_plugin.ingest.stages import default_stage_rules
from l4_plugin.ingest.timeline import MarkKey, Timeline
from l4_plugin.limits import MAX_LINE_CHARS, ReadLimits

FEED_LINES = 65_536
#: (folded key, masked line) pairs: masks one scanner's regexes computed, for the others.
Masks = list[tuple[str, str]]
#: Files go to the workers in contiguous batches of about this much work (fewer round trips),
#: counted in lines (``LogStream.lines``): a line costs the scan ~3 µs whatever its length, so
#: the dev cases' batches of 8 MB took 0.15 s where their lines are 100 bytes long and 0.9 s
#: where they are 31, and such a batch at the end of a scan left the other scanners idle...
BATCH_LINES = 80_000
BATCH_FILES = 256
#: ...and of at most a share of what is left to batch (``_batches``), no less than this.
MIN_BATCH_LINES = 2_500
#: Opening a file and making its node's partial cost about as much as this many lines...
FILE_LINES = 200
#: ...and a stream whose lines are not known is weighed at this many bytes a line.
LINE_BYTES = 100
#: Batches given to a worker process at a time: the one it scans and the next, so that it never
#: waits while the caller scans a batch of its own (``_partials``). At the end of the scan the
#: caller takes back the batches a worker has not started (``_take_back``); before that it
#: waited for them (with three queued, idle for ~0.2 s of a 1.6 s scan)...
QUEUED_PER_WORKER = 2
#: ...and at most this many bytes of files per scanner claimed but not yet merged (the partials
#: waiting in memory while an earlier batch is still being scanned).
AHEAD_BYTES = 32 << 20


@dataclass(frozen=True, slots=True)
class ScanProgress:
    """How far the scan is: files, raw lines and bytes (on disk) done of the total, after
    ``seconds``. The line total is unknown until the end; time left is estimated from bytes."""

    path: str
    files_done: int
    files: int
    lines: int
    bytes_done: int
    bytes: int
    seconds: float
    workers: int = 1

    def eta(self) -> float | None:
        """Seconds left at the rate so far (None before anything is done)."""
        if self.bytes_done <= 0 or self.seconds <= 0:
            return None
        return max(0.0, (self.bytes - self.bytes_done) * self.seconds / self.bytes_done)

    def describe(self) -> str:
        """One terminal line: ``files 12/64 · 1,234,567 lines · 120/480 MB · 40 MB/s,
        350,000 lines/s · 9 s left``."""
        secs = max(self.seconds, 1e-6)
        eta = self.eta()
        return (
            f"files {self.files_done}/{self.files} · {self.lines:,} lines · "
            f"{self.bytes_done / 1e6:,.0f}/{self.bytes / 1e6:,.0f} MB · "
            f"{self.bytes_done / 1e6 / secs:,.1f} MB/s, {self.lines / secs:,.0f} lines/s"
            + (f" · {eta:,.0f} s left" if eta is not None else "")
            + (f" · {self.workers} workers" if self.workers > 1 else "")
        )

    def fields(self) -> dict[str, object]:
        """The ``l4.ingest.progress`` object of the job document."""
        eta = self.eta()
        return {
            "files_done": self.files_done,
            "files": self.files,
            "lines": self.lines,
            "bytes_done": self.bytes_done,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "lines_per_second": round(self.lines / max(self.seconds, 1e-6)),
            "eta_seconds": round(eta, 1) if eta is not None else None,
            "workers": self.workers,
        }


@dataclass
class ScanResult:
    """The merged rollups of a job's files, its timeline and the problems met on the way."""

    rollups: dict[str, NodeRollup]
    timeline: Timeline
    problems: list[str]
    workers: int
    #: A restarted job's timeline per attempt (each attempt starts again; its iterations may
    #: repeat its predecessor's): the units of an attempt place their lines on it.
    timelines: dict[int, Timeline] = field(default_factory=dict)
    rescanned: int = 0
    #: Files cut at a read limit, in job order (``errors.FileCutError.cut``).
    cut: list[str] = field(default_factory=list)
    progress: ScanProgress | None = None

    #: CPU seconds the scanners spent (this process's scans and the worker processes'), the
    #: worker processes' part of it, and the largest worker process's peak RSS (KiB).
    scan_cpu: float = 0.0
    worker_cpu: float = 0.0
    worker_rss_kb: int = 0

    def timeline_of(self, unit: str) -> Timeline:
        """The timeline of a unit's attempt (the job's, for a job that never restarted)."""
        attempt = split_unit(unit)[1]
        if attempt is None:
            return self.timeline
        return self.timelines.setdefault(attempt, Timeline())


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


class Scanner:
    """Scans files into ``FilePartial`` s: one per worker process (or one in-process).

    Masking and the stage rules' verdicts are cached per distinct kind for the scanner's life,
    across files; ``reported`` remembers which kinds' attributes already went to the reducer.
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
        # rare one's lines below the keep level are written (``pipeline._keeps_all``, in a job
        # ingested without baselines). A kind this scanner has counted more lines of is no
        # rare template's: its groups stop keeping sample lines (None: they always keep them).
        self.rare_limit = rare_limit
        self.counted: dict[LineKind, int] = {}
        self.reported: set[str] = set()
        # Timeline transitions this scanner's partials already carried. The reducer merges
        # partials in job order and keeps a transition's first time, so a later partial of the
        # same scanner need not carry it again (every node of a job goes through the same
        # iterations: most marks would otherwise travel once per node).
        self.marked: set[MarkKey] = set()
        self.worker = os.getpid()

    def scan(self, streams: list[LogStream], sizes: list[int]) -> FilePartial:
        """Consecutive files of one node into one partial rollup, as one process would scan
        them (problems and kinds new to this scanner included)."""
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
        part = rollup.partial(order)
        marked = self.marked
        part.marks = [mark for mark in part.marks if mark[0] not in marked]
        marked.update(key for key, _ in part.marks)
        part.problems = problems
        part.cut = cut
        part.worker = self.worker
        part.size = sum(sizes)
        part.files = len(streams)
        reported = self.reported
        part.specs = [kind_spec(k) for k in order if k.key not in reported]
        reported.update(spec[0] for spec in part.specs)
        return part

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


def node_runs(streams: list[LogStream]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of consecutive streams of the same node."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(streams) + 1):
        if i == len(streams) or streams[i].node != streams[start].node:
            runs.append((start, i))
            start = i
    return runs


@dataclass(frozen=True, slots=True)
class _Task:
    node: str
    rank: int | None
    path: str
    file: str
    size: int
    host: str | None = None
    limits: ReadLimits | None = None
    route: Route | None = None
    attempt: int | None = None
    split: Split | None = None


_WORKER: Scanner | None = None
#: Who scans each batch of the current scan: ``_FREE`` until a scanner takes it, then
#: ``_BY_WORKER`` or ``_BY_CALLER`` (shared with the worker processes, ``_claim``).
_CLAIMS: Any = None
_FREE, _BY_WORKER, _BY_CALLER = 0, 1, 2


def _init_worker(rare_limit: int | None = None, claims: Any = None) -> None:
    global _WORKER, _CLAIMS
    _WORKER = Scanner(rare_limit=rare_limit, share_masks=True)
    _CLAIMS = claims


def _claim(claims: Any, batch: int, by: int) -> bool:
    """Take ``batch`` for ``by`` unless another scanner took it first."""
    if claims is None:
        return True
    with claims.get_lock():
        if claims[batch] != _FREE:
            return False
        claims[batch] = by
        return True


def _scan_batch(tasks: list[_Task], masks: Masks, handover: str, batch: int = 0) -> bool:
    """A worker process's batch: learn the masks the caller sends (those other scanners
    computed since this worker's previous batch), scan, and leave the partials and the masks
    this worker computed in the file ``handover`` (``_handed_over`` reads it). False, without
    scanning, when the caller took the batch back meanwhile (``_partials``).

    A file, not the pool's result pipe: the caller reads a pipe in a thread that needs its GIL
    for every 64 KB while its main thread scans, which held a worker's megabytes of partials
    (and the worker) for a tenth of a second a batch."""
    scanner = _WORKER
    if scanner is None:  # pragma: no cover - the initializer always ran
        scanner = _init_worker_now()
    scanner.parser.learn_masks(masks)
    if not _claim(_CLAIMS, batch, _BY_WORKER):
        return False
    parts = scanner.scan_all([_file_stream(t) for t in tasks], [t.size for t in tasks])
    data = pickle.dumps((parts, scanner.computed_masks()), pickle.HIGHEST_PROTOCOL)
    try:
        with open(handover, "xb") as out:
            out.write(data)
    except OSError as exc:
        raise IngestError(
            f"cannot hand a batch's partials over in {handover}: {exc.strerror}"
        ) from exc
    return True


@contextmanager
def _handover_dir() -> Iterator[str]:
    """A private temporary directory for the worker processes' partials (removed after)."""
    try:
        tmp = tempfile.TemporaryDirectory(prefix="l4-scan-")
    except OSError as exc:
        raise IngestError(
            f"cannot create a directory for the scan's worker processes in "
            f"{tempfile.gettempdir()}: {exc.strerror} (set TMPDIR, or --workers 1)"
        ) from exc
    with tmp as path:
        yield path


def _handed_over(handover: str) -> tuple[list[FilePartial], Masks]:
    """What ``_scan_batch`` left in ``handover`` (the file is removed)."""
    with open(handover, "rb") as src:
        data = src.read()
    os.unlink(handover)
    parts: list[FilePartial]
    masks: Masks
    parts, masks = pickle.loads(data)
    return parts, masks


def _init_worker_now() -> Scanner:
    _init_worker()
    assert _WORKER is not None
    return _WORKER


def _file_stream(task: _Task) -> LogStream:
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
        attempt=task.attempt,
        split=task.split,
    )


def _sizes(streams: list[LogStream]) -> list[int]:
    sizes = []
    for s in streams:
        try:
            sizes.append(s.file.stat().st_size if s.file is not None else 0)
        except OSError:
            sizes.append(0)
    return sizes


def plan_workers(requested: int | None, streams: list[LogStream], sizes: list[int]) -> int:
    """How many worker processes to use: ``requested`` (None: the machine's cores, fewer for a
    small job), never more than the files, 1 (in-process) when a stream is not a file."""
    if not streams or any(s.file is None for s in streams):
        return 1
    if requested is None:
        requested = procs.auto_workers(sum(sizes))
    return max(1, min(requested, len(streams)))


def scan_streams(
    streams: list[LogStream],
    parser: LineParser,
    *,
    workers: int | None = None,
    progress: Callable[[ScanProgress], None] | None = None,
    rare_limit: int | None = None,
) -> ScanResult:
    """Scan every stream (in job order) into node rollups; ``parser`` gets the job's kinds in
    the order a single process would create them (call ``parser.finish()`` afterwards).
    ``rare_limit``: the job's (``pipeline.rare_limit``) when only rare templates' lines below
    the keep level will be written, so that the scanners keep no samples of the others
    (``Scanner``); None when every sample may be written (an ingest with baselines)."""
    sizes = _sizes(streams)
    n_workers = plan_workers(workers, streams, sizes)
    result = ScanResult({}, Timeline(), [], n_workers)
    rules = default_stage_rules()
    total_bytes = sum(sizes)
    divergent: set[tuple[int, str]] = set()
    me = os.getpid()
    lines = done_bytes = 0
    started = time.monotonic()
    progress_now = ScanProgress("", 0, len(streams), 0, 0, total_bytes, 0.0, n_workers)
    done = 0
    # No garbage collection while the partials are unpickled (in the pool's thread) and merged.
    with gc_paused():
        for part in _partials(streams, sizes, n_workers, rare_limit):
            these = streams[done : done + part.files]
            stale = divergent and any((part.worker, k) in divergent for k in part.kinds)
            if stale or _adopt(parser, part, divergent):
                part = _rescan(these, sizes[done : done + part.files], parser)
                result.rescanned += part.files
            _adopt(parser, part, None)
            rollup = result.rollups.get(part.node)
            timeline = result.timeline_of(part.node)
            if rollup is None:
                rollup = result.rollups[part.node] = NodeRollup(part.node, rules, timeline)
            rollup.absorb(part, parser.kind_of, timeline)
            result.problems.extend(part.problems)
            result.cut.extend(part.cut)
            result.scan_cpu += part.cpu
            if part.worker != me:
                result.worker_cpu += part.cpu
                result.worker_rss_kb = max(result.worker_rss_kb, part.rss_kb)
            done += part.files
            lines += part.lines
            done_bytes += part.size
            progress_now = ScanProgress(
                these[-1].path,
                done,
                len(streams),
                lines,
                done_bytes,
                total_bytes,
                time.monotonic() - started,
                n_workers,
            )
            if progress is not None:
                progress(progress_now)
    result.progress = progress_now
    return result


def _adopt(parser: LineParser, part: FilePartial, divergent: set[tuple[int, str]] | None) -> bool:
    """Adopt a partial's new kinds in its first-seen order. With ``divergent``: only check —
    True when the worker's attributes of a kind the job already has differ (then the file is
    scanned again in-process, and the worker's later files with that kind too)."""
    specs = {spec[0]: spec for spec in part.specs}
    if divergent is not None:
        found = False
        for key, spec in specs.items():
            have = parser.masked_kinds.get(key)
            if have is not None and kind_spec(have) != spec:
                divergent.add((part.worker, key))
                found = True
        return found
    known = parser.masked_kinds
    for key in part.kinds:
        if key not in known:
            parser.adopt(specs[key])
    return False


def _rescan(streams: list[LogStream], sizes: list[int], parser: LineParser) -> FilePartial:
    # A fresh scanner: kinds the job already has are pinned, the others are first seen in
    # these very files, as in a single process.
    parts = Scanner(pinned=parser.masked_kinds).scan_all(streams, sizes)
    assert len(parts) == 1  # the files of one partial are one node's
    return parts[0]


def _batches(streams: list[LogStream], sizes: list[int], workers: int) -> list[list[_Task]]:
    """The streams cut into contiguous batches for ``workers`` processes.

    A batch ends at a node's last file when it can: the worker then sends one partial per node
    (its files merged), not one per file. Batches shrink towards the end (guided scheduling):
    each holds at most ``BATCH_LINES`` and half a worker's share of the lines not yet batched
    (``_cost``), so that the workers run out of work together instead of one finishing a full
    batch alone.
    """
    costs = [_cost(s, size) for s, size in zip(streams, sizes, strict=True)]
    left = sum(costs)
    limit = _batch_limit(left, workers)
    batches: list[list[_Task]] = [[]]
    batch_cost = 0
    for s, size, cost in zip(streams, sizes, costs, strict=True):
        assert s.file is not None
        batch = batches[-1]
        full = batch_cost + cost > limit or len(batch) >= BATCH_FILES
        too_full = batch_cost + cost > 4 * limit or len(batch) >= 4 * BATCH_FILES
        if batch and ((full and batch[-1].node != s.node) or too_full):
            batches.append([])
            batch_cost = 0
            limit = _batch_limit(left, workers)
        batches[-1].append(
            _Task(
                s.node,
                s.rank,
                s.path,
                str(s.file),
                size,
                s.host,
                s.limits,
                s.route,
                s.attempt,
                s.split,
            )
        )
        batch_cost += cost
        left -= cost
    return batches


def _cost(stream: LogStream, size: int) -> int:
    """What scanning a stream costs, in lines: its lines (estimated at discovery, else from its
    size) and its file's share of the fixed costs."""
    lines = stream.lines if stream.lines is not None else size // LINE_BYTES
    return lines + FILE_LINES


def _batch_limit(left: int, workers: int) -> int:
    return max(MIN_BATCH_LINES, min(BATCH_LINES, left // (2 * workers)))


#: Claimed batches not yet merged, in job order: a worker process's future (its partials in the
#: file named last) or the partials this process scanned, with the batch's number and bytes.
_Ahead = deque[tuple[Future[bool] | list[FilePartial], int, int, str]]


def _partials(
    streams: list[LogStream], sizes: list[int], workers: int, rare_limit: int | None = None
) -> Iterator[FilePartial]:
    """The streams' partials in job order, scanned by ``workers`` scanners: this process and
    ``workers - 1`` worker processes (1: this process alone).

    The batches are claimed in job order. Each worker process has up to ``QUEUED_PER_WORKER``
    of them queued; whenever the next partial in job order is not ready yet, this process
    claims the next batch and scans it itself, so it never waits while there is work, and its
    own partials (about half the job at two workers) need no pickling on either side. A worker
    process that finishes early gets the next batch whatever the order of the others', up to
    ``AHEAD_BYTES`` of files per scanner claimed but not yet merged (memory). With nothing left
    to claim, this process takes back a batch a worker process has not started (``_take_back``:
    a shared flag per batch says who scans it). Every scanner scans its batches in job order,
    which ``Scanner``'s reported kinds and carried marks require: a batch taken back comes
    before some this process's scanner has scanned, so it gets a scanner of its own.
    """
    if workers <= 1:
        scanner = Scanner(rare_limit=rare_limit)
        for a, b in node_runs(streams):
            yield scanner.scan(streams[a:b], sizes[a:b])
        return
    batches = _batches(streams, sizes, workers)
    caller = _Caller(streams, sizes, batches, rare_limit)
    weights = [sum(t.size for t in batch) for batch in batches]
    queued = QUEUED_PER_WORKER * (workers - 1)
    budget = AHEAD_BYTES * workers
    claims = procs.context().Array("b", len(batches))
    with (
        _handover_dir() as handover,
        procs.executor(workers - 1, _init_worker, (rare_limit, claims)) as pool,
    ):
        ahead: _Ahead = deque()
        ahead_bytes = claimed = 0
        try:
            while claimed < len(batches) or ahead:
                while claimed < len(batches) and (not ahead or ahead_bytes < budget):
                    running = sum(1 for f, *_ in ahead if isinstance(f, Future) and not f.done())
                    if running >= queued:
                        break
                    path = os.path.join(handover, f"{claimed}.pickle")
                    masks = caller.masks_to_send()
                    future = pool.submit(_scan_batch, batches[claimed], masks, path, claimed)
                    ahead.append((future, claimed, weights[claimed], path))
                    ahead_bytes += weights[claimed]
                    claimed += 1
                head, _, weight, path = ahead[0]
                if isinstance(head, Future) and not head.done():
                    if claimed < len(batches) and ahead_bytes < budget:
                        # Nothing to merge yet: scan the next batch here meanwhile.
                        _claim(claims, claimed, _BY_CALLER)
                        ahead.append((caller.scan(claimed), claimed, weights[claimed], ""))
                        ahead_bytes += weights[claimed]
                        claimed += 1
                        continue
                    if _take_back(ahead, claims, caller.scan):
                        continue
                ahead.popleft()
                ahead_bytes -= weight
                if isinstance(head, list):
                    yield from head
                    continue
                head.result()  # what the worker process raised, if it did
                parts, learnt = _handed_over(path)
                caller.learn(learnt, forward=workers > 2)
                yield from parts
        except BrokenProcessPool as exc:
            raise IngestError(f"an ingest worker process died — {exc}") from exc
        finally:
            for item, *_ in ahead:
                if isinstance(item, Future):
                    item.cancel()


class _Caller:
    """The calling process as a scanner of a job cut into batches, and the masks it passes on
    to the worker processes: its own and, with several worker processes, each one's to the
    others (with one, all it lacks)."""

    def __init__(
        self,
        streams: list[LogStream],
        sizes: list[int],
        batches: list[list[_Task]],
        rare_limit: int | None,
    ) -> None:
        self.scanner = Scanner(rare_limit=rare_limit, share_masks=True)
        self.streams = streams
        self.sizes = sizes
        self.starts = list(accumulate((len(b) for b in batches), initial=0))
        self.unsent: Masks = []  # computed by a scanner, carried by no batch sent yet

    def scan(self, batch: int, taken_back: bool = False) -> list[FilePartial]:
        """Scan ``batch`` here. A batch taken back from a worker process comes before batches
        this process's scanner has scanned: a scanner of its own, so that each scanner still
        scans in job order (it starts with every mask known here). Its partials carry this
        process's id, as the main scanner's do: a kind found divergent in either has the
        other's partials with that kind scanned again too (exact; at worst a rescan more)."""
        here = self.scanner
        if taken_back:
            here = Scanner(rare_limit=self.scanner.rare_limit, share_masks=True)
            here.parser.learn_masks(self.scanner.parser.known_masks())
        a, b = self.starts[batch], self.starts[batch + 1]
        parts = here.scan_all(self.streams[a:b], self.sizes[a:b])
        learnt = here.computed_masks()
        if taken_back:
            self.scanner.parser.learn_masks(learnt)
        self.unsent.extend(learnt)
        return parts

    def learn(self, learnt: Masks, *, forward: bool) -> None:
        """Masks a worker process computed; ``forward``: for the other worker processes too."""
        self.scanner.parser.learn_masks(learnt)
        if forward:
            self.unsent.extend(learnt)

    def masks_to_send(self) -> Masks:
        """The masks for the next batch sent to a worker process (then none are unsent)."""
        out, self.unsent = self.unsent, []
        return out


def _take_back(
    ahead: _Ahead,
    claims: Any,
    scan_here: Callable[[int, bool], list[FilePartial]],
) -> bool:
    """With nothing left to claim and the next partial not ready: scan here the last batch a
    worker process was given but has not started (it finds it taken and skips it), so that the
    end of the scan does not wait for a worker's queue. False when there is none."""
    for at in range(len(ahead) - 1, -1, -1):
        item, batch, weight, _ = ahead[at]
        if isinstance(item, Future) and not item.done() and _claim(claims, batch, _BY_CALLER):
            ahead[at] = (scan_here(batch, True), batch, weight, "")
            return True
    return False
