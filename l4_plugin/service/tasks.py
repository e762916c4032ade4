"""The service's tasks: discover, diagnose, watch, retention. Each runs once per call.

- **discover** — failed, ingested jobs whose analysis is due (``claims.find_pending``) go into an
  in-process queue (deduplicated);
- **diagnose** — drains the queue: claim (exactly once, ``claims.claim``), renew the lease from a
  heartbeat thread while ``diagnose_job`` runs rules then analyses and writes the annotations,
  then mark the job done; an analysis that raises is recorded on the job (error, attempts) and
  the next job goes on;
- **watch** — matches the fault library against *running* jobs whose logs grew since the last
  match, and writes ``rule_match`` annotations before the job is declared failed;
- **retention** — deletes the rollups and kept lines of jobs ingested more than N days ago;
  annotations and the job document stay.

Watch checkpoint: ``l4.analysis.watch_checkpoint`` holds the newest event time the last match
covered — the job's ``l4.job.end_ts`` (the latest ``last_ts`` of its rollups, written by ingest),
or ``l4.ingest.updated`` for jobs whose logs carry no timestamps. A job whose mark has not moved
since is skipped without a query; one that grew is matched again as a whole (``match_job`` works
on the whole job, and rules with counts need the whole job anyway).

A ``StoreError`` that is the cluster's (unreachable, timing out) propagates to the scheduler,
which backs off; anything a single job raises stays with that job.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections import deque
from dataclasses import replace

from l4_plugin.config import Settings
from l4_plugin.dashboards.links import discover_linker
from l4_plugin.diagnosis import Diagnosis, diagnose_job
from l4_plugin.errors import ConflictError, L4Error, StoreError
from l4_plugin.jobid import job_id_problem
from l4_plugin.rules import Rule, match_job
from l4_plugin.service import claims
from l4_plugin.service.claims import Claim, ClaimPolicy
from l4_plugin.service.health import Metrics
from l4_plugin.service.logs import log
from l4_plugin.store import Store, generations, jobs
from l4_plugin.store.annotations import Annotation, annotated_rules, write_annotations
from l4_plugin.store.jobs import JobRecord

DAY_MS = 86_400_000
_SCAN = 1000  # jobs read per watch / retention run


class TaskContext:
    """What every task shares: the store, the settings (how the service runs: ``service``), the
    claim policy, the rules, counters and the queue."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        policy: ClaimPolicy,
        rules: list[Rule],
        metrics: Metrics,
        logger: logging.Logger,
        stop: threading.Event,
    ) -> None:
        self.store = store
        self.settings = settings
        self.service = settings.service
        self.policy = policy
        self.rules = rules
        self.metrics = metrics
        self.logger = logger
        self.stop = stop
        self._lock = threading.Lock()
        self._queue: deque[tuple[str, str]] = deque()
        self._queued: set[str] = set()
        self.current: Claim | None = None
        # Held from the claim's write until ``current`` is set, so that a shutdown never misses
        # a claim that is already in the cluster but not yet in ``current``.
        self.claiming = threading.Lock()

    def enqueue(self, job_id: str, reason: str) -> bool:
        with self._lock:
            if job_id in self._queued:
                return False
            self._queued.add(job_id)
            self._queue.append((job_id, reason))
            return True

    def next_job(self) -> tuple[str, str] | None:
        with self._lock:
            if not self._queue:
                return None
            job_id, reason = self._queue.popleft()
            self._queued.discard(job_id)
            return job_id, reason

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)


# -- discover / diagnose ---------------------------------------------------------------------
def discover(ctx: TaskContext) -> int:
    """Queue the jobs whose analysis is due; returns how many were new to the queue."""
    found: list[tuple[str, str]] = []
    for job_id, reason in claims.find_pending(ctx.store, ctx.policy, limit=ctx.service.batch):
        problem = job_id_problem(job_id)
        if problem is None:
            found.append((job_id, reason))
            continue
        # Written into l4-jobs by something other than L4: never analysed, said once per run.
        log(
            ctx.logger,
            logging.WARNING,
            "job.invalid_id",
            f"skipped: the job id {problem}",
            task="discover",
            job_id=repr(job_id)[:80],
        )
    added = [(job_id, reason) for job_id, reason in found if ctx.enqueue(job_id, reason)]
    for job_id, reason in added:
        log(
            ctx.logger,
            logging.INFO,
            "job.pending",
            f"analysis due ({reason})",
            task="discover",
            job_id=job_id,
            reason=reason,
        )
    return len(added)


def diagnose(ctx: TaskContext) -> int:
    """Claim and diagnose queued jobs until the queue is empty or the service stops."""
    done = 0
    while not ctx.stop.is_set():
        item = ctx.next_job()
        if item is None:
            break
        if diagnose_one(ctx, item[0]):
            done += 1
    return done


