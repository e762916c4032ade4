"""Choosing and opening a store: flavour detection, credentials, the embedded fallback."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import urllib3

from l4_plugin.errors import StoreError
from l4_plugin.store.base import Store
from l4_plugin.store.embedded import EmbeddedCluster, running_cluster_url
from l4_plugin.store.names import IndexNames
from l4_plugin.store.opensearch import OpenSearchStore
from l4_plugin.urls import redact_url

if TYPE_CHECKING:  # the settings (pydantic) are built by whoever opens a store
    from l4_plugin.config import Settings


def _auth_headers(settings: Settings) -> dict[str, str]:
    if settings.es_api_key is not None:
        return {"Authorization": f"ApiKey {settings.es_api_key.get_secret_value()}"}
    if settings.es_user:
        password = settings.es_password.get_secret_value() if settings.es_password else ""
        token = base64.b64encode(f"{settings.es_user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}
    return {}


def detect_flavour(url: str, settings: Settings) -> tuple[str, str]:
    """Ask ``GET /`` which product answers: returns (flavour, version).

    OpenSearch reports ``version.distribution == "opensearch"``; Elasticsearch has no distribution
    field and sends ``X-Elastic-Product: Elasticsearch``.
    """
    shown = redact_url(url)
    kwargs: dict[str, Any] = {
        "timeout": urllib3.Timeout(total=settings.request_timeout),
        "retries": False,
    }
    if url.startswith("https://"):
        kwargs["cert_reqs"] = "CERT_REQUIRED" if settings.es_verify_certs else "CERT_NONE"
        if settings.es_ca_certs:
            kwargs["ca_certs"] = str(settings.es_ca_certs)
    pool = urllib3.PoolManager(**kwargs)
    try:
        resp = pool.request("GET", url + "/", headers=_auth_headers(settings))
    except urllib3.exceptions.SSLError as exc:
        raise StoreError(f"cannot connect to {shown}: TLS failure: {_short(exc)}") from None
    except urllib3.exceptions.HTTPError as exc:
        raise StoreError(f"cannot connect to {shown}: {_short(exc)}") from None
    finally:
        pool.clear()
    if resp.status in (401, 403):
        raise StoreError(
            f"cannot connect to {shown}: HTTP {resp.status}: authentication failed (check "
            "L4_ES_API_KEY or L4_ES_USER/L4_ES_PASSWORD)"
        )
    if resp.status != 200:
        raise StoreError(f"cannot connect to {shown}: GET / answered HTTP {resp.status}")
    try:
        body = json.loads(resp.data)
        version = body["version"]
    except (ValueError, KeyError, TypeError):
        raise StoreError(
            f"{shown} does not look like Elasticsearch or OpenSearch (GET / is not a cluster info)"
        ) from None
    flavour = "opensearch" if version.get("distribution") == "opensearch" else "elasticsearch"
    return flavour, str(version.get("number", "?"))


def _short(exc: Exception) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason).splitlines()[0][:300]


def connect(
    settings: Settings,
    url: str | None = None,
    *,
    flavour: str | None = None,
    **adapter_options: Any,
) -> Store:
    """Open a store on ``url`` (default: the configured one) with the flavour ``GET /`` reports."""
    target = url or settings.es_url
    if not target:
        raise StoreError("no cluster URL configured (set L4_ES_URL or --es-url)")
    if flavour is None:
        flavour, _ = detect_flavour(target, settings)
    options: dict[str, Any] = {
        "request_timeout": settings.request_timeout,
        "max_retries": settings.max_retries,
        "retry_backoff": settings.retry_backoff,
        "verify_certs": settings.es_verify_certs,
        "display_url": redact_url(target),
    }
    if settings.es_ca_certs:
        options["ca_certs"] = str(settings.es_ca_certs)
    if settings.es_api_key is not None:
        options["api_key"] = settings.es_api_key.get_secret_value()
    if settings.es_user:
        password = settings.es_password.get_secret_value() if settings.es_password else ""
        options["basic_auth"] = (settings.es_user, password)
    options.update(adapter_options)
    names = IndexNames(settings.index_prefix)
    if flavour == "opensearch":
        return OpenSearchStore(target, names, **options)
    # (the Elasticsearch client, a fifth of a command's start-up, only when one is reached)
    from l4_plugin.store.elastic import ElasticsearchStore

    return ElasticsearchStore(target, names, **options)


@contextmanager
def open_cluster(settings: Settings) -> Iterator[Store]:
    """The store for a command: the configured cluster, a running ``l4 cluster up``, or a new
    embedded osmem-server that lives as long as the ``with`` block."""
    if settings.es_url:
        store = connect(settings)
        try:
            yield store
        finally:
            store.close()
        return
    running = running_cluster_url(settings.state_dir)
    if running:
        store = connect(settings, running, flavour="opensearch")
        try:
            yield store
        finally:
            store.close()
        return
    with EmbeddedCluster(startup_timeout=settings.embedded_startup_timeout) as cluster:
        store = connect(settings, cluster.url, flavour="opensearch")
        try:
            yield store
        finally:
            store.close()
