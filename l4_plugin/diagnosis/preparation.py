"""``l4 diagnose`` on directories: ingest what the cluster does not hold yet, baselines first.

A job directory counts as ingested when its ``l4-jobs`` document says its last ingest completed
(``store.generations``) and read the directory as it is now (the hash ingest computes from the
files' names, sizes and modification times): an unchanged directory is not read again; a grown
one (a running job's logs), or one whose last ingest was interrupted, is.

Everything is read once and handed on: each directory's ``job.yaml`` (``jobdir.job_meta``), its
files (``jobdir.scan``, whose list the ingest then reads) and its ``l4-jobs`` document (read to
decide, or as the ingest completed it). The baseline pool is resolved once (``pool``), after the
baselines are in the cluster and before the failed job's ingest, which keeps the lines of the
templates the pool never printed; the diagnosis then compares with the same pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from l4_plugin.analysis.tables import JobDoc
from l4_plugin.diagnosis.pool import Warn, find_pool
from l4_plugin.diagnosis.queries import job_doc, read_pool_templates
from l4_plugin.ingest.jobdir import JobFiles, JobMeta, job_meta, scan
from l4_plugin.ingest.pipeline import IngestSummary, Progress, ingest_files
from l4_plugin.ingest.sources import files_generation
from l4_plugin.limits import ReadLimits
from l4_plugin.store import Store, generations, jobs
from l4_plugin.store.jobs import JobRecord


@dataclass(frozen=True, slots=True)
class Prepared:
    """A job directory made ready for analysis: its ``job.yaml``, its ``l4-jobs`` document (as
    read, or as the ingest run now completed it) and that ingest (None: the cluster held it)."""

    meta: JobMeta
    path: Path
    record: JobRecord
    ingested: IngestSummary | None

    @property
    def job_id(self) -> str:
        return self.record.id

    @property
    def doc(self) -> JobDoc:
        """What the analyses need of the job's document."""
        return job_doc(self.record)


@dataclass(frozen=True, slots=True)
class Intake:
    """``l4 diagnose``'s directories made ready: the job, its baselines and the pool."""

    job: Prepared
    baselines: list[Prepared]
    pool: list[JobDoc]


@dataclass(frozen=True, slots=True)
class Look:
    """What is known of a directory before its ingest: ``job.yaml``, files (``found``, in
    ``seconds``), the job's document (None: none yet) and whether an ingest is ``due``."""

    meta: JobMeta
    path: Path
    found: JobFiles
    seconds: float
    record: JobRecord | None
    due: bool


@dataclass(frozen=True, slots=True)
class How:
    """How directories are read and ingested (the ``l4 diagnose`` flags)."""

    node_pattern: str | None = None
    reingest: bool = False
    limits: ReadLimits | None = None
    workers: int | None = None
    progress: Callable[[str], Progress | None] | None = None
    scheduler: str | None = None  # a Dask scheduler's address: the ingest's lanes run there


def expand_baselines(paths: list[Path]) -> list[Path]:
    """Job directories named by ``--baseline``: a job directory, or a folder of job directories
    (each with its ``job.yaml``, as ``l4 simulate`` writes ``OUT/baselines/``)."""
    out: list[Path] = []
    for path in paths:
        children = (
            sorted(p for p in path.iterdir() if (p / "job.yaml").is_file())
            if (path.is_dir() and not (path / "job.yaml").is_file())
            else []
        )
        out.extend(children or [path])
    return out


def already_ingested(store: Store, record: JobRecord | None, found: JobFiles) -> bool:
    """True when the job's last ingest completed and read the files ``found`` as they are now.

    An ingest that began later and did not complete (it died, or is still writing) makes the
    directory due again: the new ingest supersedes it (``store.generations``).
    """
    if record is None or record.ingest.writing is not None:
        return False
    complete = record.ingest.generation or None
    read = record.ingest.source or complete
    if complete is None or read != files_generation(found.files):
        return False
    source = record.to_source()
    if not store.count(store.names.events, generations.scope(record.id, source)):
        return False
    generations.sweep(store, record.id, source)
    return True


def look(store: Store, job_dir: Path, meta: JobMeta, how: How) -> Look:
    """Scan ``job_dir`` and read the job's document: is an ingest due?"""
    started = time.monotonic()
    found = scan(job_dir, how.node_pattern, how.limits, how.workers, meta.hosts)
    seconds = time.monotonic() - started
    record = jobs.get_job(store, meta.id)
    due = how.reingest or not already_ingested(store, record, found)
    return Look(meta, job_dir, found, seconds, record, due)


def finish(store: Store, seen: Look, how: How, known_templates: set[str] | None = None) -> Prepared:
    """Ingest a directory ``look`` found due (``known_templates``: the pool's); else as it is."""
    if not seen.due:
        assert seen.record is not None
        return Prepared(seen.meta, seen.path, seen.record, None)
    summary = ingest_files(
        store,
        seen.meta,
        seen.found,
        where=str(seen.path),
        discovery=seen.seconds,
        baseline_templates=known_templates,
        progress=how.progress(seen.path.name) if how.progress else None,
        limits=how.limits,
        workers=how.workers,
        scheduler=how.scheduler,
    )
    assert summary.record is not None
    return Prepared(seen.meta, seen.path, summary.record, summary)


def prepare(store: Store, job_dir: Path, how: How | None = None) -> Prepared:
    """Ingest ``job_dir`` unless the cluster already holds it unchanged (no baseline pool)."""
    how = how or How()
    return finish(store, look(store, job_dir, job_meta(job_dir), how), how)


def prepare_all(
    store: Store,
    job_dir: Path,
    baselines: list[Path],
    *,
    job_id: str | None = None,
    how: How | None = None,
    force_baselines: bool = False,
    warn: Warn | None = None,
) -> Intake:
    """The job and its baselines in the cluster, and the pool (see the module docstring).

    The failed job's status defaults to ``failed`` when neither ``job.yaml`` nor a flag says.
    Every ``job.yaml`` is validated before anything is written.
    """
    how = how or How()
    meta = job_meta(job_dir, job_id=job_id)
    if meta.status == "unknown":
        meta = replace(meta, status="failed")
    base_metas = [(b, job_meta(b)) for b in expand_baselines(baselines)]
    job = look(store, job_dir, meta, how)
    done = [finish(store, look(store, b, m, how), how) for b, m in base_metas]
    # The job as the cluster will hold it: as ingested now, else as its document says.
    fingerprint = meta.fingerprint if job.due or job.record is None else job.record.fingerprint
    named = [p.doc for p in done]
    pool = find_pool(
        store, meta.id, str(fingerprint or ""), named, force=force_baselines, warn=warn
    )
    known = read_pool_templates(store, pool) if job.due else None
    return Intake(finish(store, job, how, known), done, pool)