def _claim(ctx: TaskContext, job_id: str) -> Claim | None:
    """Claim ``job_id`` for this service (logged and counted); None when it is not ours to run."""
    with ctx.claiming:
        if ctx.stop.is_set():
            return None
        outcome = claims.claim(ctx.store, job_id, ctx.policy)
        ctx.current = outcome.claim
    if outcome.gave_up:
        ctx.metrics.add("jobs_given_up")
        log(
            ctx.logger,
            logging.ERROR,
            "job.gave_up",
            outcome.gave_up,
            task="diagnose",
            job_id=job_id,
        )
        return None
    held = outcome.claim
    if held is None:
        ctx.metrics.add("claims_lost")
        log(
            ctx.logger,
            logging.DEBUG,
            "job.skipped",
            "not claimed: another service has it, or it is no longer due",
            task="diagnose",
            job_id=job_id,
        )
        return None
    ctx.metrics.add("jobs_claimed")
    if held.previous_owner:
        ctx.metrics.add("leases_taken_over")
        log(
            ctx.logger,
            logging.WARNING,
            "job.lease_taken_over",
            f"took over from {held.previous_owner}, whose lease expired",
            task="diagnose",
            job_id=job_id,
            previous_owner=held.previous_owner,
            attempt=held.attempt,
        )
    log(
        ctx.logger,
        logging.INFO,
        "job.claimed",
        f"claimed (attempt {held.attempt}, {held.reason})",
        task="diagnose",
        job_id=job_id,
        attempt=held.attempt,
        reason=held.reason,
    )
    return held


def diagnose_one(ctx: TaskContext, job_id: str) -> bool:
    """Claim one job and diagnose it; True when this service analysed it (done or failed)."""
    held = _claim(ctx, job_id)
    if held is None:
        return False
    heartbeat = Heartbeat(ctx, held)
    heartbeat.start()
    started = time.monotonic()
    try:
        diagnosis = diagnose_job(
            ctx.store,
            job_id,
            options=ctx.settings.analysis_options(),
            rules=ctx.rules if ctx.service.rules else [],
            discover=discover_linker(ctx.settings),
            warn=lambda msg: log(
                ctx.logger, logging.WARNING, "job.warning", msg, task="diagnose", job_id=job_id
            ),
        )
    except Exception as exc:
        heartbeat.stop()
        if isinstance(exc, StoreError) and not _reachable(ctx.store):
            # The cluster went away mid-analysis: not the job's fault, so the attempt is not
            # counted; the scheduler backs off and the job is claimed again later.
            with contextlib.suppress(StoreError):
                release_current(ctx)
            ctx.current = None
            raise
        _record_failure(ctx, held, exc, time.monotonic() - started)
        return True
    else:
        heartbeat.stop()
        claims.finish(ctx.store, held, ctx.policy, generation=diagnosis.job.generation)
        ctx.metrics.add("jobs_diagnosed")
        _log_diagnosed(ctx, held, diagnosis, time.monotonic() - started)
        return True
    finally:
        ctx.current = None


def _log_diagnosed(ctx: TaskContext, held: Claim, diagnosis: Diagnosis, seconds: float) -> None:
    report = diagnosis.report
    log(
        ctx.logger,
        logging.INFO,
        "job.diagnosed",
        f"diagnosed in {seconds:.1f} s: {len(diagnosis.findings)} "
        f"findings, {len(report.rule_matches)} rule matches",
        task="diagnose",
        job_id=held.job_id,
        attempt=held.attempt,
        seconds=round(seconds, 3),
        findings=len(diagnosis.findings),
        rules=[m.rule for m in report.rule_matches],
        stage=report.stage,
    )


def _reachable(store: Store) -> bool:
    try:
        store.info()
    except StoreError:
        return False
    return True


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, L4Error):
        # A bug, not a bad job: where it happened matters to whoever fixes it.
        frames = traceback.extract_tb(exc.__traceback__)[-3:]
        text += "\n" + "".join(traceback.format_list(frames))
    return text


def _record_failure(ctx: TaskContext, held: Claim, exc: Exception, seconds: float) -> None:
    error = _error_text(exc)
    # A StoreError here means the cluster failed too: it reaches the scheduler (backoff), and
    # the claim's lease expires, so the job is retried.
    last = claims.fail(ctx.store, held, ctx.policy, error)
    ctx.metrics.add("jobs_failed")
    if last:
        ctx.metrics.add("jobs_given_up")
    log(
        ctx.logger,
        logging.ERROR,
        "job.analysis_failed",
        f"analysis failed after {seconds:.1f} s (attempt {held.attempt} of "
        f"{ctx.policy.max_attempts}{', giving up' if last else ', will retry'}): "
        f"{error.splitlines()[0]}",
        task="diagnose",
        job_id=held.job_id,
        attempt=held.attempt,
        error=error,
        final=last,
    )


