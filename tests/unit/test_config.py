"""Settings precedence, validation errors with their source, and secret redaction."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from l4_plugin.analysis.params import AnalysisOptions
from l4_plugin.config import load_settings
from l4_plugin.errors import ConfigError
from l4_plugin.urls import redact_url


def test_precedence_flags_over_env_over_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "l4.yaml"
    cfg.write_text("es_url: http://file:9200\nindex_prefix: file-\nrequest_timeout: 5\n")
    monkeypatch.setenv("L4_INDEX_PREFIX", "env-")
    s = load_settings(cfg)
    assert (s.es_url, s.index_prefix, s.request_timeout) == ("http://file:9200", "env-", 5.0)
    s = load_settings(cfg, index_prefix="flag-", es_url=None)
    assert s.index_prefix == "flag-"
    assert s.es_url == "http://file:9200"


def test_secrets_are_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("L4_ES_PASSWORD", "hunter2")
    monkeypatch.setenv("L4_ES_API_KEY", "c2VjcmV0")
    s = load_settings(None, es_user="elastic")
    assert "hunter2" not in repr(s) and "c2VjcmV0" not in repr(s)
    assert s.es_password is not None and s.es_password.get_secret_value() == "hunter2"
    assert (
        redact_url("https://elastic:hunter2@es.example:9200/x") == "https://***@es.example:9200/x"
    )


def test_bad_yaml_names_file_and_line(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("es_url: http://x\nindex_prefix: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:3: invalid YAML"):
        load_settings(cfg)


def test_unknown_setting_in_file_is_named(tmp_path: Path) -> None:
    cfg = tmp_path / "l4.yaml"
    cfg.write_text("es_urll: http://x\n")
    with pytest.raises(
        ConfigError, match=r"invalid setting es_urll \(config file .*l4\.yaml:1\): unknown setting"
    ):
        load_settings(cfg)


@pytest.mark.parametrize("prefix", ["L4-", "l4*", "_l4", "l 4"])
def test_illegal_index_prefix(prefix: str) -> None:
    with pytest.raises(ConfigError, match=r"invalid setting index_prefix \(command line\)"):
        load_settings(None, index_prefix=prefix)


def test_bad_env_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("L4_ES_URL", "ftp://nope")
    with pytest.raises(ConfigError, match=r"es_url \(environment L4_ES_URL\).*http"):
        load_settings(None)


def test_password_value_is_redacted_in_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "l4.yaml"
    cfg.write_text("es_password: [1, 2]\n")
    with pytest.raises(ConfigError, match=r"es_password .*\*\*\*") as info:
        load_settings(cfg)
    assert "[1, 2]" not in str(info.value)


def test_ingest_workers_from_env_flag_or_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(None).ingest_workers is None  # None: the machine's cores
    monkeypatch.setenv("L4_INGEST_WORKERS", "3")
    assert load_settings(None).ingest_workers == 3
    assert load_settings(None, ingest_workers=5).ingest_workers == 5
    monkeypatch.setenv("L4_INGEST_WORKERS", "0")
    with pytest.raises(ConfigError, match=r"ingest_workers \(environment L4_INGEST_WORKERS\)"):
        load_settings(None)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for key in list(os.environ):
        if key.startswith("L4_"):
            monkeypatch.delenv(key)
    return monkeypatch


def test_service_and_analysis_sections_flags_over_env_over_file(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "l4.yaml"
    cfg.write_text(
        "service:\n  interval: 5\n  health-port: 9464\n  batch: 7\n"
        "analysis:\n  spatial: iforest\n  filter: false\n  dtw: tslearn\n"
    )
    s = load_settings(None)
    assert (s.service.interval, s.service.health_port, s.analysis.spatial) == (
        30.0,
        None,
        "combined",
    )
    s = load_settings(cfg)
    assert (s.service.interval, s.service.health_port, s.service.batch) == (5.0, 9464, 7)
    assert (s.analysis.spatial, s.analysis.filter, s.analysis.dtw) == ("iforest", False, "tslearn")
    clean_env.setenv("L4_SERVE_INTERVAL", "2.5")
    clean_env.setenv("L4_ANALYSIS_SPATIAL", "combined")
    s = load_settings(cfg)
    assert (s.service.interval, s.service.batch, s.analysis.spatial) == (2.5, 7, "combined")
    s = load_settings(
        cfg, service={"interval": 9.0, "batch": None}, analysis={"dtw": "numpy", "rules": None}
    )
    assert (s.service.interval, s.service.batch) == (9.0, 7)  # None = flag not given
    assert (s.analysis.dtw, s.analysis.rules, s.analysis.filter) == ("numpy", True, False)


def test_every_bad_value_is_reported_at_once_with_its_location(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "l4.yaml"
    cfg.write_text(
        "index_prefix: l4-\nservice:\n  interval: 0\n  batch: 5\nanalysis:\n  spatial: kmeans\n"
    )
    clean_env.setenv("L4_MAX_RETRIES", "many")
    with pytest.raises(ConfigError) as info:
        load_settings(cfg, index_prefix="UPPER")
    message = str(info.value)
    assert message.startswith("4 invalid settings:\n"), message
    assert re.search(r"service\.interval \(config file .*l4\.yaml:3\): 0 — .*0\.1", message)
    assert re.search(r"analysis\.spatial \(config file .*l4\.yaml:6\): 'kmeans' — ", message)
    assert "max_retries (environment L4_MAX_RETRIES): 'many'" in message
    assert "index_prefix (command line): 'UPPER'" in message
    assert "batch" not in message


def test_bad_section_env_value_and_unknown_section_key(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("L4_SERVE_HEALTH_PORT", "70000")
    with pytest.raises(
        ConfigError, match=r"^invalid setting service\.health_port \(environment L4_SERVE_HEALTH_"
    ):
        load_settings(None)
    clean_env.delenv("L4_SERVE_HEALTH_PORT")
    cfg = tmp_path / "l4.yaml"
    cfg.write_text("service:\n  intervall: 3\nes_pasword: hunter2\n")
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    message = str(info.value)
    assert "service.intervall (config file" in message and "did you mean interval?" in message
    assert "es_pasword (config file" in message and "did you mean es_password?" in message
    assert "hunter2" not in message  # a misspelt secret's value is never shown
    cfg.write_text("analysis: fast\n")
    with pytest.raises(ConfigError, match=r"invalid setting analysis \(config file .*:1\)"):
        load_settings(cfg)


def test_analysis_section_reaches_the_options_cli_and_service_share(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    # l4 analyze and l4 serve both build their AnalysisOptions with Settings.analysis_options;
    # a value in the file's analysis: section must arrive there, and the defaults must not move.
    assert load_settings(None).analysis_options() == AnalysisOptions()
    cfg = tmp_path / "l4.yaml"
    cfg.write_text(
        "random_state: 7\nanalysis:\n  spatial: iforest\n  filter: false\n  sigma: 2.5\n"
        "  window: 4\n  max-events: 9\n  filter-threshold: 0.25\n  dtw: tslearn\n"
    )
    opts = load_settings(cfg).analysis_options()
    assert opts == AnalysisOptions(
        crossjob=False,
        filter_threshold=0.25,
        spatial_method="iforest",
        dtw_backend="tslearn",
        window=4,
        sigma=2.5,
        random_state=7,
        max_events=9,
    )


def test_read_limits_from_file_env_and_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decompression guard's limits are settings like the size limits: defaults, file,
    environment, flags; sizes take units; a ratio of 1 or less is refused with its source."""
    from l4_plugin.limits import ReadLimits

    assert load_settings().read_limits() == ReadLimits()
    cfg = tmp_path / "l4.yaml"
    cfg.write_text("max_inflate_ratio: 50\nmax_inflated_size: 1G\nmax_read_seconds: 5\n")
    monkeypatch.setenv("L4_MAX_READ_SECONDS", "7.5")
    limits = load_settings(cfg, max_inflated_size="2G").read_limits()
    assert (limits.max_inflate_ratio, limits.max_inflated_size, limits.max_read_seconds) == (
        50.0,
        2 * 1024**3,
        7.5,
    )
    monkeypatch.setenv("L4_MAX_INFLATE_RATIO", "1")
    with pytest.raises(
        ConfigError, match=r"max_inflate_ratio \(environment L4_MAX_INFLATE_RATIO\): '1'"
    ):
        load_settings()
