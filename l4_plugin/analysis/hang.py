"""Where a hung job's ranks stood: their Flight Recorder traces and stacks compared.

Pure: the dumps ingest kept (:class:`~l4_plugin.traces.JobDumps`) in, findings out.

- **Flight Recorder** (per attempt and process group): the first collective sequence number at
  which the ranks disagree — ranks in another collective or with other sizes or data types
  there, ranks that never enqueued it (*behind*), members that left no dump (*missing*: a rank
  that died by a signal, or raised elsewhere, writes none) — and each rank's last collective and
  state. The comparison walks the sequence numbers every rank's ring buffer still holds, as
  PyTorch's own analyser (``torch/distributed/flight_recorder``) does; with gloo, whose entries
  are all ``scheduled`` and whose timed-out collective counts as completed, the op and the
  sequence number are what tell the ranks apart.
- **Stacks** (per attempt): ranks grouped by the innermost frame of their training thread, then
  by the whole stack; a small group apart from a majority (one rank in its DataLoader while the
  others wait in a collective) is the odd one. A group waiting in a collective while the
  majority computes is a victim, never odd.

The culprits these name are node evidence for the fusion (``evidence``), a stage where the
culprit is stuck (``stage_frames``, for the stage rules to read) and a category hint for the
verdict: ranks that called different collectives are the user's code; a rank stuck in its
DataLoader is its data source (storage); a rank stuck computing is its machine.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from l4_plugin.traces import Collective, GroupTrace, JobDumps, RankStack, RankTrace

#: Node evidence weights of a culprit the dumps name (noisy-OR with the rest of its reasons).
MISMATCH_WEIGHT = 0.9  # in another collective, or the same with other sizes or types
BEHIND_WEIGHT = 0.85  # never enqueued the collective its peers wait in
MISSING_WEIGHT = 0.75  # left no trace while its peers did
STACK_WEIGHT = 0.8  # its stack stands apart from its peers'
#: A group of ranks is a minority when it holds at most this share of them (and one rank at least).
MINORITY = 0.34
#: ... and the rest agree when the largest group holds at least this share.
MAJORITY = 0.5

_IN_COLLECTIVE = re.compile(r"torch/distributed/|\bProcessGroup|\bc10d\b")
_DATA = re.compile(r"DataLoader|torch/utils/data/|__getitem__|\bdataset", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RankPosition:
    """A rank's last collective in a group: its sequence number, op and state."""

    rank: int
    node: str | None
    seq: int | None
    op: str
    state: str


