"""The saved objects L4 ships for Kibana 8.x and OpenSearch Dashboards 2.x, built in one place.

The NDJSON files under ``kibana_saved_objects/`` are exports of :func:`saved_objects` (regenerate
them with ``l4 dashboards export``); a test keeps the two identical. Objects use types both tools
import: ``index-pattern``, ``search``, ``visualization`` (aggregation-based and Vega) and
``dashboard``. The two flavours differ where the tools differ: Kibana stores the job filter as a
dashboard control group and panel references as ``<panel>:panel_<panel>``; OpenSearch Dashboards
(a fork of Kibana 7.10) uses an input-control visualization, ``panel_<n>`` references and
``migrationVersion`` instead of ``typeMigrationVersion``.

Ids are ``<prefix><name>`` so that two prefixes installed into one space do not overwrite each
other, and the data view of an index has the index name as id (the Discover links rely on that).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from l4_plugin.store import fields as F

Flavour = Literal["kibana", "opensearch-dashboards"]
FLAVOURS: tuple[Flavour, ...] = ("kibana", "opensearch-dashboards")

#: Index kinds that get a data view / index pattern.
DATA_VIEW_KINDS: tuple[str, ...] = ("annotations", "events", "lines", "jobs")
DASHBOARD_TITLE = "L4 job diagnosis"

# Kibana >= 8.9 reads these versions as "already migrated"; older 8.x releases refuse objects
# from a newer version, which is the import API's documented compatibility rule.
_KIBANA_CORE_VERSION = "8.8.0"
_KIBANA_TYPE_VERSIONS = {
    "index-pattern": "8.0.0",
    "search": "8.0.0",
    "visualization": "8.5.0",
    "dashboard": "8.9.0",
}
# OpenSearch Dashboards 2.x keeps Kibana 7.10's migration map.
_OSD_MIGRATION_VERSIONS = {
    "index-pattern": "7.6.0",
    "search": "7.9.3",
    "visualization": "7.10.0",
    "dashboard": "7.9.3",
}
_INDEX_REF = "kibanaSavedObjectMeta.searchSourceJSON.index"

Json = dict[str, Any]


def data_view_id(kind: str, index_prefix: str = "l4-") -> str:
    """The id (and title) of the data view of one index kind, e.g. ``l4-lines``."""
    return f"{index_prefix}{kind}"


def object_id(name: str, index_prefix: str = "l4-") -> str:
    """The stable id of a search, visualization or dashboard (``<prefix><name>``)."""
    return f"{index_prefix}{name}"


def dashboard_id(index_prefix: str = "l4-") -> str:
    """The id of the "L4 job diagnosis" dashboard."""
    return object_id("dashboard-job-diagnosis", index_prefix)


def saved_objects(flavour: Flavour, index_prefix: str = "l4-") -> list[dict[str, Any]]:
    """Every saved object of one flavour, referenced objects first (the import order).

    ``index_prefix`` replaces ``l4-`` in index-pattern titles, Vega index names and ids.
    """
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; expected one of {FLAVOURS}")
    b = _Builder(flavour, index_prefix)
    objects: list[Json] = [b.index_pattern(kind) for kind in DATA_VIEW_KINDS]
    objects += b.searches()
    objects += b.visualizations()
    objects.append(b.dashboard())
    return objects


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def _search_source(query: str, *, with_index: bool = True) -> Json:
    source: Json = {"query": {"query": query, "language": "kuery"}, "filter": []}
    if with_index:
        source["indexRefName"] = _INDEX_REF
    return {"searchSourceJSON": _dumps(source)}


class _Builder:
    """Builds the objects of one flavour and prefix; methods mirror the object types."""

    def __init__(self, flavour: Flavour, prefix: str) -> None:
        self.flavour = flavour
        self.prefix = prefix

    # -- common envelope -------------------------------------------------------------------
    def _envelope(self, type_: str, id_: str, attributes: Json, references: list[Json]) -> Json:
        obj: Json = {"id": id_, "type": type_, "attributes": attributes, "references": references}
        if self.flavour == "kibana":
            obj["coreMigrationVersion"] = _KIBANA_CORE_VERSION
            obj["typeMigrationVersion"] = _KIBANA_TYPE_VERSIONS[type_]
            obj["managed"] = False
        else:
            obj["migrationVersion"] = {type_: _OSD_MIGRATION_VERSIONS[type_]}
        return obj

    def _dv(self, kind: str) -> str:
        return data_view_id(kind, self.prefix)

    def _id(self, name: str) -> str:
        return object_id(name, self.prefix)

    def _index_ref(self, kind: str) -> list[Json]:
        return [{"name": _INDEX_REF, "type": "index-pattern", "id": self._dv(kind)}]

    # -- index patterns --------------------------------------------------------------------
    def index_pattern(self, kind: str) -> Json:
        field_formats: Json = {}
        if kind == "annotations":
            field_formats[F.ANNOTATION_DISCOVER_URL] = {
                "id": "url",
                "params": {
                    "type": "a",
                    "urlTemplate": "",
                    "labelTemplate": "Open lines in Discover",
                },
            }
        attributes: Json = {
            "title": self._dv(kind),
            "timeFieldName": "@timestamp",
            # Empty: both tools read the fields from the cluster (field caps) when the pattern is
            # first used, so a mapping change never leaves a stale field list behind.
            "fields": "[]",
            "fieldFormatMap": _dumps(field_formats),
        }
        if self.flavour == "kibana":
            attributes |= {
                "name": self._dv(kind),
                "fieldAttrs": "{}",
                "runtimeFieldMap": "{}",
                "sourceFilters": "[]",
                "allowNoIndex": True,
            }
        return self._envelope("index-pattern", self._dv(kind), attributes, [])

    # -- saved searches --------------------------------------------------------------------
    def _search(
        self, name: str, title: str, kind: str, query: str, columns: list[str], description: str
    ) -> Json:
        attributes: Json = {
            "title": title,
            "description": description,
            "columns": columns,
            "sort": [["@timestamp", "desc"]],
            "kibanaSavedObjectMeta": _search_source(query),
        }
        if self.flavour == "kibana":
            attributes |= {"grid": {}, "hideChart": False, "isTextBasedQuery": False}
        else:
            attributes |= {"hits": 0, "version": 1}
        return self._envelope("search", self._id(name), attributes, self._index_ref(kind))

    def searches(self) -> list[Json]:
        return [
            self._search(
                "search-verdicts",
                "L4 verdicts",
                "annotations",
                f'{F.ANNOTATION_KIND}:"verdict"',
                [
                    F.JOB_ID,
                    "message",
                    F.ANNOTATION_NODES,
                    F.ANNOTATION_REASONS,
                    F.ANNOTATION_SCORE,
                ],
                "What to do about each failed job: the fault's category and whose it is, the "
                "nodes to evict (none for a user fault) and whether a restart helps.",
            ),
            self._search(
                "search-failure-lines",
                "L4 failure-indicating lines",
                "lines",
                "",
                ["host.name", F.RANK, F.FOLDED, F.STAGE, F.ITERATION, "log.level", "message"],
                "Raw lines L4 keeps for a job: rare, error-level or absent from the baseline. "
                f"{F.FOLDED}: how many other ranks of the node printed the line alike (but for "
                f"its digits); {F.UNTIL}: when the last of them did.",
            ),
            self._search(
                "search-rule-matches",
                "L4 rule matches",
                "annotations",
                f'{F.ANNOTATION_KIND}:"rule_match"',
                [
                    F.RULE_TITLE,
                    F.RULE_SEVERITY,
                    F.RULE_CATEGORY,
                    F.ANNOTATION_NODES,
                    "message",
                ],
                "Fault-library rules that matched, with the rendered diagnosis and remediation.",
            ),
            self._search(
                "search-findings",
                "L4 findings",
                "annotations",
                f'{F.ANNOTATION_KIND}:("event" or "node" or "iteration" or "stage")',
                [
                    F.ANNOTATION_KIND,
                    F.ANNOTATION_RANK,
                    F.ANNOTATION_SCORE,
                    "host.name",
                    F.TEMPLATE_TEXT,
                    "message",
                    F.ANNOTATION_DISCOVER_URL,
                ],
                "Ranked findings with a link to the job's lines around each one.",
            ),
            self._search(
                "search-failed-jobs",
                "L4 failed jobs",
                "jobs",
                f'{F.JOB_STATUS}:"failed"',
                [
                    F.JOB_ID,
                    F.JOB_STATUS,
                    F.INGEST_STATE,
                    F.ANALYSIS_STATE,
                    F.ANALYSIS_ERROR,
                    F.JOB_NODE_COUNT,
                ],
                "Failed jobs and how far their ingest and diagnosis got.",
            ),
        ]

    # -- visualizations --------------------------------------------------------------------
    def _vis(
        self,
        name: str,
        title: str,
        vis_state: Json,
        kind: str | None,
        query: str,
        extra_refs: list[Json] | None = None,
    ) -> Json:
        attributes: Json = {
            "title": title,
            "description": "",
            "visState": _dumps({"title": title, **vis_state}),
            "uiStateJSON": "{}",
            "version": 1,
            "kibanaSavedObjectMeta": _search_source(query, with_index=kind is not None),
        }
        refs = (self._index_ref(kind) if kind else []) + (extra_refs or [])
        return self._envelope("visualization", self._id(name), attributes, refs)

    @staticmethod
    def _axes(rotated: bool, y_title: str) -> Json:
        category_position, value_position = ("left", "bottom") if rotated else ("bottom", "left")
        return {
            "categoryAxes": [
                {
                    "id": "CategoryAxis-1",
                    "type": "category",
                    "position": category_position,
                    "show": True,
                    "style": {},
                    "scale": {"type": "linear"},
                    "labels": {"show": True, "filter": False, "truncate": 60, "rotate": 0},
                    "title": {},
                }
            ],
            "valueAxes": [
                {
                    "id": "ValueAxis-1",
                    "name": "LeftAxis-1",
                    "type": "value",
                    "position": value_position,
                    "show": True,
                    "style": {},
                    "scale": {"type": "linear", "mode": "normal"},
                    "labels": {"show": True, "rotate": 0, "filter": True, "truncate": 100},
                    "title": {"text": y_title},
                }
            ],
        }

    def visualizations(self) -> list[Json]:
        objects = [self._suspect_nodes(), self._heatmap(), self._iterations(), self._jobs_table()]
        if self.flavour == "opensearch-dashboards":
            objects.insert(0, self._job_control())
        return objects

    def _suspect_nodes(self) -> Json:
        state: Json = {
            "type": "horizontal_bar",
            "aggs": [
                {
                    "id": "1",
                    "enabled": True,
                    "type": "max",
                    "schema": "metric",
                    "params": {"field": F.ANNOTATION_SCORE, "customLabel": "Suspicion score"},
                },
                {
                    "id": "2",
                    "enabled": True,
                    "type": "terms",
                    "schema": "segment",
                    "params": {
                        "field": "host.name",
                        "size": 20,
                        "order": "desc",
                        "orderBy": "1",
                        "otherBucket": False,
                        "missingBucket": False,
                        "customLabel": "Node",
                    },
                },
            ],
            "params": {
                "type": "histogram",
                "addTooltip": True,
                "addLegend": False,
                "legendPosition": "right",
                "times": [],
                "addTimeMarker": False,
                "grid": {"categoryLines": False},
                "labels": {"show": True},
                "thresholdLine": {
                    "show": False,
                    "value": 10,
                    "width": 1,
                    "style": "full",
                    "color": "#E7664C",
                },
                **self._axes(True, "Suspicion score"),
                "seriesParams": [
                    {
                        "show": True,
                        "type": "histogram",
                        "mode": "normal",
                        "data": {"label": "Suspicion score", "id": "1"},
                        "valueAxis": "ValueAxis-1",
                        "drawLinesBetweenPoints": True,
                        "lineWidth": 2,
                        "showCircles": True,
                    }
                ],
            },
        }
        return self._vis(
            "vis-suspect-nodes",
            "L4 suspect nodes by score",
            state,
            "annotations",
            f'{F.ANNOTATION_KIND}:"node"',
        )

    def _heatmap(self) -> Json:
        state: Json = {
            "type": "heatmap",
            "aggs": [
                {
                    "id": "1",
                    "enabled": True,
                    "type": "max",
                    "schema": "metric",
                    "params": {"field": F.ANNOTATION_SCORE, "customLabel": "Event score"},
                },
                {
                    "id": "2",
                    "enabled": True,
                    "type": "terms",
                    "schema": "segment",
                    "params": {
                        "field": F.TEMPLATE_ID,
                        "size": 15,
                        "order": "desc",
                        "orderBy": "1",
                        "otherBucket": False,
                        "missingBucket": False,
                        "customLabel": "Event template",
                    },
                },
                {
                    "id": "3",
                    "enabled": True,
                    "type": "terms",
                    "schema": "group",
                    "params": {
                        "field": F.ANNOTATION_NODES,
                        "size": 25,
                        "order": "desc",
                        "orderBy": "1",
                        "otherBucket": False,
                        "missingBucket": False,
                        "customLabel": "Node",
                    },
                },
            ],
            "params": {
                "type": "heatmap",
                "addTooltip": True,
                "addLegend": True,
                "enableHover": False,
                "legendPosition": "right",
                "times": [],
                "colorsNumber": 5,
                "colorSchema": "Reds",
                "setColorRange": False,
                "colorsRange": [],
                "invertColors": False,
                "percentageMode": False,
                "valueAxes": [
                    {
                        "show": False,
                        "id": "ValueAxis-1",
                        "type": "value",
                        "scale": {"type": "linear", "defaultYExtents": False},
                        "labels": {
                            "show": False,
                            "rotate": 0,
                            "overwriteColor": False,
                            "color": "black",
                        },
                    }
                ],
            },
        }
        return self._vis(
            "vis-node-event-heatmap",
            "L4 nodes × failure-indicating events",
            state,
            "annotations",
            f'{F.ANNOTATION_KIND}:"event"',
        )

    def _iterations(self) -> Json:
        events, annotations = self._dv("events"), self._dv("annotations")

        def context(extra: list[Json]) -> Json:
            return {
                "bool": {
                    "must": ["%dashboard_context-must_clause%", *extra],
                    "filter": [
                        "%dashboard_context-filter_clause%",
                        {"range": {"@timestamp": {"%timefilter%": True}}},
                    ],
                    "must_not": ["%dashboard_context-must_not_clause%"],
                }
            }

        spec: Json = {
            "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
            "title": "Events per iteration (red: suspect iterations)",
            "layer": [
                {
                    "data": {
                        "url": {
                            "index": events,
                            "body": {
                                "size": 0,
                                "query": context([{"exists": {"field": F.ITERATION}}]),
                                "aggs": {
                                    "it": {
                                        "histogram": {
                                            "field": F.ITERATION,
                                            "interval": 1,
                                            "min_doc_count": 1,
                                        },
                                        "aggs": {"n": {"sum": {"field": F.COUNT_ALL}}},
                                    }
                                },
                            },
                        },
                        "format": {"property": "aggregations.it.buckets"},
                    },
                    "mark": {"type": "line", "interpolate": "step-after"},
                    "encoding": {
                        "x": {"field": "key", "type": "quantitative", "title": "Iteration"},
                        "y": {
                            "field": "n.value",
                            "type": "quantitative",
                            "title": "Events (lines)",
                        },
                    },
                },
                {
                    "data": {
                        "url": {
                            "index": annotations,
                            "body": {
                                "size": 0,
                                "query": context([{"term": {F.ANNOTATION_KIND: "iteration"}}]),
                                "aggs": {"it": {"terms": {"field": F.ITERATION, "size": 200}}},
                            },
                        },
                        "format": {"property": "aggregations.it.buckets"},
                    },
                    "mark": {"type": "rule", "color": "#d62728", "strokeWidth": 2},
                    "encoding": {"x": {"field": "key", "type": "quantitative"}},
                },
            ],
        }
        state: Json = {
            "type": "vega",
            "aggs": [],
            "params": {"spec": json.dumps(spec, indent=2)},
        }
        return self._vis("vis-iterations", "L4 events per iteration", state, None, "")

    def _jobs_table(self) -> Json:
        state: Json = {
            "type": "table",
            "aggs": [
                {"id": "1", "enabled": True, "type": "count", "schema": "metric", "params": {}},
                {
                    "id": "2",
                    "enabled": True,
                    "type": "terms",
                    "schema": "bucket",
                    "params": {
                        "field": F.ANALYSIS_STATE,
                        "size": 10,
                        "order": "desc",
                        "orderBy": "1",
                        "otherBucket": False,
                        "missingBucket": True,
                        "missingBucketLabel": "not analysed",
                        "customLabel": "Diagnosis state",
                    },
                },
            ],
            "params": {
                "perPage": 10,
                "showPartialRows": False,
                "showMetricsAtAllLevels": False,
                "showTotal": True,
                "totalFunc": "sum",
                "percentageCol": "",
                "sort": {"columnIndex": None, "direction": None},
            },
        }
        return self._vis(
            "vis-failed-jobs-state",
            "L4 failed jobs by diagnosis state",
            state,
            "jobs",
            f'{F.JOB_STATUS}:"failed"',
        )

    def _job_control(self) -> Json:
        state: Json = {
            "type": "input_control_vis",
            "aggs": [],
            "params": {
                "controls": [
                    {
                        "id": "job",
                        "type": "list",
                        "label": "Job",
                        "fieldName": F.JOB_ID,
                        "indexPatternRefName": "control_0_index_pattern",
                        "parent": "",
                        "options": {
                            "type": "terms",
                            "multiselect": False,
                            "dynamicOptions": True,
                            "size": 50,
                            "order": "desc",
                        },
                    }
                ],
                "updateFiltersOnChange": True,
                "useTimeFilter": False,
                "pinFilters": False,
            },
        }
        ref = [
            {
                "name": "control_0_index_pattern",
                "type": "index-pattern",
                "id": self._dv("annotations"),
            }
        ]
        return self._vis("vis-job-control", "L4 job filter", state, None, "", ref)

    # -- dashboard -------------------------------------------------------------------------
    @staticmethod
    def _evidence_layout() -> list[tuple[str, str, int, int, int, int]]:
        """The panels below the verdicts: (type, name, x, y, width, height)."""
        return [
            ("visualization", "vis-suspect-nodes", 0, 0, 20, 16),
            ("visualization", "vis-node-event-heatmap", 20, 0, 28, 16),
            ("visualization", "vis-iterations", 0, 16, 48, 14),
            ("search", "search-rule-matches", 0, 30, 48, 12),
            ("search", "search-findings", 0, 42, 48, 14),
            ("search", "search-failed-jobs", 0, 56, 32, 12),
            ("visualization", "vis-failed-jobs-state", 32, 56, 16, 12),
            ("search", "search-failure-lines", 0, 68, 48, 16),
        ]

    def dashboard(self) -> Json:
        panels, refs = self._dashboard_panels()
        attributes: Json = {
            "title": DASHBOARD_TITLE,
            "description": "Suspect nodes, failure-indicating events, suspect iterations, rule "
            "matches and failed jobs. Choose a job with the Job control.",
            "panelsJSON": _dumps(panels),
            "optionsJSON": _dumps({"useMargins": True, "hidePanelTitles": False}),
            "timeRestore": True,
            "timeFrom": "now-30d",
            "timeTo": "now",
            "refreshInterval": {"pause": True, "value": 0},
            "version": 1,
            "kibanaSavedObjectMeta": _search_source("", with_index=False),
        }
        if self.flavour == "kibana":
            attributes["controlGroupInput"] = self._kibana_control_group(refs)
        else:
            attributes["hits"] = 0
        return self._envelope("dashboard", dashboard_id(self.prefix), attributes, refs)

    def _dashboard_panels(self) -> tuple[list[Json], list[Json]]:
        """The dashboard's panels in grid order, and the references they need."""
        layout: list[tuple[str, str, int, int, int, int]] = [
            ("search", "search-verdicts", 0, 0, 48, 8),
        ] + [(t, n, x, y + 8, w, h) for t, n, x, y, w, h in self._evidence_layout()]
        if self.flavour == "opensearch-dashboards":
            layout = [("visualization", "vis-job-control", 0, 0, 48, 5)] + [
                (t, n, x, y + 5, w, h) for t, n, x, y, w, h in layout
            ]
        panels: list[Json] = []
        refs: list[Json] = []
        for i, (type_, name, x, y, w, h) in enumerate(layout, start=1):
            key = str(i)
            panel: Json = {
                "type": type_,
                "gridData": {"x": x, "y": y, "w": w, "h": h, "i": key},
                "panelIndex": key,
                "embeddableConfig": {},
                "panelRefName": f"panel_{key}",
            }
            if self.flavour == "kibana":
                panel["version"] = "8.9.0"
                panel["embeddableConfig"] = {"enhancements": {}}
                refs.append({"name": f"{key}:panel_{key}", "type": type_, "id": self._id(name)})
            else:
                panel["version"] = "2.11.0"
                refs.append({"name": f"panel_{key}", "type": type_, "id": self._id(name)})
            panels.append(panel)
        return panels, refs

    def _kibana_control_group(self, refs: list[Json]) -> Json:
        """Kibana's control group with the Job options list; appends the data view it reads."""
        control_id = "job-control"
        refs.append(
            {
                "name": f"controlGroup_{control_id}:optionsListDataView",
                "type": "index-pattern",
                "id": self._dv("annotations"),
            }
        )
        return {
            "controlStyle": "oneLine",
            "chainingSystem": "HIERARCHICAL",
            "ignoreParentSettingsJSON": _dumps(
                {
                    "ignoreFilters": False,
                    "ignoreQuery": False,
                    "ignoreTimerange": False,
                    "ignoreValidations": False,
                }
            ),
            "panelsJSON": _dumps(
                {
                    control_id: {
                        "type": "optionsListControl",
                        "order": 0,
                        "grow": True,
                        "width": "medium",
                        "explicitInput": {
                            "id": control_id,
                            "fieldName": F.JOB_ID,
                            "title": "Job",
                            "singleSelect": True,
                            "selectedOptions": [],
                        },
                    }
                }
            ),
        }
