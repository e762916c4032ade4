"""Rollups the healthy majority shares: one ``l4-events`` document for many nodes.

A job's nodes mostly print the same thing: every healthy node has an event document for the
iteration marker in every iteration bucket, with the same count. Written one per node, they make
the cluster index (and store) N copies of one fact. The write step therefore *packs* the event
documents of one template, stage and iteration bucket that agree on count and level into one
document (ARCHITECTURE.md, *Documents*):

* its indexed fields say what the nodes share, and aggregate the rest — ``host.name`` lists the
  nodes (a terms aggregation buckets the pack under each of them, so a per-node sum of
  ``l4.count`` stays right), ``l4.nodes`` counts them, ``l4.count_all`` is the job-wide count,
  the times and positions are the earliest and latest of the nodes, ``message`` is the earliest
  node's line; Kibana and Dashboards see a normal event document, but for ``l4.ranks`` (a pack
  of 64 nodes would index 512 of them, which made the embedded cluster's writes 4x slower);
* ``l4.pack`` (an object the cluster stores but does not index) keeps each node's own values —
  file, exemplar line, first and last time and position, ranks, seconds per iteration — so that
  unpacking gives back exactly the documents that were packed.

L4's readers that need per-node times or messages aggregate the unpacked documents only
(:func:`without_packs`) and add each pack's nodes from :func:`read_packs`; what a pack's indexed
fields already answer exactly (the job's last time, the earliest exemplar of a template, which
templates a job printed) is read from it directly.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Protocol

from l4_plugin.store import fields as F
from l4_plugin.store.fields import source_field

Doc = tuple[str, dict[str, Any]]  # (``_id``, ``_source``) of a document to write

# At most this many nodes in one pack document (a 4,096-node job's healthy majority is 16
# documents per bucket), so that no document grows with the job.
MAX_PACK_NODES = 256

# What the nodes of a pack share (written once) and what each keeps (``l4.pack``).
_SHARED = (
    F.JOB_ID,
    F.TEMPLATE_ID,
    F.TEMPLATE_TEXT,
    F.STAGE,
    F.GENERATION,
    F.BUCKET,
    F.COUNT,
    "log.level",
    F.ITERATION,
    F.ITERATION_SPAN,
)
# (field of an event document, key in ``l4.pack``)
_OWN = (
    ("host.name", "hosts"),
    ("log.file.path", "paths"),
    ("message", "messages"),
    (F.FIRST_TS, "first"),
    (F.LAST_TS, "last"),
    (F.FIRST_POS, "first_pos"),
    (F.LAST_POS, "last_pos"),
    (F.RANKS, "ranks"),
    (F.ITERATION_SECONDS, "seconds"),
)
_MESSAGES = f"{F.PACK}.messages"


def _signature(doc: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(doc.get(name) for name in _SHARED) + attempt_of(doc)


def attempt_of(doc: dict[str, Any]) -> tuple[int, ...]:
    """``(attempt,)`` of a restarted job's document, else ``()``: documents of two attempts
    never share a pack, and a job that never restarted keeps the signatures it always had."""
    attempt = doc.get(F.ATTEMPT)
    return (attempt,) if attempt is not None else ()


def pack_events(events: Iterable[Doc], doc_id: Callable[..., str]) -> list[Doc]:
    """The event documents to write: those of two or more nodes that agree on every shared
    field become packs (chunks of ``MAX_PACK_NODES`` nodes, in node order); the rest as given.

    ``doc_id(*parts)`` names a pack from its signature and chunk, as the write step names every
    document, so the same rollups give the same ids.
    """
    groups: dict[tuple[Any, ...], EventColumns] = {}
    add_events(groups, events)
    return pack_event_columns(groups, doc_id)


class EventColumns:
    """The event documents of one signature (what their nodes share), as a column per field a
    node keeps of its own (``_OWN``) and their ids: what travels from the processes that build
    nodes' documents to the one that packs them (a few lists, not a dict per document)."""

    __slots__ = ("columns", "ids")

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.columns: tuple[list[Any], ...] = tuple([] for _ in _OWN)

    def add(self, doc_id: str, doc: dict[str, Any]) -> None:
        self.ids.append(doc_id)
        for column, (name, _) in zip(self.columns, _OWN, strict=True):
            column.append(doc.get(name))

    def extend(self, other: EventColumns) -> None:
        self.ids.extend(other.ids)
        for mine, theirs in zip(self.columns, other.columns, strict=True):
            mine.extend(theirs)

    def doc(self, signature: tuple[Any, ...], i: int) -> dict[str, Any]:
        """The ``i``-th event document again, as the builders made it (field by field)."""
        shared, attempt = signature[: len(_SHARED)], signature[len(_SHARED) :]  # ``attempt_of``
        doc: dict[str, Any] = {name: value for name, value in zip(_SHARED, shared, strict=True)}
        for column, (name, _) in zip(self.columns, _OWN, strict=True):
            doc[name] = column[i]
        doc[F.COUNT_ALL] = doc[F.COUNT]
        if doc[F.FIRST_TS] is not None:
            doc["@timestamp"] = doc[F.FIRST_TS]
        if attempt:
            doc[F.ATTEMPT] = attempt[0]
        return {k: v for k, v in doc.items() if v is not None}

    def __reduce__(self) -> tuple[Any, ...]:
        return _columns, (self.ids, self.columns)


