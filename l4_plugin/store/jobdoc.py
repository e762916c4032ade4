"""Read-modify-write of a job's ``l4-jobs`` document under optimistic concurrency.

Ingest writes the job document whole; the diagnosis (analysis state) and the service (claims,
leases, checkpoints, statuses) change a few fields of it while others may be doing the same. They
all go through :func:`update_job`: read with ``_seq_no``/``_primary_term``, change, write only if
nothing changed meanwhile, else read again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from l4_plugin.store.base import ConflictError, Store, VersionedDoc
from l4_plugin.store.documents import job_doc_id

_WRITE_TRIES = 8


def update_job(
    store: Store,
    job_id: str,
    change: Callable[[dict[str, Any]], dict[str, Any] | None],
) -> VersionedDoc | None:
    """Read-modify-write of a job's ``l4-jobs`` document under optimistic concurrency.

    ``change`` gets a copy of the current source and returns the new one, or None to leave the
    document alone; on a conflict the document is read again and ``change`` asked again. Returns
    the written document, or None when the job is absent or ``change`` declined.
    """
    for _ in range(_WRITE_TRIES):
        doc = store.get(store.names.jobs, job_doc_id(job_id))
        if doc is None:
            return None
        new = change(dict(doc.source))
        if new is None:
            return None
        try:
            return store.put(
                store.names.jobs,
                doc.id,
                new,
                if_seq_no=doc.seq_no,
                if_primary_term=doc.primary_term,
                refresh=True,
            )
        except ConflictError:
            continue
    raise ConflictError(
        f"write {store.names.jobs}/{job_doc_id(job_id)} (job {job_id}): still conflicting after "
        f"{_WRITE_TRIES} tries"
    )
