"""The store interface the rest of L4 uses, with the behaviour both flavours share.

Adapters (``elastic.py``, ``opensearch.py``) implement a handful of primitive calls with their own
client; this class adds what must be identical everywhere: bounded retries with backoff for
transient failures, readable ``StoreError`` messages naming the index and the operation, bulk
chunking, composite-aggregation pagination and template installation.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from l4_plugin.errors import ConflictError, StoreError
from l4_plugin.store.index_templates import template_bodies
from l4_plugin.store.names import IndexNames
from l4_plugin.urls import redact_url

T = TypeVar("T")

# Statuses worth another try: throttled, or the cluster is (re)starting.
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
# Test-only (crash tests): stop before the write request after this many, until killed; and
# documents per bulk request, so that a small job still takes many requests to write.
STALL_ENV = "L4_TEST_STALL_AFTER_WRITES"
BULK_DOCS_ENV = "L4_TEST_BULK_DOCS"


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What ``GET /`` says about a cluster."""

    flavour: str  # "elasticsearch" | "opensearch"
    version: str
    name: str
    url: str


@dataclass(frozen=True, slots=True)
class VersionedDoc:
    """A document with the sequence number and primary term used for optimistic concurrency."""

    id: str
    source: dict[str, Any]
    seq_no: int
    primary_term: int


@dataclass(frozen=True, slots=True)
class CallFailure:
    """A client exception reduced to what the retry loop and the error message need."""

    status: int | None
    reason: str
    transient: bool
    conflict: bool = False
    not_found: bool = False


