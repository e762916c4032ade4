"""Scanning a job's files on every core: whole nodes per lane, digests reduced in job order.

The job's streams (files sorted by node, rank, path) are cut into batches of whole nodes, handed
to the ingest's lanes (``lanes``: local processes, this process, or a Dask cluster's workers) as
they free up. A lane reads, decompresses, masks, deduplicates and scans a batch's files into one
rollup per node, keeps it (``owners``) and answers with a ``NodeDigest`` per node. The reducer,
in the calling process, takes the digests in job order and adopts each node's new kinds into the
one ``LineParser`` that runs Drain — so Drain sees the distinct lines in the order a single
process would — and merges their timeline transitions (a transition's first in job order
holds). The lanes hand each other the masks their regexes computed (``Masks``, through the
reducer), so that a line the job prints on every node is masked about once, not once per lane.
One lane or sixteen, any scheduling: the same templates, ids and rollups.

A kind's attributes (level, emitter, body…) come from the first raw line that masked to it. A
lane's first raw line of a masked line is the job's first one unless another lane's earlier
node had it; in the rare case the two raw lines disagree (their headers parse differently), the
reducer has the lane scan the affected nodes again with the job's kinds pinned
(``owners.rescan``), so the result stays what one process would give.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from l4_plugin.errors import IngestError
from l4_plugin.ingest import owners, procs
from l4_plugin.ingest.attempts import split_unit
from l4_plugin.ingest.lanes import Lane, lane_token, open_lanes
from l4_plugin.ingest.owners import BatchReport
from l4_plugin.ingest.parser import LineParser, kind_spec
from l4_plugin.ingest.rollup import NodeRollup
from l4_plugin.ingest.scanner import Masks, NodeDigest, Task, node_runs
from l4_plugin.ingest.sources import LogStream
from l4_plugin.ingest.stages import default_stage_rules
from l4_plugin.ingest.timeline import Timeline

_T = TypeVar("_T")

#: Nodes go to the lanes in batches of about this much work (fewer round trips), counted in
#: lines (``LogStream.lines``): a line costs the scan ~3 µs whatever its length. A batch holds
#: whole nodes (its lane keeps their rollups), so a node larger than this is a batch of its own...
BATCH_LINES = 80_000
BATCH_FILES = 256
#: ...and of at most a share of what is left to batch (``_batches``), no less than this.
MIN_BATCH_LINES = 2_500
#: Opening a file and making its node's rollup cost about as much as this many lines...
FILE_LINES = 200
#: ...and a stream whose lines are not known is weighed at this many bytes a line.
LINE_BYTES = 100


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
    """What the reducer learnt of a job's nodes (their rollups stay in the lanes), its timeline
    and the problems met on the way."""

    digests: list[NodeDigest]
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
    #: CPU seconds the lanes spent scanning, the part of it spent in other processes, and the
    #: largest of those processes' peak RSS (KiB).
    scan_cpu: float = 0.0
    worker_cpu: float = 0.0
    worker_rss_kb: int = 0
    #: The rollups, in this process: only when asked for (``scan_streams``); an ingest leaves
    #: them in their lanes.
    rollups: dict[str, NodeRollup] = field(default_factory=dict)

    def timeline_of(self, unit: str) -> Timeline:
        """The timeline of a unit's attempt (the job's, for a job that never restarted)."""
        attempt = split_unit(unit)[1]
        if attempt is None:
            return self.timeline
        return self.timelines.setdefault(attempt, Timeline())


def _sizes(streams: list[LogStream]) -> list[int]:
    sizes = []
    for s in streams:
        try:
            sizes.append(s.file.stat().st_size if s.file is not None else 0)
        except OSError:
            sizes.append(0)
    return sizes


def plan_workers(requested: int | None, streams: list[LogStream], sizes: list[int]) -> int:
    """How many lanes of local processes to use: ``requested`` (None: the machine's cores, fewer
    for a small job), never more than the nodes, 1 (this process) when a stream is not a file."""
    if not streams or any(s.file is None for s in streams):
        return 1
    if requested is None:
        requested = procs.auto_workers(sum(sizes))
    return max(1, min(requested, len(node_runs(streams))))


@contextmanager
def ingest_lanes(
    streams: list[LogStream], workers: int | None, scheduler: str | None = None
) -> Iterator[tuple[list[Lane], str]]:
    """The lanes an ingest of ``streams`` runs on, and the token naming its state there, which
    every lane forgets when the block ends."""
    n = plan_workers(workers, streams, _sizes(streams)) if scheduler is None else (workers or 0)
    token = lane_token()
    with open_lanes(n, scheduler if streams and streams[0].file is not None else None) as lanes:
        try:
            yield lanes, token
        finally:
            for lane in lanes:
                with contextlib.suppress(Exception):  # a lane that is gone holds nothing
                    lane.executor.submit(owners.drop, token, lane.id).result()


def scan_streams(
    streams: list[LogStream],
    parser: LineParser,
    *,
    workers: int | None = None,
    progress: Callable[[ScanProgress], None] | None = None,
    rare_limit: int | None = None,
    scheduler: str | None = None,
) -> ScanResult:
    """Scan every stream (in job order) and gather the rollups into this process (tests and
    benchmarks that compare them; an ingest keeps them in their lanes: ``scan_lanes``);
    ``parser`` gets the job's kinds in the order a single process would create them (call
    ``parser.finish()`` afterwards)."""
    with ingest_lanes(streams, workers, scheduler) as (lanes, token):
        result = scan_lanes(lanes, token, streams, parser, progress=progress, rare_limit=rare_limit)
        rules = default_stage_rules()
        for lane in lanes:
            for part in lane.executor.submit(owners.gather, token, lane.id).result():
                rollup = NodeRollup(part.node, rules)
                rollup.absorb(part, parser.kind_of, Timeline())
                result.rollups[part.node] = rollup
        order = {d.node: i for i, d in enumerate(result.digests)}
        result.rollups = dict(sorted(result.rollups.items(), key=lambda kv: order[kv[0]]))
    return result


def scan_lanes(
    lanes: list[Lane],
    token: str,
    streams: list[LogStream],
    parser: LineParser,
    *,
    progress: Callable[[ScanProgress], None] | None = None,
    rare_limit: int | None = None,
) -> ScanResult:
    """Scan every stream (in job order) in ``lanes``, which keep the rollups under ``token``.

    ``parser`` gets the job's kinds in the order a single process would create them.
    ``rare_limit``: the job's (``documents.rare_limit``) when only rare templates' lines below
    the keep level will be written, so that the scanners keep no samples of the others
    (``scanner.Scanner``); None when every sample may be written (an ingest with baselines)."""
    sizes = _sizes(streams)
    result = ScanResult([], Timeline(), [], len(lanes))
    batches = _batches(streams, sizes, len(lanes))
    reducer = _Reducer(lanes, token, streams, sizes, parser, rare_limit)
    progress_now = ScanProgress("", 0, len(streams), 0, 0, sum(sizes), 0.0, len(lanes))
    for batch, report in _reports(lanes, token, streams, sizes, batches, reducer):
        for digest in reducer.reduce(batch, report, result):
            progress_now = reducer.progress(digest)
            if progress is not None:
                progress(progress_now)
    result.progress = progress_now
    return result


class _Reducer:
    """The reducer's side of a scan: the masks the lanes exchange, the kinds adopted in job
    order, the lanes' nodes scanned again when their kinds diverge, progress."""

    def __init__(
        self,
        lanes: list[Lane],
        token: str,
        streams: list[LogStream],
        sizes: list[int],
        parser: LineParser,
        rare_limit: int | None,
    ) -> None:
        self.lanes = {lane.id: lane for lane in lanes}
        self.token = token
        self.streams, self.sizes = streams, sizes
        self.total_bytes = sum(sizes)  # (summed once: a progress per node, 46k files a job)
        self.parser = parser
        self.rare_limit = rare_limit
        # Masks computed by each lane, in the order they came (origin lane, mask), and how far
        # each lane has been sent them.
        self.masks: list[tuple[int, tuple[str, str]]] = []
        self.sent: dict[int, int] = {}
        self.divergent: set[tuple[int, str]] = set()  # (lane, masked line)
        self.done = self.lines = self.bytes_done = 0
        self.started = time.monotonic()
        self.me = os.getpid()

    def masks_for(self, lane: int) -> Masks:
        """The masks the other lanes computed since ``lane`` was last sent any."""
        start = self.sent.get(lane, 0)
        self.sent[lane] = len(self.masks)
        return [mask for origin, mask in self.masks[start:] if origin != lane]

    def learn(self, report: BatchReport) -> None:
        """The masks a lane's batch computed, for the other lanes."""
        self.masks.extend((report.lane, mask) for mask in report.masks)

    def reduce(
        self, batch: list[int], report: BatchReport, result: ScanResult
    ) -> Iterator[NodeDigest]:
        """A batch's digests (next in job order): kinds adopted, transitions recorded."""
        result.scan_cpu += report.cpu
        if report.pid != self.me:
            result.worker_cpu += report.cpu
            result.worker_rss_kb = max(result.worker_rss_kb, report.rss_kb)
        for digest in report.digests:
            lane = report.lane
            stale = self.divergent and any((lane, k) in self.divergent for k in digest.kinds)
            if stale or self._diverges(lane, digest):
                digest = self._rescan(lane, batch, digest.node, result)
            self._adopt(digest)
            timeline = result.timeline_of(digest.node)
            for mark, ref in digest.marks:
                timeline.mark(mark, ref)
            result.digests.append(digest)
            result.problems.extend(digest.problems)
            result.cut.extend(digest.cut)
            yield digest

    def _diverges(self, lane: int, digest: NodeDigest) -> bool:
        """Whether the lane's attributes of a kind the job already has differ from the job's
        (``divergent`` remembers which: its later nodes with that kind are scanned again too)."""
        known = self.parser.masked_kinds
        found = False
        for spec in digest.specs:
            have = known.get(spec[0])
            if have is not None and kind_spec(have) != spec:
                self.divergent.add((lane, spec[0]))
                found = True
        return found

    def _adopt(self, digest: NodeDigest) -> None:
        """The node's new kinds, in their first-seen order, into Drain."""
        known = self.parser.masked_kinds
        specs = {spec[0]: spec for spec in digest.specs}
        for key in digest.kinds:
            if key not in known:
                self.parser.adopt(specs[key])

    def _rescan(self, lane: int, batch: list[int], node: str, result: ScanResult) -> NodeDigest:
        """The node scanned again by the lane that holds it, with the job's kinds pinned: the
        kinds the job already has keep their attributes, the others are first seen in these very
        files, as in a single process."""
        mine = [i for i in batch if self.streams[i].node == node]
        tasks = [_task(self.streams[i], self.sizes[i]) for i in mine]
        pinned = [kind_spec(k) for k in self.parser.masked_kinds.values()]
        future = self.lanes[lane].executor.submit(
            owners.rescan, self.token, lane, tasks, pinned, self.rare_limit
        )
        report = lane_result(future, self.lanes[lane])
        result.rescanned += len(mine)
        result.scan_cpu += report.cpu
        [digest] = report.digests
        return digest

    def progress(self, digest: NodeDigest) -> ScanProgress:
        """How far the scan is, once ``digest`` (the next node in job order) is reduced."""
        start, self.done = self.done, self.done + digest.files
        self.lines += digest.lines
        self.bytes_done += sum(self.sizes[start : self.done])
        return ScanProgress(
            self.streams[self.done - 1].path,
            self.done,
            len(self.streams),
            self.lines,
            self.bytes_done,
            self.total_bytes,
            time.monotonic() - self.started,
            len(self.lanes),
        )


