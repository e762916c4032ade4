"""Elasticsearch 8/9 adapter, on the official ``elasticsearch`` client."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TlsError
from elasticsearch import ApiError, Elasticsearch

from l4_plugin.store.base import (
    TRANSIENT_STATUSES,
    CallFailure,
    Store,
    error_reason,
    first_line,
)
from l4_plugin.store.names import IndexNames


class ElasticsearchStore(Store):
    """Store on an Elasticsearch cluster (plain documented REST APIs only)."""

    flavour = "elasticsearch"

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
        node_class: Any = None,
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
                "node_class": node_class,
            }
        )
        options: dict[str, Any] = {
            "request_timeout": request_timeout,
            # Retries are ours (bounded, with backoff, with readable errors): see Store._call.
            "max_retries": 0,
            "retry_on_timeout": False,
        }
        if api_key:
            options["api_key"] = api_key
        if basic_auth:
            options["basic_auth"] = basic_auth
        if url.startswith("https://"):
            options["verify_certs"] = verify_certs
            if ca_certs:
                options["ca_certs"] = ca_certs
        if node_class is not None:
            options["node_class"] = node_class
        self.client = Elasticsearch(url, **options)

    def close(self) -> None:
        self.client.close()

    def _info(self) -> dict[str, Any]:
        return dict(self.client.info().body)

    def _search(self, index: str, body: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        return dict(self.client.search(index=index, body=body, **params).body)

    def _count(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.client.count(index=index, body=body or None).body)

    def _bulk(self, operations: list[str], refresh: bool) -> dict[str, Any]:
        # Serialised lines, as ``elasticsearch.helpers`` sends them (the NDJSON serialiser
        # passes strings and bytes through); the stubs only name mappings.
        body = self.client.bulk(operations=operations, refresh=refresh)  # type: ignore[arg-type]
        return dict(body.body)

    def _get(self, index: str, doc_id: str) -> dict[str, Any]:
        return dict(self.client.get(index=index, id=doc_id).body)

    def _index(
        self, index: str, doc_id: str, doc: dict[str, Any], params: dict[str, Any]
    ) -> dict[str, Any]:
        return dict(self.client.index(index=index, id=doc_id, document=doc, **params).body)

    def _delete(self, index: str, doc_id: str, params: dict[str, Any]) -> dict[str, Any]:
        return dict(self.client.delete(index=index, id=doc_id, **params).body)

    def _refresh(self, index: str) -> None:
        self.client.indices.refresh(index=index)

    def _put_template(self, name: str, body: dict[str, Any]) -> None:
        self.client.indices.put_index_template(name=name, body=body)

    def _put_mapping(self, index: str, mapping: dict[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, **mapping)

    def _get_templates(self, name: str) -> list[dict[str, Any]]:
        return list(self.client.indices.get_index_template(name=name).body["index_templates"])

    def _delete_by_query(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        res = self.client.delete_by_query(index=index, body=body, conflicts="proceed", refresh=True)
        return dict(res.body)

    def _cat_indices(self, pattern: str) -> list[dict[str, Any]]:
        return list(self.client.cat.indices(index=pattern, format="json").body)

    def _delete_indices(self, pattern: str) -> None:
        self.client.indices.delete(index=pattern, ignore_unavailable=True)

    def _open_pit(self, index: str, keep_alive: str) -> str:
        # POST /<index>/_pit?keep_alive=
        return str(self.client.open_point_in_time(index=index, keep_alive=keep_alive).body["id"])

    def _close_pit(self, pit_id: str) -> None:
        # DELETE /_pit {"id": ...}
        self.client.close_point_in_time(id=pit_id)

    def _search_pit(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.client.search(body=body).body)

    def _scroll(self, scroll_id: str, keep_alive: str) -> dict[str, Any]:
        return dict(self.client.scroll(scroll_id=scroll_id, scroll=keep_alive).body)

    def _clear_scroll(self, scroll_id: str) -> None:
        self.client.clear_scroll(scroll_id=scroll_id)

    def _field_caps(self, index: str, fields: list[str]) -> dict[str, Any]:
        # GET /<index>/_field_caps?fields=a,b: the 9.x client would send `fields` in the body,
        # which only newer servers read; the query parameter works on every 8/9 server.
        res = self.client.perform_request(
            "GET",
            f"/{quote(index, safe=',*')}/_field_caps",
            params={"fields": ",".join(fields)},
            headers={"accept": "application/json"},
        )
        return dict(res.body)

    def _classify(self, exc: Exception) -> CallFailure | None:
        if isinstance(exc, ApiError):
            status = exc.meta.status
            reason = error_reason(exc.body, str(exc.message))
            return CallFailure(
                status,
                reason,
                transient=status in TRANSIENT_STATUSES,
                conflict=status == 409,
                not_found=status == 404,
            )
        if isinstance(exc, TlsError):
            return CallFailure(None, f"TLS failure: {first_line(exc)}", transient=False)
        if isinstance(exc, ConnectionTimeout):
            return CallFailure(None, "request timed out", transient=True)
        if isinstance(exc, TransportConnectionError):
            return CallFailure(None, f"cannot connect: {first_line(exc)}", transient=True)
        return None
