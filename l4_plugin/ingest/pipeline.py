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

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from l4_plugin.errors import IngestError
from l4_plugin.ingest import dumps
from l4_plugin.ingest.attempts import split_unit
from l4_plugin.ingest.context import Survey, doc_context, survey
from l4_plugin.ingest.documents import Doc, EventTotals, doc_id, rare_limit
from l4_plugin.ingest.full import write_full_lines
from l4_plugin.ingest.jobdir import JobFiles, JobMeta, job_meta, scan
from l4_plugin.ingest.lanes import Lane
from l4_plugin.ingest.logfile import LogFile
from l4_plugin.ingest.owners import BuildPlan, BuildReport, build
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.scanner import AUX_KINDS, NodeDigest
from l4_plugin.ingest.sources import LogStream, file_streams, files_generation
from l4_plugin.ingest.templates import template_from_dict
from l4_plugin.ingest.timeline import Timeline
from l4_plugin.ingest.workers import (
    ScanProgress,
    ScanResult,
    ingest_lanes,
    lane_result,
    scan_lanes,
)
from l4_plugin.ingest.writer import BulkWriter
from l4_plugin.limits import ReadLimits
from l4_plugin.records import Template, is_job_node
from l4_plugin.store import Store, generations, jobs, line_packs, packs
from l4_plugin.store import fields as F
from l4_plugin.store.fields import source_field
from l4_plugin.store.jobs import JobRecord
from l4_plugin.traces import JobDumps

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
    scheduler: str | None = None,
) -> IngestSummary:
    """Parse every log file of ``job_dir`` and write the job's documents.

    (ARCHITECTURE.md, *Documents*, lists them.)

    ``full`` also indexes every raw line into ``l4-lines`` (a second, streamed pass). Files
    ``jobdir.scan`` skips (``limits``) are warnings in the summary and counted on the job.
    ``workers`` processes scan the files and build the documents (None: the machine's cores,
    fewer for a small job); with ``scheduler`` (a Dask scheduler's address) the Dask cluster's
    workers do (at most ``workers`` of their threads when given). The documents are the same
    for any number, and on either.
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
        scheduler=scheduler,
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
    scheduler: str | None = None,
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
        scheduler=scheduler,
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
    scheduler: str | None = None,
    dumps: JobDumps | None = None,
    attempts: dict[int, set[str]] | None = None,
) -> IngestSummary:
    """The one ingest path of files and index sources: parse, tag, roll up, write.

    ``streams`` are the job's files (sorted by node, rank, path); ``generation`` identifies this
    version of the job's logs (see the module docstring); ``where`` names the source in errors;
    ``dumps`` are the traces and stacks found beside them, kept on the job document;
    ``attempts`` the attempts of a restarted job the files name, with their nodes.
    ``workers`` lanes scan them and build their nodes' documents (``workers.ingest_lanes``:
    local processes, or with ``scheduler`` a Dask cluster's workers).
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
    # rare (``documents.keeps_all``): the scanners need not keep samples of kinds they count
    # more of.
    nodes = len({s.node for s in streams})
    limit = rare_limit(nodes) if baseline_templates is None else None
    with ingest_lanes(streams, workers, scheduler) as (lanes, token):
        scanned = scan_lanes(lanes, token, streams, parser, progress=report, rare_limit=limit)
        _scanned(summary, scanned)
        parser.finish()
        if dumps:
            summary.dumps = _placed(dumps, scanned.digests)
        if dumps is not None:
            summary.problems.extend(dumps.problems)
        found = survey(scanned.digests, parser.kind_of)
        summary.steps["scan"] = time.monotonic() - started
        summary.nodes = len(found.nodes)
        summary.lines = found.lines
        if summary.lines == 0:
            raise IngestError(
                f"no readable log lines in {where}"
                + (f" ({summary.problems[0]})" if summary.problems else "")
            )
        summary.agent_paths = frozenset(s.path for s in streams if s.kind in AUX_KINDS)
        writing = _Writing(summary, parser, found, scanned.timeline, generation, scanned.timelines)
        _write(store, writing, lanes, token, baseline_templates, streams if full else None)
    summary.seconds = time.monotonic() - started
    return summary


def _scanned(summary: IngestSummary, scanned: ScanResult) -> None:
    """What the scan says in the summary."""
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


def _named_attempts(files: list[LogFile]) -> dict[int, set[str]]:
    """Each attempt the job's files name, with the nodes that have files of it."""
    out: dict[int, set[str]] = {}
    for f in files:
        if f.attempt is not None:
            out.setdefault(f.attempt, set()).add(f.node)
    return out


def _placed(found: JobDumps, digests: list[NodeDigest]) -> JobDumps:
    """The dumps with the global ranks the logs place on one node each (for the ranks that
    left no dump)."""
    ranks: dict[str, set[int]] = {}
    for d in digests:
        host = split_unit(d.node)[0]
        if not is_job_node(host):
            ranks.setdefault(host, set()).update(d.ranks)
    return replace(found, rank_nodes=dumps.rank_nodes(ranks))