def _task(stream: LogStream, size: int) -> Task | LogStream:
    """What a lane is given to read a stream: a file by its path (any process can open it), or
    the stream itself (an index source: read in this process, by the one lane there is)."""
    if stream.file is None:
        return stream
    s = stream
    return Task(
        s.node, s.rank, s.path, str(s.file), size, s.host, s.limits, s.route, s.kind, s.attempt,
        s.split,
    )  # fmt: skip


def lane_result(future: Future[_T], lane: Lane) -> _T:
    """A lane's answer; a lane whose process died is a one-line error."""
    try:
        return future.result()
    except BrokenProcessPool as exc:
        raise IngestError(f"an ingest worker process died ({lane.where}) — {exc}") from exc
    except Exception as exc:
        if type(exc).__module__.partition(".")[0] == "distributed":
            raise IngestError(f"an ingest task failed on {lane.where} — {exc}") from exc
        raise


def _reports(
    lanes: list[Lane],
    token: str,
    streams: list[LogStream],
    sizes: list[int],
    batches: list[list[int]],
    reducer: _Reducer,
) -> Iterator[tuple[list[int], BatchReport]]:
    """Each batch's report, in job order, the batches handed to the lanes as they free up
    (each up to its ``depth`` tasks at once), the lanes' masks passed on as reports come."""
    pending: deque[tuple[list[int], Lane, Future[BatchReport]]] = deque()
    load = {lane.id: 0 for lane in lanes}
    running: set[Future[BatchReport]] = set()
    claimed = 0
    try:
        while claimed < len(batches) or pending:
            while claimed < len(batches):
                free = [lane for lane in lanes if load[lane.id] < lane.depth]
                if not free:
                    break
                lane = min(free, key=lambda x: (load[x.id], x.id))
                batch = batches[claimed]
                tasks = [_task(streams[i], sizes[i]) for i in batch]
                masks = reducer.masks_for(lane.id)
                future = lane.executor.submit(
                    owners.scan_batch, token, lane.id, tasks, masks, reducer.rare_limit
                )
                pending.append((batch, lane, future))
                running.add(future)
                load[lane.id] += 1
                claimed += 1
            batch, lane, head = pending[0]
            if not head.done():
                wait(running, return_when=FIRST_COMPLETED)
            for _, other, future in pending:
                if future in running and future.done():
                    running.discard(future)
                    load[other.id] -= 1
                    if future.exception() is None:
                        reducer.learn(future.result())
            if head.done():
                pending.popleft()
                yield batch, lane_result(head, lane)
    finally:
        for _, _, future in pending:
            future.cancel()


