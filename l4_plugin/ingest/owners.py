"""What a lane's process keeps of an ingest, and the tasks it runs (``lanes``): it owns its nodes.

A lane scans the batches of whole nodes the reducer sends it (``scan_batch``) and keeps each
node's rollup here (``Held``), answering with one ``NodeDigest`` per node; once the reducer
knows the job's context, the lane builds those nodes' documents (``build``), writes their kept
lines to the cluster itself and returns what only the reducer can write: the event documents
and the lines it packs across nodes, and the job document's totals. A node's rollup never
leaves its lane (``gather`` hands them over for tests and benchmarks only).

State is per ``(token, lane)``: one ingest (``lanes.lane_token``) and one lane of it, so that
a Dask worker with several threads can hold several lanes, and a worker that outlives an
ingest can drop its state (``drop``). A lane runs its tasks one after the other.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from l4_plugin.errors import IngestError
from l4_plugin.ingest.documents import Doc, DocContext, EventTotals, node_documents
from l4_plugin.ingest.parser import KindSpec, LineKind, LineParser
from l4_plugin.ingest.rollup import FilePartial, NodeRollup
from l4_plugin.ingest.scanner import (
    Masks,
    NodeDigest,
    Scanner,
    Task,
    gc_paused,
    node_runs,
    task_stream,
)
from l4_plugin.ingest.sources import LogStream
from l4_plugin.ingest.spill import Spill
from l4_plugin.ingest.timeline import Timeline
from l4_plugin.ingest.writer import BulkWriter
from l4_plugin.records import Template
from l4_plugin.store import Store
from l4_plugin.store.packs import EventColumns, add_events


@dataclass
class Held:
    """One lane's share of one ingest: its scanner and the rollups of the nodes it scanned."""

    scanner: Scanner
    rollups: dict[str, NodeRollup] = field(default_factory=dict)
    #: Every parser whose kinds the rollups use: the scanner's, and those of rescans.
    parsers: list[LineParser] = field(default_factory=list)
    #: One set object per distinct set of ranks, shared by the groups that have it (``_seal``).
    ranks: dict[frozenset[int], set[int]] = field(default_factory=dict)
    #: Its nodes in job order, the bytes of those in ``rollups`` (about), the others on disk.
    order: list[str] = field(default_factory=list)
    bytes: int = 0
    spill: Spill | None = None

    def keep(self, rollup: NodeRollup, parser: int) -> None:
        """Keep a scanned node: in memory up to ``HELD_BYTES``, then on disk."""
        node = rollup.node
        if node not in self.rollups and (self.spill is None or node not in self.spill.where):
            self.order.append(node)
        size = GROUP_BYTES * len(rollup.groups)
        old = self.rollups.pop(node, None)
        if old is not None:
            self.bytes -= GROUP_BYTES * len(old.groups)
        if self.bytes + size <= HELD_BYTES:
            self.rollups[node] = rollup
            self.bytes += size
            return
        if self.spill is None:
            self.spill = Spill()
        self.spill.put(rollup, parser)

    def take(self, node: str) -> NodeRollup:
        """A kept node's rollup, forgotten here."""
        rollup = self.rollups.pop(node, None)
        if rollup is not None:
            return rollup
        assert self.spill is not None
        return self.spill.take(
            node, self.scanner.rules, self.scanner.cache, lambda i: self.parsers[i].kind_of
        )

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()


_HELD: dict[tuple[str, int], Held] = {}
#: Bytes of rollups a lane keeps in memory; the nodes it scans past that wait on disk (``spill``).
HELD_BYTES = 1 << 30
#: What one group of a kept rollup holds, about (measured on the 64-node simulated job: its
#: group, key, exemplar and last reference line, kept lines).
GROUP_BYTES = 1_200


@dataclass
class BatchReport:
    """A lane's answer to one batch: a digest per node, the masks its scanner computed (for the
    other lanes), the CPU seconds it spent and its process's peak RSS (KiB)."""

    lane: int
    digests: list[NodeDigest]
    masks: Masks
    cpu: float
    rss_kb: int
    pid: int


@dataclass
class BuildPlan:
    """What a lane builds its nodes' documents with: the job's context, every kind's template
    (by masked line) and where to write the kept lines (None: hand them back, ``--full``)."""

    ctx: DocContext
    templates: dict[str, Template]
    store: Store | None


@dataclass
class BuildReport:
    """What a lane's nodes' documents leave for the reducer."""

    lane: int
    events: dict[tuple[Any, ...], EventColumns]  # by signature (``store.packs``)
    shared: list[Doc]  # kept lines it packs across nodes (``store.line_packs``)
    kept: list[Doc]  # kept lines not written here (no store given)
    lines_written: int
    totals: EventTotals
    cpu: float
    rss_kb: int


def _held(token: str, lane: int, rare_limit: int | None) -> Held:
    held = _HELD.get((token, lane))
    if held is None:
        scanner = Scanner(rare_limit=rare_limit, share_masks=True)
        held = _HELD[(token, lane)] = Held(scanner, parsers=[scanner.parser])
    return held


