"""The documents' fast paths (``documents._placed``) against the plain calls they stand for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from l4_plugin.ingest.context import doc_context, survey
from l4_plugin.ingest.documents import DocContext, _placed
from l4_plugin.ingest.jobdir import scan
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.rollup import NodeRollup, time_ref
from l4_plugin.ingest.sources import file_streams
from l4_plugin.ingest.timeline import UNPLACED
from l4_plugin.ingest.workers import ScanResult, scan_streams
from l4_plugin.limits import ReadLimits
from l4_simulate import simulate


def _plain(ctx: DocContext, node: str, rollup: NodeRollup) -> Iterator[tuple[object, ...]]:
    """What ``_placed`` yields, one plain call at a time: ``Clock.ms`` for every reference,
    ``Timeline.place`` or ``refine`` for every group, ``Buckets.__call__`` for every iteration."""
    clock, timeline = ctx.clock, ctx.timeline_of(node)
    for (kind, stage, it), group in rollup.groups.items():
        first_ms, last_ms = clock.ms(group.first_ts_ref), clock.ms(group.last_ts_ref)
        moved = None
        if stage.startswith(UNPLACED):
            ref = time_ref(rollup, it, group)
            if ref is not group.first_ts_ref:
                first_ms = moved = clock.ms(ref)
                if first_ms is not None and it is not None and ref is rollup.runs[-1 - it].after:
                    first_ms = moved = first_ms - 1
                last_ms = max(last_ms or 0, first_ms or 0) or None
        first_s = first_ms / 1000.0 if first_ms is not None else None
        if stage.startswith(UNPLACED):
            stage, it = timeline.place(stage[1:], first_s)
        else:
            stage = timeline.refine(stage, it, first_s)
        start, span = ctx.bucket_of(it) if it is not None else (None, 0)
        yield kind, group, stage, it, start, span, first_ms, last_ms, moved


def _scanned(job_dir: Path) -> tuple[ScanResult, DocContext]:
    found = scan(job_dir, None, None)
    parser = LineParser(known=[])
    scanned = scan_streams(file_streams(found.files, ReadLimits()), parser, workers=1)
    parser.finish()
    ctx = doc_context("k", "g", survey(scanned.digests, parser.kind_of), scanned.timeline, None)
    return scanned, ctx


def _timeless_runs(job_dir: Path) -> Path:
    """A marker file and a marker-less one whose timeless error runs take a neighbour's time."""
    for n in range(2):
        node = job_dir / f"gpu{n}"
        node.mkdir(parents=True)
        steps = [
            f"2024-05-01 10:00:{i:02d},000 INFO iteration {i}/40 loss 1.{i}" for i in range(40)
        ]
        (node / "rank0.log").write_text("\n".join(steps) + "\n")
        agent = []
        for i in range(0, 40, 5):
            agent.append(f"2024-05-01 10:00:{i:02d},500 INFO agent heartbeat {i}")
            agent += [f"loading shard {w}" for w in range(6)]  # timeless: the stamp before
            # A timeless error block, nearer the next stamp: it takes that one's time.
            agent.append("Traceback (most recent call last):")
            agent.append(f'  File "train.py", line {i}, in <module>')
            agent.append(f"RuntimeError: NCCL error {i}")
        (node / "agent.log").write_text("\n".join(agent) + "\n")
    return job_dir


def _announced_save(job_dir: Path) -> Path:
    """Megatron-LM's save announced by rank 0 alone: rank 1's lines of the saved iteration
    printed after the announcement belong to the save (``Timeline.refine``)."""
    node = job_dir / "gpu0"
    node.mkdir(parents=True)
    for rank in range(2):
        lines = []
        for i in range(1, 21):
            lines.append(
                f"[rank{rank}]: [2024-07-13 04:49:{i + 10:02d}] iteration {i:8d}/      20 | "
                f"consumed samples: {2048 * i:12d} | elapsed time per iteration (ms): 5578.9 | "
                "lm loss: 7.737459E+00 | loss scale: 1.0 |"
            )
            if i % 5 == 0 and rank == 0:
                lines.append(f"[rank0]:saving checkpoint at iteration {i:7d} to /ckpt/job-742")
            if i % 5 == 0 and rank == 1:
                lines.append(f"[rank1]: [2024-07-13 04:49:{i + 10:02d}] waiting on rank 0 {i}")
        (node / f"rank{rank}.log").write_text("\n".join(lines) + "\n")
    return job_dir


#: What each job takes of the fast paths besides references read again: times moved from a
#: stamped line, a line of a save only another rank announced, coarse iteration buckets.
_TAKES = {
    "checkpoint-io": (),
    "nccl-ib-error": ("coarse",),
    "timeless": ("moved",),
    "save": ("refined",),
}


@pytest.mark.parametrize("fault", sorted(_TAKES))
def test_placed_groups_are_those_the_plain_calls_give(tmp_path: Path, fault: str) -> None:
    if fault in ("timeless", "save"):
        job_dir = (_timeless_runs if fault == "timeless" else _announced_save)(tmp_path / "job")
    else:
        simulate(tmp_path, nodes=3, iterations=150, fault=fault, seed=5, baselines=0)
        job_dir = tmp_path / "job"
    scanned, ctx = _scanned(job_dir)
    seen = dict.fromkeys(("moved", "refined", "coarse", "again"), 0)
    for node, rollup in scanned.rollups.items():
        fast = list(_placed(ctx, node, rollup))
        ctx.clock.cache.clear()
        plain = list(_plain(ctx, node, rollup))
        ctx.clock.cache.clear()
        assert fast == plain
        seen["moved"] += sum(p[8] is not None for p in plain)
        seen["refined"] += sum(
            p[2] != k[1] == "training" for p, k in zip(plain, rollup.groups, strict=True)
        )
        seen["coarse"] += sum(p[5] > 1 for p in plain)
        refs = [r for g in rollup.groups.values() for r in (g.first_ts_ref, g.last_ts_ref)]
        seen["again"] += len(refs) - len(set(refs))  # read from the clock's cache
    assert all(seen[path] > 0 for path in (*_TAKES[fault], "again")), seen
