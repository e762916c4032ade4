"""The report's ``hang`` section: where the ranks stood when the job hung, from their dumps.

Records of :class:`~l4_plugin.report.model.Report` like the others of ``report/model.py``: frozen,
numbers as the JSON holds them, ``to_json`` (key order is part of the contract) and ``from_json``
(a missing key reads as empty). ``diagnosis.assembly`` builds them from ``analysis.hang``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]


def _ints(raw: Mapping[str, Any], key: str) -> tuple[int, ...]:
    return tuple(int(v) for v in raw.get(key) or () if isinstance(v, int))


def _strs(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    return tuple(str(v) for v in raw.get(key) or ())


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pairs(raw: Mapping[str, Any], key: str) -> tuple[tuple[int, str], ...]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping):
        return ()
    return tuple((int(k), str(v)) for k, v in value.items() if str(k).lstrip("-").isdigit())


@dataclass(frozen=True, slots=True)
class ReportRank:
    """A rank's last collective in a process group: sequence number, op and state."""

    rank: int
    node: str | None
    seq: int | None
    op: str
    state: str

    def to_json(self) -> Json:
        """An entry of ``ranks``."""
        return {
            "rank": self.rank,
            "node": self.node,
            "seq": self.seq,
            "op": self.op,
            "state": self.state,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportRank:
        """The inverse of :meth:`to_json`."""
        node = raw.get("node")
        return cls(
            int(raw.get("rank", 0)),
            str(node) if node is not None else None,
            _opt_int(raw.get("seq")),
            str(raw.get("op", "")),
            str(raw.get("state", "")),
        )


@dataclass(frozen=True, slots=True)
class ReportCollective:
    """The Flight Recorder finding of one process group in one attempt: the first collective at
    which the ranks part (``seq``, ``op``), who is where, and the culprits it names."""

    attempt: int | None
    process_group: str
    kind: str
    seq: int | None
    op: str
    summary: str
    ranks_in_op: tuple[int, ...]
    ranks_in_other_op: tuple[tuple[int, str], ...]
    ranks_other_shape: tuple[tuple[int, str], ...]
    ranks_behind: tuple[int, ...]
    ranks_without_dump: tuple[int, ...]
    culprits: tuple[int, ...]
    culprit_nodes: tuple[str, ...]
    ranks: tuple[ReportRank, ...]

    def to_json(self) -> Json:
        """An entry of ``hang.collectives``."""
        return {
            "attempt": self.attempt,
            "process_group": self.process_group,
            "kind": self.kind,
            "seq": self.seq,
            "op": self.op,
            "summary": self.summary,
            "ranks_in_op": list(self.ranks_in_op),
            "ranks_in_other_op": {str(r): op for r, op in self.ranks_in_other_op},
            "ranks_other_shape": {str(r): s for r, s in self.ranks_other_shape},
            "ranks_behind": list(self.ranks_behind),
            "ranks_without_dump": list(self.ranks_without_dump),
            "culprits": list(self.culprits),
            "culprit_nodes": list(self.culprit_nodes),
            "ranks": [r.to_json() for r in self.ranks],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportCollective:
        """The inverse of :meth:`to_json`."""
        return cls(
            attempt=_opt_int(raw.get("attempt")),
            process_group=str(raw.get("process_group", "")),
            kind=str(raw.get("kind", "")),
            seq=_opt_int(raw.get("seq")),
            op=str(raw.get("op", "")),
            summary=str(raw.get("summary", "")),
            ranks_in_op=_ints(raw, "ranks_in_op"),
            ranks_in_other_op=_pairs(raw, "ranks_in_other_op"),
            ranks_other_shape=_pairs(raw, "ranks_other_shape"),
            ranks_behind=_ints(raw, "ranks_behind"),
            ranks_without_dump=_ints(raw, "ranks_without_dump"),
            culprits=_ints(raw, "culprits"),
            culprit_nodes=_strs(raw, "culprit_nodes"),
            ranks=tuple(ReportRank.from_json(r) for r in raw.get("ranks") or ()),
        )


@dataclass(frozen=True, slots=True)
class ReportStackGroup:
    """Ranks whose stacks stood at the same frame."""

    frame: str
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]

    def to_json(self) -> Json:
        """An entry of ``groups`` (or the ``odd`` group)."""
        return {"frame": self.frame, "ranks": list(self.ranks), "nodes": list(self.nodes)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportStackGroup:
        """The inverse of :meth:`to_json`."""
        return cls(str(raw.get("frame", "")), _ints(raw, "ranks"), _strs(raw, "nodes"))


@dataclass(frozen=True, slots=True)
class ReportStacks:
    """One attempt's stacks grouped, and the group that stands apart (``odd``)."""

    attempt: int | None
    groups: tuple[ReportStackGroup, ...]
    odd: ReportStackGroup | None
    frames: tuple[str, ...]

    def to_json(self) -> Json:
        """An entry of ``hang.stacks``."""
        return {
            "attempt": self.attempt,
            "groups": [g.to_json() for g in self.groups],
            "odd": None if self.odd is None else self.odd.to_json(),
            "frames": list(self.frames),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportStacks:
        """The inverse of :meth:`to_json`."""
        odd = raw.get("odd")
        return cls(
            _opt_int(raw.get("attempt")),
            tuple(ReportStackGroup.from_json(g) for g in raw.get("groups") or ()),
            ReportStackGroup.from_json(odd) if isinstance(odd, Mapping) else None,
            _strs(raw, "frames"),
        )


@dataclass(frozen=True, slots=True)
class ReportHang:
    """What the ranks' dumps say (``hang``): the collectives and stacks compared, the nodes
    they name, a category they suggest and why, and the dumps that could not be read."""

    collectives: tuple[ReportCollective, ...]
    stacks: tuple[ReportStacks, ...]
    nodes: tuple[str, ...]
    category: str | None
    why: str
    problems: tuple[str, ...]

    def to_json(self) -> Json:
        """The ``hang`` object."""
        return {
            "collectives": [c.to_json() for c in self.collectives],
            "stacks": [s.to_json() for s in self.stacks],
            "nodes": list(self.nodes),
            "category": self.category,
            "why": self.why,
            "problems": list(self.problems),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportHang:
        """The inverse of :meth:`to_json`."""
        category = raw.get("category")
        return cls(
            tuple(ReportCollective.from_json(c) for c in raw.get("collectives") or ()),
            tuple(ReportStacks.from_json(s) for s in raw.get("stacks") or ()),
            _strs(raw, "nodes"),
            str(category) if category is not None else None,
            str(raw.get("why", "")),
            _strs(raw, "problems"),
        )
