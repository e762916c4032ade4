"""`l4 setup`, `l4 status`, `l4 cluster up` as a user runs them, the invocation state, and
settings flowing from file, environment and flags into `serve`, `analyze` and `ingest`."""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.l4cli import alive, run_l4


def test_unreachable_url_one_line_error_no_traceback() -> None:
    res = run_l4("--es-url", "http://u:secret@127.0.0.1:9", "status")
    assert res.returncode == 1
    assert res.stderr.startswith("error: cannot connect to http://***@127.0.0.1:9")
    assert len(res.stderr.strip().splitlines()) == 1
    assert "secret" not in res.stderr and "Traceback" not in res.stderr


def test_debug_shows_traceback() -> None:
    res = run_l4("--debug", "--es-url", "http://127.0.0.1:9", "status")
    assert res.returncode == 1
    assert "Traceback" in res.stderr and "error: cannot connect" in res.stderr


class _Unauthorized(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"error": "unauthorized"}).encode())

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def unauthorized_url() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Unauthorized)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()
    server.server_close()


def test_wrong_credentials(unauthorized_url: str) -> None:
    res = run_l4(
        "status",
        env={"L4_ES_URL": unauthorized_url, "L4_ES_USER": "elastic", "L4_ES_PASSWORD": "wrong-pw"},
    )
    assert res.returncode == 1
    assert "HTTP 401: authentication failed" in res.stderr
    assert unauthorized_url in res.stderr and "wrong-pw" not in res.stderr


def test_missing_osmem_binary(tmp_path: Path, state_env: dict[str, str]) -> None:
    res = run_l4("status", env={**state_env, "OSMEM_SERVER_BIN": str(tmp_path / "nope")})
    assert res.returncode == 1
    assert "osmem-server binary" in res.stderr and "missing" in res.stderr


def test_crashing_osmem_binary_reports_its_message(
    tmp_path: Path, state_env: dict[str, str]
) -> None:
    fake = tmp_path / "osmem-crash"
    fake.write_text("#!/bin/sh\necho 'panic: address already in use' >&2\nexit 2\n")
    fake.chmod(0o755)
    res = run_l4("status", env={**state_env, "OSMEM_SERVER_BIN": str(fake)})
    assert res.returncode == 1
    assert "exited with status 2: panic: address already in use" in res.stderr


def test_hanging_osmem_binary_is_killed_no_orphan(
    tmp_path: Path, state_env: dict[str, str]
) -> None:
    pidfile = tmp_path / "pid"
    fake = tmp_path / "osmem-hang"
    fake.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 300\n")
    fake.chmod(0o755)
    res = run_l4(
        "status",
        env={**state_env, "OSMEM_SERVER_BIN": str(fake), "L4_EMBEDDED_STARTUP_TIMEOUT": "1"},
    )
    assert res.returncode == 1
    assert "did not report ready within 1 s" in res.stderr
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_serve_takes_its_options_from_file_env_and_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: Any
) -> None:
    seen: list[Any] = []

    class Recorder:
        def __init__(self, settings: Any, logger: Any, *, once: bool = False) -> None:
            seen.append((settings.service, once))

        def run(self) -> int:
            return 0

    monkeypatch.setattr("l4_plugin.service.Service", Recorder)
    cfg = tmp_path / "l4.yaml"
    cfg.write_text("service:\n  interval: 5\n  batch: 7\n  lease: 60\n  health_port: 0\n")
    monkeypatch.setenv("L4_SERVE_BATCH", "9")
    code, _, err = in_process(
        "--config", str(cfg), "serve", "--once", "--interval", "2", "--no-rules"
    )
    assert code == 0, err
    o, once = seen[-1]
    assert (o.interval, o.batch, o.lease, o.health_port) == (2.0, 9, 60.0, 0)
    assert (once, o.rules, o.watch, o.max_attempts) == (True, False, True, 3)
    code, _, err = in_process("serve")
    assert code == 0, err
    o, once = seen[-1]
    assert (o.interval, o.batch, o.rules, once) == (30.0, 9, True, False)
    cfg.write_text("service:\n  interval: 0\n  max-attempts: none\n")
    code, _, err = in_process("--config", str(cfg), "serve")
    assert code == 1 and len(seen) == 2
    assert err.startswith("error: 2 invalid settings:")
    assert re.search(r"service\.interval \(config file .*l4\.yaml:2\): 0 ", err)
    assert re.search(r"service\.max_attempts \(config file .*l4\.yaml:3\): 'none' ", err)


def test_analysis_section_defaults_are_the_evaluated_options() -> None:
    from l4_plugin.config import AnalysisSettings
    from l4_plugin.diagnosis import AnalysisOptions

    a, o = AnalysisSettings(), AnalysisOptions()
    assert (a.filter, a.filter_threshold, a.spatial, a.dtw, a.window, a.sigma, a.max_events) == (
        o.crossjob,
        o.filter_threshold,
        o.spatial_method,
        o.dtw_backend,
        o.window,
        o.sigma,
        o.max_events,
    )