def _columns(ids: list[str], columns: tuple[list[Any], ...]) -> EventColumns:
    out = EventColumns()
    out.ids, out.columns = ids, columns
    return out


def add_events(groups: dict[tuple[Any, ...], EventColumns], events: Iterable[Doc]) -> None:
    """Event documents into ``groups``, by signature."""
    for doc_id, doc in events:
        sig = _signature(doc)
        columns = groups.get(sig)
        if columns is None:
            columns = groups[sig] = EventColumns()
        columns.add(doc_id, doc)


def pack_event_columns(
    groups: Mapping[tuple[Any, ...], EventColumns], doc_id: Callable[..., str]
) -> list[Doc]:
    """``pack_events`` of event documents gathered by signature (``add_events``).

    A pack is made from the columns directly (``_pack_columns``), without a document per node
    first: a node's document is made only when it is written as it is (the one node of its
    signature, or of the last chunk). ``tests/unit/test_packs.py`` checks the documents, their
    fields' order included, against packing each node's document (``packed``)."""
    out: list[Doc] = []
    for sig, c in groups.items():
        n = len(c.ids)
        if n < 2:
            out.extend((c.ids[i], c.doc(sig, i)) for i in range(n))
            continue
        hosts = c.columns[0]  # ``host.name``: packs list their nodes in order
        order = sorted(range(n), key=lambda i: str(hosts[i]))
        for start in range(0, n, MAX_PACK_NODES):
            chunk = order[start : start + MAX_PACK_NODES]
            if len(chunk) == 1:
                out.append((c.ids[chunk[0]], c.doc(sig, chunk[0])))
                continue
            out.append((doc_id("pack", *sig, start), _pack_columns(sig, c, chunk)))
    return out


def _pack_columns(signature: tuple[Any, ...], c: EventColumns, nodes: list[int]) -> dict[str, Any]:
    """One document for the nodes ``nodes`` (indices into ``c``'s columns, sorted by node) of
    one signature: what ``_pack`` made of their documents, field by field in its order."""
    shared, attempt = signature[: len(_SHARED)], signature[len(_SHARED) :]  # ``attempt_of``
    out = {name: value for name, value in zip(_SHARED, shared, strict=True) if value is not None}
    if attempt:
        out[F.ATTEMPT] = attempt[0]
    pack = {
        key: [column[i] for i in nodes] for column, (_, key) in zip(c.columns, _OWN, strict=True)
    }
    out[F.PACK] = pack
    out["host.name"] = pack["hosts"]
    out["log.file.path"] = sorted(set(pack["paths"]))
    out[F.NODES] = len(nodes)
    out[F.COUNT_ALL] = out[F.COUNT] * len(nodes)
    firsts = [(t, j) for j, t in enumerate(pack["first"]) if t is not None]
    starts = pack["first_pos"]
    earliest = min(firsts)[1] if firsts else min(range(len(nodes)), key=starts.__getitem__)
    out["message"] = pack["messages"][earliest]
    if firsts:
        out["@timestamp"] = out[F.FIRST_TS] = min(firsts)[0]
    lasts = [t for t in pack["last"] if t is not None]
    if lasts:
        out[F.LAST_TS] = max(lasts)
    out[F.FIRST_POS] = min(starts)
    out[F.LAST_POS] = max(pack["last_pos"])
    seconds = [s for s in pack["seconds"] if s is not None]
    if seconds:
        out[F.ITERATION_SECONDS] = sum(seconds) / len(seconds)
    return out


def packed(
    groups: Mapping[tuple[Any, ...], list[Doc]],
    pack: Callable[[list[dict[str, Any]]], dict[str, Any]],
    pack_id: Callable[[tuple[Any, ...], int], str],
) -> list[Doc]:
    """Each group's documents (one per node) as ``pack`` documents of up to ``MAX_PACK_NODES``
    nodes, in node order, named ``pack_id(key, first)``; a group or last chunk of one node as
    it is (also for ``store/line_packs.py``)."""
    out: list[Doc] = []
    for key, docs in groups.items():
        if len(docs) < 2:
            out.extend(docs)
            continue
        docs = sorted(docs, key=lambda d: str(d[1]["host.name"]))
        for start in range(0, len(docs), MAX_PACK_NODES):
            chunk = [d for _, d in docs[start : start + MAX_PACK_NODES]]
            if len(chunk) == 1:
                out.append(docs[start])
                continue
            out.append((pack_id(key, start), pack(chunk)))
    return out


def without_packs(query: dict[str, Any]) -> dict[str, Any]:
    """``query`` restricted to the event documents of one node each (no packs)."""
    return {"bool": {"filter": [query], "must_not": [{"exists": {"field": F.NODES}}]}}


def only_packs(query: dict[str, Any]) -> dict[str, Any]:
    """``query`` restricted to packs."""
    return {"bool": {"filter": [query, {"exists": {"field": F.NODES}}]}}


