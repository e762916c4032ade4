"""What every node's documents depend on across the job, worked out by the reducer.

The lanes that scanned the nodes keep their rollups and hand the reducer one ``NodeDigest`` per
node (``scanner``): its kinds with their line counts, its timeline transitions, its iterations.
With the kinds' templates (Drain, run by the reducer in job order) that is enough to know each
template's total and how many nodes print it, the iteration buckets and the job's clock, and so
the ``DocContext`` each lane builds its nodes' documents with (``documents``). The reducer never
walks a rollup or a line.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from l4_plugin.ingest.attempts import split_unit
from l4_plugin.ingest.documents import (
    MAJORITY,
    Buckets,
    Clock,
    DocContext,
    rare_limit,
    this_year,
)
from l4_plugin.ingest.parser import LineKind
from l4_plugin.ingest.scanner import NodeDigest
from l4_plugin.ingest.timeline import Timeline
from l4_plugin.records import host_shapes, may_name_a_node


@dataclass
class Survey:
    """What the documents of a job depend on across its nodes, gathered before any is built."""

    nodes: list[str] = field(default_factory=list)  # in job order
    totals: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # per template
    iterations: list[int] = field(default_factory=list)  # each node's last iteration
    progressing: list[str] = field(default_factory=list)  # the nodes that have one
    first_iteration: int | None = None
    node_counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    texts: dict[str, str] = field(default_factory=dict)  # template id -> text
    from_rank_logs: set[str] = field(default_factory=set)  # seen in a training log, not kern.log
    from_workers: set[str] = field(default_factory=set)  # seen in a rank's own output
    system_logs: bool = False
    year: int | None = None  # the first node's (in job order) with a reference carrying one
    zone: int | None = None  # the first node's (in job order) whose files show one
    lines: int = 0


def survey(digests: Iterable[NodeDigest], kind_of: Callable[[str], LineKind]) -> Survey:
    """Per-template totals, node counts and iterations of the nodes' digests (job order)."""
    out = Survey()
    for d in digests:
        out.nodes.append(d.node)
        out.lines += d.lines
        rank_logs, from_workers = set(d.rank_logs), set(d.from_workers)
        seen: set[str] = set()
        for i, (key, count) in enumerate(zip(d.kinds, d.counts, strict=True)):
            if not count:
                continue
            template = kind_of(key).template
            assert template is not None
            out.totals[template.id] += count
            out.texts[template.id] = template.text
            seen.add(template.id)
            if i in rank_logs:
                out.from_rank_logs.add(template.id)
            if i in from_workers:
                out.from_workers.add(template.id)
        out.system_logs = out.system_logs or d.system_logs
        for tid in seen:
            out.node_counts[tid] += 1
        if d.last_iteration is not None:
            out.iterations.append(d.last_iteration)
            out.progressing.append(d.node)
        if d.first_iteration is not None:
            first = out.first_iteration
            out.first_iteration = (
                d.first_iteration if first is None else min(first, d.first_iteration)
            )
        if out.year is None:
            out.year = d.year
        if out.zone is None:
            out.zone = d.zone
    return out


def doc_context(
    job_id: str,
    generation: str,
    found: Survey,
    timeline: Timeline,
    baseline_templates: set[str] | None,
    *,
    fold: bool = True,
    attempts: Mapping[int, Timeline] | None = None,
) -> DocContext:
    """The job's clock, its timeline (and each attempt's) placed on it, the iteration buckets,
    and which templates may name a node or are printed by nearly every node."""
    clock = Clock(found.year if found.year is not None else this_year(), found.zone or 0)
    for each in (timeline, *(attempts or {}).values()):
        each.resolve(clock.seconds)
    clock.cache.clear()
    shapes = host_shapes(split_unit(n)[0] for n in found.nodes)
    named = frozenset(t for t, text in found.texts.items() if may_name_a_node(text, shapes))
    least = max(2, MAJORITY * len(found.nodes))
    majority = frozenset(t for t, n in found.node_counts.items() if n >= least and t not in named)
    return DocContext(
        job_id,
        generation,
        clock,
        timeline,
        Buckets.of(found.iterations, found.first_iteration),
        dict(found.totals),
        rare_limit(len(found.nodes)),
        baseline_templates,
        named,
        majority,
        fold,
        dict(attempts or {}),
    )
