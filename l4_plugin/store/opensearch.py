"""OpenSearch 2/3 adapter, on the official ``opensearch-py`` client."""

from __future__ import annotations

from typing import Any

from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import ConnectionTimeout, SSLError, TransportError

from l4_plugin.store.base import (
    TRANSIENT_STATUSES,
    CallFailure,
    Store,
    error_reason,
    first_line,
)
from l4_plugin.store.names import IndexNames


class OpenSearchStore(Store):
    """Store on an OpenSearch cluster (and on the embedded osmem-server)."""

    flavour = "opensearch"

    def __init__(
        self,
        url: str,
        names: IndexNames,
        *,
        api_key: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        ca_certs: str | None = None,
        verify_certs: bool = True,
        request_timeout: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(url, names, **kwargs)
        self._options.update(
            {
                "api_key": api_key,
                "basic_auth": basic_auth,
                "ca_certs": ca_certs,
                "verify_certs": verify_certs,
                "request_timeout": request_timeout,
            }
        )
        options: dict[str, Any] = {
            "timeout": request_timeout,
            "max_retries": 0,
            "retry_on_timeout": False,
        }
        if basic_auth:
            options["http_auth"] = basic_auth
        if api_key:
            # OpenSearch has no API keys of its own; a proxy or a managed service may accept one.
            options["headers"] = {"Authorization": f"ApiKey {api_key}"}
        if url.startswith("https://"):
            options["use_ssl"] = True
            options["verify_certs"] = verify_certs
            options["ssl_show_warn"] = verify_certs
            if ca_certs:
                options["ca_certs"] = ca_certs
        self.client = OpenSearch(hosts=[url], **options)

    def close(self) -> None:
        self.client.close()

    def _info(self) -> dict[str, Any]:
        return dict(self.client.info())

    def _search(self, index: str, body: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        return dict(self.client.search(index=index, body=body, params=params or None))

    def _count(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.client.count(index=index, body=body or None))

    def _bulk(self, operations: list[str], refresh: bool) -> dict[str, Any]:
        params = {"refresh": "true"} if refresh else None
        return dict(self.client.bulk(body=operations, params=params))

    def _get(self, index: str, doc_id: str) -> dict[str, Any]:
        return dict(self.client.get(index=index, id=doc_id))

    def _index(
        self, index: str, doc_id: str, doc: dict[str, Any], params: dict[str, Any]
    ) -> dict[str, Any]:
        return dict(self.client.index(index=index, id=doc_id, body=doc, params=params or None))

    def _delete(self, index: str, doc_id: str, params: dict[str, Any]) -> dict[str, Any]:
        return dict(self.client.delete(index=index, id=doc_id, params=params or None))

    def _refresh(self, index: str) -> None:
        self.client.indices.refresh(index=index)

    def _put_template(self, name: str, body: dict[str, Any]) -> None:
        self.client.indices.put_index_template(name=name, body=body)

    def _put_mapping(self, index: str, mapping: dict[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, body=mapping)

    def _get_templates(self, name: str) -> list[dict[str, Any]]:
        return list(self.client.indices.get_index_template(name=name)["index_templates"])

    def _delete_by_query(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        params = {"conflicts": "proceed", "refresh": "true"}
        return dict(self.client.delete_by_query(index=index, body=body, params=params))

    def _cat_indices(self, pattern: str) -> list[dict[str, Any]]:
        return list(self.client.cat.indices(index=pattern, params={"format": "json"}))

    def _delete_indices(self, pattern: str) -> None:
        self.client.indices.delete(index=pattern, params={"ignore_unavailable": "true"})

    def _open_pit(self, index: str, keep_alive: str) -> str:
        # POST /<index>/_search/point_in_time?keep_alive=
        return str(self.client.create_pit(index=index, params={"keep_alive": keep_alive})["pit_id"])

    def _close_pit(self, pit_id: str) -> None:
        # DELETE /_search/point_in_time {"pit_id": [...]}
        self.client.delete_pit(body={"pit_id": [pit_id]})

    def _search_pit(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.client.search(body=body))

    def _scroll(self, scroll_id: str, keep_alive: str) -> dict[str, Any]:
        return dict(self.client.scroll(body={"scroll_id": scroll_id, "scroll": keep_alive}))

    def _clear_scroll(self, scroll_id: str) -> None:
        self.client.clear_scroll(body={"scroll_id": [scroll_id]})

    def _field_caps(self, index: str, fields: list[str]) -> dict[str, Any]:
        return dict(self.client.field_caps(index=index, params={"fields": ",".join(fields)}))

    def _classify(self, exc: Exception) -> CallFailure | None:
        if isinstance(exc, SSLError):
            return CallFailure(None, f"TLS failure: {first_line(exc)}", transient=False)
        if isinstance(exc, ConnectionTimeout):
            return CallFailure(None, "request timed out", transient=True)
        if isinstance(exc, OSConnectionError):
            return CallFailure(None, f"cannot connect: {first_line(exc)}", transient=True)
        if isinstance(exc, TransportError):
            status = exc.status_code if isinstance(exc.status_code, int) else None
            return CallFailure(
                status,
                error_reason(exc.info, str(exc.error)),
                transient=status in TRANSIENT_STATUSES,
                conflict=status == 409,
                not_found=status == 404,
            )
        return None
