"""Reading ``l4-events`` node by node, whatever the packing (ARCHITECTURE.md, *Documents*).

The healthy majority's rollups are packs (``packs.py``): one document for the nodes that agree,
whose indexed times, positions and message are those of all of them together. A reader that
grouped rollups by node and took a pack's fields for each of its nodes would read an aggregate
as one node's value. Every per-node read of ``l4-events`` therefore goes through this module:
the cluster aggregates the documents of one node each, the nodes of each pack are read back from
``l4.pack`` and folded into the same rows, and the caller gets what one document per node would
have given. Nothing outside ``store/`` unpacks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any, Literal, Protocol

from l4_plugin.store import fields as F
from l4_plugin.store.fields import source_field
from l4_plugin.store.names import IndexNames
from l4_plugin.store.packs import PackMember, int_or_none, only_packs, read_packs, without_packs

Query = dict[str, Any]
PAGE = 50_000  # composite buckets per request


class EventSource(Protocol):
    """What the readers need of a store (``Store`` and the rule engine's port)."""

    @property
    def names(self) -> IndexNames: ...

    def search_after(
        self, index: str, body: dict[str, Any], *, page_size: int = ...
    ) -> Iterator[dict[str, Any]]: ...

    def composite(
        self,
        index: str,
        sources: list[dict[str, Any]],
        *,
        query: dict[str, Any] | None = None,
        aggs: dict[str, Any] | None = None,
        page_size: int = 1000,
    ) -> Iterator[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class Key:
    """A column rows are grouped by: ``name`` in the row, ``field`` of the documents; with
    ``missing``, documents without the field make a row of their own (None), else none."""

    name: str
    field: str
    missing: bool = False


@dataclass(frozen=True, slots=True)
class Metric:
    """A value of a row: the ``op`` of ``field`` over the row's documents."""

    op: Literal["sum", "min", "max"]
    field: str


@dataclass(slots=True)
class Row:
    """One group of per-node rollups: its key and each metric (None: no document had it)."""

    key: dict[str, Any]
    values: dict[str, Any]


# What one node's share of a pack holds (its attribute), by the field its own document would have
# had.
_MEMBER = {
    "host.name": "node",
    F.TEMPLATE_ID: "template_id",
    F.TEMPLATE_TEXT: "template_text",
    F.STAGE: "stage",
    "log.level": "level",
    F.ITERATION: "iteration",
    F.ITERATION_SPAN: "span",
    F.COUNT: "count",
    F.FIRST_TS: "first_ts",
    F.LAST_TS: "last_ts",
    F.FIRST_POS: "first_pos",
    F.LAST_POS: "last_pos",
    F.ITERATION_SECONDS: "seconds",
}


def _fold_members(
    rows: dict[tuple[Any, ...], Row],
    members: Iterable[PackMember],
    keys: Sequence[Key],
    metrics: Mapping[str, Metric],
) -> None:
    """The packs' nodes folded into ``rows`` (by key, as ``table`` keys them): a member whose
    key lacks a field that is not ``missing`` is left out, as the composite leaves out such
    documents; a new key makes a row after the others."""
    names = [k.name for k in keys]
    field = {k.name: k.field for k in keys}  # a name given twice: its later field, as a dict
    key_of = _getter([_MEMBER[field[name]] for name in names])
    values_of = _getter([_MEMBER[m.field] for m in metrics.values()])
    required = _getter([names[i] for i, k in enumerate(keys) if not k.missing], dict)
    folds = [(name, _FOLDS[m.op]) for name, m in metrics.items()]
    for member in members:
        at = key_of(member)
        key = dict(zip(names, at, strict=True))
        if None in required(key):
            continue  # the composite leaves such documents out too
        values = values_of(member)
        row = rows.get(at)
        if row is None:
            rows[at] = Row(key, dict(zip(metrics, values, strict=True)))
            continue
        have = row.values
        for (name, fold), value in zip(folds, values, strict=True):
            have[name] = fold(have[name], value)


def _getter(names: list[str], of: type = PackMember) -> Callable[[Any], tuple[Any, ...]]:
    """A function giving the attributes ``names`` of a member (``of`` a dict: its items) as a
    tuple, of one or none too."""
    get = attrgetter if of is PackMember else itemgetter
    if len(names) == 1:
        one = get(names[0])
        return lambda m: (one(m),)
    if not names:
        return lambda m: ()
    return get(*names)


def _sum(old: Any, new: Any) -> Any:
    return new if old is None else old if new is None else old + new


def _min(old: Any, new: Any) -> Any:
    return new if old is None else old if new is None else min(old, new)


def _max(old: Any, new: Any) -> Any:
    return new if old is None else old if new is None else max(old, new)


#: How each op folds a value into a row's (None: no value yet, or none to add).
_FOLDS: dict[str, Callable[[Any, Any], Any]] = {"sum": _sum, "min": _min, "max": _max}


def sort_time(value: Any) -> float:
    """A hit's sort time, missing last (as the searches sort)."""
    return float(value) if isinstance(value, int | float) else math.inf


class JobEvents:
    """The rollups ``query`` selects (a job's complete generation), read node by node; the packs'
    nodes are read once and serve every table."""

    def __init__(self, store: EventSource, query: Query, *, page_size: int = PAGE) -> None:
        self.store = store
        self.query = query
        self.page_size = page_size
        self._members: list[PackMember] | None = None

    def members(self) -> list[PackMember]:
        """Every node's share of the packs the query selects (times and counts, no message)."""
        if self._members is None:
            self._members = read_packs(self.store, self.store.names.events, self.query)
        return self._members

    def table(self, keys: Sequence[Key], metrics: Mapping[str, Metric]) -> list[Row]:
        """One row per distinct key of the per-node rollups: the cluster's composite over the
        documents of one node each (in its key order), then the packs' nodes folded in (keys
        new to the table after, in pack order)."""
        sources = [
            {
                k.name: {
                    "terms": {"field": k.field, **({"missing_bucket": True} if k.missing else {})}
                }
            }
            for k in keys
        ]
        aggs = {name: {m.op: {"field": m.field}} for name, m in metrics.items()}
        rows: dict[tuple[Any, ...], Row] = {}
        for b in self.store.composite(
            self.store.names.events,
            sources,
            query=without_packs(self.query),
            aggs=aggs,
            page_size=self.page_size,
        ):
            key = dict(b["key"])
            values = {name: b.get(name, {}).get("value") for name in metrics}
            rows[tuple(key[k.name] for k in keys)] = Row(key, values)
        _fold_members(rows, self.members(), keys, metrics)
        return list(rows.values())

    def earliest_messages(
        self, template_ids: Sequence[str], size: int
    ) -> dict[tuple[str, str], list[str]]:
        """Up to ``size`` exemplar messages per (node, template) of ``template_ids``, earliest
        first (by ``l4.first_ts``, the cluster's order among equal times), keys sorted."""
        if not template_ids:
            return {}
        query = {"bool": {"filter": [without_packs(self.query), _templates(template_ids)]}}
        found = node_top_hits(self.store, self.store.names.events, query, F.FIRST_TS, size)
        for r in read_packs(
            self.store, self.store.names.events, self.query, messages=True, templates=template_ids
        ):
            found[(r.node, r.template_id)].append((sort_time(r.first_ts), r.message))
        return earliest_first(found, size)

    def bucket_messages(
        self, template_ids: Sequence[str], nodes: Sequence[str]
    ) -> list[tuple[str, str, int | None, float, str]]:
        """``(node, template, iteration bucket, first time, message)`` of every rollup of
        ``template_ids``: one per node and iteration bucket (the bucket's first line of the
        template, its time in epoch ms; inf: none), the packs' nodes included, of ``nodes``
        only (a few: the documents of a template printed once per bucket, a progress bar, are
        a hundred per node)."""
        if not template_ids or not nodes:
            return []
        where = [without_packs(self.query), _templates(template_ids)]
        body = {
            "query": {"bool": {"filter": [*where, {"terms": {"host.name": list(nodes)}}]}},
            "sort": ["_doc"],
            "_source": ["host.name", F.TEMPLATE_ID, F.ITERATION, "message", F.FIRST_TS],
        }
        out: list[tuple[str, str, int | None, float, str]] = []
        for hit in self.store.search_after(self.store.names.events, body, page_size=1000):
            src = hit.get("_source", {})
            node, message = source_field(src, "host.name"), source_field(src, "message")
            if node is not None and message is not None:
                tid, first = source_field(src, F.TEMPLATE_ID), source_field(src, F.FIRST_TS)
                it = int_or_none(source_field(src, F.ITERATION))
                out.append((str(node), str(tid), it, sort_time(first), str(message)))
        wanted = set(nodes)
        for r in read_packs(
            self.store,
            self.store.names.events,
            self.query,
            messages=True,
            templates=template_ids,
            nodes=wanted,  # of the few packs that hold them, not of every pack of the templates
        ):
            if r.message is not None and r.node in wanted:
                out.append((r.node, r.template_id, r.iteration, sort_time(r.first_ts), r.message))
        return out


def _templates(template_ids: Collection[str]) -> Query:
    return {"terms": {F.TEMPLATE_ID: list(template_ids)}}


def node_top_hits(
    store: EventSource, index: str, query: Query, sort_field: str, size: int
) -> defaultdict[tuple[str, str], list[tuple[float, Any]]]:
    """(sort time, message) of the first ``size`` documents per (node, template) of ``query``."""
    found: defaultdict[tuple[str, str], list[tuple[float, Any]]] = defaultdict(list)
    for b in store.composite(
        index,
        [{"node": {"terms": {"field": "host.name"}}}, {"t": {"terms": {"field": F.TEMPLATE_ID}}}],
        query=query,
        aggs={
            "x": {
                "top_hits": {
                    "size": size,
                    "sort": [{sort_field: {"order": "asc", "missing": "_last"}}],
                    "_source": ["message", sort_field],
                }
            }
        },
        page_size=PAGE,
    ):
        key = (str(b["key"]["node"]), str(b["key"]["t"]))
        for hit in b.get("x", {}).get("hits", {}).get("hits", []):
            src = hit.get("_source", {})
            found[key].append(
                (sort_time(source_field(src, sort_field)), source_field(src, "message"))
            )
    return found


def earliest_first(
    found: Mapping[tuple[str, str], list[tuple[float, Any]]], size: int
) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for key, hits in sorted(found.items()):
        hits.sort(key=lambda h: h[0])  # stable: the cluster's order among equal times
        messages = [str(m) for _, m in hits[:size] if m]
        if messages:
            out[key] = messages
    return out


def template_totals(
    store: EventSource, query: Query, *, page_size: int = PAGE
) -> Iterator[tuple[str, str, int, int]]:
    """(template, job, lines, nodes) of the rollups ``query`` selects: a pack's ``l4.count`` is
    each of its nodes' count and its ``l4.count_all`` theirs together, and a terms aggregation
    counts each node of its ``host.name`` list."""
    for b in store.composite(
        store.names.events,
        [{"t": {"terms": {"field": F.TEMPLATE_ID}}}, {"j": {"terms": {"field": F.JOB_ID}}}],
        query=query,
        aggs={
            "own": {
                "filter": without_packs({"match_all": {}}),
                "aggs": {"n": {"sum": {"field": F.COUNT}}},
            },
            "packed": {
                "filter": only_packs({"match_all": {}}),
                "aggs": {"n": {"sum": {"field": F.COUNT_ALL}}},
            },
            "nodes": {"cardinality": {"field": "host.name"}},
        },
        page_size=page_size,
    ):
        own = b.get("own", {}).get("n", {}).get("value") or 0
        packed = b.get("packed", {}).get("n", {}).get("value") or 0
        nodes = b.get("nodes", {}).get("value") or 0
        yield str(b["key"]["t"]), str(b["key"]["j"]), int(own) + int(packed), int(nodes)
