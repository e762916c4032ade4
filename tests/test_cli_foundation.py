"""`l4 setup`, `l4 status`, `l4 cluster up` as a user runs them, the invocation state, and
settings flowing from file, environment and flags into `serve`, `analyze` and `ingest`."""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

L4 = [sys.executable, "-m", "l4_plugin.cli"]


def run_l4(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")}
    full_env.update(env or {})
    return subprocess.run(
        [*L4, *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def state_env(tmp_path: Path) -> dict[str, str]:
    return {"L4_STATE_DIR": str(tmp_path / "state")}


def test_setup_and_status_on_embedded_cluster(state_env: dict[str, str]) -> None:
    res = run_l4("setup", env=state_env)
    assert res.returncode == 0, res.stderr
    assert "cluster: opensearch" in res.stdout
    assert "index template l4-annotations: created" in res.stdout
    assert res.stderr == ""
    res = run_l4("status", env=state_env)
    assert res.returncode == 0, res.stderr
    assert "index prefix: l4-" in res.stdout


def test_setup_twice_on_one_cluster_is_idempotent(settings_url_env: dict[str, str]) -> None:
    assert run_l4("setup", env=settings_url_env).returncode == 0
    res = run_l4("setup", env=settings_url_env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count(": unchanged") == 5


@pytest.fixture
def settings_url_env(osmem_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        "L4_ES_URL": osmem_url,
        "L4_INDEX_PREFIX": f"cli{os.getpid()}-{tmp_path.name[-8:]}-",
        "L4_STATE_DIR": str(tmp_path / "state"),
    }


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


def test_wrong_credentials(unauthorized_url: str) -> None:
    res = run_l4(
        "status",
        env={"L4_ES_URL": unauthorized_url, "L4_ES_USER": "elastic", "L4_ES_PASSWORD": "wrong-pw"},
    )
    assert res.returncode == 1
    assert "HTTP 401: authentication failed" in res.stderr
    assert unauthorized_url in res.stderr and "wrong-pw" not in res.stderr


def test_tls_failure_is_reported(osmem_url: str) -> None:
    # osmem speaks plain HTTP: an https:// URL to it fails the TLS handshake.
    res = run_l4("status", env={"L4_ES_URL": osmem_url.replace("http://", "https://")})
    assert res.returncode == 1
    assert "TLS failure" in res.stderr and "Traceback" not in res.stderr


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0
    except OSError:
        return False


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
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_cluster_up_is_shared_and_stops_cleanly(tmp_path: Path, state_env: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")} | state_env
    proc = subprocess.Popen(
        [*L4, "cluster", "up"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("embedded cluster running at http://127.0.0.1:")
        url = first.split(" at ")[1].strip()
        state = json.loads((tmp_path / "state" / "cluster.json").read_text())
        assert state["url"] == url
        server_pid = int(state["pid"])
        res = run_l4("status", env=state_env)
        assert res.returncode == 0 and f"at {url}" in res.stdout
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (tmp_path / "state" / "cluster.json").exists()
    deadline = time.monotonic() + 5
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server_pid)


def test_sigterm_stops_embedded_cluster(tmp_path: Path, state_env: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")} | state_env
    proc = subprocess.Popen(
        [*L4, "cluster", "up"], stdout=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    server_pid = int(json.loads((tmp_path / "state" / "cluster.json").read_text())["pid"])
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    deadline = time.monotonic() + 5
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server_pid)


def test_state_lives_in_the_click_context_not_the_module(
    osmem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from l4_plugin import cli
    from l4_plugin.cli.common import CliState

    for key in list(os.environ):
        if key.startswith("L4_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("L4_STATE_DIR", str(tmp_path / "state"))
    prefix = f"ctx{os.getpid()}-"
    state = CliState()
    res = CliRunner().invoke(
        cli.app, ["--es-url", osmem_url, "--index-prefix", prefix, "status"], obj=state
    )
    assert res.exit_code == 0, res.output
    assert f"index prefix: {prefix}" in res.output
    assert state.settings.index_prefix == prefix and state.settings.es_url == osmem_url
    # A second invocation in the same process starts from nothing: the first one's flags are gone.
    again = CliRunner().invoke(cli.app, ["--es-url", osmem_url, "status"], obj=CliState())
    assert again.exit_code == 0, again.output
    assert "index prefix: l4-" in again.output
    module = sys.modules["l4_plugin.cli.main"]
    assert not any(isinstance(v, CliState) for v in vars(module).values())


@pytest.fixture
def in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Any]:
    """``l4 ARGS`` in this process with a clean L4_* environment: (exit code, stdout, stderr)."""
    from l4_plugin import cli

    for key in list(os.environ):
        if key.startswith("L4_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("L4_STATE_DIR", str(tmp_path / "state"))
    previous = signal.getsignal(signal.SIGTERM)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    yield run
    signal.signal(signal.SIGTERM, previous)


def test_serve_takes_its_options_from_file_env_and_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: Any
) -> None:
    seen: list[Any] = []

    class Recorder:
        def __init__(self, settings: Any, options: Any, logger: Any) -> None:
            seen.append(options)

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
    o = seen[-1]
    assert (o.interval, o.batch, o.lease_seconds, o.health_port) == (2.0, 9, 60.0, 0)
    assert (o.once, o.rules, o.watch, o.max_attempts) == (True, False, True, 3)
    code, _, err = in_process("serve")
    assert code == 0, err
    assert (seen[-1].interval, seen[-1].batch, seen[-1].rules) == (30.0, 9, True)
    cfg.write_text("service:\n  interval: 0\n  max-attempts: none\n")
    code, _, err = in_process("--config", str(cfg), "serve")
    assert code == 1 and len(seen) == 2
    assert err.startswith("error: 2 invalid settings:")
    assert re.search(r"service\.interval \(config file .*l4\.yaml:2\): 0 ", err)
    assert re.search(r"service\.max_attempts \(config file .*l4\.yaml:3\): 'none' ", err)


def test_analyze_takes_its_options_from_the_analysis_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Any, in_process: Any
) -> None:
    from l4_plugin.errors import L4Error

    seen: list[Any] = []

    def recorder(store: Any, job_id: str, **kwargs: Any) -> Any:
        seen.append(kwargs)
        raise L4Error("stopped by the test")

    monkeypatch.setattr("l4_plugin.diagnosis.diagnose_job", recorder)
    cfg = tmp_path / "l4.yaml"
    cfg.write_text("analysis:\n  spatial: iforest\n  rules: false\n  sigma: 2.5\n")
    monkeypatch.setenv("L4_ANALYSIS_DTW", "tslearn")
    base = ("--config", str(cfg), "--es-url", store.url, "--index-prefix", store.names.prefix)
    base = (*base, "analyze", "some-job", "--dry-run")
    code, _, err = in_process(*base)
    assert code == 1 and "stopped by the test" in err
    options, rules = seen[-1]["options"], seen[-1]["rules"]
    assert (options.spatial_method, options.dtw_backend, options.sigma) == (
        "iforest",
        "tslearn",
        2.5,
    )
    assert options.crossjob and rules == []
    code, _, _ = in_process(*base, "--spatial", "combined", "--dtw", "numpy", "--no-filter")
    options = seen[-1]["options"]
    assert (options.spatial_method, options.dtw_backend, options.crossjob) == (
        "combined",
        "numpy",
        False,
    )


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


def test_ingest_set_and_the_deprecated_config_spelling(
    tmp_path: Path, store: Any, in_process: Any
) -> None:
    job = tmp_path / "job" / "n1"
    job.mkdir(parents=True)
    (job / "rank0.log").write_text("2024-01-01 00:00:00 INFO step 1 loss 2.0\n")
    base = ("--es-url", store.url, "--index-prefix", store.names.prefix, "ingest")
    fingerprints = []
    for extra in ((), ("--set", "model=a"), ("--config", "model=a")):
        code, out, err = in_process(*base, str(tmp_path / "job"), "--job-id", "s", *extra)
        assert code == 0, err
        assert ("deprecated: use --set" in err) == (extra[:1] == ("--config",))
        fingerprints.append(re.search(r"fingerprint (\S+)\)", out).group(1))  # type: ignore[union-attr]
    assert fingerprints[0] != fingerprints[1] == fingerprints[2]
    code, _, err = in_process(*base, str(tmp_path / "job"), "--set", "novalue")
    assert code == 1 and "invalid --set value — 'novalue'" in err
