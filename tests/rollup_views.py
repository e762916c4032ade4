"""Rollup objects as plain values, for tests that compare two scans' rollups field by field."""

from __future__ import annotations

from typing import Any

from l4_plugin.ingest.rollup import Group, KeptLine


def kept_view(k: KeptLine) -> tuple[object, ...]:
    return (k.path, k.line, k.message, k.ts_ref, k.rank, k.flags, k.offset)


def group_view(g: Group) -> tuple[object, ...]:
    return (
        g.count,
        g.first_pos,
        g.last_pos,
        g.first_ts_ref,
        g.last_ts_ref,
        g.message,
        g.path,
        sorted(g.ranks),
        [kept_view(k) for k in g.kept],
        g.seconds_ns,
        g.seconds_n,
    )


def rollups_view(rollups: dict[str, Any]) -> dict[str, Any]:
    """Every node's lines, last iteration, runs and groups (kinds by their masked line)."""
    return {
        node: (
            rollup.lines,
            rollup.last_iteration,
            [(r.before, r.before_pos, r.after, r.after_pos) for r in rollup.runs],
            {(k.key, stage, it): group_view(g) for (k, stage, it), g in rollup.groups.items()},
        )
        for node, rollup in rollups.items()
    }
