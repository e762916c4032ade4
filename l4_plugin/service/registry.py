"""Registering jobs and changing their status: how a platform tells L4 about its jobs.

``l4 job register ID --status running`` when a job starts, ``l4 job status ID failed`` when it
dies: the service watches running jobs with the fault library and diagnoses failed ones as soon
as their logs are ingested (``l4 ingest``). Both only touch ``l4.job.*`` fields, under optimistic
concurrency, so they never undo a claim or an analysis the service recorded meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from l4_plugin.errors import ConfigError, ConflictError
from l4_plugin.jobid import check_job_id
from l4_plugin.service.claims import now_ms
from l4_plugin.store import Store, jobs
from l4_plugin.store.jobs import JobRecord

JOB_STATUSES = ("running", "failed", "succeeded", "unknown")


@dataclass(frozen=True, slots=True)
class JobState:
    """What ``l4 job status`` shows about a job: a view of its :class:`JobRecord`."""

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
    def of(cls, record: JobRecord) -> JobState:
        """The state shown of a job document."""
        claim = record.analysis
        attempts = claim.attempts
        return cls(
            job_id=record.id,
            status=record.status_or_unknown,
            fingerprint=record.fingerprint,
            ingest=record.ingest.state,
            analysis=claim.state,
            attempts=int(attempts) if isinstance(attempts, int | float) else 0,
            claimed_by=claim.claimed_by,
            error=claim.error,
            version=claim.version,
            generation=record.ingest.generation or None,
            writing=record.ingest.writing,
            progress=record.ingest.progress,
        )


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
    record = JobRecord(
        id=job_id,
        status=status,
        fingerprint=fingerprint or None,
        origin="registered",
        registered=now,
        timestamp=now,
    )
    try:
        written = jobs.create_job(store, record, refresh=True)
        return JobState.of(JobRecord.from_source(written.source)), True
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

    def change(record: JobRecord) -> JobRecord:
        return replace(record, status=status, fingerprint=fingerprint or record.fingerprint)

    written = jobs.update_record(store, job_id, change)
    if written is None:
        raise _unknown(store, job_id)
    return JobState.of(written)


def job_state(store: Store, job_id: str) -> JobState:
    """The registered state of one job; ``ConfigError`` naming the job when it is absent."""
    check_job_id(job_id, "job id")
    record = jobs.get_job(store, job_id)
    if record is None:
        raise _unknown(store, job_id)
    return JobState.of(record)


def _unknown(store: Store, job_id: str) -> ConfigError:
    return ConfigError(
        f"job {job_id!r} is not registered in {store.names.jobs} — hint: "
        f"`l4 job register {job_id} --status …` or `l4 ingest DIR --job-id {job_id}`"
    )
