"""The report's files: the JSON report and the self-contained HTML report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from l4_plugin.display import JSON_ESCAPES
from l4_plugin.errors import L4Error
from l4_plugin.report.extras import ReportExtras
from l4_plugin.report.html import write_html
from l4_plugin.report.model import Report


def write_report_files(
    report: Report,
    extras: ReportExtras | None,
    *,
    json_out: Path | None,
    html_out: Path | None,
) -> None:
    """Write the JSON report (``-`` = stdout, terminal escapes of logged text escaped) and/or
    the HTML report; a file that cannot be written is a one-line ``L4Error``."""
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
