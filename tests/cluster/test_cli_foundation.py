"""`l4 setup`, `l4 status`, `l4 cluster up` as a user runs them, the invocation state, and
settings flowing from file, environment and flags into `serve`, `analyze` and `ingest`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.l4cli import L4, alive, run_l4


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


def test_tls_failure_is_reported(osmem_url: str) -> None:
    # osmem speaks plain HTTP: an https:// URL to it fails the TLS handshake.
    res = run_l4("status", env={"L4_ES_URL": osmem_url.replace("http://", "https://")})
    assert res.returncode == 1
    assert "TLS failure" in res.stderr and "Traceback" not in res.stderr


def test_cluster_up_is_shared_and_stops_cleanly(tmp_path: Path, state_env: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")} | state_env
    # Leaving the block closes the pipes and waits for the process.
    with subprocess.Popen(
        [*L4, "cluster", "up"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    ) as proc:
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
    while alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(server_pid)


def test_sigterm_stops_embedded_cluster(tmp_path: Path, state_env: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")} | state_env
    with subprocess.Popen(
        [*L4, "cluster", "up"], stdout=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL
    ) as proc:
        assert proc.stdout is not None
        proc.stdout.readline()
        server_pid = int(json.loads((tmp_path / "state" / "cluster.json").read_text())["pid"])
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    deadline = time.monotonic() + 5
    while alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(server_pid)


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
