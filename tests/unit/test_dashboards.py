"""Saved objects: shipped NDJSON files, field names against ingest/, Discover links, install.

Real Kibana 8.x / OpenSearch Dashboards 2.x cannot run here, so ``install`` is tested against a
stdlib HTTP server on 127.0.0.1 that checks what the real import API requires (path, anti-CSRF
header, multipart ``file`` part with the NDJSON) and answers in the real API's shape.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from l4_plugin.dashboards import (
    DEFAULT_DISCOVER_URL_TEMPLATE,
    FLAVOURS,
    dashboard_id,
    detect_flavour,
    discover_url,
    export_ndjson,
    install,
    saved_objects,
    to_ndjson,
)
from l4_plugin.errors import ConfigError, DashboardsError
from l4_plugin.resources import data_path
from tests.dashboards_validation import (
    check_fields,
    check_structure,
    mapping_fields,
    parse_ndjson,
    referenced_fields,
)

KINDS = ("annotations", "events", "lines", "jobs")


def _templates(directory: Path | None = None) -> dict[str, dict[str, Any]]:
    directory = directory or data_path("ingest", "index_templates")
    return {k: json.loads((directory / f"{k}.json").read_text()) for k in KINDS}


def _shipped(flavour: str) -> list[dict[str, Any]]:
    path = data_path("kibana_saved_objects", flavour, "l4.ndjson")
    return parse_ndjson(path.read_text(encoding="utf-8"), str(path))


# -- shipped files -------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_shipped_ndjson_is_valid(flavour: str) -> None:
    objects = _shipped(flavour)
    assert check_structure(objects) == []
    assert check_fields(objects, _templates()) == []
    types = {o["type"] for o in objects}
    assert types == {"index-pattern", "search", "visualization", "dashboard"}
    titles = {o["attributes"]["title"] for o in objects if o["type"] == "index-pattern"}
    assert titles == {f"l4-{k}" for k in KINDS}
    assert [o["attributes"]["title"] for o in objects if o["type"] == "dashboard"] == [
        "L4 job diagnosis"
    ]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_shipped_ndjson_matches_the_builder(flavour: str, tmp_path: Path) -> None:
    """The files are ``l4 dashboards export`` output; regenerate them after changing objects.py."""
    assert _shipped(flavour) == saved_objects(flavour)  # type: ignore[arg-type]
    written = export_ndjson(flavour, tmp_path)  # type: ignore[arg-type]
    assert written.read_text(encoding="utf-8") == data_path(
        "kibana_saved_objects", flavour, "l4.ndjson"
    ).read_text(encoding="utf-8")


def test_flavour_specific_formats() -> None:
    kibana = {o["id"]: o for o in saved_objects("kibana")}
    osd = {o["id"]: o for o in saved_objects("opensearch-dashboards")}
    assert all("typeMigrationVersion" in o and "coreMigrationVersion" in o for o in kibana.values())
    assert all("migrationVersion" in o and "typeMigrationVersion" not in o for o in osd.values())
    k_dash, o_dash = kibana[dashboard_id()], osd[dashboard_id()]
    assert "controlGroupInput" in k_dash["attributes"]
    assert all(":" in r["name"] for r in k_dash["references"])
    assert "l4-vis-job-control" in osd and "l4-vis-job-control" not in kibana
    assert all(r["name"].startswith("panel_") for r in o_dash["references"])


def test_every_field_the_objects_name_is_found() -> None:
    used = referenced_fields(saved_objects("kibana"))
    assert {"l4.annotation.score", "host.name", "l4.annotation.kind"} <= used["l4-annotations"]
    assert {"l4.count_all", "l4.iteration"} <= used["l4-events"]
    assert {"l4.job.status", "l4.analysis.state", "l4.job.id"} <= used["l4-jobs"]


@pytest.mark.parametrize(
    ("kind", "path", "new_name"),
    [
        ("annotations", ["l4", "annotation", "score"], "suspicion"),
        ("events", ["l4", "count_all"], "n"),
        ("jobs", ["l4", "analysis", "state"], "status"),
        ("lines", ["host", "name"], "hostname"),
    ],
)
def test_renamed_field_in_a_template_fails_the_check(
    kind: str, path: list[str], new_name: str, tmp_path: Path
) -> None:
    templates = copy.deepcopy(_templates())
    props = templates[kind]["template"]["mappings"]["properties"]
    for key in path[:-1]:
        props = props[key]["properties"]
    props[new_name] = props.pop(path[-1])
    for k, body in templates.items():
        (tmp_path / f"{k}.json").write_text(json.dumps(body))
    for flavour in FLAVOURS:
        problems = check_fields(_shipped(flavour), _templates(tmp_path))
        assert any(f"field {'.'.join(path)!r}" in p and kind in p for p in problems), problems


def test_structure_check_catches_broken_exports() -> None:
    objects = saved_objects("kibana")
    broken = [*copy.deepcopy(objects), copy.deepcopy(objects[0])]
    broken[5]["references"][0]["id"] = "no-such-pattern"
    problems = check_structure(broken)
    assert any("duplicate id" in p for p in problems)
    assert any("no-such-pattern" in p for p in problems)
    with pytest.raises(ConfigError, match=r"x.ndjson:2: not JSON"):
        parse_ndjson('{"id": 1}\n{nope\n', "x.ndjson")


def test_mapping_fields_knows_multi_fields_and_dynamic_objects() -> None:
    exact, dynamic = mapping_fields(_templates()["jobs"])
    assert "l4.job.status" in exact and "l4.job.config." in dynamic
    exact, _ = mapping_fields(_templates()["lines"])
    assert "message.keyword" in exact


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_other_index_prefix(flavour: str) -> None:
    objects = saved_objects(flavour, index_prefix="acme-l4-")  # type: ignore[arg-type]
    assert check_structure(objects) == []
    assert check_fields(objects, _templates(), index_prefix="acme-l4-") == []
    text = to_ndjson(objects)
    assert '"l4-' not in text.replace('"acme-l4-', "")
    assert "acme-l4-events" in text


# -- Discover links ------------------------------------------------------------------------------


def test_discover_url_default_template() -> None:
    url = discover_url(
        DEFAULT_DISCOVER_URL_TEMPLATE,
        "job-7",
        "node'1",
        "2024-05-01T10:00:00Z",
        "2024-05-01T10:10:00Z",
        base_url="https://kibana.example:5601/",
    )
    assert url.startswith(
        "https://kibana.example:5601/app/discover#/?_g=(time:(from:"
        "'2024-05-01T10:00:00Z',to:'2024-05-01T10:10:00Z'))"
    )
    assert "index:'l4-lines'" in url
    assert "query:'l4.job.id:%22job-7%22%20and%20host.name:%22node!%271%22'" in url


def test_discover_url_custom_template_and_errors() -> None:
    from datetime import UTC, datetime

    start = datetime(2024, 5, 1, 10, tzinfo=UTC)
    url = discover_url(
        "{base_url}/x?job={job_id}&node={node}&from={start}",
        "j 1",
        None,
        start,
        start,
        base_url="http://k",
    )
    assert url == "http://k/x?job=j%201&node=&from=2024-05-01T10:00:00.000Z"
    with pytest.raises(ConfigError, match=r"unknown placeholder\(s\) \['host'\]"):
        discover_url("{host}", "j", None, start, start)


# -- install against a fake import API -----------------------------------------------------------


class _FakeDashboards(BaseHTTPRequestHandler):
    """Answers /api/status and the saved-objects import like Kibana 8 / OSD 2 do."""

    flavour = "kibana"
    received: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""

    def _send(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path == "/api/status":
            name = "osd-name" if self.flavour == "opensearch-dashboards" else "kbn-name"
            version = "2.15.0" if self.flavour == "opensearch-dashboards" else "8.15.2"
            self._send(200, {"version": {"number": version}}, {name: "test"})
        else:
            self._send(404, {"message": "not found"})

    def do_POST(self) -> None:
        xsrf = "osd-xsrf" if self.flavour == "opensearch-dashboards" else "kbn-xsrf"
        length = int(self.headers["Content-Length"])
        raw = self.rfile.read(length)
        if not self.path.endswith("/api/saved_objects/_import?overwrite=true"):
            return self._send(404, {"message": f"unexpected path {self.path}"})
        if self.headers.get(xsrf) != "true":
            return self._send(
                400,
                {
                    "statusCode": 400,
                    "error": "Bad Request",
                    "message": f"Request must contain a {xsrf} header.",
                },
            )
        message = BytesParser(policy=HTTP).parsebytes(
            b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + raw
        )
        parts = [
            p
            for p in message.iter_parts()
            if p.get_param("name", header="content-disposition") == "file"
        ]
        if len(parts) != 1 or not str(parts[0].get_filename()).endswith(".ndjson"):
            return self._send(415, {"message": "expected one multipart part 'file' (.ndjson)"})
        objects = parse_ndjson(parts[0].get_payload(decode=True).decode("utf-8"))
        self.received.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "objects": objects}
        )
        failing = next(o for o in objects if o["type"] == "visualization")
        errors = [
            {
                "id": failing["id"],
                "type": failing["type"],
                "title": failing["attributes"]["title"],
                "meta": {"title": "x", "icon": "v"},
                "error": {
                    "type": "missing_references",
                    "references": [{"type": "index-pattern", "id": "gone"}],
                },
            }
        ]
        ok = [
            {"id": o["id"], "type": o["type"], "meta": {"title": o["attributes"]["title"]}}
            for o in objects
            if o is not failing
        ]
        self._send(
            200, {"success": False, "successCount": len(ok), "successResults": ok, "errors": errors}
        )


@pytest.fixture
def fake_server() -> Iterator[tuple[str, type[_FakeDashboards]]]:
    handler = type("Handler", (_FakeDashboards,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_install_reports_per_object_results(
    flavour: str, fake_server: tuple[str, type[_FakeDashboards]]
) -> None:
    url, handler = fake_server
    handler.flavour = flavour
    result = install(url, None, username="elastic", password="pw")
    assert result.flavour == flavour
    assert handler.received[0]["auth"].startswith("Basic ")
    assert handler.received[0]["objects"] == saved_objects(flavour)  # type: ignore[arg-type]
    assert not result.ok and len(result.errors) == 1
    assert result.errors[0].error == "missing_references: index-pattern/gone"
    assert len(result.objects) == len(saved_objects(flavour))  # type: ignore[arg-type]
    assert "imported" in result.summary()


def test_install_into_a_kibana_space(fake_server: tuple[str, type[_FakeDashboards]]) -> None:
    url, handler = fake_server
    install(url, "kibana", space="sre team", api_key="abc")
    assert handler.received[0]["path"].startswith("/s/sre%20team/api/saved_objects/_import")
    assert handler.received[0]["auth"] == "ApiKey abc"
    with pytest.raises(ConfigError, match="OpenSearch Dashboards has no spaces"):
        install(url, "opensearch-dashboards", space="x")


def test_install_errors_are_reported(fake_server: tuple[str, type[_FakeDashboards]]) -> None:
    url, handler = fake_server
    handler.flavour = "opensearch-dashboards"
    with pytest.raises(DashboardsError, match=r"HTTP 400: Request must contain a osd-xsrf"):
        install(url, "kibana")  # wrong flavour sends kbn-xsrf
    with pytest.raises(DashboardsError, match=r"cannot reach http://127\.0\.0\.1:9/api/status"):
        install("http://127.0.0.1:9", timeout=2)


def test_detect_flavour_without_headers() -> None:
    assert detect_flavour(200, {}, {"version": {"number": "2.11.1"}}) == "opensearch-dashboards"
    assert detect_flavour(200, {}, {"version": {"number": "8.14.0"}}) == "kibana"
    with pytest.raises(DashboardsError, match="pass --flavour"):
        detect_flavour(404, {}, "Not Found")


def test_install_with_credentials_in_the_url(
    fake_server: tuple[str, type[_FakeDashboards]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import base64

    from l4_plugin import cli

    url, handler = fake_server
    monkeypatch.delenv("L4_ES_URL", raising=False)
    with_user = url.replace("http://", "http://kib%40ana:s3cr%2Ft@")
    code = cli.main(["dashboards", "install", "--url", with_user])
    out = capsys.readouterr()
    assert code == 1  # the fake import API fails one object on purpose
    token = base64.b64encode(b"kib@ana:s3cr/t").decode()
    assert handler.received[0]["auth"] == f"Basic {token}"
    assert f"at {url}" in out.out
    assert "s3cr" not in out.out + out.err
