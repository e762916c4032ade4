"""What a job's ranks left beside their logs: Flight Recorder traces and stack dumps.

Ingest reads them (``ingest/dumps.py``) into these frozen records and keeps them on the job's
``l4-jobs`` document (``l4.job.dumps``, stored, not indexed); the diagnosis reads them back
(``diagnosis/queries.py``) and compares the ranks (``analysis/hang.py``). Below both ingest and
the analysis, so that neither imports the other. ``to_json`` / ``from_json`` are the stored
form; ``from_json`` takes what a document holds and never fails on a missing or mistyped key
(a value it cannot read is left out).

A rank's *attempt* is the restart of the job it belongs to (torchrun's ``attempt_<k>``), None
when nothing says (a job that never restarted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
#: Collectives kept per rank and process group: the end of its ring buffer, where ranks part.
KEPT_COLLECTIVES = 12
#: Frames kept of a stack's thread, innermost first.
KEPT_FRAMES = 24


def _int(value: Any) -> int | None:
    """An integer as dumps write them (a number, or its text in a JSON dump); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        return ()
    out = [_int(v) for v in value]
    return tuple(v for v in out if v is not None)


@dataclass(frozen=True, slots=True)
class Collective:
    """One entry of a rank's Flight Recorder: a collective (or point-to-point op) it enqueued.

    ``state`` is ``scheduled``, ``started`` or ``completed`` as the recorder saw it (gloo never
    times its work: every entry is ``scheduled``); ``shape`` is the input and output sizes and
    data types as one text, what ranks must agree on; times are ns since the epoch (None: not
    recorded)."""

    seq: int
    op: str
    state: str
    shape: str
    p2p: bool = False
    created_ns: int | None = None
    started_ns: int | None = None
    completed_ns: int | None = None

    def to_json(self) -> list[Any]:
        """The stored form: a short list."""
        return [
            self.seq,
            self.op,
            self.state,
            self.shape,
            self.p2p,
            self.created_ns,
            self.started_ns,
            self.completed_ns,
        ]

    @classmethod
    def from_json(cls, raw: Any) -> Collective | None:
        """The inverse of :meth:`to_json` (None for a value that is none)."""
        if not isinstance(raw, list | tuple) or len(raw) < 4 or _int(raw[0]) is None:
            return None
        times = [_int(v) for v in (list(raw[5:8]) + [None] * 3)[:3]]
        return cls(int(raw[0]), _str(raw[1]), _str(raw[2]), _str(raw[3]), raw[4] is True, *times)


@dataclass(frozen=True, slots=True)
class GroupTrace:
    """A rank's view of one process group: its members, how far its collectives got
    (``pg_status``: last enqueued, started, completed sequence numbers) and its last entries."""

    pg: str
    name: str
    ranks: tuple[int, ...]
    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None
    entries: tuple[Collective, ...]

    def to_json(self) -> Json:
        """The stored form."""
        return {
            "pg": self.pg,
            "name": self.name,
            "ranks": list(self.ranks),
            "last": [self.last_enqueued, self.last_started, self.last_completed],
            "entries": [e.to_json() for e in self.entries],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> GroupTrace:
        """The inverse of :meth:`to_json`."""
        last = raw.get("last")
        last = list(last) if isinstance(last, list | tuple) else []
        enq, started, done = [_int(v) for v in (last + [None] * 3)[:3]]
        entries = [Collective.from_json(e) for e in raw.get("entries") or ()]
        return cls(
            _str(raw.get("pg")),
            _str(raw.get("name")),
            _ints(raw.get("ranks")),
            enq,
            started,
            done,
            tuple(e for e in entries if e is not None),
        )


@dataclass(frozen=True, slots=True)
class RankTrace:
    """One rank's Flight Recorder dump: where it lies in the job, and its process groups."""

    rank: int
    node: str | None
    attempt: int | None
    file: str
    version: str
    groups: tuple[GroupTrace, ...]

    def to_json(self) -> Json:
        """The stored form."""
        return {
            "rank": self.rank,
            "node": self.node,
            "attempt": self.attempt,
            "file": self.file,
            "version": self.version,
            "groups": [g.to_json() for g in self.groups],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RankTrace | None:
        """The inverse of :meth:`to_json` (None without a rank)."""
        rank = _int(raw.get("rank"))
        if rank is None:
            return None
        groups = raw.get("groups") or ()
        return cls(
            rank,
            raw.get("node") if isinstance(raw.get("node"), str) else None,
            _int(raw.get("attempt")),
            _str(raw.get("file")),
            _str(raw.get("version")),
            tuple(GroupTrace.from_json(g) for g in groups if isinstance(g, Mapping)),
        )


@dataclass(frozen=True, slots=True)
class RankStack:
    """One process's stack as ``py-spy dump`` printed it: the thread that runs the training
    (Python's main thread), its frames innermost first as ``name (file:line)``."""

    rank: int | None
    node: str | None
    attempt: int | None
    file: str
    pid: int | None
    thread: str
    frames: tuple[str, ...]

    def to_json(self) -> Json:
        """The stored form."""
        return {
            "rank": self.rank,
            "node": self.node,
            "attempt": self.attempt,
            "file": self.file,
            "pid": self.pid,
            "thread": self.thread,
            "frames": list(self.frames),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RankStack:
        """The inverse of :meth:`to_json`."""
        frames = raw.get("frames") or ()
        return cls(
            _int(raw.get("rank")),
            raw.get("node") if isinstance(raw.get("node"), str) else None,
            _int(raw.get("attempt")),
            _str(raw.get("file")),
            _int(raw.get("pid")),
            _str(raw.get("thread")),
            tuple(f for f in frames if isinstance(f, str)),
        )


@dataclass(frozen=True, slots=True)
class JobDumps:
    """Every trace and stack of a job, the global ranks its logs place on each node
    (``rank_nodes``: ranks one node's lines alone name), and what could not be read."""

    traces: tuple[RankTrace, ...] = ()
    stacks: tuple[RankStack, ...] = ()
    rank_nodes: tuple[tuple[int, str], ...] = ()
    problems: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.traces or self.stacks)

    def to_json(self) -> Json:
        """The stored form (``l4.job.dumps``)."""
        return {
            "traces": [t.to_json() for t in self.traces],
            "stacks": [s.to_json() for s in self.stacks],
            "rank_nodes": [list(p) for p in self.rank_nodes],
            "problems": list(self.problems),
        }

    @classmethod
    def from_json(cls, raw: Any) -> JobDumps | None:
        """The inverse of :meth:`to_json` (None for a document without dumps)."""
        if not isinstance(raw, Mapping):
            return None
        traces = [RankTrace.from_json(t) for t in raw.get("traces") or () if isinstance(t, Mapping)]
        return cls(
            tuple(t for t in traces if t is not None),
            tuple(
                RankStack.from_json(s) for s in raw.get("stacks") or () if isinstance(s, Mapping)
            ),
            _pairs(raw.get("rank_nodes")),
            tuple(p for p in raw.get("problems") or () if isinstance(p, str)),
        )


def _pairs(raw: Any) -> tuple[tuple[int, str], ...]:
    out: list[tuple[int, str]] = []
    for pair in raw if isinstance(raw, Sequence) and not isinstance(raw, str) else ():
        if isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[1], str):
            rank = _int(pair[0])
            if rank is not None:
                out.append((rank, pair[1]))
    return tuple(out)
