"""The store interface on both adapters, against a real osmem-server process."""

from __future__ import annotations

from typing import Any

import pytest

from l4_plugin.errors import ConflictError, StoreError
from l4_plugin.store import IndexNames, OpenSearchStore, Store


def test_info_reports_flavour(any_store: Store) -> None:
    info = any_store.info()
    # osmem identifies itself as OpenSearch whichever client asks.
    assert info.flavour == "opensearch"
    assert info.version


def test_install_templates_is_idempotent(any_store: Store) -> None:
    again = any_store.install_templates()
    assert {action for _, action in again} == {"unchanged"}
    assert {name for name, _ in again} == set(any_store.names.all().values())


def test_bulk_with_same_ids_overwrites(any_store: Store) -> None:
    index = any_store.names.events
    docs = [
        (f"id{i}", {"l4.job.id": "j1", "host.name": f"n{i % 3}", "l4.count": i}) for i in range(50)
    ]
    assert any_store.bulk_index(index, docs, refresh=True) == 50
    any_store.bulk_index(index, docs, refresh=True)
    assert any_store.count(index) == 50
    assert any_store.count(index, {"term": {"host.name": "n1"}}) == 17


def test_templates_apply_mappings(any_store: Store) -> None:
    index = any_store.names.events
    any_store.bulk_index(index, [("a", {"host.name": "Node-A", "l4.count": 3})], refresh=True)
    # host.name is a keyword: exact, case-sensitive term match.
    assert any_store.count(index, {"term": {"host.name": "Node-A"}}) == 1
    assert any_store.count(index, {"term": {"host.name": "node-a"}}) == 0


def test_strict_mapping_rejects_unknown_field_with_readable_error(any_store: Store) -> None:
    with pytest.raises(StoreError, match=r"bulk write to .*events.*rejected; first: x:"):
        any_store.bulk_index(any_store.names.events, [("x", {"no.such.field": 1})])


def test_composite_paginates_every_bucket(any_store: Store) -> None:
    index = any_store.names.events
    docs = [
        (f"d{n}-{t}", {"host.name": f"node-{n:03d}", "l4.template.id": f"t{t}", "l4.count": n + t})
        for n in range(23)
        for t in range(7)
    ]
    any_store.bulk_index(index, docs, refresh=True)
    buckets = list(
        any_store.composite(
            index,
            [
                {"node": {"terms": {"field": "host.name"}}},
                {"tpl": {"terms": {"field": "l4.template.id"}}},
            ],
            aggs={"n": {"sum": {"field": "l4.count"}}},
            page_size=10,
        )
    )
    assert len(buckets) == 23 * 7
    assert len({(b["key"]["node"], b["key"]["tpl"]) for b in buckets}) == 23 * 7
    first = next(b for b in buckets if b["key"] == {"node": "node-002", "tpl": "t5"})
    assert first["n"]["value"] == 7


def test_composite_on_missing_index_is_empty(any_store: Store) -> None:
    assert (
        list(
            any_store.composite(
                any_store.names.prefix + "nothing", [{"a": {"terms": {"field": "x"}}}]
            )
        )
        == []
    )


def test_conditional_write_detects_conflict(any_store: Store) -> None:
    index = any_store.names.jobs
    first = any_store.put(
        index, "job-1", {"l4.job.id": "job-1", "l4.job.status": "failed"}, refresh=True
    )
    doc = any_store.get(index, "job-1")
    assert doc is not None and doc.seq_no == first.seq_no
    any_store.put(
        index,
        "job-1",
        {"l4.job.id": "job-1", "l4.job.status": "running"},
        if_seq_no=doc.seq_no,
        if_primary_term=doc.primary_term,
    )
    with pytest.raises(ConflictError, match="version conflict"):
        any_store.put(
            index,
            "job-1",
            {"l4.job.id": "job-1"},
            if_seq_no=doc.seq_no,
            if_primary_term=doc.primary_term,
        )
    with pytest.raises(ConflictError):
        any_store.put(index, "job-1", {"l4.job.id": "job-1"}, create=True)


def test_missing_documents_and_indices(any_store: Store) -> None:
    assert any_store.get(any_store.names.jobs, "nope") is None
    assert any_store.get(any_store.names.prefix + "absent", "nope") is None
    assert any_store.count(any_store.names.prefix + "absent") == 0
    assert any_store.delete(any_store.names.jobs, "nope") is False


