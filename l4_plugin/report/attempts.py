"""The report's ``attempts`` section: a restarted job's attempts, each diagnosed on its own.

Records of :class:`~l4_plugin.report.model.Report` like the others of ``report/model.py``: frozen,
``to_json`` (key order is part of the contract) and ``from_json`` (a missing key reads as empty).
Written only for a job with two attempts or more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]


def _strs(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    return tuple(str(v) for v in raw.get(key) or ())


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class ReportAttempt:
    """One attempt's own diagnosis, in brief: where it stopped, whom and what it blames."""

    attempt: int
    stage: str | None
    category: str
    culprits: tuple[str, ...]
    nodes: tuple[str, ...]
    first_seen: str | None
    last_seen: str | None

    def to_json(self) -> Json:
        """An entry of ``attempts.attempts``."""
        return {
            "attempt": self.attempt,
            "stage": self.stage,
            "category": self.category,
            "culprits": list(self.culprits),
            "nodes": list(self.nodes),
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportAttempt:
        """The inverse of :meth:`to_json`."""
        return cls(
            int(raw.get("attempt", 0)),
            _opt_str(raw.get("stage")),
            str(raw.get("category", "unknown")),
            _strs(raw, "culprits"),
            _strs(raw, "nodes"),
            _opt_str(raw.get("first_seen")),
            _opt_str(raw.get("last_seen")),
        )


@dataclass(frozen=True, slots=True)
class ReportAttempts:
    """The attempts side by side: the one the report leads with and why, the nodes every
    attempt names (``bound``) and what that says (``note``)."""

    lead: int
    why: str
    bound: tuple[str, ...]
    note: str
    attempts: tuple[ReportAttempt, ...]

    def to_json(self) -> Json:
        """The ``attempts`` object."""
        return {
            "lead": self.lead,
            "why": self.why,
            "bound": list(self.bound),
            "note": self.note,
            "attempts": [a.to_json() for a in self.attempts],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportAttempts:
        """The inverse of :meth:`to_json`."""
        return cls(
            int(raw.get("lead", 0)),
            str(raw.get("why", "")),
            _strs(raw, "bound"),
            str(raw.get("note", "")),
            tuple(ReportAttempt.from_json(a) for a in raw.get("attempts") or ()),
        )
