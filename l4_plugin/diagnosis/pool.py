"""The baseline pool of a diagnosis: the successful jobs a failed job is compared with.

One rule, resolved once per diagnosis and used by ingest and analysis alike:

* every succeeded job of the job's configuration fingerprint that has documents to compare with
  (``store.jobs.comparable_query``);
* plus each job named as a baseline (``--baseline``) of that fingerprint; one of another
  fingerprint is left out with a warning, unless ``force`` (``--force-baseline``);
* never the job itself.

Ingest reads the pool's templates to decide which of the failed job's lines to keep (a template
the pool never printed keeps every line, ``pipeline._keeps_all``); the analysis filters what the
pool also prints (``analysis.crossjob``). Until issue 33 the two resolved it apart: ingest took
every named baseline whatever its configuration, the analysis then left the other
configurations out. The analysis's rule wins: a run of another configuration (another model,
launcher or image) prints templates of its own for reasons that are not the failure, so it is
no evidence of what is normal for this job, and the user is told so where it is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from l4_plugin.analysis.tables import JobDoc
from l4_plugin.diagnosis.queries import find_jobs
from l4_plugin.store import Store

Warn = Callable[[str], None]


def resolve_pool(
    job_id: str,
    fingerprint: str,
    candidates: Sequence[JobDoc],
    named: Sequence[JobDoc],
    *,
    force: bool = False,
    warn: Warn | None = None,
) -> list[JobDoc]:
    """The pool of job ``job_id`` (of ``fingerprint``) by the rule of the module docstring:
    ``candidates`` are the succeeded jobs of its fingerprint, ``named`` the jobs named as
    baselines. Sorted by job id."""
    pool = {j.id: j for j in candidates}
    for other in named:
        if other.fingerprint != fingerprint and not force:
            if warn:
                warn(
                    f"baseline {other.id} has configuration fingerprint {other.fingerprint}, "
                    f"not {fingerprint} like {job_id}: left out (use --force-baseline)"
                )
            continue
        pool[other.id] = other
    pool.pop(job_id, None)
    return [pool[k] for k in sorted(pool)]


def find_pool(
    store: Store,
    job_id: str,
    fingerprint: str,
    named: Sequence[JobDoc] = (),
    *,
    force: bool = False,
    warn: Warn | None = None,
) -> list[JobDoc]:
    """The pool of job ``job_id``: one search of ``l4-jobs`` for the succeeded jobs of
    ``fingerprint`` (the job and the ``named`` baselines, read already, are not read again),
    then :func:`resolve_pool`."""
    known = {job_id, *(j.id for j in named)}
    candidates = find_jobs(store, fingerprint=fingerprint, status="succeeded", exclude=known)
    return resolve_pool(job_id, fingerprint, candidates, named, force=force, warn=warn)