@dataclass
class _Writing:
    """What the write step works from: the scan's summary, the templates, the job's survey
    and timeline, and the version of the logs (``source``)."""

    summary: IngestSummary
    parser: LineParser
    found: Survey
    timeline: Timeline
    source: str
    #: A restarted job's timeline per attempt (``workers.ScanResult.timelines``).
    attempts: dict[int, Timeline] = field(default_factory=dict)


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
    found: Survey,
    totals: EventTotals,
    source: str,
    now: int,
) -> JobRecord:
    """The job document of a completed ingest (before ``completed`` merges the old one in)."""
    meta = summary.job
    progressing = sorted({split_unit(n)[0] for n in found.progressing})
    # The hosts, not the job's own files (a restarted job's units are (host, attempt)).
    hosts = sorted({h for n in found.nodes if not is_job_node(h := split_unit(n)[0])})
    iterations = found.iterations
    first = found.first_iteration
    progress = summary.progress
    return replace(
        jobs.job_identity(meta.id, meta.status, meta.fingerprint, meta.config),
        registered=now,
        timestamp=totals.first,
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
            start_ts=totals.first,
            end_ts=totals.last if totals.first is not None else None,
            dumps=summary.dumps.to_json() if summary.dumps else None,
            attempts=_attempts(totals, found, summary.attempts),
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
    totals: EventTotals, found: Survey, named: Mapping[int, set[str]]
) -> tuple[jobs.AttemptSpan, ...] | None:
    """A restarted job's attempts: every attempt its files name (one whose workers died before
    printing a line counts, with its nodes and no time), nodes and time span from their
    documents, and whether a rank printed progress of its own in each (None: the job never
    restarted)."""
    attempts = sorted(set(named) | set(totals.attempts))
    if len(attempts) < 2:
        return None
    trained = {split_unit(n)[1] for n in found.progressing}
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
    w: _Writing,
    lanes: list[Lane],
    token: str,
    baseline_templates: set[str] | None,
    full_streams: list[LogStream] | None,
) -> None:
    """Build and write every document of the ingest, then make its generation the complete one.

    Each lane builds its nodes' documents and writes their kept lines; this process packs the
    event documents and the healthy majority's lines across nodes and writes them, then the
    templates and the job document. The documents are written as a new ingest generation
    (``store.generations``), complete only at the end.
    """
    started = time.monotonic()
    summary, meta = w.summary, w.summary.job
    generation = _begin(store, meta, summary.files)
    ctx = doc_context(
        meta.id, generation, w.found, w.timeline, baseline_templates,
        fold=full_streams is None,  # with --full every raw line is a document of its own
        attempts=w.attempts,
    )  # fmt: skip
    templates = {k.key: k.template for k in w.parser.kinds if k.template is not None}
    # With --full the kept lines are written after the raw lines, which they overwrite.
    plan = BuildPlan(ctx, templates, store if full_streams is None else None)
    built = _build(lanes, token, plan)
    totals = EventTotals()
    events: dict[tuple[Any, ...], packs.EventColumns] = {}
    shared: list[Doc] = []
    kept: list[Doc] = []
    lines_written = 0
    for report in built:
        totals.merge(report.totals)
        for sig, columns in report.events.items():
            have = events.get(sig)
            if have is None:
                events[sig] = columns
            else:
                have.extend(columns)
        shared.extend(report.shared)  # none with --full (ctx.fold is off)
        kept.extend(report.kept)
        lines_written += report.lines_written
    with BulkWriter(store) as writer:  # stopped (not left waiting) if packing fails
        # The healthy majority's lines and rollups: one document for the nodes that agree.
        for pack_id, doc in line_packs.pack_lines(shared, doc_id):
            writer.add(store.names.lines, pack_id, doc)
        for pack_id, doc in packs.pack_event_columns(events, doc_id):
            writer.add(store.names.events, pack_id, doc)
        handed = time.monotonic()
        written = writer.close()
    summary.steps["build"] = handed - started
    summary.steps["send"] = time.monotonic() - handed
    summary.events_docs = written.get(store.names.events, 0)
    if full_streams is not None:
        summary.lines_docs = write_full_lines(store, meta, full_streams, w.parser, ctx)
        # Kept lines overwrite their raw-line twins: same ids, joined tracebacks, flags.
        store.bulk_index(store.names.lines, kept)
    else:
        summary.lines_docs = lines_written + written.get(store.names.lines, 0)
    _finish(store, w, totals, generation)
    summary.steps["finish"] = (
        time.monotonic() - started - sum(summary.steps.get(k, 0.0) for k in ("build", "send"))
    )


def _build(lanes: list[Lane], token: str, plan: BuildPlan) -> list[BuildReport]:
    """Every lane builds its nodes' documents (all at once); their reports in lane order."""
    futures = [lane.executor.submit(build, token, lane.id, plan) for lane in lanes]
    return [lane_result(future, lane) for future, lane in zip(futures, lanes, strict=True)]


def _finish(store: Store, w: _Writing, totals: EventTotals, generation: str) -> None:
    """The templates this job saw first, a refresh, and the job document: the generation is
    complete."""
    meta = w.summary.job
    new = w.parser.new_templates()
    now = int(time.time() * 1000)
    levels = {k.template.id: k.level for k in w.parser.kinds if k.template is not None}
    store.bulk_index(
        store.names.templates, template_documents(new, levels, w.found.totals, meta.id, now)
    )
    w.summary.new_templates = len(new)
    for index in (store.names.events, store.names.lines, store.names.templates):
        store.refresh(index)
    job = job_record(w.summary, w.found, totals, w.source, now)
    w.summary.record = generations.complete(
        store, meta.id, generation, lambda old: completed(job, old)
    )


def _begin(store: Store, meta: JobMeta, files: int) -> str:
    """Record on the job document that a new generation is being written; returns it."""
    identity = jobs.job_identity(meta.id, meta.status, meta.fingerprint, meta.config)
    return generations.begin(store, meta.id, files=files, new_job=identity.to_source())
