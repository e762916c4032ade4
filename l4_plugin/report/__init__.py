"""Renderings of one diagnosis: the typed report, the self-contained HTML report and its extras."""

from __future__ import annotations

from l4_plugin.records import Verdict
from l4_plugin.report.extras import DroppedTemplate, IterationPoint, NodeEventMatrix, ReportExtras
from l4_plugin.report.html import render_html, write_html
from l4_plugin.report.model import (
    Report,
    ReportEvent,
    ReportIteration,
    ReportNode,
    ReportRuleMatch,
)

__all__ = [
    "DroppedTemplate",
    "IterationPoint",
    "NodeEventMatrix",
    "Report",
    "ReportEvent",
    "ReportExtras",
    "ReportIteration",
    "ReportNode",
    "ReportRuleMatch",
    "Verdict",
    "render_html",
    "write_html",
]
