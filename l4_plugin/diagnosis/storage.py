"""A diagnosis stored in the cluster and read back: its findings as ``l4-annotations`` documents
(written by ``store/annotations.py``, the one writer), the analysis recorded on the job.

Ids are deterministic (job, kind, key), so re-analysing a job overwrites its annotations; the
job's annotations that the new run did not produce (a node that is no longer suspect) are then
deleted, so the index always holds exactly the latest analysis. The ``summary`` annotation keeps
the whole §6 report and the HTML extras, which is what ``l4 report JOB_ID`` renders. The job's
``l4-jobs`` document records the analysis (state, analyzer version, time).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from l4_plugin.diagnosis.assembly import Diagnosis
from l4_plugin.errors import AnalysisError, ConflictError
from l4_plugin.records import Finding
from l4_plugin.report.extras import ReportExtras
from l4_plugin.report.model import Report
from l4_plugin.rules.engine import RuleMatch
from l4_plugin.store import Store
from l4_plugin.store import fields as F
from l4_plugin.store.annotations import Annotation, read_details, write_annotations
from l4_plugin.store.fields import source_field
from l4_plugin.store.jobs import update_job

Discover = Callable[[str, str | None, float | None], str | None]


def _first_ts(report: Report, finding: Finding) -> float | None:
    if finding.kind != "event":
        return None
    for ev in report.events:
        if ev.template_id == finding.key and ev.first_seen:
            return datetime.fromisoformat(ev.first_seen).timestamp()
    return None


def write_diagnosis(
    store: Store,
    diagnosis: Diagnosis,
    matches: Sequence[RuleMatch],
    *,
    analyzer_version: str,
    discover: Discover | None = None,
) -> int:
    """Write every finding plus the summary; delete the job's stale ones; returns docs written."""
    report = diagnosis.report
    job_id = diagnosis.job.id
    rules = {
        m.rule_id: {"title": m.title, "category": m.category, "severity": m.severity}
        for m in matches
    }
    annotations: list[Annotation] = []
    for f in diagnosis.findings:
        node = f.nodes[0] if f.nodes else None
        annotations.append(
            Annotation(
                f,
                template_text=diagnosis.template_texts.get(f.template_id or ""),
                discover_url=discover(job_id, node, _first_ts(report, f)) if discover else None,
                rule=rules.get(f.rule_id or ""),
            )
        )
    summary = Finding(
        job_id=job_id,
        kind="summary",
        key="summary",
        score=max((e.score for e in report.events), default=0.0),
        rank=0,
        explanation=summary_text(report),
        nodes=tuple(n.node for n in report.nodes[:5] if n.score > 0),
        stage=report.stage,
    )
    annotations.append(
        Annotation(
            summary,
            discover_url=discover(job_id, None, None) if discover else None,
            details={"report": report.to_json(), "extras": diagnosis.extras.to_json()},
        )
    )
    written = write_annotations(store, job_id, annotations, analyzer_version=analyzer_version)
    record_analysis(store, job_id, analyzer_version=analyzer_version)
    return written


def summary_text(report: Report) -> str:
    """One paragraph: what failed where, for the summary annotation and dashboards."""
    parts = [f"job {report.job_id} ({report.status}) stopped in stage {report.stage}"]
    verdict = report.verdict
    if verdict:
        evict = ", ".join(verdict.evict) or "nobody"
        parts.append(
            f"verdict {verdict.category} ({verdict.blame}): evict {evict}, restart "
            f"{verdict.restart}"
        )
    if report.rule_matches:
        m = report.rule_matches[0]
        parts.append(f"fault rule {m.rule}: {m.title} on {', '.join(m.nodes[:5])}")
    suspects = [n.node for n in report.nodes[:3] if n.score > 0]
    if suspects:
        parts.append(f"most suspect nodes: {', '.join(suspects)}")
    if report.events:
        parts.append(f"top event: {report.events[0].template}")
    if report.silent_nodes:
        parts.append(f"silent nodes: {', '.join(report.silent_nodes[:5])}")
    if report.iterations:
        parts.append(f"suspect iteration: {report.iterations[0].iteration}")
    return "; ".join(parts)


def record_analysis(
    store: Store, job_id: str, *, analyzer_version: str, state: str = "done", error: str = ""
) -> None:
    """Record the analysis state on the job's ``l4-jobs`` document (optimistic concurrency).

    A job a service has claimed (``running`` with an owner) is left to that service, which
    records the result and drops the claim in one write (``service.claims.finish``); marking it
    done here first would show a finished job that still names an owner. A job whose document
    keeps changing under us is left as it is for the same reason.
    """

    def change(source: dict[str, Any]) -> dict[str, Any] | None:
        claimed = source_field(source, F.ANALYSIS_CLAIMED_BY)
        if claimed and source_field(source, F.ANALYSIS_STATE) == "running":
            return None
        source[F.ANALYSIS_STATE] = state
        source[F.ANALYSIS_VERSION] = analyzer_version
        source[F.ANALYSIS_UPDATED] = int(time.time() * 1000)
        if error:
            source[F.ANALYSIS_ERROR] = error[:8000]
        else:
            source.pop(F.ANALYSIS_ERROR, None)
        return source

    with contextlib.suppress(ConflictError):
        update_job(store, job_id, change)


def load_summary(store: Store, job_id: str) -> tuple[Report, ReportExtras]:
    """The latest stored report and extras of a job (``l4 report``)."""
    details = read_details(store, job_id, "summary", "summary")
    if details is None:
        raise AnalysisError(
            f"job {job_id!r} has no stored diagnosis in {store.names.annotations} — hint: run "
            f"`l4 analyze {job_id}` first"
        )
    if "report" not in details:
        raise AnalysisError(f"the summary annotation of job {job_id!r} has no report")
    return Report.from_json(details["report"]), ReportExtras.from_json(details.get("extras") or {})
