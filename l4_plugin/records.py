"""Frozen records that the stages of L4 hand to each other.

Ingest produces ``ParsedLine`` (for ``l4 parse``), ``JobInfo``, ``EventRollup`` and ``LineRecord``;
the analyses and the rule engine produce ``Finding`` objects that end up in ``Diagnosis``. The
store turns them into index documents (``l4_plugin.store.documents``); nothing else knows the
document layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

JobStatus = Literal["succeeded", "failed", "running", "unknown"]
AnnotationKind = Literal["event", "node", "iteration", "stage", "rule_match", "summary", "verdict"]
ReviewState = Literal["open", "confirmed", "rejected"]

#: The paper's fault taxonomy (§3), shared by the rules, the simulator and the reports.
FAULT_CATEGORIES = (
    "hardware/network",
    "hardware/accelerator",
    "hardware/node",
    "hardware/storage",
    "user/config",
    "user/code",
    "user/software-incompatibility",
    "user/misoperation",
    "framework",
    "platform",
)


@dataclass(frozen=True, slots=True)
class ParsedLine:
    """One input line after header parsing, masking and template assignment (``l4 parse``)."""

    line: int
    template_id: str
    template: str
    level: str | None = None
    timestamp: float | None = None
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class Template:
    """A log template: stable id (hash of the final masked text) and its text."""

    id: str
    text: str


@dataclass(frozen=True, slots=True)
class JobInfo:
    """What L4 knows about one job: identity, outcome, configuration and size."""

    id: str
    status: JobStatus
    fingerprint: str
    config: dict[str, str] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()
    ranks: int = 0
    lines: int = 0
    start_ts: float | None = None
    end_ts: float | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class EventRollup:
    """Occurrences of one template on one node in one iteration or stage bucket."""

    job_id: str
    node: str
    template_id: str
    template: str
    count: int
    first_ts: float | None
    last_ts: float | None
    first_pos: int
    last_pos: int
    ranks: tuple[int, ...]
    level: str | None
    stage: str
    iteration: int | None
    message: str


@dataclass(frozen=True, slots=True)
class LineRecord:
    """One raw line kept in ``l4-lines`` (rare, error-level or baseline-absent templates)."""

    job_id: str
    node: str
    path: str
    line: int
    offset: int
    timestamp: float | None
    level: str | None
    rank: int | None
    template_id: str
    stage: str
    iteration: int | None
    message: str
    flags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Finding:
    """One conclusion of an analysis or a rule, stored as an ``l4-annotations`` document."""

    job_id: str
    kind: AnnotationKind
    key: str
    score: float
    rank: int
    explanation: str
    template_id: str | None = None
    nodes: tuple[str, ...] = ()
    iteration: int | None = None
    stage: str | None = None
    rule_id: str | None = None
    reasons: tuple[str, ...] = ()
    review: ReviewState = "open"