def _streams(tasks: Sequence[Task | LogStream]) -> list[LogStream]:
    return [task_stream(t) if isinstance(t, Task) else t for t in tasks]


def scan_batch(
    token: str,
    lane: int,
    tasks: Sequence[Task | LogStream],
    masks: Masks,
    rare_limit: int | None,
) -> BatchReport:
    """Scan a batch of whole nodes (files in job order) with the lane's scanner, after
    learning ``masks`` (those the other lanes computed); keep the rollups."""
    cpu = time.process_time()
    held = _held(token, lane, rare_limit)
    scanner = held.scanner
    scanner.parser.learn_masks(masks)
    digests = _scan_into(held, scanner, tasks, 0)
    return BatchReport(lane, digests, scanner.computed_masks(), *_usage(cpu))


def rescan(
    token: str,
    lane: int,
    tasks: Sequence[Task | LogStream],
    pinned: list[KindSpec],
    rare_limit: int | None,
) -> BatchReport:
    """Scan nodes this lane scanned before again, with a fresh scanner whose kinds take the
    job's attributes (``pinned``: the kinds the reducer has, by masked line) instead of this
    lane's first raw line's: what one process would have made of them (``workers``)."""
    cpu = time.process_time()
    held = _HELD.get((token, lane))
    if held is None:
        raise IngestError(f"an ingest's lane {lane} lost its rollups (its process restarted?)")
    kinds = {spec[0]: LineKind(*spec) for spec in pinned}
    scanner = Scanner(pinned=kinds, rare_limit=rare_limit)
    held.parsers.append(scanner.parser)
    digests = _scan_into(held, scanner, tasks, len(held.parsers) - 1)
    return BatchReport(lane, digests, [], *_usage(cpu))


def _scan_into(
    held: Held, scanner: Scanner, tasks: Sequence[Task | LogStream], parser: int
) -> list[NodeDigest]:
    streams = _streams(tasks)
    sizes = [t.size if isinstance(t, Task) else 0 for t in tasks]
    digests = []
    with gc_paused():
        for a, b in node_runs(streams):
            done = scanner.scan_node(streams[a:b])
            digests.append(scanner.digest(done, sizes[a:b]))
            held.keep(_seal(done.rollup, held.ranks), parser)
    return digests


def _seal(rollup: NodeRollup, ranks: dict[frozenset[int], set[int]]) -> NodeRollup:
    """A scanned node's rollup as the lane keeps it until it builds the node's documents: its
    own timeline's transitions went to the reducer with its digest (the build places lines on
    the job's), and groups with the same ranks share one set of them (most groups of a node
    name the same few ranks: 216 bytes a group otherwise). Nothing changes a group after this."""
    rollup.timeline = Timeline()
    for group in rollup.groups.values():
        key = frozenset(group.ranks)
        shared = ranks.get(key)
        if shared is None:
            shared = ranks[key] = group.ranks
        group.ranks = shared
    return rollup


def _usage(cpu: float) -> tuple[float, int, int]:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return time.process_time() - cpu, rss, os.getpid()


def build(token: str, lane: int, plan: BuildPlan) -> BuildReport:
    """Build the documents of the lane's nodes (job order), write their kept lines to
    ``plan.store`` (from a writer thread, while the next node's are built) and drop each
    rollup once built."""
    cpu = time.process_time()
    held = _HELD.get((token, lane))
    if held is None:
        raise IngestError(f"an ingest's lane {lane} lost its rollups (its process restarted?)")
    for parser in held.parsers:
        for kind in parser.kinds:
            kind.template = plan.templates[kind.key]
    report = BuildReport(lane, {}, [], [], 0, EventTotals(), 0.0, 0)
    ctx = plan.ctx
    writer = BulkWriter(plan.store) if plan.store is not None else None
    try:
        with gc_paused():
            for node in held.order:
                events, lines, shared = node_documents(ctx, node, held.take(node))
                ctx.clock.cache.clear()
                report.totals.add(events)
                add_events(report.events, events)
                report.shared.extend(shared)
                if writer is None:
                    report.kept.extend(lines)
                    continue
                index = plan.store.names.lines if plan.store is not None else ""
                for doc_id, doc in lines:
                    writer.add(index, doc_id, doc)
        if writer is not None:
            report.lines_written = sum(writer.close().values())
    finally:
        if writer is not None:
            writer.stop()
        held.order = []
        held.close()
    report.cpu, report.rss_kb, _ = _usage(cpu)
    return report


def gather(token: str, lane: int) -> list[FilePartial]:
    """The lane's rollups, for a test or benchmark that compares them (kinds by masked line)."""
    held = _HELD.get((token, lane))
    if held is None:
        return []
    out = []
    for node in held.order:
        rollup = held.rollups.get(node)
        if rollup is not None:
            out.append(rollup.partial(()))
        elif held.spill is not None:
            out.append(held.spill.partial(node)[0])
    return out


def drop(token: str, lane: int) -> None:
    """Forget the ingest's state in this lane (what is left of it after a failure)."""
    held = _HELD.pop((token, lane), None)
    if held is not None:
        held.close()
