"""``l4 ingest``: a job's log streams → rollups, kept lines, templates and a job document.

The streams are the files of a job directory (``ingest_job``) or the lines a shipper put into an
index (``index_source.ingest_index``); both go through ``ingest_streams``, so they produce the same
documents. ``--full`` adds every raw line to ``l4-lines`` in a second, streamed pass.

Every ingest writes a new *generation* of the job (``l4_plugin.store.generations``): documents
carry it and have deterministic ids derived from the job, the generation and what a document is
about. The job document switches to the new generation only when every document is written, and
the older generation's documents are deleted after that, so a crash at any point leaves one
complete generation to read. What the logs were is recorded as ``l4.ingest.source`` (a hash of the
job's files: names, sizes, modification times; for an index source, line counts and last
offsets): a re-ingest of unchanged logs leaves a finished analysis alone, grown logs make it due.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from l4_plugin.errors import IngestError
from l4_plugin.ingest import dumps, procs
from l4_plugin.ingest.attempts import split_unit
from l4_plugin.ingest.header import parse_time
from l4_plugin.ingest.jobdir import JobFiles, JobMeta, is_system_log, job_meta, scan
from l4_plugin.ingest.logfile import LogFile
from l4_plugin.ingest.parser import LineKind, LineParser
from l4_plugin.ingest.rollup import (
    RARE_SAMPLE,
    Group,
    KeptLine,
    NodeRollup,
    kept_like_errors,
    time_ref,
)
from l4_plugin.ingest.sources import LogStream, file_streams, files_generation
from l4_plugin.ingest.stages import default_stage_rules
from l4_plugin.ingest.templates import template_from_dict
from l4_plugin.ingest.timeline import UNPLACED, Timeline
from l4_plugin.ingest.workers import ScanProgress, scan_streams
from l4_plugin.ingest.workers import chunks as _chunks
from l4_plugin.ingest.writer import BulkWriter
from l4_plugin.limits import ReadLimits
from l4_plugin.records import (
    Level,
    Template,
    host_shapes,
    is_job_node,
    may_name_a_node,
    numbers_blanked,
)
from l4_plugin.store import Store, generations, jobs, line_packs, packs
from l4_plugin.store import fields as F
from l4_plugin.store.fields import source_field
from l4_plugin.store.jobs import JobRecord
from l4_plugin.traces import JobDumps

# Running (sum in ns, lines) of an event document's iteration durations while groups merge into it;
# replaced by their mean, ``l4.iteration_seconds``, just before the documents are written.
_SECONDS = "_seconds"
TAIL_ITERATIONS = 32  # the last iterations of a job keep one bucket each
MAX_COARSE_BUCKETS = 64  # earlier iterations share buckets: keeps the index compact
FULL_CHUNK = 2_000  # --full: raw-line documents per bulk request
PARALLEL_REFS = 200_000  # reference times parsed in worker processes from this many on
PARALLEL_GROUPS = 20_000  # documents built in forked processes from this many rollup groups on
# Kept lines of a template below the error level, per node (the event documents keep every count):
REPEAT_KEPT = 16  # a node's repeated template keeps its first and its last REPEAT_KEPT lines
MAJORITY = 0.9  # a template this share of the job's nodes prints (at least 2) ...
MAJORITY_KEPT = RARE_SAMPLE  # ... keeps this many lines per node: it is no node's own anomaly
PROGRESS_EVERY = 2.0  # seconds between progress updates of the job document
Progress = Callable[[ScanProgress], None]


@dataclass
class IngestSummary:
    """What one ingest did, for the CLI summary and the job document."""

    job: JobMeta
    files: int = 0
    nodes: int = 0
    lines: int = 0
    events_docs: int = 0
    lines_docs: int = 0
    new_templates: int = 0
    seconds: float = 0.0  # wall time of the whole ingest, discovery of the job's files included
    workers: int = 1
    problems: list[str] = field(default_factory=list)
    skipped_files: int = 0  # log files not read: outside the job, not regular, too big, binary
    #: Log files read only up to a limit (``errors.FileCutError.cut``: path, why, hint); the
    #: job document counts them with the skipped ones and names them (``l4.job.cut_files``).
    cut_files: list[str] = field(default_factory=list)
    #: The files that are a launcher agent's own log or the job's own (``LogStream.kind``): not
    #: stored as such, they make the job document's ``aux_templates``.
    agent_paths: frozenset[str] = frozenset()
    progress: ScanProgress | None = None
    scan_cpu: float = 0.0  # CPU seconds of the file scans, all scanners
    worker_cpu: float = 0.0  # the worker processes' part of it
    worker_rss_mb: float = 0.0  # the largest worker process's peak RSS (0: none)
    # Wall seconds of each step: discovery (of a job directory), scan (read, mask, scan, Drain),
    # build (the documents, until the last is handed to the writer), send (waiting for the
    # cluster after that), finish (templates, refresh, the job document).
    steps: dict[str, float] = field(default_factory=dict)
    # The job's ``l4-jobs`` document as the ingest completed it (what a diagnosis reads next).
    record: JobRecord | None = None
    #: The Flight Recorder traces and stacks found beside the logs (``ingest.dumps``).
    dumps: JobDumps = field(default_factory=JobDumps)
    #: A restarted job's attempts as its files name them, each with its nodes (an attempt
    #: whose workers died before printing left empty files: it counts).
    attempts: dict[int, set[str]] = field(default_factory=dict)


class _ProgressReport:
    """Passes the scan's progress on to ``progress`` and, every ``PROGRESS_EVERY`` s, to the
    job document (``l4.ingest.progress``: what ``l4 job status`` and the service show)."""

    def __init__(self, store: Store, meta: JobMeta, progress: Progress | None) -> None:
        self.store, self.meta, self.progress = store, meta, progress
        self.last = time.monotonic()  # a job read within PROGRESS_EVERY is never reported

    def __call__(self, p: ScanProgress) -> None:
        if self.progress is not None:
            self.progress(p)
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY and p.files_done < p.files:
            self.last = now
            record_progress(self.store, self.meta, p)


def record_progress(store: Store, meta: JobMeta, p: ScanProgress) -> None:
    """Write an ingest's progress into its job document, leaving every other field as it is
    (a new job gets a document with ``l4.ingest.state: running``); a concurrent write wins."""
    fields = {**p.fields(), "updated": int(time.time() * 1000)}
    jobs.put_progress(store, jobs.JobRecord(id=meta.id, status=meta.status), fields)


def _doc_id(*parts: object) -> str:
    return hashlib.sha1("\x1f".join(str(p) for p in parts).encode()).hexdigest()


def load_known_templates(store: Store) -> list[Template]:
    """Every template already in the cluster (keeps template ids stable across jobs)."""
    known: list[Template] = []
    if not store.count(store.names.templates):
        return known
    after: list[Any] | None = None
    while True:
        body: dict[str, Any] = {"size": 5000, "sort": [{F.TEMPLATE_ID: "asc"}]}
        if after:
            body["search_after"] = after
        hits = store.search(store.names.templates, body)["hits"]["hits"]
        for hit in hits:
            src = hit["_source"]
            known.append(
                template_from_dict(
                    {
                        "id": source_field(src, F.TEMPLATE_ID),
                        "text": source_field(src, F.TEMPLATE_TEXT),
                    },
                    where=f"{store.names.templates}/{hit['_id']}",
                )
            )
        if len(hits) < 5000:
            return known
        after = hits[-1]["sort"]


_UNSEEN = object()


class _Clock:
    """Timestamps of the reference lines, parsed once each, with one year for year-less formats.

    With ``workers`` > 1 and at least ``PARALLEL_REFS`` references, they are parsed up front in
    worker processes (a paper-size job has tens of millions: every rollup group's first and
    last line); the same function with the same year, so the same times."""

    def __init__(self, refs: set[str], workers: int = 1) -> None:
        self.year = time.gmtime().tm_year
        for ref in refs:
            a, b = parse_time(ref, 2000), parse_time(ref, 2001)
            if a is not None and a == b:  # the format carries its own year
                self.year = time.gmtime(a).tm_year
                break
        self.cache: dict[str, object] = {}
        if workers > 1 and len(refs) >= PARALLEL_REFS:
            self.cache = _times_in_workers(list(refs), self.year, workers)

    def ms(self, ref: str | None, *, cache: bool = True) -> int | None:
        """Epoch milliseconds of a reference line; ``cache=False`` for one-off lines (--full)."""
        if ref is None:
            return None
        ts = self.cache.get(ref, _UNSEEN)
        if ts is _UNSEEN:
            ts = parse_time(ref, self.year)
            if cache:
                self.cache[ref] = ts
        return int(ts * 1000) if isinstance(ts, float) else None

    def seconds(self, ref: str | None, *, cache: bool = True) -> float | None:
        """The same time in seconds (what the job timeline works in)."""
        ms = self.ms(ref, cache=cache)
        return ms / 1000.0 if ms is not None else None


def _times_in_workers(refs: list[str], year: int, workers: int) -> dict[str, object]:
    """``{ref: parse_time(ref, year)}`` computed by ``workers`` processes."""
    size = max(1, -(-len(refs) // (4 * workers)))
    chunks = [(refs[i : i + size], year) for i in range(0, len(refs), size)]
    times = procs.map_in_workers(_parse_times, [[c] for c in chunks], workers)
    out: dict[str, object] = {}
    for (chunk, _), [parsed] in zip(chunks, times, strict=True):
        out.update(zip(chunk, parsed, strict=True))
    return out


def _parse_times(tasks: list[tuple[list[str], int]]) -> list[list[float | None]]:
    """In a worker: the times of each task's reference lines."""
    return [[parse_time(ref, year) for ref in refs] for refs, year in tasks]


