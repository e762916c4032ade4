"""Checks on saved objects that need no Kibana: format, unique ids, references and field names.

A real Kibana / OpenSearch Dashboards cannot run in the test environment, so these checks are what
stands between a renamed field in ``ingest/index_templates/`` and a dashboard that shows nothing:
every field an object names (aggregations, columns, sort, KQL queries, Vega query bodies, controls,
time fields, field formats) must exist in the mapping of the index it reads. Test-only code: it
lives with the tests, not in the wheel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from l4_plugin.errors import ConfigError

Json = dict[str, Any]

#: Types a saved object may have in the files L4 ships.
KNOWN_TYPES = frozenset({"index-pattern", "search", "visualization", "dashboard"})
#: Query clauses whose keys are field names.
_FIELD_KEYED = frozenset({"term", "terms", "range", "match", "match_phrase", "prefix", "wildcard"})
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_KQL_FIELD = re.compile(r"([A-Za-z_@][\w.@*]*)\s*:")


def parse_ndjson(text: str, source: str = "<ndjson>") -> list[Json]:
    """Parse an NDJSON export; a bad line raises ``ConfigError`` naming ``source:line``."""
    objects: list[Json] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source}:{number}: not JSON: {exc.msg}") from exc
        if not isinstance(value, dict):
            raise ConfigError(f"{source}:{number}: expected a JSON object, got {type(value)}")
        objects.append(value)
    return objects


def _json_attr(obj: Json, *path: str) -> Any:
    value: Any = obj.get("attributes", {})
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return json.loads(value) if isinstance(value, str) and value else value


def check_structure(objects: Iterable[Json]) -> list[str]:
    """Problems with ids, types, JSON-in-string attributes and references, as readable lines."""
    objects = list(objects)
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for obj in objects:
        key = (str(obj.get("type")), str(obj.get("id")))
        where = f"{key[0]}/{key[1]}"
        for required in ("id", "type", "attributes", "references"):
            if required not in obj:
                problems.append(f"{where}: missing {required!r}")
        if key[0] not in KNOWN_TYPES:
            problems.append(f"{where}: unknown type {key[0]!r}")
        if key in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(key)
        if not obj.get("attributes", {}).get("title"):
            problems.append(f"{where}: no title")
        for attr in ("visState", "panelsJSON", "optionsJSON", "fieldFormatMap", "uiStateJSON"):
            try:
                _json_attr(obj, attr)
            except json.JSONDecodeError as exc:
                problems.append(f"{where}: attribute {attr} is not JSON ({exc.msg})")
        try:
            _json_attr(obj, "kibanaSavedObjectMeta", "searchSourceJSON")
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: searchSourceJSON is not JSON ({exc.msg})")
    present = {(str(o.get("type")), str(o.get("id"))) for o in objects}
    for obj in objects:
        where = f"{obj.get('type')}/{obj.get('id')}"
        names = set()
        for ref in obj.get("references", []):
            names.add(ref.get("name"))
            if (ref.get("type"), ref.get("id")) not in present:
                problems.append(
                    f"{where}: reference {ref.get('name')!r} -> "
                    f"{ref.get('type')}/{ref.get('id')} is not in the export"
                )
        for name in _used_ref_names(obj):
            if name not in names:
                problems.append(f"{where}: uses reference {name!r} but does not declare it")
    return problems


def _used_ref_names(obj: Json) -> list[str]:
    """Reference names an object's attributes point at (index, panel and control refs)."""
    used: list[str] = []
    source = _json_attr(obj, "kibanaSavedObjectMeta", "searchSourceJSON") or {}
    if source.get("indexRefName"):
        used.append(source["indexRefName"])
    vis = _json_attr(obj, "visState") or {}
    for control in vis.get("params", {}).get("controls", []) or []:
        if control.get("indexPatternRefName"):
            used.append(control["indexPatternRefName"])
    for panel in _json_attr(obj, "panelsJSON") or []:
        if isinstance(panel, dict) and panel.get("panelRefName"):
            ref = panel["panelRefName"]
            # Kibana 8 prefixes the panel index; OpenSearch Dashboards (7.10 format) does not.
            declared = {r.get("name") for r in obj.get("references", [])}
            prefixed = f"{panel.get('panelIndex')}:{ref}"
            used.append(prefixed if prefixed in declared else ref)
    group = obj.get("attributes", {}).get("controlGroupInput")
    if group:
        for control_id in json.loads(group.get("panelsJSON") or "{}"):
            used.append(f"controlGroup_{control_id}:optionsListDataView")
    return used


