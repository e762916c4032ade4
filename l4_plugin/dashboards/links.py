"""Discover links: open a job's lines (``l4-lines``) around a finding, in Kibana or OSD.

The link is built from a template (setting ``discover_url_template``) with these placeholders,
each already escaped for where it goes (Rison inside the URL fragment, then percent-encoding):
``{base_url}`` (Kibana / OSD URL without trailing slash, may be empty for a relative link),
``{data_view}`` (id of the lines data view), ``{start}``, ``{end}`` (ISO-8601 UTC), ``{query}``
(KQL ``l4.job.id:"…" and host.name:"…"``), ``{job_id}``, ``{node}``.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from l4_plugin.config import Settings
from l4_plugin.dashboards.objects import data_view_id
from l4_plugin.errors import ConfigError
from l4_plugin.store import fields as F

#: Kibana 8.x Discover (OpenSearch Dashboards 2.x redirects this legacy form to its own Discover).
DEFAULT_DISCOVER_URL_TEMPLATE = (
    "{base_url}/app/discover#/?_g=(time:(from:'{start}',to:'{end}'))"
    "&_a=(index:'{data_view}',query:(language:kuery,query:'{query}'),"
    "sort:!(!('@timestamp',asc)))"
)
_PLACEHOLDERS = frozenset({"base_url", "data_view", "start", "end", "query", "job_id", "node"})
# Characters Rison and the URL fragment both accept unescaped.
_SAFE = "-_.~!*:@,/ "


def _rison_string(value: str) -> str:
    """Escape a value for a single-quoted Rison string, then percent-encode it for the URL."""
    rison = value.replace("!", "!!").replace("'", "!'")
    return quote(rison, safe=_SAFE).replace(" ", "%20")


def _kql_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _iso(value: datetime | str) -> str:
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def discover_query(job_id: str, node: str | None = None) -> str:
    """The KQL query of a Discover link: the job, and the node when there is one."""
    query = f"{F.JOB_ID}:{_kql_quote(job_id)}"
    if node:
        query += f" and host.name:{_kql_quote(node)}"
    return query


def validate_template(template: str) -> None:
    """Raise ``ConfigError`` if the template uses a placeholder :func:`discover_url` lacks."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ConfigError(f"discover_url_template: {exc} — value {template!r}") from exc
    unknown = fields - _PLACEHOLDERS
    if unknown:
        raise ConfigError(
            f"discover_url_template: unknown placeholder(s) {sorted(unknown)} — value "
            f"{template!r} — hint: use {sorted(_PLACEHOLDERS)}"
        )


def discover_url(
    template: str,
    job_id: str,
    node: str | None,
    start_ts: datetime | str,
    end_ts: datetime | str,
    *,
    base_url: str = "",
    index_prefix: str = "l4-",
) -> str:
    """A Discover link to ``job_id``'s lines (on ``node`` if given) between the two times."""
    validate_template(template)
    values = {
        "base_url": base_url.rstrip("/"),
        "data_view": _rison_string(data_view_id("lines", index_prefix)),
        "start": _rison_string(_iso(start_ts)),
        "end": _rison_string(_iso(end_ts)),
        "query": _rison_string(discover_query(job_id, node)),
        "job_id": quote(job_id, safe=""),
        "node": quote(node or "", safe=""),
    }
    return template.format_map(values)


def window_around(ts: datetime, minutes: float = 5.0) -> tuple[datetime, datetime]:
    """A time window of ``minutes`` either side of a finding, for :func:`discover_url`."""
    delta = timedelta(minutes=minutes)
    return ts - delta, ts + delta


Linker = Callable[[str, str | None, float | None], str | None]


def discover_linker(settings: Settings) -> Linker:
    """A function building the Discover link of an annotation (job, node, time of the finding)
    from the settings (``discover_url_template``, ``dashboards_url``, ``index_prefix``); the
    template is checked now, so a bad one fails before any work."""
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
