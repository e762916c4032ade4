"""Registering jobs and changing their status: how a platform tells L4 about its jobs.

``l4 job register ID --status running`` when a job starts, ``l4 job status ID failed`` when it
dies: the service watches running jobs with the fault library and diagnoses failed ones as soon
as their logs are ingested (``l4 ingest``). Both only touch ``l4.job.*`` fields, under optimistic
concurrency, so they never undo a claim or an analysis the service recorded meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from l4_plugin.errors import ConfigError
from l4_plugin.jobid import check_job_id
from l4_plugin.service.claims import now_ms, update_job
from l4_plugin.store import ConflictError, Store, generations
from l4_plugin.store import fields as F
from l4_plugin.store.documents import job_doc_id, source_field

JOB_STATUSES = ("running", "failed", "succeeded", "unknown")


@dataclass(frozen=True, slots=True)
class JobState:
    """What ``l4 job status`` shows about a job."""

    job_id: str
    status: str
    fingerprint: str | None
    ingest: str | None
    analysis: str | None
    attempts: int
    claimed_by: str | None
    error: str | None
    version: str | None
    generation: str | None = None  # the last complete ingest generation
    writing: dict[str, Any] | None = None  # the ingest generation begun and not completed
    #: ``l4.ingest.progress`` while an ingest runs (and its last figures after).
    progress: dict[str, Any] | None = None

    @classmethod
    def from_source(cls, source: dict[str, Any]) -> JobState:
        attempts = source_field(source, F.ANALYSIS_ATTEMPTS)
        return cls(
            job_id=str(source_field(source, F.JOB_ID)),
            status=str(source_field(source, F.JOB_STATUS) or "unknown"),
            fingerprint=source_field(source, F.JOB_FINGERPRINT),
            ingest=source_field(source, F.INGEST_STATE),
            analysis=source_field(source, F.ANALYSIS_STATE),
            attempts=int(attempts) if isinstance(attempts, int | float) else 0,
            claimed_by=source_field(source, F.ANALYSIS_CLAIMED_BY),
            error=source_field(source, F.ANALYSIS_ERROR),
            version=source_field(source, F.ANALYSIS_VERSION),
            generation=generations.complete_generation(source),
            writing=generations.writing(source),
            progress=_mapping(source_field(source, F.INGEST_PROGRESS)),
        )


def _mapping(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _check_status(status: str) -> None:
    if status not in JOB_STATUSES:
        raise ConfigError(
            f"invalid job status {status!r} — expected one of {', '.join(JOB_STATUSES)}"
        )


def register_job(
    store: Store, job_id: str, status: str, *, fingerprint: str | None = None
) -> tuple[JobState, bool]:
    """Create the job's ``l4-jobs`` document, or update the status (and fingerprint) of an
    existing one; returns its state and whether it was created."""
    _check_status(status)
    job_id = check_job_id(job_id, "l4 job register")
    now = now_ms()
    doc: dict[str, Any] = {
        "@timestamp": now,
        F.JOB_ID: job_id,
        F.JOB_STATUS: status,
        F.JOB_SOURCE: "registered",
        F.JOB_REGISTERED: now,
    }
    if fingerprint:
        doc[F.JOB_FINGERPRINT] = fingerprint
    try:
        written = store.put(store.names.jobs, job_doc_id(job_id), doc, create=True, refresh=True)
        return JobState.from_source(written.source), True
    except ConflictError:
        pass  # already registered (or ingested): update it below
    return set_status(store, job_id, status, fingerprint=fingerprint), False


def set_status(
    store: Store, job_id: str, status: str, *, fingerprint: str | None = None
) -> JobState:
    """Change the status of a registered job (e.g. running → failed, which makes the service
    diagnose it); ``ConfigError`` naming the job when it is not registered."""
    _check_status(status)
    check_job_id(job_id, "job id")

    def change(source: dict[str, Any]) -> dict[str, Any]:
        source[F.JOB_STATUS] = status
        if fingerprint:
            source[F.JOB_FINGERPRINT] = fingerprint
        return source

    written = update_job(store, job_id, change)
    if written is None:
        raise _unknown(store, job_id)
    return JobState.from_source(written.source)


def job_state(store: Store, job_id: str) -> JobState:
    """The registered state of one job; ``ConfigError`` naming the job when it is absent."""
    check_job_id(job_id, "job id")
    doc = store.get(store.names.jobs, job_doc_id(job_id))
    if doc is None:
        raise _unknown(store, job_id)
    return JobState.from_source(doc.source)


def _unknown(store: Store, job_id: str) -> ConfigError:
    return ConfigError(
        f"job {job_id!r} is not registered in {store.names.jobs} — hint: "
        f"`l4 job register {job_id} --status …` or `l4 ingest DIR --job-id {job_id}`"
    )