@dataclass(frozen=True, slots=True)
class CollectiveFinding:
    """The ranks of one process group in one attempt, compared (see the module docstring).

    ``kind`` is ``mismatch``, ``behind`` or ``missing`` when the ranks part at ``seq`` (the
    culprits in ``culprits``), ``split`` when they part but no small group stands out, ``agree``
    when every dumped rank holds the same collectives."""

    attempt: int | None
    pg: str
    name: str
    kind: str
    seq: int | None
    op: str
    members: tuple[int, ...]
    in_op: tuple[int, ...]
    other_op: tuple[tuple[int, str], ...]
    other_shape: tuple[tuple[int, str], ...]
    behind: tuple[int, ...]
    missing: tuple[int, ...]
    positions: tuple[RankPosition, ...]
    culprits: tuple[int, ...]
    #: The nodes of the culprits (where their dumps lie, or their logs place them).
    culprit_nodes: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: the collective and the ranks apart."""
        where = f"collective #{self.seq} ({self.op or '?'})" if self.seq is not None else "—"
        parts = [f"{self.name or 'pg ' + self.pg}: {where}"]
        if self.other_op:
            parts.append("in another op: " + _ranks_ops(self.other_op))
        if self.other_shape:
            parts.append("other sizes/types: " + _ranks_ops(self.other_shape))
        if self.behind:
            parts.append("never enqueued it: ranks " + _ranks(self.behind))
        if self.missing:
            parts.append("no trace: ranks " + _ranks(self.missing))
        if self.kind == "agree":
            parts.append("every rank agrees")
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class StackGroup:
    """Ranks whose training thread stood at the same frame."""

    frame: str
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    in_collective: bool


@dataclass(frozen=True, slots=True)
class StackFinding:
    """The stacks of one attempt grouped; ``odd`` the group that stands apart, if any."""

    attempt: int | None
    groups: tuple[StackGroup, ...]
    odd: StackGroup | None
    frames: tuple[str, ...] = ()  # the odd group's whole stack (its first rank's)


@dataclass(frozen=True, slots=True)
class HangResult:
    """Every finding, and what they name: node evidence, the frames where a culprit is stuck,
    and a category hint (``category``, ``confidence``, ``why``)."""

    collectives: tuple[CollectiveFinding, ...]
    stacks: tuple[StackFinding, ...]
    evidence: Mapping[str, tuple[float, tuple[str, ...]]] = field(default_factory=dict)
    stage_frames: tuple[str, ...] = ()
    category: str | None = None
    confidence: float = 0.0
    why: str = ""
    problems: tuple[str, ...] = ()


def _ranks(ranks: Iterable[int]) -> str:
    return ",".join(str(r) for r in sorted(ranks))


def _ranks_ops(pairs: Iterable[tuple[int, str]]) -> str:
    return ", ".join(f"{r} {op}" for r, op in sorted(pairs))


def analyse(dumps: JobDumps | None, nodes: Sequence[str] = ()) -> HangResult | None:
    """The findings of a job's dumps (None when it has none); ``nodes`` are the job's nodes."""
    if not dumps:
        return None
    assert dumps is not None
    where = rank_places(dumps, nodes)
    collectives = tuple(
        f
        for attempt, traces in _by_attempt(dumps.traces)
        for f in compare_traces(traces, attempt, where)
    )
    stacks = tuple(
        f
        for attempt, group in _by_attempt(dumps.stacks)
        if (f := group_stacks(group, attempt)) is not None
    )
    evidence = _evidence(collectives, stacks)
    frames, category, confidence, why = _hint(collectives, stacks)
    return HangResult(
        collectives, stacks, evidence, frames, category, confidence, why, dumps.problems
    )


_Dump = TypeVar("_Dump", RankTrace, RankStack)


def _by_attempt(items: Iterable[_Dump]) -> list[tuple[int | None, list[_Dump]]]:
    per: dict[int | None, list[_Dump]] = {}
    for item in items:
        per.setdefault(item.attempt, []).append(item)
    return sorted(per.items(), key=lambda kv: -1 if kv[0] is None else kv[0])


Places = dict[tuple[int | None, int], str]


def rank_places(dumps: JobDumps, nodes: Sequence[str] = ()) -> Places:
    """(attempt, rank) → node: where its dump lies; for a rank that left none, torchrun's
    contiguous blocks of ranks per node (``_place_by_elimination``), else the node whose log
    lines alone name the rank (a ``[rankN]`` prefix) when that node holds fewer ranks than the
    others (a local rank's ``[defaultN]`` on one node only would claim it otherwise)."""
    places: Places = {}
    found: list[tuple[int | None, int | None, str | None]]
    found = [(t.attempt, t.rank, t.node) for t in dumps.traces]
    found += [(s.attempt, s.rank, s.node) for s in dumps.stacks]
    for attempt, rank, node in found:
        if rank is not None and node is not None:
            places.setdefault((attempt, rank), node)
    logged = dict(dumps.rank_nodes)
    attempts = {t.attempt for t in dumps.traces} or {None}
    for attempt in attempts:
        members = {
            r for t in dumps.traces if t.attempt == attempt for g in t.groups for r in g.ranks
        }
        _place_by_elimination(places, attempt, members, nodes)
        counts = Counter(n for (a, _), n in places.items() if a == attempt)
        full = max(counts.values(), default=0)
        for rank in sorted(members):
            node = logged.get(rank)
            if (attempt, rank) not in places and node is not None and counts[node] < full:
                places[(attempt, rank)] = node
                counts[node] += 1
    return places


def _place_by_elimination(
    places: Places, attempt: int | None, members: set[int], nodes: Sequence[str]
) -> None:
    """The ranks nothing places, by torchrun's contiguous blocks of ranks per node: on the one
    node of the job nothing placed a rank on, when they are as many as each other node holds;
    else a rank next to a rank of a node that holds fewer than the others, on that node."""
    placed = {r: n for (a, r), n in places.items() if a == attempt}
    unplaced = sorted(members - set(placed))
    counts = Counter(placed.values())
    if not unplaced or not counts:
        return
    empty = [n for n in nodes if n not in counts]
    if len(empty) == 1 and set(counts.values()) == {len(unplaced)}:
        for rank in unplaced:
            places[(attempt, rank)] = empty[0]
        return
    full = max(counts.values())
    for rank in unplaced:
        beside = (placed.get(r) for r in (rank - 1, rank + 1))
        short = {n for n in beside if n is not None and counts[n] < full}
        if len(short) == 1:
            node = short.pop()
            places[(attempt, rank)] = placed[rank] = node
            counts[node] += 1


def _node(places: Places, attempt: int | None, rank: int) -> str | None:
    return places.get((attempt, rank))


def compare_traces(
    traces: Sequence[RankTrace], attempt: int | None, places: Places
) -> list[CollectiveFinding]:
    """One finding per process group the attempt's ranks traced (the default group first)."""
    per: dict[str, dict[int, GroupTrace]] = {}
    for t in traces:
        for g in t.groups:
            per.setdefault(g.pg, {})[t.rank] = g
    out = []
    for pg in sorted(per, key=lambda p: (not p.isdigit(), int(p) if p.isdigit() else 0, p)):
        found = compare_group(per[pg], attempt, places)
        if found is not None:
            out.append(found)
    # The groups where ranks part first; a group where all agree adds nothing when one parts.
    parted = [f for f in out if f.kind != "agree"]
    return parted or out[:1]


def compare_group(
    ranks: Mapping[int, GroupTrace], attempt: int | None, places: Places
) -> CollectiveFinding | None:
    """The ranks of one process group compared (see the module docstring)."""
    if not ranks:
        return None
    any_group = next(iter(ranks.values()))
    members = tuple(sorted(set().union(*(g.ranks for g in ranks.values())) or ranks))
    entries = {r: {e.seq: e for e in g.entries} for r, g in ranks.items()}
    last = {r: _last(g) for r, g in ranks.items()}
    missing = tuple(r for r in members if r not in ranks)
    positions = tuple(_position(r, ranks[r], places, attempt) for r in sorted(ranks))
    lo = max((min(e) for e in entries.values() if e), default=None)
    hi = max((v for v in last.values() if v is not None), default=None)
    base = dict(attempt=attempt, pg=any_group.pg, name=any_group.name, members=members)
    if lo is None or hi is None:
        return None
    # The sequence numbers some rank still holds (a status claiming more is not walked to).
    held = sorted({q for e in entries.values() for q in e if lo <= q <= hi})
    for seq in held:
        parted = _at(seq, entries, last)
        if parted is not None:
            op, in_op, other_op, other_shape, behind = parted
            kind, culprits = _culprits(members, in_op, other_op, other_shape, behind, missing)
            return CollectiveFinding(
                **base,  # type: ignore[arg-type]
                kind=kind,
                seq=seq,
                op=op,
                in_op=in_op,
                other_op=other_op,
                other_shape=other_shape,
                behind=behind,
                missing=missing,
                positions=positions,
                culprits=culprits,
                culprit_nodes=_nodes_of(culprits, places, attempt),
            )
    top = max((e[hi] for e in entries.values() if hi in e), key=lambda e: e.seq, default=None)
    small = bool(missing) and len(missing) <= max(1, MINORITY * len(members))
    return CollectiveFinding(
        **base,  # type: ignore[arg-type]
        kind="missing" if small else "agree",
        seq=hi,
        op=top.op if top is not None else "",
        in_op=tuple(sorted(ranks)),
        other_op=(),
        other_shape=(),
        behind=(),
        missing=missing,
        positions=positions,
        culprits=missing if small else (),
        culprit_nodes=_nodes_of(missing if small else (), places, attempt),
    )


def _nodes_of(ranks: Iterable[int], places: Places, attempt: int | None) -> tuple[str, ...]:
    return tuple(sorted({n for r in ranks if (n := _node(places, attempt, r)) is not None}))


def _last(g: GroupTrace) -> int | None:
    """The last collective a rank enqueued in the group: its status, else its last entry."""
    if g.last_enqueued is not None:
        return g.last_enqueued
    return max((e.seq for e in g.entries), default=None)


def _position(rank: int, g: GroupTrace, places: Places, attempt: int | None) -> RankPosition:
    seq = _last(g)
    entry = next((e for e in g.entries if e.seq == seq), None)
    return RankPosition(
        rank, _node(places, attempt, rank), seq, entry.op if entry else "", _state(g, entry, seq)
    )


def _state(g: GroupTrace, entry: Collective | None, seq: int | None) -> str:
    """A collective's state: its own when the recorder timed it (NCCL), else the group's
    status (gloo leaves every entry ``scheduled``)."""
    if entry is not None and entry.state in ("completed", "started"):
        return entry.state
    if seq is not None and g.last_completed is not None and g.last_completed >= seq:
        return "completed"
    if seq is not None and g.last_started is not None and g.last_started >= seq:
        return "started"
    return entry.state if entry is not None and entry.state else "scheduled"


def _at(
    seq: int, entries: Mapping[int, Mapping[int, Collective]], last: Mapping[int, int | None]
) -> (
    tuple[
        str,
        tuple[int, ...],
        tuple[tuple[int, str], ...],
        tuple[tuple[int, str], ...],
        tuple[int, ...],
    ]
    | None
):
    """How the ranks stand at one sequence number: the op most are in, the ranks in it, in
    another op, with another shape, and behind (never enqueued it); None when all agree."""
    behind = tuple(sorted(r for r, v in last.items() if v is None or v < seq))
    present = {r: e[seq] for r, e in entries.items() if seq in e}
    if not present:
        return None
    ops = Counter(e.op for e in present.values())
    op = max(ops, key=lambda o: (ops[o], o))
    same = [e for e in present.values() if e.op == op]
    shapes = Counter(e.shape if symmetric(op) else "" for e in same)
    shape = max(shapes, key=lambda s: (shapes[s], s))

    def shape_of(e: Collective) -> str:
        return e.shape if symmetric(op) else ""

    in_op = tuple(sorted(r for r, e in present.items() if e.op == op and shape_of(e) == shape))
    other_op = tuple(sorted((r, e.op) for r, e in present.items() if e.op != op))
    other_shape = tuple(
        sorted((r, e.shape) for r, e in present.items() if e.op == op and shape_of(e) != shape)
    )
    if not (behind or other_op or other_shape):
        return None
    return op, in_op, other_op, other_shape, behind


#: Collectives every rank calls with the same sizes and types (scatter, gather and all-to-all
#: differ between the root and the others, or by rank).
_SYMMETRIC = frozenset(
    {"all_reduce", "allreduce", "all_gather", "allgather", "broadcast", "reduce", "barrier"}
    | {"reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "_allgather_base"}
    | {"all_gather_into_tensor", "allreduce_coalesced", "allgather_coalesced"}
)


def symmetric(op: str) -> bool:
    """Whether every rank calls ``op`` (``nccl:all_reduce``) with the same sizes and types."""
    name = op.rsplit(":", 1)[-1].strip().lower()
    return name.removesuffix("_coalesced") in _SYMMETRIC or name in _SYMMETRIC


#: A collective's timeout that a rank's Python traceback ends with (gloo's transport, raised
#: from the collective's ``work.wait()``): the frames above it say which collective it waited in.
_TIMED_OUT_WAIT = re.compile(r"Timed out waiting \S+ for (?:recv|send) operation to complete")
#: The call into torch.distributed a rank's stack made (the innermost is the collective it was in).
_C10D_CALL = re.compile(r'distributed_c10d\.py"?, line \d+, in (\w+)')


def collectives_apart(records: Iterable[str]) -> tuple[str, ...]:
    """The collectives the ranks' timed-out records (``records``: their texts, frames and
    all) waited in, when they name more than one that every rank calls alike (``symmetric``):
    one rank in a barrier while the others wait in an all_reduce — the ranks called
    different collectives, as Flight Recorder's traces would tell (the user's code); () when
    they agree or say nothing (point-to-point sends and receives of pipeline stages differ by
    design)."""
    names: set[str] = set()
    for text in records:
        if _TIMED_OUT_WAIT.search(text) is None:
            continue
        calls = _C10D_CALL.findall(text)
        if calls and symmetric(calls[-1]):
            names.add(calls[-1])
    return tuple(sorted(names)) if len(names) > 1 else ()


def _culprits(
    members: tuple[int, ...],
    in_op: tuple[int, ...],
    other_op: tuple[tuple[int, str], ...],
    other_shape: tuple[tuple[int, str], ...],
    behind: tuple[int, ...],
    missing: tuple[int, ...],
) -> tuple[str, tuple[int, ...]]:
    """Which ranks the parting names: the ranks that left no trace first (a rank that died
    leaves its peers wherever they were), then a small group in another op or shape, then a
    small group behind; ``split`` when no group is small."""
    n = max(len(members), len(in_op) + len(other_op) + len(other_shape) + len(behind))
    small = max(1.0, MINORITY * n)
    if missing and len(missing) <= small:
        return "missing", missing
    apart = tuple(sorted({r for r, _ in other_op} | {r for r, _ in other_shape}))
    if apart and len(apart) <= small and len(in_op) >= MAJORITY * n:
        return "mismatch", apart
    if behind and len(behind) <= small:
        return "behind", behind
    return "split", ()


def group_stacks(stacks: Sequence[RankStack], attempt: int | None) -> StackFinding | None:
    """The attempt's stacks grouped by innermost frame, then by whole stack; the odd group."""
    usable = [s for s in stacks if s.frames]
    if len(usable) < 2:
        return None
    for key in (_innermost, _whole):
        groups = _groups(usable, key)
        odd = _odd(groups, len(usable))
        if odd is not None:
            first = next(s for s in usable if key(s) == odd.frame and _rank(s) in odd.ranks)
            return StackFinding(attempt, tuple(groups), odd, first.frames)
    return StackFinding(attempt, tuple(_groups(usable, _innermost)), None)


def _innermost(s: RankStack) -> str:
    return _no_line(s.frames[0])


def _whole(s: RankStack) -> str:
    return " < ".join(_no_line(f) for f in s.frames)


def _no_line(frame: str) -> str:
    return re.sub(r":\d+\)$", ")", frame)


def _rank(s: RankStack) -> int:
    return s.rank if s.rank is not None else -1 - (s.pid or 0)


def _groups(stacks: Sequence[RankStack], key: object) -> list[StackGroup]:
    per: dict[str, list[RankStack]] = {}
    for s in stacks:
        per.setdefault(key(s), []).append(s)  # type: ignore[operator]
    groups = [
        StackGroup(
            frame,
            tuple(sorted(_rank(s) for s in members)),
            tuple(sorted({s.node for s in members if s.node})),
            bool(_IN_COLLECTIVE.search(members[0].frames[0])),
        )
        for frame, members in per.items()
    ]
    groups.sort(key=lambda g: (-len(g.ranks), g.frame))
    return groups


def _odd(groups: Sequence[StackGroup], n: int) -> StackGroup | None:
    """The one small group apart from a majority; never a group waiting in a collective while
    the majority is not (it waits on them: a victim)."""
    if len(groups) < 2 or n < 3 or len(groups[0].ranks) < MAJORITY * n:
        return None
    small = [g for g in groups[1:] if len(g.ranks) <= max(1.0, MINORITY * n)]
    if len(small) != len(groups) - 1 or len(small) != 1:
        return None
    odd = small[0]
    if odd.in_collective and not groups[0].in_collective:
        return None
    return odd


def _evidence(
    collectives: Sequence[CollectiveFinding], stacks: Sequence[StackFinding]
) -> dict[str, tuple[float, tuple[str, ...]]]:
    """Node → (weight, reasons) for each node a finding names."""
    out: dict[str, tuple[float, list[str]]] = {}

    def name(node: str, weight: float, reason: str) -> None:
        w, why = out.get(node, (0.0, []))
        if reason not in why:
            why.append(reason)
        out[node] = (max(w, weight), why)

    for f in collectives:
        weight, reason = {
            "mismatch": (MISMATCH_WEIGHT, f"collective-mismatch:{f.seq}"),
            "behind": (BEHIND_WEIGHT, f"collective-behind:{f.seq}"),
            "missing": (MISSING_WEIGHT, "no-trace"),
        }.get(f.kind, (0.0, ""))
        for node in f.culprit_nodes if weight else ():
            name(node, weight, reason)
    for s in stacks:
        if s.odd is not None:
            for node in s.odd.nodes:
                name(node, STACK_WEIGHT, "stack-apart:" + s.odd.frame.split(" (")[0][:60])
    return {n: (w, tuple(why)) for n, (w, why) in sorted(out.items())}


def _hint(
    collectives: Sequence[CollectiveFinding], stacks: Sequence[StackFinding]
) -> tuple[tuple[str, ...], str | None, float, str]:
    """(frames where the culprit is stuck, category, confidence, why) from the findings."""
    named = [f for f in collectives if f.kind in ("mismatch", "behind")]
    odd = next((s for s in stacks if s.odd is not None), None)
    gloo = any(p.op.startswith("gloo:") for f in collectives for p in f.positions)
    if named and named[0].kind == "mismatch":
        f = named[0]
        return (), "user/code", 0.7, f"ranks called different collectives at #{f.seq}"
    stuck = odd.frames if odd is not None and odd.odd is not None else ()
    if not stuck or (named and not _same_ranks(named[0], odd)):
        return (), None, 0.0, ""
    if any(_DATA.search(f) for f in stuck):
        return stuck, "hardware/storage", 0.6, "a rank stuck reading its data while peers wait"
    if odd is not None and odd.odd is not None and not odd.odd.in_collective:
        category = "hardware/node" if gloo else "hardware/accelerator"
        return stuck, category, 0.5, "a rank stuck computing while its peers wait on it"
    return stuck, None, 0.0, ""


def _same_ranks(f: CollectiveFinding, s: StackFinding | None) -> bool:
    return s is not None and s.odd is not None and bool(set(f.culprits) & set(s.odd.ranks))