def mapping_fields(template: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """Field paths of an index template: (exact fields, prefixes of dynamic objects).

    Multi-fields count (``message.keyword``); a ``dynamic: true`` object such as
    ``l4.job.config`` admits any sub-field, so it is returned as a prefix.
    """
    exact: set[str] = set()
    dynamic: set[str] = set()

    def walk(properties: Mapping[str, Any], prefix: str) -> None:
        for name, spec in properties.items():
            path = f"{prefix}{name}"
            exact.add(path)
            for sub in spec.get("fields") or {}:
                exact.add(f"{path}.{sub}")
            if spec.get("dynamic") in (True, "true") and spec.get("enabled", True):
                dynamic.add(f"{path}.")
            if "properties" in spec:
                walk(spec["properties"], f"{path}.")

    mappings = template.get("template", template).get("mappings", {})
    walk(mappings.get("properties", {}), "")
    return exact, dynamic


def _kql_fields(query: str) -> set[str]:
    return {m.group(1) for m in _KQL_FIELD.finditer(_QUOTED.sub('""', query))}


def _query_body_fields(node: Any) -> set[str]:
    """Field names in an Elasticsearch query / aggregation body (``field`` values, term keys)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "field" and isinstance(value, str):
                found.add(value)
            elif key in _FIELD_KEYED and isinstance(value, dict) and "field" not in value:
                # A ``terms`` / ``range`` aggregation names its field under "field" instead.
                found.update(k for k in value if not k.startswith("%"))
            found |= _query_body_fields(value)
    elif isinstance(node, list):
        for item in node:
            found |= _query_body_fields(item)
    return found


def referenced_fields(objects: Iterable[Json]) -> dict[str, set[str]]:
    """Field names each object uses, keyed by the data-view id (index-pattern id) they read."""
    objects = list(objects)
    titles = {
        o["attributes"]["title"]: o["id"] for o in objects if o.get("type") == "index-pattern"
    }
    used: dict[str, set[str]] = {}

    def add(view: str | None, fields: Iterable[str]) -> None:
        if view is not None:
            used.setdefault(view, set()).update(fields)

    for obj in objects:
        refs = {r["name"]: r["id"] for r in obj.get("references", [])}
        attributes = obj.get("attributes", {})
        source = _json_attr(obj, "kibanaSavedObjectMeta", "searchSourceJSON") or {}
        own_view = refs.get(source.get("indexRefName", ""))
        query = (source.get("query") or {}).get("query") or ""
        if obj.get("type") == "index-pattern":
            add(obj["id"], [attributes["timeFieldName"]] if attributes.get("timeFieldName") else [])
            add(obj["id"], (_json_attr(obj, "fieldFormatMap") or {}).keys())
        elif obj.get("type") == "search":
            add(own_view, attributes.get("columns", []))
            add(own_view, [s[0] for s in attributes.get("sort", []) if s])
            add(own_view, _kql_fields(query))
        elif obj.get("type") == "visualization":
            vis = _json_attr(obj, "visState") or {}
            add(own_view, _kql_fields(query))
            add(own_view, _query_body_fields(vis.get("aggs", [])))
            for control in vis.get("params", {}).get("controls", []) or []:
                add(refs.get(control.get("indexPatternRefName", "")), [control["fieldName"]])
            if vis.get("type") == "vega":
                spec = json.loads(vis["params"]["spec"])
                for url in _vega_urls(spec):
                    view = titles.get(url.get("index", ""), f"<index {url.get('index')}>")
                    add(view, _query_body_fields(url.get("body", {})))
                    if url.get("%timefield%"):
                        add(view, [url["%timefield%"]])
        elif obj.get("type") == "dashboard":
            group = attributes.get("controlGroupInput")
            if group:
                for control_id, panel in json.loads(group["panelsJSON"]).items():
                    view = refs.get(f"controlGroup_{control_id}:optionsListDataView")
                    add(view, [panel["explicitInput"]["fieldName"]])
    return used


def _vega_urls(node: Any) -> list[Json]:
    if isinstance(node, dict):
        found = [node["url"]] if isinstance(node.get("url"), dict) else []
        for value in node.values():
            found += _vega_urls(value)
        return found
    if isinstance(node, list):
        return [u for item in node for u in _vega_urls(item)]
    return []


def check_fields(
    objects: Iterable[Json], templates: Mapping[str, Mapping[str, Any]], index_prefix: str = "l4-"
) -> list[str]:
    """Fields the objects use that the index templates do not map, as readable lines.

    ``templates`` maps an index kind (``annotations``, ``events``…) to its template body; the
    data view ``<index_prefix><kind>`` is checked against it.
    """
    problems: list[str] = []
    for view, fields in sorted(referenced_fields(objects).items()):
        kind = view[len(index_prefix) :] if view.startswith(index_prefix) else ""
        if kind not in templates:
            problems.append(f"data view {view!r} has no index template in ingest/")
            continue
        exact, dynamic = mapping_fields(templates[kind])
        for field in sorted(fields):
            if field not in exact and not any(field.startswith(p) for p in dynamic):
                problems.append(f"{view}: field {field!r} is not in the {kind} index template")
    return problems
