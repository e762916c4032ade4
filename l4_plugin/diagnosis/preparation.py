"""``l4 diagnose`` on directories: ingest what the cluster does not hold yet, baselines first.

A job directory counts as ingested when its ``l4-jobs`` document says its last ingest completed
(``store.generations``) and read the directory as it is now (the hash ingest computes from the
files' names, sizes and modification times): an unchanged directory is not read again; a grown
one (a running job's logs), or one whose last ingest was interrupted, is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from l4_plugin.diagnosis.queries import find_jobs, job_scope, read_job
from l4_plugin.ingest.jobdir import discover, job_meta
from l4_plugin.ingest.pipeline import IngestSummary, Progress, ingest_job
from l4_plugin.ingest.sources import files_generation
from l4_plugin.limits import ReadLimits
from l4_plugin.store import Store, generations, jobs
from l4_plugin.store import fields as F


@dataclass(frozen=True, slots=True)
class Prepared:
    """A job directory made ready for analysis: its id and whether it was (re-)ingested now."""

    job_id: str
    path: Path
    ingested: IngestSummary | None


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


def already_ingested(
    store: Store,
    job_dir: Path,
    job_id: str,
    node_pattern: str | None,
    limits: ReadLimits | None = None,
) -> bool:
    """True when the job's last ingest completed and read the directory as it is now.

    An ingest that began later and did not complete (it died, or is still writing) makes the
    directory due again: the new ingest supersedes it (``store.generations``).
    """
    record = jobs.get_job(store, job_id)
    if record is None or record.ingest.writing is not None:
        return False
    complete = record.ingest.generation or None
    read = record.ingest.source or complete
    if complete is None or read != files_generation(discover(job_dir, node_pattern, limits)):
        return False
    source = record.to_source()
    if not store.count(store.names.events, generations.scope(job_id, source)):
        return False
    generations.sweep(store, job_id, source)
    return True


def prepare(
    store: Store,
    job_dir: Path,
    *,
    job_id: str | None = None,
    status: str | None = None,
    node_pattern: str | None = None,
    progress: Progress | None = None,
    reingest: bool = False,
    known_templates: set[str] | None = None,
    limits: ReadLimits | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
) -> Prepared:
    """Ingest ``job_dir`` unless the cluster already holds it unchanged."""
    meta = job_meta(job_dir, job_id=job_id, status=status)
    if not reingest and already_ingested(store, job_dir, meta.id, node_pattern, limits):
        return Prepared(meta.id, job_dir, None)
    summary = ingest_job(
        store,
        job_dir,
        job_id=meta.id,
        status=meta.status,
        node_pattern=node_pattern,
        baseline_templates=known_templates,
        progress=progress,
        limits=limits,
        workers=workers,
        scheduler=scheduler,
    )
    return Prepared(meta.id, job_dir, summary)


def prepare_all(
    store: Store,
    job_dir: Path,
    baselines: list[Path],
    *,
    job_id: str | None = None,
    node_pattern: str | None = None,
    progress: Callable[[str], Progress | None] | None = None,
    reingest: bool = False,
    limits: ReadLimits | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
) -> tuple[Prepared, list[Prepared]]:
    """Baselines first (so the failed job's rare-template choice can use them), then the job.

    The failed job's status defaults to ``failed`` when neither ``job.yaml`` nor a flag says.
    Every ``job.yaml`` is validated before anything is written.
    """
    meta = job_meta(job_dir, job_id=job_id)
    base_dirs = expand_baselines(baselines)
    for b in base_dirs:
        job_meta(b)
    done_baselines = [
        prepare(
            store,
            b,
            node_pattern=node_pattern,
            progress=progress(b.name) if progress else None,
            reingest=reingest,
            limits=limits,
            workers=workers,
            scheduler=scheduler,
        )
        for b in base_dirs
    ]
    known = baseline_templates(
        store, [b.job_id for b in done_baselines], fingerprint=meta.fingerprint
    )
    job = prepare(
        store,
        job_dir,
        job_id=meta.id,
        status="failed" if meta.status == "unknown" else meta.status,
        node_pattern=node_pattern,
        progress=progress(job_dir.name) if progress else None,
        reingest=reingest,
        known_templates=known,
        limits=limits,
        workers=workers,
        scheduler=scheduler,
    )
    return job, done_baselines


def baseline_templates(store: Store, job_ids: list[str], *, fingerprint: str) -> set[str] | None:
    """Template ids the baseline pool printed (given jobs + succeeded jobs of the fingerprint),
    so ingest keeps the failed job's lines of every other template; None without a pool."""
    jobs = {j.id: j for j in find_jobs(store, fingerprint=fingerprint, status="succeeded")}
    for job_id in job_ids:
        if job_id not in jobs:
            jobs[job_id] = read_job(store, job_id)
    if not jobs:
        return None
    scopes = [job_scope(jobs[j]) for j in sorted(jobs)]
    return {
        str(b["key"]["t"])
        for b in store.composite(
            store.names.events,
            [{"t": {"terms": {"field": F.TEMPLATE_ID}}}],
            query={"bool": {"should": scopes, "minimum_should_match": 1}},
            page_size=5000,
        )
    }
