"""Kept lines the healthy majority shares: one ``l4-lines`` document for many nodes.

Below the error level, a template nearly every node prints (torchrun's start-up banner, a
deprecation warning, "no checkpoint found") keeps a line or two per node in ``l4-lines``
(``pipeline._trim_kept``). At 1,024 nodes that is thousands of documents saying one thing, and
they were most of what the embedded cluster indexed for such a job. The write step therefore
*packs* those lines across nodes, as ``packs.py`` packs the event rollups:

* lines of one template, stage, iteration, level and flags, that stand for as many ranks each
  (``l4.folded``) and whose messages differ only in their digits, one per node (a node's second
  such line goes to a second pack), become one document per ``MAX_PACK_NODES`` nodes;
* its indexed fields are its earliest node's line (the *representative*): ``message``,
  ``@timestamp``, rank, file, line and offset; ``host.name`` lists the nodes, the
  representative first, so that a terms aggregation buckets the pack under each of them and a
  per-node count stays right; ``l4.nodes`` counts them; ``l4.until`` is the last time any of
  them printed it;
* ``l4.pack`` (stored, not indexed) keeps each node's own file, line, offset, rank, times and
  message, so that :func:`members` gives back exactly the lines that were packed.

Readers that need a node's own time or line unpack: the rule engine's per-node facts
(``rules/engine.py``) and the sample lines (:func:`own_line`). Lines that may name a node (a
peer's address) and error lines are never packed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from l4_plugin.records import numbers_blanked
from l4_plugin.store import fields as F
from l4_plugin.store.fields import source_field
from l4_plugin.store.packs import attempt_of, int_or_none, pack_columns, packed

Doc = tuple[str, dict[str, Any]]

# What the lines of a pack share (besides their message up to its digits).
_SHARED = (F.JOB_ID, F.TEMPLATE_ID, F.STAGE, F.GENERATION, "log.level", F.ITERATION, F.FOLDED)
# (field of a line document, key in ``l4.pack``): each node's own.
_OWN = (
    ("host.name", "hosts"),
    ("log.file.path", "paths"),
    (F.LINE, "lines"),
    ("log.offset", "offsets"),
    (F.RANK, "ranks"),
    ("@timestamp", "times"),
    (F.UNTIL, "untils"),
    ("message", "messages"),
)


@dataclass(frozen=True, slots=True)
class MemberLine:
    """One node's own line in a pack."""

    node: str
    message: str
    ms: int | None  # its time (epoch ms)
    until: int | None  # the last of its node's folded ranks, when later
    rank: int | None
    path: str | None
    line: int | None
    offset: int | None


def _signature(doc: dict[str, Any]) -> tuple[Any, ...]:
    flags = doc.get(F.FLAGS)
    shared = tuple(doc.get(name) for name in _SHARED)
    blanked = numbers_blanked(str(doc.get("message", "")))
    return (*shared, tuple(flags) if flags else (), blanked, *attempt_of(doc))


def _time(doc: dict[str, Any]) -> tuple[bool, int]:
    ts = doc.get("@timestamp")
    return (ts is None, ts if isinstance(ts, int) else 0)


def pack_lines(lines: Iterable[Doc], doc_id: Callable[..., str]) -> list[Doc]:
    """The line documents to write: lines of two or more nodes with one signature become packs
    (chunks of ``MAX_PACK_NODES`` nodes, in node order); the rest as given.

    A node's k-th line of a signature (in the order given) packs with the other nodes' k-th.
    ``doc_id(*parts)`` names a pack from its signature, its k and its chunk, so the same lines
    give the same ids.
    """
    groups: dict[tuple[Any, ...], list[Doc]] = defaultdict(list)
    nth: dict[tuple[Any, ...], int] = defaultdict(int)
    for doc in lines:
        sig = _signature(doc[1])
        node = str(doc[1]["host.name"])
        k = nth[(*sig, node)]
        nth[(*sig, node)] = k + 1
        groups[(*sig, k)].append(doc)
    return packed(groups, _pack, lambda key, start: doc_id("line-pack", *key, start))


def _pack(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One document for the lines of ``docs`` (one signature, one per node)."""
    docs = sorted(docs, key=lambda d: (*_time(d), str(d["host.name"])))
    first = docs[0]
    out = {k: v for k, v in first.items() if k != F.UNTIL}  # the representative's fields
    pack = {key: [d.get(name) for d in docs] for name, key in _OWN}
    out["host.name"] = pack["hosts"]
    out[F.NODES] = len(docs)
    out[F.PACK] = pack
    ends = [t for d in docs for t in (d.get("@timestamp"), d.get(F.UNTIL)) if isinstance(t, int)]
    start = first.get("@timestamp")
    if ends and (not isinstance(start, int) or max(ends) > start):
        out[F.UNTIL] = max(ends)
    return out


def is_pack(src: dict[str, Any]) -> bool:
    """Whether an ``l4-lines`` ``_source`` is a pack."""
    return source_field(src, F.NODES) is not None


def members(src: dict[str, Any]) -> Iterator[MemberLine]:
    """The nodes' own lines of one pack's ``_source`` (nothing for a line of one node)."""
    hosts, cols = pack_columns(src, [key for _, key in _OWN])
    for i, host in enumerate(hosts):
        yield MemberLine(
            node=str(host),
            message=str(cols["messages"][i] or ""),
            ms=int_or_none(cols["times"][i]),
            until=int_or_none(cols["untils"][i]),
            rank=int_or_none(cols["ranks"][i]),
            path=None if cols["paths"][i] is None else str(cols["paths"][i]),
            line=int_or_none(cols["lines"][i]),
            offset=int_or_none(cols["offsets"][i]),
        )


def own_line(src: dict[str, Any], prefer: Sequence[str] = ()) -> dict[str, Any]:
    """A line ``_source`` as one node's line: a pack becomes the line of the first node of
    ``prefer`` it holds (else its representative's), with ``host.name`` one node; any other
    ``_source`` is returned as it is. Fields the ``_source`` does not carry stay absent."""
    if not is_pack(src):
        return src
    lines = list(members(src))
    chosen = next((m for p in prefer for m in lines if m.node == p), lines[0] if lines else None)
    # Dotted keys as L4 writes them, whatever shape the cluster's source filtering returned.
    out = {k: v for k, v in _flat(src).items() if k not in (F.NODES, F.PACK)}
    if chosen is None:
        hosts = source_field(src, "host.name")
        out["host.name"] = hosts[0] if isinstance(hosts, list) and hosts else hosts
        return out
    own = {
        "host.name": chosen.node,
        "message": chosen.message,
        "@timestamp": chosen.ms,
        F.RANK: chosen.rank,
        "log.file.path": chosen.path,
        F.LINE: chosen.line,
        "log.offset": chosen.offset,
        F.UNTIL: chosen.until,
    }
    for name, value in own.items():
        if name in out:
            out[name] = value
    return {k: v for k, v in out.items() if v is not None}


def _flat(src: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A ``_source`` with dotted keys; ``l4.pack`` is left whole."""
    out: dict[str, Any] = {}
    for key, value in src.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name != F.PACK:
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = value
    return out
