"""Settings precedence, validation errors with their source, and secret redaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from l4_plugin.config import load_settings, redact_url
from l4_plugin.errors import ConfigError


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
    with pytest.raises(ConfigError, match=r"invalid setting es_urll \(config file .*l4\.yaml\)"):
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
