"""Kibana / OpenSearch Dashboards saved objects: build, export, install; links."""

from __future__ import annotations

from l4_plugin.dashboards.install import (
    InstallResult,
    ObjectResult,
    detect_flavour,
    export_ndjson,
    install,
    to_ndjson,
)
from l4_plugin.dashboards.links import DEFAULT_DISCOVER_URL_TEMPLATE, discover_url
from l4_plugin.dashboards.objects import (
    DASHBOARD_TITLE,
    FLAVOURS,
    Flavour,
    dashboard_id,
    data_view_id,
    saved_objects,
)

__all__ = [
    "DASHBOARD_TITLE",
    "DEFAULT_DISCOVER_URL_TEMPLATE",
    "FLAVOURS",
    "Flavour",
    "InstallResult",
    "ObjectResult",
    "dashboard_id",
    "data_view_id",
    "detect_flavour",
    "discover_url",
    "export_ndjson",
    "install",
    "saved_objects",
    "to_ndjson",
]
