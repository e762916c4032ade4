"""Reading ``l4-lines`` node by node, whatever the packing (ARCHITECTURE.md, *Documents*).

Lines the healthy majority shares are packs (``line_packs.py``): one document whose indexed
fields are its earliest node's line and whose ``host.name`` lists every node. Counted per node
by the cluster, a pack is right; read as one node's line (its message, time, rank, file), it is
the representative's unless unpacked. Every reader that needs a node's own line goes through
this module: facts per node and selection (the rule engine), sample lines (the rule engine, the
diagnosis, ``l4 rules new``), the earliest messages per node and template, each node's last
time. Each answers as if every node had its own documents. Nothing outside ``store/`` unpacks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from l4_plugin.store import fields as F
from l4_plugin.store.events import PAGE, EventSource, earliest_first, node_top_hits, sort_time
from l4_plugin.store.fields import source_field
from l4_plugin.store.line_packs import members, own_line
from l4_plugin.store.packs import only_packs, without_packs

Query = dict[str, Any]
# What a sample line carries (a pack's columns are read to answer as one of its nodes).
_SAMPLE_SOURCE = ["message", "host.name", F.RANK, "@timestamp", F.PACK, F.NODES]


class LineSource(EventSource, Protocol):
    """What the readers need of a store: ``EventSource`` and two searches."""

    def search(self, index: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def count(self, index: str, query: dict[str, Any] | None = None) -> int: ...


@dataclass(frozen=True, slots=True)
class LineFacts:
    """A node's lines matching one selection: how many (lines folded into them included), the
    first and the last time (epoch ms; a folded rank's last time counts)."""

    count: int
    first_ms: float | None
    last_ms: float | None


def _fold(old: LineFacts | None, new: LineFacts) -> LineFacts:
    if old is None:
        return new
    firsts = [t for t in (old.first_ms, new.first_ms) if t is not None]
    lasts = [t for t in (old.last_ms, new.last_ms) if t is not None]
    return LineFacts(
        old.count + new.count, min(firsts) if firsts else None, max(lasts) if lasts else None
    )


class JobLines:
    """The kept lines ``query`` selects (a job's complete generation), read node by node."""

    def __init__(self, store: LineSource, query: Query) -> None:
        self.store = store
        self.query = query
        self._any: bool | None = None
        self._packs: bool | None = None

    @property
    def index(self) -> str:
        return self.store.names.lines

    def any(self) -> bool:
        """Whether the query selects any line (asked once)."""
        if self._any is None:
            self._any = bool(self.store.count(self.index, self.query))
        return self._any

    def has_packs(self) -> bool:
        """Whether any of those lines is a pack (asked once)."""
        if self._packs is None:
            self._packs = bool(self.store.count(self.index, only_packs(self.query)))
        return self._packs

    def _pack_hits(self, query: Query, source: list[str]) -> Iterator[dict[str, Any]]:
        if not self.has_packs():
            return iter(())
        body = {"query": only_packs(query), "sort": ["_doc"], "_source": source}
        return self.store.search_after(self.index, body, page_size=1000)

    def earliest_messages(
        self, template_ids: Sequence[str], size: int
    ) -> dict[tuple[str, str], list[str]]:
        """Up to ``size`` messages per (node, template) of ``template_ids``, earliest first (by
        ``@timestamp``, the cluster's order among equal times), keys sorted."""
        if not template_ids or not self.any():
            return {}
        terms = {"terms": {F.TEMPLATE_ID: list(template_ids)}}
        query = {"bool": {"filter": [without_packs(self.query), terms]}}
        found = node_top_hits(self.store, self.index, query, "@timestamp", size)
        packed = {"bool": {"filter": [self.query, terms]}}
        for hit in self._pack_hits(packed, [F.PACK, F.TEMPLATE_ID]):
            src = hit.get("_source", {})
            tid = str(source_field(src, F.TEMPLATE_ID))
            for m in members(src):
                found[(m.node, tid)].append((sort_time(m.ms), m.message))
        return earliest_first(found, size)

    def earliest_by_template(
        self, where: Sequence[Query], size: int, prefer: Sequence[str] = ()
    ) -> dict[str, list[dict[str, Any]]]:
        """Per template, the ``size`` earliest lines (time, then line number) that ``where``
        also selects, each as one node's line: a pack's as that of the first node of
        ``prefer`` it holds, else its earliest node's."""
        out: dict[str, list[dict[str, Any]]] = {}
        for b in self.store.composite(
            self.index,
            [{"t": {"terms": {"field": F.TEMPLATE_ID}}}],
            query={"bool": {"filter": [self.query, *where]}},
            aggs={
                "x": {
                    "top_hits": {
                        "size": size,
                        "sort": [
                            {"@timestamp": {"order": "asc", "missing": "_last"}},
                            {F.LINE: {"order": "asc"}},
                        ],
                        "_source": [*_SAMPLE_SOURCE[:4], "log.file.path", F.LINE, F.PACK, F.NODES],
                    }
                }
            },
            page_size=PAGE,
        ):
            hits = b.get("x", {}).get("hits", {}).get("hits", [])
            sources = [own_line(h.get("_source", {}), prefer) for h in hits]
            if sources:
                out[str(b["key"]["t"])] = sources
        return out

    def first_line(self, where: Query, fields: Sequence[str]) -> dict[str, Any]:
        """The earliest line ``where`` also selects (its ``fields``), as one node's: a pack's as
        its earliest node's; {} when there is none."""
        query = {"bool": {"filter": [self.query, where]}}
        if not self.store.count(self.index, query):
            return {}
        body = {
            "size": 1,
            "query": query,
            "sort": [{"@timestamp": {"order": "asc", "missing": "_last"}}],
            "_source": [*fields, F.PACK, F.NODES],
        }
        hits = self.store.search(self.index, body)["hits"]["hits"]
        return own_line(dict(hits[0].get("_source", {}))) if hits else {}

    def latest_lines(self, template_ids: Sequence[str], size: int) -> list[tuple[float, str, str]]:
        """``(epoch seconds, message, template id)`` of the ``size`` latest stamped lines of
        ``template_ids`` (a pack's as its first line), latest first."""
        if not template_ids or not self.any():
            return []
        terms = {"terms": {F.TEMPLATE_ID: list(template_ids)}}
        body = {
            "size": size,
            "query": {"bool": {"filter": [self.query, terms, {"exists": {"field": "@timestamp"}}]}},
            "sort": [{"@timestamp": {"order": "desc"}}],
            "_source": ["message", "@timestamp", F.TEMPLATE_ID],
        }
        out: list[tuple[float, str, str]] = []
        for hit in self.store.search(self.index, body)["hits"]["hits"]:
            src = hit.get("_source", {})
            ms, message = src.get("@timestamp"), src.get("message")
            if isinstance(ms, int | float) and isinstance(message, str):
                out.append((float(ms) / 1000.0, message, str(source_field(src, F.TEMPLATE_ID))))
        return out

    def node_last_ms(self, page_size: int = PAGE) -> dict[str, float]:
        """The last time (epoch ms) each node printed a kept line."""
        out: dict[str, float] = {}
        for b in self.store.composite(
            self.index,
            [{"node": {"terms": {"field": "host.name"}}}],
            query=without_packs(self.query),
            aggs={"last": {"max": {"field": "@timestamp"}}},
            page_size=page_size,
        ):
            value = b["last"]["value"]
            if isinstance(value, int | float):
                out[str(b["key"]["node"])] = value
        for hit in self._pack_hits(self.query, [F.PACK]):
            for m in members(hit.get("_source", {})):
                if m.ms is not None and m.ms > out.get(m.node, -float("inf")):
                    out[m.node] = m.ms
        return out

    def node_facts(
        self, queries: Mapping[str, Query], page_size: int = PAGE
    ) -> dict[str, dict[str, LineFacts]]:
        """Per selection (name → query), per node: its lines' :class:`LineFacts`. The cluster
        aggregates the lines of one node each; each pack a selection matches (named queries)
        adds its nodes' own lines."""
        out: dict[str, dict[str, LineFacts]] = {name: {} for name in queries}
        for bucket in self.store.composite(
            self.index,
            [{"node": {"terms": {"field": "host.name"}}}],
            query=_matching(without_packs(self.query), queries),
            aggs=_facts_aggregations(queries),
            page_size=page_size,
        ):
            node = str(bucket["key"]["node"])
            for name in queries:
                agg = bucket[name]
                if agg["doc_count"]:
                    folded = agg.get("folded", {}).get("value") or 0
                    lasts = [agg["last"]["value"], agg.get("until", {}).get("value")]
                    out[name][node] = LineFacts(
                        int(agg["doc_count"]) + int(folded),
                        agg["first"]["value"],
                        max((v for v in lasts if v is not None), default=None),
                    )
        self._add_packs(queries, out)
        return out

    def _add_packs(
        self, queries: Mapping[str, Query], out: dict[str, dict[str, LineFacts]]
    ) -> None:
        """Each node of a pack a selection matches, with its own line, time and folded ranks."""
        if not self.has_packs():
            return
        named = [{"bool": {"filter": [q], "_name": name}} for name, q in queries.items()]
        body = {
            "query": {
                "bool": {
                    "filter": [only_packs(self.query)],
                    "should": named,
                    "minimum_should_match": 1,
                }
            },
            "sort": ["_doc"],
            "_source": [F.PACK, F.FOLDED],
        }
        for hit in self.store.search_after(self.index, body, page_size=1000):
            src = hit.get("_source", {})
            folded = int(source_field(src, F.FOLDED) or 0)
            for member in members(src):
                ends = [t for t in (member.ms, member.until) if t is not None]
                own = LineFacts(1 + folded, member.ms, max(ends) if ends else None)
                for name in hit.get("matched_queries", ()):
                    if name in out:
                        out[name][member.node] = _fold(out[name].get(member.node), own)

    def samples(
        self, queries: Mapping[str, Query], nodes: Sequence[str], size: int = 3
    ) -> dict[str, list[dict[str, Any]]]:
        """Per selection, its ``size`` earliest lines on ``nodes`` (all nodes when empty), each
        as one node's line: a pack's as that of the first of ``nodes`` it holds."""
        response = self.store.search(self.index, _samples_body(self.query, queries, nodes, size))
        out: dict[str, list[dict[str, Any]]] = {}
        for name in queries:
            hits = response.get("aggregations", {}).get(name, {}).get("hits", {})
            out[name] = [
                own_line(h.get("_source", {}), nodes) for h in hits.get("hits", {}).get("hits", [])
            ]
        return out


def _matching(scope: Query, queries: Mapping[str, Query]) -> Query:
    """Lines of ``scope`` that match at least one selection (keeps the composite small)."""
    return {
        "bool": {"filter": [scope], "should": list(queries.values()), "minimum_should_match": 1}
    }


def _facts_aggregations(queries: Mapping[str, Query]) -> dict[str, Any]:
    """Per-selection sub-aggregations of a per-node composite bucket: count, first, last.

    A kept line may stand for lines of other ranks folded into it at ingest: their number is
    ``l4.folded`` (added to the bucket's documents) and the last one's time ``l4.until``.
    """
    return {
        name: {
            "filter": query,
            "aggs": {
                "first": {"min": {"field": "@timestamp"}},
                "last": {"max": {"field": "@timestamp"}},
                "folded": {"sum": {"field": F.FOLDED}},
                "until": {"max": {"field": F.UNTIL}},
            },
        }
        for name, query in queries.items()
    }


def _samples_body(
    scope: Query, queries: Mapping[str, Query], nodes: Sequence[str], size: int
) -> dict[str, Any]:
    """A search body returning the earliest ``size`` lines per selection on ``nodes``."""
    filters: list[Query] = [scope]
    if nodes:
        filters.append({"terms": {"host.name": list(nodes)}})
    # The top-level query keeps the aggregations' parent set to the matching lines: filter
    # aggregations test each parent document, the query uses the index.
    return {
        "size": 0,
        "track_total_hits": False,
        "query": {
            "bool": {"filter": filters, "should": list(queries.values()), "minimum_should_match": 1}
        },
        "aggs": {
            name: {
                "filter": query,
                "aggs": {
                    "hits": {
                        "top_hits": {
                            "size": size,
                            "sort": [{"@timestamp": {"order": "asc", "missing": "_last"}}],
                            "_source": _SAMPLE_SOURCE,
                        }
                    }
                },
            }
            for name, query in queries.items()
        },
    }


__all__ = ["JobLines", "LineFacts", "LineSource"]
