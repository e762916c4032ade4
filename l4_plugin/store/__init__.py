"""The cluster store: one interface (``Store``), one adapter per flavour, the embedded server."""

from __future__ import annotations

from l4_plugin.store.base import ClusterInfo, Store, VersionedDoc
from l4_plugin.store.connect import connect, detect_flavour, open_cluster
from l4_plugin.store.elastic import ElasticsearchStore
from l4_plugin.store.embedded import EmbeddedCluster
from l4_plugin.store.names import INDEX_KINDS, IndexNames
from l4_plugin.store.opensearch import OpenSearchStore

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