@dataclass(frozen=True, slots=True)
class PackMember:
    """One node's share of a pack: the fields its own event document would have had."""

    node: str
    template_id: str
    template_text: str
    stage: str
    level: str | None
    iteration: int | None
    span: int | None
    count: int
    first_ts: int | None  # epoch ms
    last_ts: int | None
    first_pos: int
    last_pos: int
    seconds: float | None
    path: str | None  # None unless read with ``messages``
    message: str | None  # None unless read with ``messages``


class PackReader(Protocol):
    """What :func:`read_packs` needs of a store (``Store`` and the rule engine's port)."""

    def search_after(
        self, index: str, body: dict[str, Any], *, page_size: int = ...
    ) -> Iterator[dict[str, Any]]: ...


def read_packs(
    store: PackReader,
    index: str,
    query: dict[str, Any],
    *,
    messages: bool = False,
    templates: Collection[str] | None = None,
    nodes: Collection[str] | None = None,
) -> list[PackMember]:
    """Every node's share of the packs ``query`` selects (of ``templates`` only, if given;
    only the packs that hold one of ``nodes``, if given: with their other nodes).

    Exemplar lines and files are read only with ``messages`` (most of a pack's bytes).
    """
    filters: list[dict[str, Any]] = [only_packs(query)]
    if templates is not None:
        if not templates:
            return []
        filters.append({"terms": {F.TEMPLATE_ID: sorted(templates)}})
    if nodes is not None:
        if not nodes:
            return []
        filters.append({"terms": {"host.name": sorted(nodes)}})  # a pack's own: its nodes
    body: dict[str, Any] = {"query": {"bool": {"filter": filters}}, "sort": ["_doc"]}
    # Each node's ranks are never read back; its file and line only with ``messages``.
    skip = [f"{F.PACK}.ranks", F.RANKS]
    if not messages:
        skip += [_MESSAGES, f"{F.PACK}.paths", "message", "log.file.path"]
    body["_source"] = {"excludes": skip}
    out: list[PackMember] = []
    for hit in store.search_after(index, body, page_size=1000):
        out.extend(unpack(hit.get("_source", {})))
    return out


def unpack(src: dict[str, Any]) -> Iterator[PackMember]:
    """The nodes' shares of one pack document's ``_source``.

    What the nodes share is read once per pack and each column converted in one pass (a pack
    holds up to ``MAX_PACK_NODES`` nodes; a paper-size job's diagnosis unpacks millions)."""
    hosts, cols = pack_columns(src, _UNPACKED)
    if not hosts:
        return iter(())
    n = len(hosts)
    level = source_field(src, "log.level")
    shared = (
        str(source_field(src, F.TEMPLATE_ID)),
        str(source_field(src, F.TEMPLATE_TEXT) or ""),
        str(source_field(src, F.STAGE)),
        None if level is None else str(level),
        int_or_none(source_field(src, F.ITERATION)),
        int_or_none(source_field(src, F.ITERATION_SPAN)),
        int(source_field(src, F.COUNT) or 0),
    )
    return map(
        PackMember,
        map(str, hosts),
        *(repeat(value, n) for value in shared),
        map(int_or_none, cols["first"]),
        map(int_or_none, cols["last"]),
        [int(v or 0) for v in cols["first_pos"]],
        [int(v or 0) for v in cols["last_pos"]],
        _floats32(cols["seconds"]),
        [None if v is None else str(v) for v in cols["paths"]],
        [None if v is None else str(v) for v in cols["messages"]],
    )


#: The columns ``unpack`` reads (each node's ranks are never read back).
_UNPACKED = ("first", "last", "first_pos", "last_pos", "seconds", "paths", "messages")


def pack_columns(
    src: dict[str, Any], keys: Iterable[str]
) -> tuple[list[Any], dict[str, list[Any]]]:
    """A pack's nodes (``l4.pack.hosts``) and its per-node columns of ``keys``, one value per
    node (all None for a column missing or of another length)."""
    pack = source_field(src, F.PACK) or {}
    hosts = list(pack.get("hosts") or [])
    n = len(hosts)

    def column(key: str) -> list[Any]:
        values = pack.get(key)
        return list(values) if isinstance(values, list) and len(values) == n else [None] * n

    return hosts, {key: column(key) for key in keys}


def int_or_none(value: Any) -> int | None:
    """A stored number as an int (times, positions, ranks), None for anything else."""
    return int(value) if isinstance(value, int | float) else None


def _float32(value: Any) -> float | None:
    """As an aggregation reads the field: ``l4.iteration_seconds`` is mapped as a 32-bit float."""
    if not isinstance(value, int | float):
        return None
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _floats32(values: list[Any]) -> list[float | None]:
    """``_float32`` of each value, the numbers converted in one ``struct`` call."""
    at = [i for i, v in enumerate(values) if isinstance(v, int | float)]
    out: list[float | None] = [None] * len(values)
    if at:
        numbers = [values[i] for i in at]
        fmt = f"<{len(numbers)}f"
        for i, v in zip(at, struct.unpack(fmt, struct.pack(fmt, *numbers)), strict=True):
            out[i] = v
    return out
