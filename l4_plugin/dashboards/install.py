"""Export the saved objects as NDJSON and import them through each tool's saved-objects API.

Kibana 8.x and OpenSearch Dashboards 2.x both answer ``POST /api/saved_objects/_import`` with
``{"success", "successCount", "successResults": [...], "errors": [...]}``; they differ in the
anti-CSRF header (``kbn-xsrf`` / ``osd-xsrf``) and in the objects' format, hence the flavour.
"""

from __future__ import annotations

import base64
import json
import ssl
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote
from urllib.request import Request, urlopen

from l4_plugin.dashboards.objects import FLAVOURS, Flavour, saved_objects
from l4_plugin.errors import ConfigError, DashboardsError
from l4_plugin.urls import split_credentials

NDJSON_NAME = "l4.ndjson"


@dataclass(frozen=True, slots=True)
class ObjectResult:
    """The outcome for one saved object: ``error`` is None when it was imported."""

    type: str
    id: str
    title: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class InstallResult:
    """What the import API reported, one entry per object L4 sent."""

    url: str
    flavour: Flavour
    space: str | None
    objects: tuple[ObjectResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(o.error is None for o in self.objects)

    @property
    def errors(self) -> tuple[ObjectResult, ...]:
        return tuple(o for o in self.objects if o.error is not None)

    def summary(self) -> str:
        """One line per failed object and a count, for the terminal."""
        lines = [f"{o.type}/{o.id} ({o.title}): {o.error}" for o in self.errors]
        done = len(self.objects) - len(self.errors)
        lines.append(
            f"imported {done} of {len(self.objects)} saved objects into {self.flavour} "
            f"at {self.url}" + (f" (space {self.space})" if self.space else "")
        )
        return "\n".join(lines)


def to_ndjson(objects: list[dict[str, Any]]) -> str:
    """Objects as NDJSON: one compact line each, keys sorted so exports diff cleanly."""
    return "".join(json.dumps(o, sort_keys=True, ensure_ascii=False) + "\n" for o in objects)


def export_ndjson(flavour: Flavour, out_dir: Path, index_prefix: str = "l4-") -> Path:
    """Write ``out_dir/<flavour>/l4.ndjson`` and return its path."""
    if flavour not in FLAVOURS:
        raise ConfigError(f"unknown dashboards flavour {flavour!r}; expected one of {FLAVOURS}")
    target = Path(out_dir) / flavour / NDJSON_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(to_ndjson(saved_objects(flavour, index_prefix)), encoding="utf-8")
    return target


@dataclass(frozen=True, slots=True)
class _Http:
    base: str
    headers: dict[str, str]
    context: ssl.SSLContext | None
    timeout: float

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        req = Request(
            self.base + path, data=body, method=method, headers={**self.headers, **(headers or {})}
        )
        try:
            with urlopen(req, timeout=self.timeout, context=self.context) as resp:
                status, resp_headers, raw = resp.status, dict(resp.headers), resp.read()
        except HTTPError as exc:
            status, resp_headers, raw = exc.code, dict(exc.headers), exc.read()
        except (URLError, OSError) as exc:
            raise DashboardsError(
                f"cannot reach {self.base}{path}: {exc} — hint: check --url "
                "(the Kibana / OpenSearch Dashboards URL, not the cluster's)"
            ) from exc
        try:
            payload = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            payload = raw.decode("utf-8", "replace")
        return status, {k.lower(): v for k, v in resp_headers.items()}, payload


def detect_flavour(status: int, headers: dict[str, str], payload: Any) -> Flavour:
    """Kibana or OpenSearch Dashboards, from a ``GET /api/status`` answer.

    OSD sends an ``osd-name`` header and Kibana ``kbn-name``; failing those, OSD's versions are
    1.x–3.x and Kibana's 7.x and later.
    """
    if "osd-name" in headers or "osd-version" in headers:
        return "opensearch-dashboards"
    if "kbn-name" in headers or "kbn-version" in headers:
        return "kibana"
    version = ""
    if isinstance(payload, dict):
        version = str((payload.get("version") or {}).get("number", ""))
    major = version.split(".")[0]
    if major.isdigit():
        return "opensearch-dashboards" if int(major) < 7 else "kibana"
    raise DashboardsError(
        f"GET /api/status answered {status} without a Kibana or OpenSearch "
        "Dashboards version — hint: pass --flavour"
    )


def _multipart(filename: str, content: bytes) -> tuple[bytes, str]:
    boundary = f"l4-{uuid.uuid4().hex}"
    body = (
        (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            "Content-Type: application/ndjson\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


def _error_text(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    kind = str(error.get("type", "error"))
    if kind == "missing_references":
        refs = ", ".join(f"{r.get('type')}/{r.get('id')}" for r in error.get("references", []))
        return f"missing_references: {refs}"
    if kind == "unsupported_type":
        return "unsupported_type: this Kibana / OSD does not know this object type"
    detail = error.get("message") or error.get("reason") or error.get("error")
    return f"{kind}: {detail}" if detail else kind


def install(
    url: str,
    flavour: Flavour | None = None,
    *,
    space: str | None = None,
    index_prefix: str = "l4-",
    api_key: str | None = None,
    username: str | None = None,
    password: str | None = None,
    ca_certs: Path | None = None,
    verify_certs: bool = True,
    timeout: float = 30.0,
) -> InstallResult:
    """Import L4's saved objects into Kibana or OSD at ``url`` (overwriting L4's own objects).

    ``flavour`` None asks ``GET /api/status``. ``space`` targets a Kibana space (``/s/<space>``);
    OSD has no spaces (its multi-tenancy uses the ``securitytenant`` header instead), so a space
    with OSD is an error. Per-object failures come back in the result, not as exceptions.
    ``user:password@`` in ``url`` is used for basic auth and never shown.
    """
    url, url_user, url_password = split_credentials(url, "--url")
    if url_user is not None:
        # Credentials in the URL are meant for this Kibana / OSD: they win over the cluster's.
        api_key, username, password = None, url_user, url_password
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"ApiKey {api_key}"
    elif username is not None:
        token = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    context: ssl.SSLContext | None = None
    if url.startswith("https:"):
        context = ssl.create_default_context(cafile=str(ca_certs) if ca_certs else None)
        if not verify_certs:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    http = _Http(url.rstrip("/"), headers, context, timeout)

    if flavour is None:
        flavour = detect_flavour(*http.request("GET", "/api/status"))
    if flavour not in FLAVOURS:
        raise ConfigError(f"unknown dashboards flavour {flavour!r}; expected one of {FLAVOURS}")
    if space and flavour == "opensearch-dashboards":
        raise ConfigError(
            f"--space {space!r}: OpenSearch Dashboards has no spaces — hint: drop "
            "--space (OSD tenants are chosen by the security plugin)"
        )

    objects = saved_objects(flavour, index_prefix)
    body, content_type = _multipart(NDJSON_NAME, to_ndjson(objects).encode("utf-8"))
    xsrf = "kbn-xsrf" if flavour == "kibana" else "osd-xsrf"
    prefix = f"/s/{quote(space, safe='')}" if space else ""
    status, _, payload = http.request(
        "POST",
        f"{prefix}/api/saved_objects/_import?overwrite=true",
        body,
        {"Content-Type": content_type, xsrf: "true"},
    )
    if status >= 300 or not isinstance(payload, dict):
        message = payload.get("message") if isinstance(payload, dict) else payload
        raise DashboardsError(
            f"saved-objects import at {http.base} failed: HTTP {status}: {message}"
        )

    failed = {
        (str(e.get("type")), str(e.get("id"))): _error_text(e.get("error"))
        for e in payload.get("errors") or []
    }
    succeeded = {
        (str(s.get("type")), str(s.get("id"))) for s in payload.get("successResults") or []
    }
    results = []
    for obj in objects:
        key = (obj["type"], obj["id"])
        error = failed.get(key)
        if error is None and key not in succeeded and succeeded:
            error = "not reported by the import API"
        results.append(ObjectResult(obj["type"], obj["id"], obj["attributes"]["title"], error))
    return InstallResult(http.base, flavour, space, tuple(results))