def _buckets(
    last_iterations: list[int], first_iteration: int | None
) -> Callable[[int], tuple[int, int]]:
    """Map an iteration to (bucket start, span): exact in the tail, coarse before it."""
    if not last_iterations or first_iteration is None:
        return lambda it: (it, 1)
    tail_start = max(last_iterations) - TAIL_ITERATIONS + 1
    width = max(1, math.ceil((tail_start - first_iteration) / MAX_COARSE_BUCKETS))

    def bucket(it: int) -> tuple[int, int]:
        if it >= tail_start or width == 1:
            return it, 1
        start = first_iteration + ((it - first_iteration) // width) * width
        return start, min(width, tail_start - start)

    return bucket


def ingest_job(
    store: Store,
    job_dir: Path,
    *,
    job_id: str | None = None,
    status: str | None = None,
    config: dict[str, str] | None = None,
    node_pattern: str | None = None,
    baseline_templates: set[str] | None = None,
    full: bool = False,
    progress: Progress | None = None,
    limits: ReadLimits | None = None,
    workers: int | None = None,
) -> IngestSummary:
    """Parse every log file of ``job_dir`` and write the job's documents.

    (ARCHITECTURE.md, *Documents*, lists them.)

    ``full`` also indexes every raw line into ``l4-lines`` (a second, streamed pass). Files
    ``jobdir.scan`` skips (``limits``) are warnings in the summary and counted on the job.
    ``workers`` processes scan the files (None: the machine's cores, fewer for a small job);
    the documents are the same for any number.
    """
    meta = job_meta(job_dir, job_id=job_id, status=status, config=config)
    started = time.monotonic()
    found = scan(job_dir, node_pattern, limits, workers, meta.hosts)
    return ingest_files(
        store,
        meta,
        found,
        where=str(job_dir),
        discovery=time.monotonic() - started,
        baseline_templates=baseline_templates,
        full=full,
        progress=progress,
        limits=limits,
        workers=workers,
    )


def ingest_files(
    store: Store,
    meta: JobMeta,
    found: JobFiles,
    *,
    where: str,
    discovery: float = 0.0,
    baseline_templates: set[str] | None = None,
    full: bool = False,
    progress: Progress | None = None,
    limits: ReadLimits | None = None,
    workers: int | None = None,
) -> IngestSummary:
    """``ingest_job`` of the job directory ``where`` whose ``job.yaml`` (``meta``) and files
    (``found``, ``jobdir.scan`` in ``discovery`` seconds) were read already: neither is read
    again. The Flight Recorder traces and stacks the scan found are read here."""
    started = time.monotonic()
    traces = dumps.read_dumps(Path(where), found.dumps, {f.node for f in found.files}, limits)
    discovery += time.monotonic() - started
    summary = ingest_streams(
        store,
        meta,
        file_streams(found.files, limits),
        files_generation(found.files),
        where=where,
        baseline_templates=baseline_templates,
        full=full,
        progress=progress,
        skipped=found.skipped,
        workers=workers,
        dumps=traces,
        attempts=_named_attempts(found.files),
    )
    summary.steps = {"discovery": discovery, **summary.steps}
    summary.seconds += discovery  # the whole ingest, as the user waits for it
    return summary


def ingest_streams(
    store: Store,
    meta: JobMeta,
    streams: list[LogStream],
    generation: str,
    *,
    where: str,
    baseline_templates: set[str] | None = None,
    full: bool = False,
    progress: Progress | None = None,
    skipped: list[str] | None = None,
    workers: int | None = None,
    dumps: JobDumps | None = None,
    attempts: dict[int, set[str]] | None = None,
) -> IngestSummary:
    """The one ingest path of files and index sources: parse, tag, roll up, write.

    ``streams`` are the job's files (sorted by node, rank, path); ``generation`` identifies this
    version of the job's logs (see the module docstring); ``where`` names the source in errors;
    ``dumps`` are the traces and stacks found beside them, kept on the job document;
    ``attempts`` the attempts of a restarted job the files name, with their nodes.
    """
    started = time.monotonic()
    summary = IngestSummary(meta, files=len(streams))
    summary.problems.extend(meta.warnings)  # job.yaml keys ignored
    summary.attempts = dict(attempts or {})
    summary.problems.extend(skipped or [])
    summary.skipped_files = len(skipped or [])
    parser = LineParser(known=load_known_templates(store))
    report = _ProgressReport(store, meta, progress)
    # Without baselines a template's lines below the keep level are written only if it is
    # rare (``_keeps_all``): the scanners need not keep samples of kinds they count more of.
    nodes = len({s.node for s in streams})
    limit = rare_limit(nodes) if baseline_templates is None else None
    scanned = scan_streams(streams, parser, workers=workers, progress=report, rare_limit=limit)
    rollups = scanned.rollups
    summary.cut_files = scanned.cut
    summary.skipped_files += len(scanned.cut)
    # Cut files before the other problems: the terminal shows the first ones only.
    summary.problems.extend(f"log file cut — {cut}" for cut in scanned.cut)
    summary.problems.extend(scanned.problems)
    summary.workers = scanned.workers
    summary.progress = scanned.progress
    summary.scan_cpu = scanned.scan_cpu
    summary.worker_cpu = scanned.worker_cpu
    summary.worker_rss_mb = scanned.worker_rss_kb / 1024
    parser.finish()
    if dumps:
        summary.dumps = _placed(dumps, rollups)
    if dumps is not None:
        summary.problems.extend(dumps.problems)
    summary.steps["scan"] = time.monotonic() - started
    summary.nodes = len(rollups)
    summary.lines = sum(r.lines for r in rollups.values())
    if summary.lines == 0:
        raise IngestError(
            f"no readable log lines in {where}"
            + (f" ({summary.problems[0]})" if summary.problems else "")
        )
    summary.agent_paths = frozenset(s.path for s in streams if s.kind in ("agent", "job"))
    full_streams = streams if full else None
    _write(
        store, summary, rollups, parser, generation, baseline_templates, full_streams,
        scanned.timeline, scanned.timelines,
    )  # fmt: skip
    summary.seconds = time.monotonic() - started
    return summary


def _named_attempts(files: list[LogFile]) -> dict[int, set[str]]:
    """Each attempt the job's files name, with the nodes that have files of it."""
    out: dict[int, set[str]] = {}
    for f in files:
        if f.attempt is not None:
            out.setdefault(f.attempt, set()).add(f.node)
    return out


def _placed(found: JobDumps, rollups: dict[str, NodeRollup]) -> JobDumps:
    """The dumps with the global ranks the logs place on one node each (for the ranks that
    left no dump)."""
    ranks: dict[str, set[int]] = {}
    for n, rollup in rollups.items():
        host = split_unit(n)[0]
        if not is_job_node(host):
            ranks.setdefault(host, set()).update(r for g in rollup.groups.values() for r in g.ranks)
    return replace(found, rank_nodes=dumps.rank_nodes(ranks))


def _write_full_lines(
    store: Store,
    meta: JobMeta,
    streams: list[LogStream],
    parser: LineParser,
    clock: _Clock,
    generation: str,
    ctx: DocContext,
) -> int:
    """Index every raw line as an ``l4-lines`` document (``--full``); returns how many.

    A second pass over the streams with the final templates: the stage machine runs again (a
    throwaway ``NodeRollup``) so each line carries the same stage and iteration as its rollup.
    Memory stays bounded: documents go to the cluster in bulk chunks of ``FULL_CHUNK`` as the
    lines are read. Ids are (job, node, file, line): a re-ingest overwrites, never duplicates.
    """
    rules, written = default_stage_rules(), 0
    docs: list[tuple[str, dict[str, Any]]] = []

    def sink(
        pos: int,
        raw: str,
        kind: LineKind,
        stage: str,
        iteration: int | None,
        ts_ref: str | None,
        rank: int | None,
        offset: int | None,
    ) -> None:
        template = kind.template
        if template is None:  # a line that was not there in the first pass (a growing file)
            parser.finish()
            template = kind.template
        assert template is not None
        if stage.startswith(UNPLACED):
            stage, iteration = ctx.timeline_of(node).place(
                stage[1:], clock.seconds(ts_ref, cache=False)
            )
        host, attempt = split_unit(node)
        doc: dict[str, Any] = {
            "message": raw,
            "host.name": host,
            "log.file.path": path,
            F.JOB_ID: meta.id,
            F.TEMPLATE_ID: template.id,
            F.STAGE: stage,
            F.LINE: pos,
            F.GENERATION: generation,
        }
        ms = clock.ms(ts_ref, cache=False)
        if ms is not None:
            doc["@timestamp"] = ms
        if kind.level:
            doc["log.level"] = kind.level
        if rank is not None:
            doc[F.RANK] = rank
        if iteration is not None:
            doc[F.ITERATION] = iteration
        if offset is not None:
            doc["log.offset"] = offset
        if pos in long_lines:
            doc[F.FLAGS] = ["truncated"]
        if attempt is not None:
            doc[F.ATTEMPT] = attempt
        docs.append((_doc_id(meta.id, generation, node, path, pos), doc))
        if len(docs) >= FULL_CHUNK:
            nonlocal written
            written += store.bulk_index(store.names.lines, docs)
            docs.clear()

    for stream in streams:
        node, path = stream.node, stream.path
        long_lines: set[int] = set()
        chunks = _chunks(stream, parser, None, long_lines)
        try:
            NodeRollup(node, rules).scan(path, stream.rank, chunks, long_lines, sink)
        except OSError:
            continue  # reported by the first pass
    written += store.bulk_index(store.names.lines, docs)
    return written


Doc = tuple[str, dict[str, Any]]  # (``_id``, ``_source``) of a document to write


@dataclass
class Survey:
    """What the documents of a job depend on across its nodes, gathered before any is built."""

    refs: set[str] = field(default_factory=set)  # reference lines whose times are needed
    totals: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # per template
    iterations: list[int] = field(default_factory=list)  # each node's last iteration
    first_iteration: int | None = None
    node_counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    texts: dict[str, str] = field(default_factory=dict)  # template id -> text
    from_rank_logs: set[str] = field(default_factory=set)  # seen in a training log, not kern.log
    from_workers: set[str] = field(default_factory=set)  # seen in a rank's own output
    system_logs: bool = False


def survey(
    rollups: dict[str, NodeRollup],
    timeline: Timeline,
    agent_paths: frozenset[str] = frozenset(),
    attempts: Mapping[int, Timeline] | None = None,
) -> Survey:
    """Per-template totals, node counts, iterations and the time references of the rollups
    (``agent_paths``: the files that are a launcher agent's own log)."""
    out = Survey()
    for rollup in rollups.values():
        out.refs.update(run.after for run in rollup.runs if run.after is not None)
        seen: set[str] = set()
        for (kind, stage, it), group in rollup.groups.items():
            assert kind.template is not None
            out.totals[kind.template.id] += group.count
            out.texts[kind.template.id] = kind.template.text
            seen.add(kind.template.id)
            if is_system_log(group.path):
                out.system_logs = True
            else:
                out.from_rank_logs.add(kind.template.id)
                if group.path not in agent_paths and not is_job_node(rollup.node):
                    out.from_workers.add(kind.template.id)
            for ref in (group.first_ts_ref, group.last_ts_ref):
                if ref is not None:
                    out.refs.add(ref)
            if it is not None and not stage.startswith(UNPLACED):
                first = out.first_iteration
                out.first_iteration = it if first is None else min(first, it)
        for tid in seen:
            out.node_counts[tid] += 1
        if rollup.last_iteration is not None:
            out.iterations.append(rollup.last_iteration)
    for each in (timeline, *(attempts or {}).values()):
        out.refs.update(each.marks.values())
    return out


@dataclass(frozen=True)
class DocContext:
    """What building one node's documents needs of the whole job."""

    job_id: str
    generation: str
    clock: _Clock
    timeline: Timeline  # resolved
    bucket_of: Callable[[int], tuple[int, int]]
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


def doc_context(
    job_id: str,
    generation: str,
    rollups: dict[str, NodeRollup],
    found: Survey,
    timeline: Timeline,
    baseline_templates: set[str] | None,
    workers: int = 1,
    *,
    fold: bool = True,
    attempts: Mapping[int, Timeline] | None = None,
) -> DocContext:
    """Parse the reference times (in ``workers`` processes for a large job), place the
    timeline (and each attempt's), size the iteration buckets."""
    clock = _Clock(found.refs, workers)
    for each in (timeline, *(attempts or {}).values()):
        each.resolve(clock.seconds)
    shapes = host_shapes(split_unit(n)[0] for n in rollups)
    named = frozenset(t for t, text in found.texts.items() if may_name_a_node(text, shapes))
    least = max(2, MAJORITY * len(rollups))
    majority = frozenset(t for t, n in found.node_counts.items() if n >= least and t not in named)
    return DocContext(
        job_id,
        generation,
        clock,
        timeline,
        _buckets(found.iterations, found.first_iteration),
        found.totals,
        rare_limit(len(rollups)),
        baseline_templates,
        named,
        majority,
        fold,
        dict(attempts or {}),
    )


def _group_times(
    ctx: DocContext, rollup: NodeRollup, stage: str, it: int | None, group: Group
) -> tuple[int | None, int | None, int | None]:
    """(first ms, last ms, moved): ``moved`` is the time a timeless run took from its next
    stamp's line, which its kept lines carry too."""
    clock = ctx.clock
    first_ms, last_ms = clock.ms(group.first_ts_ref), clock.ms(group.last_ts_ref)
    moved: int | None = None
    if stage.startswith(UNPLACED):
        ref = time_ref(rollup, it, group)
        if ref is not group.first_ts_ref:
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


def _keeps_all(ctx: DocContext, kind: LineKind, template: Template) -> bool:
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
    return _doc_id(ctx.job_id, ctx.generation, node, kept.path, kept.line), doc


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
    timeline = ctx.timeline_of(node)
    for (kind, stage, it), group in rollup.groups.items():
        template = kind.template
        assert template is not None
        first_ms, last_ms, moved = _group_times(ctx, rollup, stage, it, group)
        first_s = first_ms / 1000.0 if first_ms is not None else None
        if stage.startswith(UNPLACED):
            stage, it = timeline.place(stage[1:], first_s)
        else:
            stage = timeline.refine(stage, it, first_s)
        start, span = ctx.bucket_of(it) if it is not None else (None, 0)
        key = (node, template.id, stage, start)
        doc = merged.get(key)
        if doc is None:
            merged[key] = _event_doc(
                ctx.job_id, node, template, kind, stage, start, span, group, first_ms, last_ms,
                ctx.generation,
            )  # fmt: skip
        else:
            _merge(doc, group, first_ms, last_ms)
        if _keeps_all(ctx, kind, template):
            kept.setdefault(template.id, []).extend(_kept_lines(ctx, kind, stage, it, group, moved))
            level = Level.parse(kind.level)
            below = level is not None and not level.is_error  # says so; no level: may be an error
            below_error[template.id] = below_error.get(template.id, True) and below
    lines: list[Doc] = []
    shared: list[Doc] = []
    for tid, ks in kept.items():
        below = below_error[tid]
        # The majority never holds a template that may name a node (``doc_context``).
        out = shared if ctx.fold and below and tid in ctx.majority else lines
        out.extend(_line_doc(ctx, node, tid, k) for k in _trim_kept(ctx, tid, ks, below))
    events = [
        (_doc_id(ctx.job_id, ctx.generation, *key), _finish_event(d)) for key, d in merged.items()
    ]
    host, attempt = split_unit(node)
    if attempt is not None:  # the unit is a node's lines of one attempt
        for _, doc in (*events, *lines, *shared):
            doc["host.name"] = host
            doc[F.ATTEMPT] = attempt
    return events, lines, shared


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
    times: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    #: Per attempt of a restarted job: its nodes and the time span of its documents.
    attempts: dict[int, jobs.AttemptSpan] = field(default_factory=dict)

    def add(self, events: list[Doc]) -> None:
        """Count a node's event documents in."""
        for _, d in events:
            self.ranks.update(d[F.RANKS])
            if d.get(F.FIRST_TS) is not None:
                self.times.append(d[F.FIRST_TS])
            if d.get(F.LAST_TS) is not None:
                self.ends.append(d[F.LAST_TS])
            if d.get(F.ATTEMPT) is not None:
                k = d[F.ATTEMPT]
                span = self.attempts.get(k) or jobs.AttemptSpan(k)
                self.attempts[k] = span.add(d["host.name"], d.get(F.FIRST_TS), d.get(F.LAST_TS))


def template_documents(
    new: list[Template],
    levels: dict[str, str | None],
    totals: dict[str, int],
    job_id: str,
    now: int,
) -> list[Doc]:
    """The ``l4-templates`` documents of the templates this job saw first."""
    return [
        (
            t.id,
            {
                "@timestamp": now,
                F.TEMPLATE_ID: t.id,
                F.TEMPLATE_TEXT: t.text,
                F.TEMPLATE_FIRST_JOB: job_id,
                F.TEMPLATE_LEVEL: levels.get(t.id),
                F.TEMPLATE_OCCURRENCES: totals.get(t.id, 0),
            },
        )
        for t in new
    ]


def job_record(
    summary: IngestSummary,
    rollups: dict[str, NodeRollup],
    found: Survey,
    totals: EventTotals,
    source: str,
    now: int,
) -> JobRecord:
    """The job document of a completed ingest (before ``completed`` merges the old one in)."""
    meta = summary.job
    progressing = sorted(
        {split_unit(n)[0] for n, r in rollups.items() if r.last_iteration is not None}
    )
    hosts = sorted({h for n in rollups if not is_job_node(h := split_unit(n)[0])})  # not the job's
    iterations = found.iterations
    first = found.first_iteration
    progress = summary.progress
    return replace(
        jobs.job_identity(meta.id, meta.status, meta.fingerprint, meta.config),
        registered=now,
        timestamp=min(totals.times) if totals.times else None,
        summary=jobs.JobSummary(
            nodes=tuple(hosts),
            progress_nodes=tuple(progressing),
            node_count=len(hosts),
            lines=summary.lines,
            ranks=len(totals.ranks),
            template_stats={t: (n, found.node_counts[t]) for t, n in found.totals.items()},
            iterations=max(iterations) - first + 1 if iterations and first is not None else 0,
            system_logs=found.system_logs,
            system_templates=tuple(sorted(set(found.totals) - found.from_rank_logs)),
            aux_templates=tuple(sorted(set(found.totals) - found.from_workers)),
            skipped_files=summary.skipped_files,
            cut_files=tuple(summary.cut_files) or None,
            start_ts=min(totals.times) if totals.times else None,
            end_ts=max(totals.ends) if totals.times else None,
            dumps=summary.dumps.to_json() if summary.dumps else None,
            attempts=_attempts(totals, rollups, summary.attempts),
        ),
        ingest=jobs.IngestState(
            state="done",
            updated=now,
            files=summary.files,
            source=source,
            events_docs=summary.events_docs,
            lines_docs=summary.lines_docs,
            progress={**progress.fields(), "updated": now} if progress is not None else None,
            problems="\n".join(summary.problems[:100]) if summary.problems else None,
        ),
    )  # fmt: skip


def _attempts(
    totals: EventTotals, rollups: dict[str, NodeRollup], named: Mapping[int, set[str]]
) -> tuple[jobs.AttemptSpan, ...] | None:
    """A restarted job's attempts: every attempt its files name (one whose workers died before
    printing a line counts, with its nodes and no time), nodes and time span from their
    documents, and whether a rank printed progress of its own in each (None: the job never
    restarted)."""
    attempts = sorted(set(named) | set(totals.attempts))
    if len(attempts) < 2:
        return None
    trained = {split_unit(n)[1] for n, r in rollups.items() if r.last_iteration is not None}
    out = []
    for k in attempts:
        span = totals.attempts.get(k) or jobs.AttemptSpan(k, tuple(sorted(named.get(k, ()))))
        out.append(replace(span, trained=k in trained))
    return tuple(out)


def completed(job: JobRecord, existing: Mapping[str, Any]) -> dict[str, Any]:
    """The new job document from ``job`` and the one it replaces (``generations.complete``).

    Keeps what the analysis service recorded about the job, and a status registered with
    ``l4 job register`` when neither job.yaml nor a flag gives one. New logs (another source)
    make a finished analysis due again; an unchanged re-ingest does not.
    """
    old = JobRecord.from_source(existing)
    before = old.ingest.source or old.ingest.generation
    analysis = old.analysis
    if before not in (None, job.ingest.source):
        analysis = replace(analysis, state=None, version=None)
    status = job.status
    if job.status == "unknown" and old.status:
        status = old.status
    kept = {k: v for k, v in old.extra.items() if k.startswith(F.ANALYSIS + ".")}
    return replace(job, status=status, analysis=analysis, extra=kept).to_source()


def _write(
    store: Store,
    summary: IngestSummary,
    rollups: dict[str, NodeRollup],
    parser: LineParser,
    generation: str,
    baseline_templates: set[str] | None,
    full_streams: list[LogStream] | None,
    timeline: Timeline,
    attempts: Mapping[int, Timeline] | None = None,
) -> None:
    """Build and write every document of the ingest, then make its generation the complete one.

    ``generation`` names the logs as read (their files' names, sizes, times); the documents are
    written as a new ingest generation (``store.generations``), complete only at the end.
    """
    started = time.monotonic()
    meta = summary.job
    source, generation = generation, _begin(store, meta, summary.files)
    found = survey(rollups, timeline, summary.agent_paths, attempts)
    ctx = doc_context(
        meta.id, generation, rollups, found, timeline, baseline_templates, summary.workers,
        fold=full_streams is None,  # with --full every raw line is a document of its own
        attempts=attempts,
    )  # fmt: skip
    kept_docs: list[Doc] = []  # --full: written after the raw lines
    all_events: list[Doc] = []
    all_shared: list[Doc] = []
    totals = EventTotals()
    built = _built_documents(ctx, rollups, summary.workers)  # forks before the writer starts
    # Documents go to the cluster from the writer's thread while the next node's are built.
    with BulkWriter(store) as writer:  # stopped (not left waiting) if building fails
        for events, lines, shared in built:
            for doc_id, doc in lines:
                if full_streams is not None:
                    kept_docs.append((doc_id, doc))
                else:
                    writer.add(store.names.lines, doc_id, doc)
            totals.add(events)
            all_events.extend(events)
            all_shared.extend(shared)  # none with --full (ctx.fold is off)
        # The healthy majority's lines and rollups: one document for the nodes that agree.
        for doc_id, doc in line_packs.pack_lines(all_shared, _doc_id):
            writer.add(store.names.lines, doc_id, doc)
        for doc_id, doc in packs.pack_events(all_events, _doc_id):
            writer.add(store.names.events, doc_id, doc)
        handed = time.monotonic()
        written = writer.close()
    summary.steps["build"] = handed - started
    summary.steps["send"] = time.monotonic() - handed
    summary.events_docs = written.get(store.names.events, 0)
    if full_streams is not None:
        summary.lines_docs = _write_full_lines(
            store, meta, full_streams, parser, ctx.clock, generation, ctx
        )
        # Kept lines overwrite their raw-line twins: same ids, joined tracebacks, flags.
        store.bulk_index(store.names.lines, kept_docs)
    else:
        summary.lines_docs = written.get(store.names.lines, 0)
    new = parser.new_templates()
    now = int(time.time() * 1000)
    levels = {k.template.id: k.level for k in parser.kinds if k.template is not None}
    store.bulk_index(
        store.names.templates, template_documents(new, levels, found.totals, meta.id, now)
    )
    summary.new_templates = len(new)
    for index in (store.names.events, store.names.lines, store.names.templates):
        store.refresh(index)
    job = job_record(summary, rollups, found, totals, source, now)
    summary.record = generations.complete(
        store, meta.id, generation, lambda old: completed(job, old)
    )
    summary.steps["finish"] = (
        time.monotonic() - started - sum(summary.steps.get(k, 0.0) for k in ("build", "send"))
    )


def _built_documents(
    ctx: DocContext, rollups: dict[str, NodeRollup], workers: int
) -> Iterator[tuple[list[Doc], list[Doc], list[Doc]]]:
    """Every node's ``node_documents``, in node order.

    A job of at least ``PARALLEL_GROUPS`` rollup groups is built by ``workers`` processes: the
    nodes are cut into runs of about equal groups; forked children (they share the parent's
    rollups and clock without copying them) build all runs but the first, which the parent
    builds meanwhile. The documents are the same as built in one process: each node's depend
    only on its rollup and the job-wide context."""
    nodes = list(rollups)
    groups = [len(rollups[n].groups) for n in nodes]
    parallel = workers > 1 and sum(groups) >= PARALLEL_GROUPS and procs.can_fork()
    runs = _runs(groups, workers if parallel else 1)
    if len(runs) < 2:  # one process, or one node
        return (node_documents(ctx, n, rollups[n]) for n in nodes)
    pool = procs.fork_pool((ctx, rollups), len(runs) - 1)
    pending = [pool.apply_async(_build_run, (nodes[a:b],)) for a, b in runs[1:]]
    pool.close()
    return _collect(ctx, rollups, nodes[: runs[0][1]], pending, pool)


def _collect(
    ctx: DocContext,
    rollups: dict[str, NodeRollup],
    first: list[str],
    pending: list[Any],
    pool: Any,
) -> Iterator[tuple[list[Doc], list[Doc], list[Doc]]]:
    try:
        for node in first:
            yield node_documents(ctx, node, rollups[node])
        for result in pending:
            yield from result.get()
        pool.join()
    finally:
        pool.terminate()


def _runs(weights: list[int], parts: int) -> list[tuple[int, int]]:
    """``parts`` consecutive runs (start, end) of about equal total weight, none empty."""
    parts = max(1, min(parts, len(weights)))
    total, start, acc = sum(weights), 0, 0
    out: list[tuple[int, int]] = []
    for i, w in enumerate(weights):
        acc += w
        left = parts - len(out) - 1  # runs still to start after this one
        if left and acc >= total * (len(out) + 1) / parts and len(weights) - i - 1 >= left:
            out.append((start, i + 1))
            start = i + 1
    out.append((start, len(weights)))
    return out


def _build_run(nodes: list[str]) -> list[tuple[list[Doc], list[Doc], list[Doc]]]:
    """In a forked child (``procs.fork_pool``): the documents of a run of nodes."""
    ctx: DocContext
    rollups: dict[str, NodeRollup]
    ctx, rollups = procs.forked_state()
    return [node_documents(ctx, n, rollups[n]) for n in nodes]


def _begin(store: Store, meta: JobMeta, files: int) -> str:
    """Record on the job document that a new generation is being written; returns it."""
    identity = jobs.job_identity(meta.id, meta.status, meta.fingerprint, meta.config)
    return generations.begin(store, meta.id, files=files, new_job=identity.to_source())


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
    doc[F.COUNT] += group.count
    if group.seconds_n:
        total_ns, n = doc.get(_SECONDS, (0, 0))
        doc[_SECONDS] = (total_ns + group.seconds_ns, n + group.seconds_n)
    doc[F.RANKS] |= group.ranks
    doc[F.FIRST_POS] = min(doc[F.FIRST_POS], group.first_pos)
    doc[F.LAST_POS] = max(doc[F.LAST_POS], group.last_pos)
    if first_ms is not None and (doc.get(F.FIRST_TS) is None or first_ms < doc[F.FIRST_TS]):
        doc["@timestamp"] = doc[F.FIRST_TS] = first_ms
    if last_ms is not None and (doc.get(F.LAST_TS) is None or last_ms > doc[F.LAST_TS]):
        doc[F.LAST_TS] = last_ms
