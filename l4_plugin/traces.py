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

import json
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
    """One entry of a rank's Flight Recorder: a collective it enqueued.

    ``state`` is ``scheduled``, ``started`` or ``completed`` as the recorder saw it (from its
    times when it took them: NCCL; gloo never times its work and leaves every entry
    ``scheduled``); ``shape`` is the input and output sizes and data types as one text, what the
    ranks must agree on. Times are not kept: the ranks' entries then read alike, and a job's
    many healthy ranks are stored once (``JobDumps.to_json``)."""

    seq: int
    op: str
    state: str
    shape: str

    def to_json(self) -> list[Any]:
        """The stored form: a short list."""
        return [self.seq, self.op, self.state, self.shape]

    @classmethod
    def from_json(cls, raw: Any) -> Collective | None:
        """The inverse of :meth:`to_json` (None for a value that is none)."""
        if not isinstance(raw, list | tuple) or len(raw) < 4 or _int(raw[0]) is None:
            return None
        return cls(int(raw[0]), _str(raw[1]), _str(raw[2]), _str(raw[3]))


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
        """The stored form (``l4.job.dumps``): each distinct group list or stack once
        (``tails``, ``frames``), each rank as a row naming it by index — a job's healthy ranks
        hold the same last collectives and wait at the same frames."""
        tails: dict[str, int] = {}
        frames: dict[str, int] = {}
        tail_list: list[Any] = []
        frame_list: list[Any] = []

        def index(value: Any, seen: dict[str, int], out: list[Any]) -> int:
            key = json.dumps(value, separators=(",", ":"))
            if key not in seen:
                seen[key] = len(out)
                out.append(value)
            return seen[key]

        def tail(t: RankTrace) -> int:
            return index([g.to_json() for g in t.groups], tails, tail_list)

        def stack(s: RankStack) -> int:
            return index(list(s.frames), frames, frame_list)

        return {
            "tails": tail_list,
            "traces": [
                [t.rank, t.node, t.attempt, t.file, t.version, tail(t)] for t in self.traces
            ],
            "frames": frame_list,
            "stacks": [
                [s.rank, s.node, s.attempt, s.file, s.pid, s.thread, stack(s)] for s in self.stacks
            ],
            "rank_nodes": [list(p) for p in self.rank_nodes],
            "problems": list(self.problems),
        }

    @classmethod
    def from_json(cls, raw: Any) -> JobDumps | None:
        """The inverse of :meth:`to_json` (None for a document without dumps)."""
        if not isinstance(raw, Mapping):
            return None
        tails = [_groups(t) for t in _list(raw.get("tails"))]
        frames = [
            tuple(f for f in _list(fs) if isinstance(f, str)) for fs in _list(raw.get("frames"))
        ]
        traces = []
        for row in _list(raw.get("traces")):
            if len(row) == 6 and _int(row[0]) is not None and _int(row[5]) is not None:
                at = _int(row[5])
                groups = tails[at] if at is not None and 0 <= at < len(tails) else ()
                traces.append(
                    RankTrace(
                        int(row[0]),
                        _opt_str(row[1]),
                        _int(row[2]),
                        _str(row[3]),
                        _str(row[4]),
                        groups,
                    )
                )
        stacks = []
        for row in _list(raw.get("stacks")):
            if len(row) == 7:
                at = _int(row[6])
                stack = frames[at] if at is not None and 0 <= at < len(frames) else ()
                stacks.append(
                    RankStack(
                        _int(row[0]),
                        _opt_str(row[1]),
                        _int(row[2]),
                        _str(row[3]),
                        _int(row[4]),
                        _str(row[5]),
                        stack,
                    )
                )
        return cls(
            tuple(traces),
            tuple(stacks),
            _pairs(raw.get("rank_nodes")),
            tuple(p for p in _list(raw.get("problems")) if isinstance(p, str)),
        )


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _groups(raw: Any) -> tuple[GroupTrace, ...]:
    return tuple(GroupTrace.from_json(g) for g in _list(raw) if isinstance(g, Mapping))


def _pairs(raw: Any) -> tuple[tuple[int, str], ...]:
    out: list[tuple[int, str]] = []
    for pair in raw if isinstance(raw, Sequence) and not isinstance(raw, str) else ():
        if isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[1], str):
            rank = _int(pair[0])
            if rank is not None:
                out.append((rank, pair[1]))
    return tuple(out)
