"""Renderings of one diagnosis: the self-contained HTML report and what it needs beyond §6."""

from __future__ import annotations

from l4_plugin.report.extras import DroppedTemplate, IterationPoint, NodeEventMatrix, ReportExtras
from l4_plugin.report.html import render_html, write_html

__all__ = [
    "DroppedTemplate",
    "IterationPoint",
    "NodeEventMatrix",
    "ReportExtras",
    "render_html",
    "write_html",
]
