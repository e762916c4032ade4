"""Claiming a job's analysis exactly once, through its ``l4-jobs`` document.

The analysis state of a job lives on its ``l4-jobs`` document (``l4.analysis.*``), so every
service process against one cluster sees the same truth and a restarted one resumes:

=============  ==========================================================================
state          meaning
=============  ==========================================================================
(missing)      never analysed: due as soon as the job is ``failed`` and ingested
``pending``    a service released its claim on shutdown: due again
``running``    claimed by ``claimed_by`` until ``lease_until`` (epoch ms); the claimer renews the
               lease while it works; once it expires another service may take the job over
``done``       analysed by ``version``; due again only when a newer analyzer runs
``failed``     the last analysis raised (``error``); retried while ``attempts`` < the maximum
=============  ==========================================================================

A claim is one conditional write (``if_seq_no`` / ``if_primary_term``) of the document as it was
read: of two services that read the same version, exactly one write succeeds, the other gets a
``ConflictError`` and re-reads a job that is now ``running`` under a live lease. ``attempts``
counts the claims for the current analyzer version, including those whose claimer died, so a job
that kills its analyser every time is given up after the maximum instead of looping forever.
Times are the service's clock (epoch ms): services that share a cluster need synchronised clocks
(NTP), to within a small fraction of the lease.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import Any

from l4_plugin.store import Store, jobs
from l4_plugin.store import fields as F
from l4_plugin.store.jobs import AnalysisClaim, JobRecord

STATE = F.ANALYSIS_STATE
OWNER = F.ANALYSIS_CLAIMED_BY
LEASE = F.ANALYSIS_LEASE_UNTIL
ATTEMPTS = F.ANALYSIS_ATTEMPTS
ERROR = F.ANALYSIS_ERROR
UPDATED = F.ANALYSIS_UPDATED
VERSION = F.ANALYSIS_VERSION
CHECKPOINT = F.ANALYSIS_WATCH_CHECKPOINT

_ERROR_CHARS = 8000


@dataclass(frozen=True, slots=True)
class ClaimPolicy:
    """Who claims, for how long, how often a failing job is retried, and by which analyzer."""

    owner: str
    lease_seconds: float
    max_attempts: int
    analyzer_version: str


@dataclass(frozen=True, slots=True)
class Claim:
    """A job this service holds: its id, which attempt this is, and whose lease it took over."""

    job_id: str
    owner: str
    attempt: int
    reason: str
    previous_owner: str | None = None


def now_ms() -> int:
    """The current time in epoch milliseconds (the unit of every ``l4.analysis`` date)."""
    return int(time.time() * 1000)


def version_older(have: object, current: str) -> bool:
    """True when analyzer version ``have`` is older than ``current`` (missing counts as older).

    Versions compare by their numbers (``l4-0.10.0`` > ``l4-0.9.2``), so a service of an older
    release never redoes the work of a newer one that shares the cluster.
    """
    if not isinstance(have, str) or not have:
        return True
    mine, theirs = _numbers(current), _numbers(have)
    if mine == theirs:
        return False
    return theirs < mine


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def pending_reason(record: JobRecord, policy: ClaimPolicy, now: int) -> str | None:
    """Why the job's analysis is due (``new``, ``released``, ``retry``, ``outdated``,
    ``lease-expired``), or None when it is not (not failed, not ingested, done, or claimed)."""
    if record.status != "failed":
        return None
    if not (record.ingest.state == "done" or record.ingest.generation):
        return None  # no complete ingest generation (``generations.complete_generation``)
    state = record.analysis.state
    if state is None:
        return "new"
    if state == "pending":
        return "released"
    if state == "running":
        return "lease-expired" if _int(record.analysis.lease_until) < now else None
    if state in ("done", "failed") and version_older(
        record.analysis.version, policy.analyzer_version
    ):
        return "outdated"
    if state == "failed" and _int(record.analysis.attempts) < policy.max_attempts:
        return "retry"
    return None


def find_pending(store: Store, policy: ClaimPolicy, *, limit: int) -> list[tuple[str, str]]:
    """Up to ``limit`` jobs whose analysis is due, oldest registration first: (job id, reason)."""
    now = now_ms()
    due = jobs.find_due(
        store,
        max_attempts=policy.max_attempts,
        analyzer_version=policy.analyzer_version,
        now=now,
        limit=limit,
    )
    found: list[tuple[str, str]] = []
    for record in due:
        reason = pending_reason(record, policy, now)
        if reason is not None:
            found.append((record.id, reason))
    return found


@dataclass
class ClaimOutcome:
    """What ``claim`` did: the claim, or why there is none."""

    claim: Claim | None = None
    gave_up: str | None = None  # the job was marked failed: its attempts ran out


def claim(store: Store, job_id: str, policy: ClaimPolicy) -> ClaimOutcome:
    """Claim the analysis of ``job_id`` if it is still due; see the module docstring."""
    outcome = ClaimOutcome()

    def change(record: JobRecord) -> JobRecord | None:
        outcome.claim = outcome.gave_up = None
        now = now_ms()
        reason = pending_reason(record, policy, now)
        if reason is None:
            return None
        held = record.analysis
        previous = held.claimed_by
        attempts = 0 if reason in ("new", "outdated") else _int(held.attempts)
        if reason == "lease-expired" and attempts >= policy.max_attempts:
            # Each of those attempts died with its service: stop feeding it new services.
            outcome.gave_up = (
                f"gave up after {attempts} attempts: the analysis never finished (the service "
                f"that claimed it last, {previous}, stopped renewing its lease)"
            )
            gave_up = replace(_unclaimed(held), state="failed", error=outcome.gave_up, updated=now)
            return replace(record, analysis=gave_up)
        claimed = replace(
            held,
            state="running",
            claimed_by=policy.owner,
            lease_until=now + int(policy.lease_seconds * 1000),
            attempts=attempts + 1,
            updated=now,
        )
        outcome.claim = Claim(
            job_id,
            policy.owner,
            attempts + 1,
            reason,
            str(previous) if reason == "lease-expired" and previous else None,
        )
        return replace(record, analysis=claimed)

    jobs.update_record(store, job_id, change)
    return outcome


def _holds(record: JobRecord, held: Claim) -> bool:
    return record.analysis.state == "running" and record.analysis.claimed_by == held.owner


def _unclaimed(analysis: AnalysisClaim) -> AnalysisClaim:
    return replace(analysis, claimed_by=None, lease_until=None)


def renew(store: Store, held: Claim, policy: ClaimPolicy) -> str:
    """Extend the lease of a claim still held: ``renewed``; ``lost`` when another service holds
    the job now; ``ended`` when it is no longer running (the analysis recorded its result)."""
    result = "ended"

    def change(record: JobRecord) -> JobRecord | None:
        nonlocal result
        if record.analysis.state != "running":
            result = "ended"
            return None
        if record.analysis.claimed_by != held.owner:
            result = "lost"
            return None
        result = "renewed"
        lease = now_ms() + int(policy.lease_seconds * 1000)
        return replace(record, analysis=replace(record.analysis, lease_until=lease))

    jobs.update_record(store, held.job_id, change)
    return result


def finish(
    store: Store, held: Claim, policy: ClaimPolicy, *, generation: str | None = None
) -> None:
    """Mark the job analysed by this analyzer version and drop the claim.

    ``generation`` is the ingest generation the analysis read: when another one completed
    meanwhile (a re-ingest), the job is left due again instead (``new``).
    """

    def change(record: JobRecord) -> JobRecord:
        done = replace(_unclaimed(record.analysis), error=None)
        if generation is not None and (record.ingest.generation or None) != generation:
            done = replace(done, state=None, version=None, attempts=None)
        else:
            done = replace(done, state="done", version=policy.analyzer_version, updated=now_ms())
        return replace(record, analysis=done)

    jobs.update_record(store, held.job_id, change)


def fail(store: Store, held: Claim, policy: ClaimPolicy, error: str) -> bool:
    """Record a failed analysis (``error``) and drop the claim; True when no retry is left."""

    def change(record: JobRecord) -> JobRecord:
        failed = replace(
            _unclaimed(record.analysis),
            state="failed",
            version=policy.analyzer_version,
            error=error[:_ERROR_CHARS],
            attempts=held.attempt,
            updated=now_ms(),
        )
        return replace(record, analysis=failed)

    jobs.update_record(store, held.job_id, change)
    return held.attempt >= policy.max_attempts


def release(store: Store, held: Claim) -> bool:
    """Give the job back (shutdown): ``pending``, without counting this attempt; False when
    the claim was no longer ours."""
    released = False

    def change(record: JobRecord) -> JobRecord | None:
        nonlocal released
        released = _holds(record, held)
        if not released:
            return None
        back = replace(
            _unclaimed(record.analysis),
            state="pending",
            attempts=held.attempt - 1,
            updated=now_ms(),
        )
        return replace(record, analysis=back)

    jobs.update_record(store, held.job_id, change)
    return released