def test_delete_by_query_and_indices_listing(any_store: Store) -> None:
    index = any_store.names.lines
    any_store.bulk_index(
        index, [(str(i), {"l4.job.id": "a" if i < 4 else "b"}) for i in range(10)], refresh=True
    )
    assert any_store.delete_by_query(index, {"term": {"l4.job.id": "a"}}) == 4
    assert any_store.count(index) == 6
    assert (index, 6) in any_store.indices()


def test_search_error_names_the_index(any_store: Store) -> None:
    with pytest.raises(StoreError, match=r"search on .*events failed on http://127\.0\.0\.1"):
        any_store.search(any_store.names.events, {"query": {"no_such_query": {}}})


def test_unreachable_cluster_is_retried_then_reported() -> None:
    store = OpenSearchStore(
        "http://127.0.0.1:9", IndexNames("l4-"), max_retries=2, retry_backoff=0.01
    )
    with pytest.raises(
        StoreError,
        match=r"GET / failed on http://127\.0\.0\.1:9: cannot connect.*"
        r"\(after 3 attempts\)",
    ):
        store.info()


def _raw_lines(store: Store, n: int) -> str:
    """A raw-log index as a shipper leaves it (dynamic mapping), n documents, shuffled ids."""
    index = f"{store.names.prefix}raw-shipped"
    docs = [
        (f"d{(i * 7919) % n}", {"message": f"line {i}", "log": {"offset": i * 10}, "k": i % 3})
        for i in range(n)
    ]
    store.bulk_index(index, docs, refresh=True)
    return index


@pytest.mark.parametrize("page_size", [7, 1000])
def test_search_after_reads_every_hit_in_order(any_store: Store, page_size: int) -> None:
    index = _raw_lines(any_store, 103)
    pit = any_store.open_pit(index)
    if any_store.flavour == "opensearch":
        # OpenSearch: POST /<index>/_search/point_in_time (osmem implements it).
        assert pit is not None
    else:
        # Elasticsearch: POST /<index>/_pit. osmem has no such route: open_pit says None and
        # search_after falls back to scroll. A real Elasticsearch 8/9 returns an id here.
        assert pit is None
    body = {"query": {"term": {"k": 1}}, "sort": [{"log.offset": "asc"}]}
    hits = list(any_store.search_after(index, body, page_size=page_size, pit_id=pit))
    offsets = [h["_source"]["log"]["offset"] for h in hits]
    assert offsets == sorted(offsets) and len(offsets) == len(range(1, 103, 3))
    if pit is not None:
        any_store.close_pit(pit)
    # Scroll on both adapters too (the fallback path).
    hits = list(any_store.search_after(index, body, page_size=page_size))
    assert [h["_source"]["log"]["offset"] for h in hits] == offsets


def test_field_types_of_a_shipped_index(any_store: Store) -> None:
    index = _raw_lines(any_store, 3)
    types = any_store.field_types(index, ["message", "message.keyword", "log.offset", "nope"])
    assert types["message"] == {"text"} and types["message.keyword"] == {"keyword"}
    assert types["log.offset"] == {"long"} and "nope" not in types
    assert any_store.field_types(f"{any_store.names.prefix}missing", ["message"]) == {}


def test_install_templates_adds_new_fields_to_an_existing_index(any_store: Store) -> None:
    # An index created by an older L4 (a narrower strict mapping) must accept today's fields:
    # a template shapes only indices created after it, so setup also updates the mapping.
    index = any_store.names.jobs
    client: Any = any_store.client  # type: ignore[attr-defined]
    client.indices.delete_index_template(name=index)
    narrow = {
        "dynamic": "strict",
        "properties": {"l4": {"properties": {"job": {"properties": {"id": {"type": "keyword"}}}}}},
    }
    if any_store.flavour == "elasticsearch":
        client.indices.create(index=index, mappings=narrow)
    else:
        client.indices.create(index=index, body={"mappings": narrow})
    with pytest.raises(StoreError, match="rejected"):
        any_store.bulk_index(index, [("new", {"l4.job.id": "new", "l4.job.iterations": 3})])
    any_store.install_templates()
    doc = {"l4.job.id": "new", "l4.job.iterations": 3, "l4.job.template_stats": {"t": [1, 1]}}
    any_store.bulk_index(index, [("new", doc)], refresh=True)
    assert any_store.count(index, {"term": {"l4.job.iterations": 3}}) == 1
