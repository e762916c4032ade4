"""Settings: one object read from command-line flags, then the environment, then a YAML file.

Precedence is flags > environment (``L4_*``) > ``--config FILE`` > defaults. Secrets are
``SecretStr`` and never appear in ``repr``, logs or error messages (``redacted_url``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from l4_plugin.errors import ConfigError
from l4_plugin.ingest.jobdir import MAX_FILE_SIZE, MAX_JOB_SIZE
from l4_plugin.yamldoc import read_mapping

# Characters Elasticsearch and OpenSearch refuse in index names (plus upper case).
_ILLEGAL_INDEX_CHARS = re.compile(r'[\\/*?"<>| ,#:]')


class Settings(BaseSettings):
    """Everything L4 needs to know to talk to a cluster and run its analyses."""

    model_config = SettingsConfigDict(env_prefix="L4_", extra="forbid", validate_default=True)

    es_url: str | None = Field(None, description="Cluster URL; unset = embedded osmem-server")
    es_api_key: SecretStr | None = Field(None, description="Elasticsearch API key (encoded form)")
    es_user: str | None = None
    es_password: SecretStr | None = None
    es_ca_certs: Path | None = Field(None, description="CA bundle for https clusters")
    es_verify_certs: bool = True
    index_prefix: str = "l4-"
    request_timeout: float = Field(30.0, gt=0)
    max_retries: int = Field(4, ge=0, le=20)
    retry_backoff: float = Field(0.5, ge=0)
    embedded_startup_timeout: float = Field(30.0, gt=0)
    state_dir: Path = Field(
        Path.home() / ".local" / "state" / "l4",
        description="Where `l4 cluster up` records the URL of the running embedded cluster",
    )
    random_state: int = 0
    max_file_size: int = Field(
        MAX_FILE_SIZE, gt=0, description="Bytes ingest reads of one log file (e.g. 16G)"
    )
    max_job_size: int = Field(
        MAX_JOB_SIZE, gt=0, description="Bytes of log files one job may hold on disk (e.g. 1T)"
    )
    ingest_workers: int | None = Field(
        None, ge=1, le=1024, description="Worker processes scanning a job's files (unset: cores)"
    )
    dashboards_url: str = Field(
        "", description="Kibana / OpenSearch Dashboards URL for Discover links in annotations"
    )
    discover_url_template: str | None = Field(
        None, description="Discover link template (default: Kibana 8 / OSD 2 Discover)"
    )

    @field_validator("index_prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        if not value or value != value.lower() or _ILLEGAL_INDEX_CHARS.search(value):
            raise ValueError(
                "must be lower case without \\ / * ? \" < > | , # : or spaces (e.g. 'l4-')"
            )
        if value[0] in "-_+.":
            raise ValueError("must not start with -, _, + or .")
        return value

    @field_validator("max_file_size", "max_job_size", mode="before")
    @classmethod
    def _parse_size(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value

    @field_validator("es_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        problem = url_problem(value)
        if problem is not None:
            raise ValueError(f"must be an http:// or https:// URL with a host: {problem}")
        return value.rstrip("/")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # load_settings merges flags, environment and the YAML file itself (with the precedence
        # documented above) and passes the result as init data, so that errors can name the source.
        return (init_settings,)

    def redacted_url(self) -> str:
        """The cluster URL without any user:password part, safe to print."""
        return redact_url(self.es_url) if self.es_url else "embedded"


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``512``, ``64K``, ``500M``, ``16G``, ``1T`` (powers of 1024) as bytes; ValueError else."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size — e.g. 500M, 16G, 1T or a number of bytes")
    factor = 1024 ** "_kmgt".index(m.group(2).lower() or "_")
    return int(float(m.group(1)) * factor)


def redact_url(url: str) -> str:
    """The URL with any ``user:password@`` replaced by ``***@`` (``https://***@host``).

    Works on the text, so a URL that does not parse (``http://user:pw@[::1``) or has another
    scheme (``ftp://user:pw@host``) is redacted too: everything between ``//`` and the last
    ``@`` is taken for credentials.
    """
    head, sep, rest = url.partition("//")
    if not sep:
        at = url.rfind("@")
        return url if at < 0 else f"***@{url[at + 1 :]}"
    at = rest.rfind("@")
    return url if at < 0 else f"{head}//***@{rest[at + 1 :]}"


def url_problem(url: str, schemes: tuple[str, ...] = ("http", "https")) -> str | None:
    """Why ``url`` is not a usable ``scheme://host[:port]`` URL (None when it is); the reason
    never repeats the URL."""
    if "//" not in url:
        return f"it does not start with {' or '.join(f'{s}://' for s in schemes)}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        reason = str(exc).split(":")[0]  # "Port could not be cast to integer value as 'x'"
        if "port" in reason.lower():
            return "the port is not a number from 0 to 65535"
        return f"it does not parse ({reason})"
    if parts.scheme.lower() not in schemes:
        shown = f"{parts.scheme}://" if parts.scheme else "no scheme"
        return f"{shown} is not supported — use {' or '.join(f'{s}://' for s in schemes)}"
    if not parts.hostname:
        return "it has no host"
    del port
    return None


def split_credentials(url: str, what: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` part, and that user and password (or None).

    A URL that is not ``http(s)://host[:port]`` is a ``ConfigError`` naming ``what`` and the
    redacted URL.
    """
    problem = url_problem(url)
    if problem is not None:
        raise ConfigError(
            f"invalid {what} — {redact_url(url)!r} — {problem} — hint: e.g. https://kibana.example:5601"
        )
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    bare = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return bare, user, password


def _read_yaml(path: Path) -> dict[str, Any]:
    data = read_mapping(path, ConfigError, "config file")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build the settings: ``overrides`` (CLI flags, None = not given) > env > YAML file."""
    file_values = _read_yaml(config_file) if config_file else {}
    flags = {k: v for k, v in overrides.items() if v is not None}
    # Environment beats the file: read env by building once without file values for known keys.
    try:
        return Settings(**{**file_values, **_env_values(), **flags})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "settings"
        source = _source_of(field, flags, file_values, config_file)
        bad = err.get("input")
        if "password" in field or "api_key" in field:
            shown = "***"
        elif field.endswith("url") and isinstance(bad, str):
            shown = repr(redact_url(bad))
        else:
            shown = repr(bad)
        raise ConfigError(f"invalid setting {field} ({source}): {shown} — {err['msg']}") from None


def _env_values() -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in Settings.model_fields:
        env = os.environ.get(f"L4_{name.upper()}")
        if env is not None and env != "":
            values[name] = env
    return values


def _source_of(
    field: str, flags: dict[str, Any], file_values: dict[str, Any], config_file: Path | None
) -> str:
    if field in flags:
        return "command line"
    if os.environ.get(f"L4_{field.upper()}"):
        return f"environment L4_{field.upper()}"
    if field in file_values and config_file is not None:
        return f"config file {config_file}"
    return "default"
