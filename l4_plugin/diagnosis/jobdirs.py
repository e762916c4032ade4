"""``l4 diagnose`` on directories: ingest what the cluster does not hold yet, baselines first.

A job directory counts as ingested when its ``l4-jobs`` document says ingest is done and the
cluster holds rollups of the directory's current *generation* (the hash ingest computes from the
files' names, sizes and modification times): an unchanged directory is not read again, a grown
one (a running job's logs) is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from l4_plugin.diagnosis.facts import find_jobs
from l4_plugin.ingest.jobdir import discover, job_meta
from l4_plugin.ingest.pipeline import IngestSummary, Progress, ingest_job
from l4_plugin.ingest.sources import files_generation
from l4_plugin.store import Store
from l4_plugin.store.documents import job_doc_id, source_field


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


def already_ingested(store: Store, job_dir: Path, job_id: str, node_pattern: str | None) -> bool:
    """True when the cluster holds this directory's current generation of the job."""
    doc = store.get(store.names.jobs, job_doc_id(job_id))
    if doc is None or source_field(doc.source, "l4.ingest.state") != "done":
        return False
    generation = files_generation(discover(job_dir, node_pattern))
    query = {
        "bool": {
            "filter": [
                {"term": {"l4.job.id": job_id}},
                {"term": {"l4.generation": generation}},
            ]
        }
    }
    return store.count(store.names.events, query) > 0


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
    workers: int | None = None,
) -> Prepared:
    """Ingest ``job_dir`` unless the cluster already holds it unchanged."""
    meta = job_meta(job_dir, job_id=job_id, status=status)
    if not reingest and already_ingested(store, job_dir, meta.id, node_pattern):
        return Prepared(meta.id, job_dir, None)
    summary = ingest_job(
        store,
        job_dir,
        job_id=meta.id,
        status=meta.status,
        node_pattern=node_pattern,
        baseline_templates=known_templates,
        progress=progress,
        workers=workers,
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
    workers: int | None = None,
) -> tuple[Prepared, list[Prepared]]:
    """Baselines first (so the failed job's rare-template choice can use them), then the job.

    The failed job's status defaults to ``failed`` when neither ``job.yaml`` nor a flag says.
    """
    done_baselines = [
        prepare(
            store,
            b,
            node_pattern=node_pattern,
            progress=progress(b.name) if progress else None,
            reingest=reingest,
            workers=workers,
        )
        for b in expand_baselines(baselines)
    ]
    meta = job_meta(job_dir, job_id=job_id)
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
        workers=workers,
    )
    return job, done_baselines


def baseline_templates(store: Store, job_ids: list[str], *, fingerprint: str) -> set[str] | None:
    """Template ids the baseline pool printed (given jobs + succeeded jobs of the fingerprint),
    so ingest keeps the failed job's lines of every other template; None without a pool."""
    ids = set(job_ids) | {
        j.id for j in find_jobs(store, fingerprint=fingerprint, status="succeeded")
    }
    if not ids:
        return None
    return {
        str(b["key"]["t"])
        for b in store.composite(
            store.names.events,
            [{"t": {"terms": {"field": "l4.template.id"}}}],
            query={"terms": {"l4.job.id": sorted(ids)}},
            page_size=5000,
        )
    }