def _batches(streams: list[LogStream], sizes: list[int], lanes: int) -> list[list[int]]:
    """The streams (their indices) cut into contiguous batches of whole nodes for ``lanes``.

    Batches shrink towards the end (guided scheduling): each holds at most ``BATCH_LINES`` and
    half a lane's share of the lines not yet batched (``_cost``), so that the lanes run out of
    work together instead of one finishing a full batch alone; a node larger than that is a
    batch of its own.
    """
    costs = [_cost(s, size) for s, size in zip(streams, sizes, strict=True)]
    left = sum(costs)
    limit = _batch_limit(left, lanes)
    batches: list[list[int]] = [[]]
    batch_cost = 0
    for a, b in node_runs(streams):
        cost = sum(costs[a:b])
        batch = batches[-1]
        if batch and (batch_cost + cost > limit or len(batch) + b - a > BATCH_FILES):
            batches.append([])
            batch_cost = 0
            limit = _batch_limit(left, lanes)
        batches[-1].extend(range(a, b))
        batch_cost += cost
        left -= cost
    return batches if batches[0] else []


def _cost(stream: LogStream, size: int) -> int:
    """What scanning a stream costs, in lines: its lines (estimated at discovery, else from its
    size) and its file's share of the fixed costs."""
    lines = stream.lines if stream.lines is not None else size // LINE_BYTES
    return lines + FILE_LINES


def _batch_limit(left: int, lanes: int) -> int:
    return max(MIN_BATCH_LINES, min(BATCH_LINES, left // (2 * lanes)))
