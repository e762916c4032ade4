"""The report's ``hang`` section from what the ranks' dumps say (``analysis.hang``)."""

from __future__ import annotations

from l4_plugin.analysis.hang import CollectiveFinding, HangResult, StackFinding, StackGroup
from l4_plugin.report.hangs import (
    ReportCollective,
    ReportHang,
    ReportRank,
    ReportStackGroup,
    ReportStacks,
)

#: Ranks listed per process group (a 10,000-rank job's report stays readable: the ranks apart
#: and the culprits are always listed, then the others up to this many).
MAX_RANKS = 256


def report_hang(hang: HangResult | None) -> ReportHang | None:
    """The ``hang`` section (None for a job without dumps)."""
    if hang is None:
        return None
    return ReportHang(
        collectives=tuple(_collective(f) for f in hang.collectives),
        stacks=tuple(_stacks(s) for s in hang.stacks),
        nodes=tuple(hang.evidence),
        category=hang.category,
        why=hang.why,
        problems=hang.problems,
    )


def _collective(f: CollectiveFinding) -> ReportCollective:
    apart = set(f.culprits) | set(f.behind) | {r for r, _ in (*f.other_op, *f.other_shape)}
    listed = [p for p in f.positions if p.rank in apart]
    listed += [p for p in f.positions if p.rank not in apart][: max(0, MAX_RANKS - len(listed))]
    return ReportCollective(
        attempt=f.attempt,
        process_group=f.name or f.pg,
        kind=f.kind,
        seq=f.seq,
        op=f.op,
        summary=f.describe(),
        ranks_in_op=f.in_op,
        ranks_in_other_op=f.other_op,
        ranks_other_shape=f.other_shape,
        ranks_behind=f.behind,
        ranks_without_dump=f.missing,
        culprits=f.culprits,
        culprit_nodes=f.culprit_nodes,
        ranks=tuple(
            ReportRank(p.rank, p.node, p.seq, p.op, p.state)
            for p in sorted(listed, key=lambda p: p.rank)
        ),
    )


def _group(g: StackGroup) -> ReportStackGroup:
    return ReportStackGroup(g.frame, g.ranks[:MAX_RANKS], g.nodes[:MAX_RANKS])


def _stacks(s: StackFinding) -> ReportStacks:
    return ReportStacks(
        attempt=s.attempt,
        groups=tuple(_group(g) for g in s.groups[:20]),
        odd=_group(s.odd) if s.odd is not None else None,
        frames=s.frames,
    )