class Store(ABC):
    """One cluster, one index prefix. Create with ``l4_plugin.store.connect``."""

    flavour: str = ""

    def __init__(
        self,
        url: str,
        names: IndexNames,
        *,
        max_retries: int = 4,
        retry_backoff: float = 0.5,
        display_url: str | None = None,
    ) -> None:
        self.url = url
        self.display_url = display_url or redact_url(url)
        self.names = names
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self._writes = 0
        # What opens this store again in another process (``__reduce__``): the base options
        # here, the adapter's own (credentials included) added by its constructor.
        self._options: dict[str, Any] = {
            "max_retries": max_retries,
            "retry_backoff": retry_backoff,
            "display_url": self.display_url,
        }
        self._stall_after = _env_int(STALL_ENV)
        self._bulk_docs = _env_int(BULK_DOCS_ENV)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # A store travels to the processes that write an ingest's documents (``ingest.owners``)
        # as what opens it: a new client there, on the same cluster, prefix and credentials.
        return _reopen, (type(self), self.url, self.names, self._options)

    # -- primitives every adapter implements -------------------------------------------------
    @abstractmethod
    def _info(self) -> dict[str, Any]: ...

    @abstractmethod
    def _search(
        self, index: str, body: dict[str, Any], params: dict[str, Any]
    ) -> dict[str, Any]: ...

    @abstractmethod
    def _count(self, index: str, body: dict[str, Any]) -> dict[str, Any]: ...

    @abstractmethod
    def _bulk(self, operations: list[str], refresh: bool) -> dict[str, Any]:
        """Send NDJSON lines (actions and sources, each serialised once)."""

    @abstractmethod
    def _get(self, index: str, doc_id: str) -> dict[str, Any]: ...

    @abstractmethod
    def _index(
        self, index: str, doc_id: str, doc: dict[str, Any], params: dict[str, Any]
    ) -> dict[str, Any]: ...

    @abstractmethod
    def _delete(self, index: str, doc_id: str, params: dict[str, Any]) -> dict[str, Any]: ...

    @abstractmethod
    def _refresh(self, index: str) -> None: ...

    @abstractmethod
    def _put_template(self, name: str, body: dict[str, Any]) -> None: ...

    @abstractmethod
    def _get_templates(self, name: str) -> list[dict[str, Any]]: ...

    @abstractmethod
    def _put_mapping(self, index: str, mapping: dict[str, Any]) -> None: ...

    @abstractmethod
    def _delete_by_query(self, index: str, body: dict[str, Any]) -> dict[str, Any]: ...

    @abstractmethod
    def _cat_indices(self, pattern: str) -> list[dict[str, Any]]: ...

    @abstractmethod
    def _delete_indices(self, pattern: str) -> None: ...

    @abstractmethod
    def _open_pit(self, index: str, keep_alive: str) -> str:
        """Open a point in time over ``index``; returns its id."""

    @abstractmethod
    def _close_pit(self, pit_id: str) -> None: ...

    @abstractmethod
    def _search_pit(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /_search`` without an index: the body's ``pit`` names what is searched."""

    @abstractmethod
    def _scroll(self, scroll_id: str, keep_alive: str) -> dict[str, Any]: ...

    @abstractmethod
    def _clear_scroll(self, scroll_id: str) -> None: ...

    @abstractmethod
    def _field_caps(self, index: str, fields: list[str]) -> dict[str, Any]: ...

    @abstractmethod
    def _classify(self, exc: Exception) -> CallFailure | None:
        """Map a client exception to a CallFailure; None = not a cluster error (re-raise)."""

    @abstractmethod
    def close(self) -> None:
        """Release the client's connections."""

    def _before_write(self, what: str) -> None:
        """Count write requests; with ``L4_TEST_STALL_AFTER_WRITES=N`` hang before the N+1st
        (the crash tests ``kill -9`` the process there: a real crash at a chosen point)."""
        if self._stall_after is not None and self._writes >= self._stall_after:
            print(f"l4-test: stalled after {self._writes} writes, before {what}", file=sys.stderr)
            sys.stderr.flush()
            time.sleep(3600)
        self._writes += 1

    # -- retry and error wrapping ------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[], T]) -> T:
        attempt = 0
        while True:
            try:
                return fn()
            except Exception as exc:
                failure = self._classify(exc)
                if failure is None:
                    raise
                if failure.not_found:
                    raise _NotFound(what) from None
                if failure.conflict:
                    raise ConflictError(f"{what}: version conflict ({failure.reason})") from None
                if failure.transient and attempt < self.max_retries:
                    time.sleep(self.retry_backoff * (2**attempt))
                    attempt += 1
                    continue
                status = f"HTTP {failure.status}: " if failure.status else ""
                tries = f" (after {attempt + 1} attempts)" if attempt else ""
                raise StoreError(
                    f"{what} failed on {self.display_url}: {status}{failure.reason}{tries}"
                ) from None

    # -- public interface --------------------------------------------------------------------
    def info(self) -> ClusterInfo:
        """Flavour, version and name of the cluster."""
        raw = self._call("GET /", self._info)
        version = raw.get("version", {})
        flavour = "opensearch" if version.get("distribution") == "opensearch" else "elasticsearch"
        return ClusterInfo(
            flavour, str(version.get("number", "?")), raw.get("cluster_name", ""), self.display_url
        )

    def search(
        self, index: str, body: dict[str, Any], *, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Run a search (query and/or aggregations); returns the raw response."""
        return self._call(f"search on {index}", lambda: self._search(index, body, params or {}))

    def count(self, index: str, query: dict[str, Any] | None = None) -> int:
        """Number of documents matching ``query`` (all when None); 0 for a missing index."""
        body = {"query": query} if query else {}
        try:
            return int(self._call(f"count on {index}", lambda: self._count(index, body))["count"])
        except _NotFound:
            return 0

    def composite(
        self,
        index: str,
        sources: list[dict[str, Any]],
        *,
        query: dict[str, Any] | None = None,
        aggs: dict[str, Any] | None = None,
        page_size: int = 1000,
    ) -> Iterator[dict[str, Any]]:
        """Every bucket of a composite aggregation, following ``after_key`` page by page."""
        after: dict[str, Any] | None = None
        while True:
            comp: dict[str, Any] = {"size": page_size, "sources": sources}
            if after is not None:
                comp["after"] = after
            agg: dict[str, Any] = {"composite": comp}
            if aggs:
                agg["aggs"] = aggs
            body: dict[str, Any] = {"size": 0, "aggs": {"c": agg}, "track_total_hits": False}
            if query:
                body["query"] = query
            try:
                res = self.search(index, body)
            except _NotFound:
                return
            result = res.get("aggregations", {}).get("c", {})
            buckets = result.get("buckets", [])
            yield from buckets
            after = result.get("after_key")
            if not buckets or after is None or len(buckets) < page_size:
                return

    def bulk_index(
        self,
        index: str,
        docs: Iterable[tuple[str, dict[str, Any]]],
        *,
        refresh: bool = False,
        chunk_docs: int = 2000,
        chunk_bytes: int = 8 * 1024 * 1024,
    ) -> int:
        """Index ``(id, source)`` pairs (same id overwrites); returns how many were written.

        Each document is serialised once: the request is sized by the very lines it sends."""
        written = 0
        ops: list[str] = []
        size = 0
        if self._bulk_docs is not None:
            chunk_docs = min(chunk_docs, self._bulk_docs)
        for doc_id, source in docs:
            action = _dumps({"index": {"_index": index, "_id": doc_id}})
            line = _dumps(source)
            ops += (action, line)
            size += len(action) + len(line) + 2
            if len(ops) >= 2 * chunk_docs or size >= chunk_bytes:
                written += self._bulk_chunk(index, ops, refresh=False)
                ops, size = [], 0
        if ops:
            written += self._bulk_chunk(index, ops, refresh=False)
        if refresh:
            self.refresh(index)
        return written

    def _bulk_chunk(self, index: str, ops: list[str], *, refresh: bool) -> int:
        pending = ops
        self._before_write(f"bulk write to {index}")
        for attempt in range(self.max_retries + 1):
            res = self._call(f"bulk write to {index}", lambda p=pending: self._bulk(p, refresh))  # type: ignore[misc]
            if not res.get("errors"):
                return len(ops) // 2
            retry: list[str] = []
            fatal: list[str] = []
            for i, item in enumerate(res.get("items", [])):
                result = next(iter(item.values()))
                status = int(result.get("status", 200))
                if status < 300:
                    continue
                if status in TRANSIENT_STATUSES:
                    retry += pending[2 * i : 2 * i + 2]
                else:
                    err = result.get("error", {})
                    reason = err.get("reason", err) if isinstance(err, dict) else err
                    fatal.append(f"{result.get('_id')}: {reason}")
            if fatal:
                raise StoreError(
                    f"bulk write to {index} on {self.display_url}: {len(fatal)} of "
                    f"{len(pending) // 2} documents rejected; first: {fatal[0]}"
                )
            if not retry:
                return len(ops) // 2
            pending = retry
            time.sleep(self.retry_backoff * (2**attempt))
        raise StoreError(
            f"bulk write to {index} on {self.display_url}: {len(pending) // 2} documents still "
            f"throttled after {self.max_retries + 1} attempts"
        )

    def get(self, index: str, doc_id: str) -> VersionedDoc | None:
        """One document with its seq_no/primary_term, or None when it (or the index) is absent."""
        try:
            raw = self._call(f"get {index}/{doc_id}", lambda: self._get(index, doc_id))
        except _NotFound:
            return None
        if not raw.get("found", True):
            return None
        return VersionedDoc(
            raw["_id"], raw.get("_source", {}), int(raw["_seq_no"]), int(raw["_primary_term"])
        )

    def put(
        self,
        index: str,
        doc_id: str,
        doc: dict[str, Any],
        *,
        if_seq_no: int | None = None,
        if_primary_term: int | None = None,
        create: bool = False,
        refresh: bool = False,
    ) -> VersionedDoc:
        """Write one document; conditional writes raise ``ConflictError`` when they lose."""
        params: dict[str, Any] = {}
        if if_seq_no is not None and if_primary_term is not None:
            params["if_seq_no"] = if_seq_no
            params["if_primary_term"] = if_primary_term
        if create:
            params["op_type"] = "create"
        if refresh:
            params["refresh"] = "true"
        self._before_write(f"write {index}/{doc_id}")
        raw = self._call(f"write {index}/{doc_id}", lambda: self._index(index, doc_id, doc, params))
        return VersionedDoc(doc_id, doc, int(raw["_seq_no"]), int(raw["_primary_term"]))

    def delete(
        self,
        index: str,
        doc_id: str,
        *,
        if_seq_no: int | None = None,
        if_primary_term: int | None = None,
    ) -> bool:
        """Delete one document; False when it was not there."""
        params: dict[str, Any] = {}
        if if_seq_no is not None and if_primary_term is not None:
            params = {"if_seq_no": if_seq_no, "if_primary_term": if_primary_term}
        try:
            self._call(f"delete {index}/{doc_id}", lambda: self._delete(index, doc_id, params))
        except _NotFound:
            return False
        return True

    def delete_by_query(self, index: str, query: dict[str, Any]) -> int:
        """Delete every matching document (refreshing first and after); returns how many."""
        self._before_write(f"delete-by-query on {index}")
        try:
            res = self._call(
                f"delete-by-query on {index}",
                lambda: self._delete_by_query(index, {"query": query}),
            )
        except _NotFound:
            return 0
        return int(res.get("deleted", 0))

    def refresh(self, index: str) -> None:
        """Make recent writes visible to searches (missing indices are ignored)."""
        try:
            self._call(f"refresh {index}", lambda: self._refresh(index))
        except _NotFound:
            return

    def field_types(self, index: str, fields: list[str]) -> dict[str, set[str]]:
        """``GET /<index>/_field_caps``: the mapped types of each field ({} for unmapped ones)."""
        try:
            res = self._call(
                f"field capabilities of {index}", lambda: self._field_caps(index, fields)
            )
        except _NotFound:
            return {}
        return {name: set(types) for name, types in res.get("fields", {}).items()}

    def open_pit(self, index: str, keep_alive: str = "2m") -> str | None:
        """Open a point in time over ``index``: its id, or None when the cluster has no PIT.

        OpenSearch: ``POST /<index>/_search/point_in_time?keep_alive=``; Elasticsearch:
        ``POST /<index>/_pit?keep_alive=``. A cluster without the API (older versions, osmem on
        the Elasticsearch path) answers with an error: the caller falls back to ``scroll``.
        """
        try:
            return self._call(
                f"open point in time on {index}", lambda: self._open_pit(index, keep_alive)
            )
        except StoreError:
            return None

    def close_pit(self, pit_id: str) -> None:
        """Release a point in time (errors ignored: it expires with its keep-alive anyway)."""
        try:
            self._call("close point in time", lambda: self._close_pit(pit_id))
        except StoreError:
            return

    def search_after(
        self,
        index: str,
        body: dict[str, Any],
        *,
        page_size: int = 5000,
        keep_alive: str = "2m",
        pit_id: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Every hit of a sorted search, page by page, in ``body["sort"]`` order.

        With a point in time (``pit_id``, from ``open_pit``) pages follow ``search_after`` on a
        consistent view, with ``_shard_doc`` as the tie-breaker; without one, a scroll
        (``POST /<index>/_search?scroll=`` then ``POST /_search/scroll``), cleared at the end.
        """
        if pit_id is not None:
            query = dict(body, size=page_size, track_total_hits=False)
            query["sort"] = [*body.get("sort", []), {"_shard_doc": "asc"}]
            query["pit"] = {"id": pit_id, "keep_alive": keep_alive}
            while True:
                res = self._call(f"search on {index}", lambda q=query: self._search_pit(q))  # type: ignore[misc]
                hits = res["hits"]["hits"]
                yield from hits
                if len(hits) < page_size:
                    return
                query["search_after"] = hits[-1]["sort"]
                query["pit"] = {"id": res.get("pit_id", pit_id), "keep_alive": keep_alive}
        res = self.search(index, dict(body, size=page_size), params={"scroll": keep_alive})
        scroll_id = res.get("_scroll_id")
        try:
            while True:
                hits = res["hits"]["hits"]
                yield from hits
                if len(hits) < page_size or not scroll_id:
                    return
                res = self._call(
                    f"scroll on {index}",
                    lambda s=scroll_id: self._scroll(s, keep_alive),  # type: ignore[misc]
                )
                scroll_id = res.get("_scroll_id", scroll_id)
        finally:
            if scroll_id:
                with contextlib.suppress(StoreError):
                    self._call("clear scroll", lambda: self._clear_scroll(scroll_id))

    def install_templates(self) -> list[tuple[str, str]]:
        """Install or update every L4 index template; returns (name, created|updated|unchanged)."""
        done: list[tuple[str, str]] = []
        for name, body in template_bodies(self.names).items():
            try:
                existing = self._call(
                    f"get index template {name}", partial(self._get_templates, name)
                )
            except _NotFound:
                existing = []
            if existing and _same_template(existing[0], body):
                done.append((name, "unchanged"))
            else:
                self._call(f"put index template {name}", partial(self._put_template, name, body))
                done.append((name, "updated" if existing else "created"))
            # A template only shapes indices created after it: an index made by an older L4
            # (strict mapping) gets the fields added since, or it would reject the new documents.
            mapping = {
                k: v
                for k, v in body["template"].get("mappings", {}).items()
                if k in ("properties", "dynamic_templates")
            }
            with contextlib.suppress(_NotFound):
                self._call(f"put mapping of {name}", partial(self._put_mapping, name, mapping))
        return done

    def indices(self) -> list[tuple[str, int]]:
        """L4 indices of this prefix with their document counts."""
        try:
            rows = self._call("list indices", lambda: self._cat_indices(f"{self.names.prefix}*"))
        except _NotFound:
            return []
        out = [(str(r["index"]), int(r.get("docs.count") or 0)) for r in rows]
        return sorted(out)

    def drop_indices(self) -> None:
        """Delete every index of this prefix (tests and ``l4 cluster reset``)."""
        self._call("delete indices", lambda: self._delete_indices(f"{self.names.prefix}*"))


def error_reason(body: object, fallback: str) -> str:
    """``type: reason`` from a cluster error body (``{"error": {...}}``), else ``fallback``."""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return f"{err.get('type', 'error')}: {err.get('reason', '')}".strip()
        if err:
            return str(err)
    return fallback


def first_line(exc: Exception) -> str:
    """The first line of an exception's text (or of the exception it wraps), at most 300 chars."""
    info = getattr(exc, "info", None)
    text = str(info if isinstance(info, Exception) else exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


class _NotFound(StoreError):
    """Internal: a 404 that the public methods turn into None / 0 / empty."""


def _same_template(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    have = existing.get("index_template", existing)
    if have.get("index_patterns") != wanted["index_patterns"]:
        return False
    have_map = have.get("template", {}).get("mappings", {})
    return bool(have_map == wanted["template"].get("mappings", {}))


def _json_default(value: object) -> object:
    """What the clients' serialisers make of the non-JSON values L4 could hand them."""
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        return isoformat()  # datetime, date
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _dumps(value: object) -> str:
    """One compact JSON line in ASCII (non-ASCII text escaped), so its length is its size in
    bytes: ``bulk_index`` sizes requests by it."""
    return json.dumps(value, default=_json_default, separators=(",", ":"))


def _reopen(cls: type[Store], url: str, names: IndexNames, options: dict[str, Any]) -> Store:
    """A store opened again from what ``Store.__reduce__`` recorded."""
    return cls(url, names, **options)
