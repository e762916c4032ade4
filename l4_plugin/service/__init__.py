"""``l4 serve``: the scheduled diagnosis service and job registration.

ARCHITECTURE.md, *The path of one diagnosis*, shows where it sits.

``claims`` (exactly-once claims with leases on ``l4-jobs``), ``registry`` (``l4 job``),
``tasks`` (discover, diagnose, watch, retention), ``scheduler`` (APScheduler wiring, backoff,
shutdown), ``health`` (counters and the HTTP endpoint), ``logs`` (plain or JSON lines).
"""

from __future__ import annotations

from l4_plugin.service.logs import setup_logging
from l4_plugin.service.registry import JOB_STATUSES, JobState, job_state, register_job, set_status
from l4_plugin.service.scheduler import Service

__all__ = [
    "JOB_STATUSES",
    "JobState",
    "Service",
    "job_state",
    "register_job",
    "set_status",
    "setup_logging",
]
