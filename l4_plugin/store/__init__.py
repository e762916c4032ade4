"""The cluster store: one interface (``Store``), one adapter per flavour, the embedded server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from l4_plugin.store.base import ClusterInfo, Store, VersionedDoc
from l4_plugin.store.connect import connect, detect_flavour, open_cluster
from l4_plugin.store.embedded import EmbeddedCluster
from l4_plugin.store.names import INDEX_KINDS, IndexNames
from l4_plugin.store.opensearch import OpenSearchStore

if TYPE_CHECKING:
    from l4_plugin.store.elastic import ElasticsearchStore


def __getattr__(name: str) -> Any:
    # The Elasticsearch adapter imports its client (a fifth of a command's start-up): only
    # when asked for (``connect`` to an Elasticsearch cluster, the tests).
    if name == "ElasticsearchStore":
        from l4_plugin.store.elastic import ElasticsearchStore

        return ElasticsearchStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "INDEX_KINDS",
    "ClusterInfo",
    "ElasticsearchStore",
    "EmbeddedCluster",
    "IndexNames",
    "OpenSearchStore",
    "Store",
    "VersionedDoc",
    "connect",
    "detect_flavour",
    "open_cluster",
]
