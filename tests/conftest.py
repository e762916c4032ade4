"""Shared fixtures: one real osmem-server per test session, a fresh index prefix per test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
from elastic_transport import Urllib3HttpNode

from l4_plugin.config import Settings, load_settings
from l4_plugin.store import ElasticsearchStore, EmbeddedCluster, IndexNames, OpenSearchStore, Store

_counter = itertools.count()


class JsonOnlyNode(Urllib3HttpNode):
    """Test-only bridge for the Elasticsearch client against osmem.

    The elasticsearch 8/9 client sends ``application/vnd.elasticsearch+json; compatible-with=N``;
    a real Elasticsearch accepts it, osmem answers 406. This node rewrites the two headers to plain
    JSON / NDJSON. The product uses the client's default node class on real clusters.
    """

    def perform_request(
        self, method: str, target: str, body: Any = None, headers: Any = None, **kwargs: Any
    ) -> Any:
        if headers is not None:
            headers = headers.copy()
            for name in ("accept", "content-type"):
                value = headers.get(name)
                if value and "vnd.elasticsearch+" in value:
                    headers[name] = (
                        "application/x-ndjson" if "ndjson" in value else "application/json"
                    )
        return super().perform_request(method, target, body=body, headers=headers, **kwargs)


@pytest.fixture(scope="session")
def osmem_url() -> Iterator[str]:
    """URL of a real osmem-server process shared by the whole session."""
    with EmbeddedCluster(startup_timeout=60) as cluster:
        yield cluster.url


def _prefix() -> str:
    return f"t{os.getpid()}-{next(_counter)}-l4-"


@pytest.fixture
def settings(osmem_url: str, tmp_path: Any) -> Settings:
    """Settings pointing at the session server with a prefix of this test's own."""
    return load_settings(None, es_url=osmem_url, index_prefix=_prefix(), state_dir=tmp_path / "st")


@pytest.fixture
def store(osmem_url: str) -> Iterator[Store]:
    """OpenSearch adapter on osmem, unique prefix, templates installed; indices dropped after."""
    s = OpenSearchStore(osmem_url, IndexNames(_prefix()), retry_backoff=0.05)
    s.install_templates()
    yield s
    s.drop_indices()
    s.close()


@pytest.fixture
def es_store(osmem_url: str) -> Iterator[Store]:
    """Elasticsearch adapter on osmem through the test-only JSON bridge."""
    s = ElasticsearchStore(
        osmem_url, IndexNames(_prefix()), node_class=JsonOnlyNode, retry_backoff=0.05
    )
    s.install_templates()
    yield s
    s.drop_indices()
    s.close()


@pytest.fixture(params=["opensearch", "elasticsearch"])
def any_store(request: pytest.FixtureRequest) -> Store:
    """Both adapters, one after the other."""
    name = "store" if request.param == "opensearch" else "es_store"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]