class Heartbeat:
    """Renews a claim's lease every third of the lease while the analysis runs."""

    def __init__(self, ctx: TaskContext, held: Claim) -> None:
        self.ctx = ctx
        self.held = held
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"l4-lease-{held.job_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        every = max(self.ctx.policy.lease_seconds / 3, 0.2)
        while not self._done.wait(every):
            try:
                kept = claims.renew(self.ctx.store, self.held, self.ctx.policy)
            except StoreError as exc:
                log(
                    self.ctx.logger,
                    logging.WARNING,
                    "job.lease_renewal_failed",
                    f"cannot renew the lease: {exc}",
                    task="diagnose",
                    job_id=self.held.job_id,
                )
                continue
            if kept == "lost":
                log(
                    self.ctx.logger,
                    logging.WARNING,
                    "job.claim_lost",
                    "another service holds the job now (this lease expired before it was "
                    "renewed): both write the same annotation ids",
                    task="diagnose",
                    job_id=self.held.job_id,
                )
            if kept != "renewed":
                return


def release_current(ctx: TaskContext) -> str | None:
    """Give back the claim in progress (shutdown); returns its job id when one was released."""
    if not ctx.claiming.acquire(timeout=30):
        return None  # stuck claiming on a failing cluster: the lease will expire instead
    try:
        held = ctx.current
        released = held is not None and claims.release(ctx.store, held)
    finally:
        ctx.claiming.release()
    if held is not None and released:
        ctx.metrics.add("jobs_released")
        log(
            ctx.logger,
            logging.WARNING,
            "job.released",
            "shutting down mid-analysis: claim released, another service (or the next start) "
            "will analyse it",
            task="diagnose",
            job_id=held.job_id,
            attempt=held.attempt,
        )
        return held.job_id
    return None


# -- watch -----------------------------------------------------------------------------------
def _mark(record: JobRecord) -> int | None:
    for value in (record.summary.end_ts, record.ingest.updated):
        if isinstance(value, int | float):
            return int(value)
    return None


def watch(ctx: TaskContext) -> int:
    """Match the fault library against running jobs that logged more since the last match;
    returns how many jobs were matched."""
    store = ctx.store
    if not ctx.rules or not store.count(store.names.jobs):
        return 0
    matched = 0
    for record in jobs.find_running(store, limit=_SCAN):
        if ctx.stop.is_set():
            break
        mark = _mark(record)
        checkpoint = record.analysis.watch_checkpoint
        if mark is not None and isinstance(checkpoint, int | float) and mark <= checkpoint:
            continue
        if watch_job(ctx, record.id):
            matched += 1
    return matched


def watch_job(ctx: TaskContext, job_id: str) -> bool:
    """Match one running job and write its ``rule_match`` annotations; False when it stopped
    running (or changed) meanwhile — the next round sees the new state."""
    store = ctx.store
    doc = jobs.get_versioned(store, job_id)
    if doc is None:
        return False
    record = JobRecord.from_source(doc.source)
    if record.status != "running":
        return False
    matches = match_job(store, job_id, ctx.rules)
    checked = replace(
        record, analysis=replace(record.analysis, watch_checkpoint=_mark(record) or claims.now_ms())
    )
    try:
        # Only if nothing changed since the read: a job declared failed meanwhile belongs to
        # the diagnose task, whose annotations must not be overwritten by this older match.
        jobs.put_if_unchanged(store, doc, checked, refresh=True)
    except ConflictError:
        return False
    known = annotated_rules(store, job_id)
    rules = [
        Annotation(
            m.to_finding(job_id, rank),
            rule={"title": m.title, "category": m.category, "severity": m.severity},
        )
        for rank, m in enumerate(matches, 1)
    ]
    write_annotations(
        store, job_id, rules, analyzer_version=ctx.policy.analyzer_version, only_kind="rule_match"
    )
    fresh = [m.rule_id for m in matches if m.rule_id not in known]
    if fresh:
        # Only rules new to this job: a long job that keeps matching is not re-announced.
        ctx.metrics.add("watch_matches", len(fresh))
        log(
            ctx.logger,
            logging.WARNING,
            "watch.matched",
            f"running job matches fault rule(s) {', '.join(fresh)}",
            task="watch",
            job_id=job_id,
            rules=fresh,
        )
    return True


# -- retention -------------------------------------------------------------------------------
def retention(ctx: TaskContext) -> int:
    """Delete rollups and kept lines of jobs ingested more than ``retention_days`` ago (not
    while their analysis is due or running); returns the number of jobs purged."""
    days = ctx.service.retention_days
    store = ctx.store
    if days is None or not store.count(store.names.jobs):
        return 0
    cutoff = claims.now_ms() - int(days * DAY_MS)
    purged = 0
    for record in jobs.find_ingested_before(store, cutoff, limit=_SCAN):
        if ctx.stop.is_set():
            break
        if claims.pending_reason(record, ctx.policy, claims.now_ms()):
            continue  # a failed job still waiting for its analysis keeps its data
        deleted = generations.purge(store, record.id)
        jobs.record_purge(store, record.id, deleted=deleted, now=claims.now_ms())
        purged += 1
        ctx.metrics.add("retention_jobs")
        ctx.metrics.add("retention_deleted_docs", deleted)
        log(
            ctx.logger,
            logging.INFO,
            "retention.purged",
            f"deleted {deleted} rollup/line documents (older than {days:g} days)",
            task="retention",
            job_id=record.id,
            deleted=deleted,
        )
    return purged
