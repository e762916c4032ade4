"""Where a diagnosis goes besides the cluster: the JSON file, the HTML file, Discover links."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from l4_plugin.config import Settings
from l4_plugin.dashboards.links import (
    DEFAULT_DISCOVER_URL_TEMPLATE,
    discover_url,
    validate_template,
    window_around,
)
from l4_plugin.diagnosis.assembly import Diagnosis
from l4_plugin.display import JSON_ESCAPES
from l4_plugin.errors import L4Error
from l4_plugin.report import ReportExtras, write_html
from l4_plugin.report.model import Report


def discover_linker(settings: Settings) -> Callable[[str, str | None, float | None], str | None]:
    """A function building the Discover link of an annotation (job, node, time of the finding)."""
    template = settings.discover_url_template or DEFAULT_DISCOVER_URL_TEMPLATE
    validate_template(template)

    def link(job_id: str, node: str | None, ts: float | None) -> str | None:
        if ts is None:
            start: datetime | str = "now-30d"
            end: datetime | str = "now"
        else:
            start, end = window_around(datetime.fromtimestamp(ts, UTC))
        return discover_url(
            template,
            job_id,
            node,
            start,
            end,
            base_url=settings.dashboards_url,
            index_prefix=settings.index_prefix,
        )

    return link


def write_report_files(
    report: Report,
    extras: ReportExtras | None,
    *,
    json_out: Path | None,
    html_out: Path | None,
) -> None:
    """Write the JSON report (``-`` = stdout) and/or the HTML report."""
    try:
        if json_out is not None:
            text = json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
            if str(json_out) == "-":
                sys.stdout.write(text.translate(JSON_ESCAPES))
            else:
                json_out.write_text(text, "utf-8")
        if html_out is not None:
            write_html(html_out, report, extras)
    except OSError as exc:
        raise L4Error(f"cannot write the report — {exc.filename} — {exc.strerror}") from None


def write_outputs(diagnosis: Diagnosis, *, json_out: Path | None, html_out: Path | None) -> None:
    """The files ``l4 diagnose`` / ``l4 analyze`` were asked for."""
    write_report_files(diagnosis.report, diagnosis.extras, json_out=json_out, html_out=html_out)
