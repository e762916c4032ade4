"""Settings: one object read from command-line flags, then the environment, then a YAML file.

Precedence is flags > environment > ``l4 --config FILE`` > defaults, for every field:

- the cluster and ingest fields at the top level: ``es_url:`` in the file, ``L4_ES_URL``,
  ``--es-url``;
- ``service:`` — how ``l4 serve`` runs: ``service: {interval: 60}`` in the file,
  ``L4_SERVE_INTERVAL``, ``l4 serve --interval``;
- ``analysis:`` — how ``l4 diagnose`` / ``l4 analyze`` analyse: ``analysis: {spatial: iforest}``,
  ``L4_ANALYSIS_SPATIAL``, ``--spatial`` (``--no-rules`` / ``--no-filter`` set ``rules`` /
  ``filter`` to false).

``load_settings`` reports every invalid value at once, each with its field path and where it came
from (``file:line``, the environment variable or the command line). Secrets are ``SecretStr`` and
never appear in ``repr``, logs or error messages (``redacted_url``).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from l4_plugin.analysis.params import AnalysisOptions
from l4_plugin.errors import ConfigError
from l4_plugin.limits import (
    MAX_FILE_SIZE,
    MAX_INFLATE_RATIO,
    MAX_INFLATED_SIZE,
    MAX_JOB_SIZE,
    MAX_READ_SECONDS,
    ReadLimits,
)
from l4_plugin.urls import redact_url, url_problem
from l4_plugin.yamldoc import compose, read_document, read_text

# Characters Elasticsearch and OpenSearch refuse in index names (plus upper case).
_ILLEGAL_INDEX_CHARS = re.compile(r'[\\/*?"<>| ,#:]')


class ServiceSettings(BaseModel):
    """``service:`` — how ``l4 serve`` runs (environment ``L4_SERVE_<NAME>``, flag ``--<name>``).

    ``rules`` / ``watch`` false are ``--no-rules`` / ``--no-watch``; ``once`` and ``--debug-log``
    stay flags of one run.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: float = Field(
        default=30.0, ge=0.1, description="Seconds between discover+diagnose runs"
    )
    watch_interval: float = Field(default=60.0, ge=0.1, description="Seconds between rule watches")
    lease: float = Field(default=300.0, ge=1, description="Claim lease in seconds")
    max_attempts: int = Field(default=3, ge=1, description="Analyses of one job before giving up")
    batch: int = Field(default=20, ge=1, description="Jobs discovered per run")
    retention_days: float | None = Field(
        default=None, ge=0, description="Rollup/line retention (days)"
    )
    retention_interval: float = Field(
        default=3600.0, ge=1, description="Seconds between retention runs"
    )
    health_port: int | None = Field(
        default=None, ge=0, le=65535, description="/healthz port (0 = any)"
    )
    log_json: bool = False
    rules: bool = True
    watch: bool = True
    stop_grace: float = Field(
        default=30.0, ge=0, description="On SIGTERM, seconds to finish an analysis"
    )
    max_backoff: float = Field(default=300.0, ge=0.1, description="Longest wait between retries")


class AnalysisSettings(BaseModel):
    """``analysis:`` — how ``l4 diagnose`` / ``l4 analyze`` analyse (``L4_ANALYSIS_<NAME>``).

    The defaults are the evaluated ones (``diagnosis.AnalysisOptions``); ``filter`` false is the
    cross-job filtering ablation (``--no-filter``), ``rules`` false skips the fault library.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: bool = True
    filter: bool = True
    filter_threshold: float = Field(
        default=0.5, gt=0, le=1, description="Share of baseline jobs a template must appear in"
    )
    spatial: Literal["combined", "iforest"] = "combined"
    dtw: Literal["numpy", "tslearn"] = "numpy"
    window: int = Field(default=10, ge=1, description="DTW window, in iterations")
    sigma: float = Field(
        default=3.0, gt=0, description="Standard deviations that make an iteration abnormal"
    )
    max_events: int = Field(default=20, ge=1, description="Events kept in the report")


#: The sections of the settings and the prefix of their environment variables.
SECTIONS: dict[str, tuple[str, type[BaseModel]]] = {
    "service": ("L4_SERVE_", ServiceSettings),
    "analysis": ("L4_ANALYSIS_", AnalysisSettings),
}


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
    max_inflate_ratio: float = Field(
        MAX_INFLATE_RATIO,
        gt=1,
        description="Most a compressed log may inflate, per compressed byte (a bomb: ~1000)",
    )
    max_inflated_size: int = Field(
        MAX_INFLATED_SIZE, gt=0, description="Bytes one compressed log file may inflate to (4G)"
    )
    max_read_seconds: float = Field(
        MAX_READ_SECONDS, gt=0, description="Seconds reading and inflating one compressed log"
    )
    ingest_workers: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Processes scanning a job's files, l4's own included (unset: cores)",
    )
    ingest_scheduler: str | None = Field(
        None,
        description="A Dask scheduler (tcp://HOST:8786) whose workers ingest jobs (unset: local)",
    )
    dashboards_url: str = Field(
        "", description="Kibana / OpenSearch Dashboards URL for Discover links in annotations"
    )
    discover_url_template: str | None = Field(
        None, description="Discover link template (default: Kibana 8 / OSD 2 Discover)"
    )
    # Frozen, so one default instance can be shared.
    service: ServiceSettings = ServiceSettings()
    analysis: AnalysisSettings = AnalysisSettings()

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

    @field_validator("max_file_size", "max_job_size", "max_inflated_size", mode="before")
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

    def read_limits(self) -> ReadLimits:
        """What ingest may read of a job directory, from these settings."""
        return ReadLimits(
            self.max_file_size,
            self.max_job_size,
            self.max_inflate_ratio,
            self.max_inflated_size,
            self.max_read_seconds,
        )

    def analysis_options(self) -> AnalysisOptions:
        """The analysis parameters these settings ask for (``analysis:`` plus ``random_state``).

        One conversion for ``l4 diagnose`` / ``l4 analyze`` and the service, so that a setting in
        the file's ``analysis:`` section means the same in both.
        """
        a = self.analysis
        return AnalysisOptions(
            crossjob=a.filter,
            filter_threshold=a.filter_threshold,
            spatial_method=a.spatial,
            dtw_backend=a.dtw,
            window=a.window,
            sigma=a.sigma,
            random_state=self.random_state,
            max_events=a.max_events,
        )


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``512``, ``64K``, ``500M``, ``16G``, ``1T`` (powers of 1024) as bytes; ValueError else."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size — e.g. 500M, 16G, 1T or a number of bytes")
    factor = 1024 ** "_kmgt".index(m.group(2).lower() or "_")
    return int(float(m.group(1)) * factor)


#: A field's path in the settings: ``("es_url",)``, ``("service", "interval")``.
FieldPath = tuple[str, ...]


def _name(key: object) -> str:
    return str(key).replace("-", "_")


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[FieldPath, str]]:
    """The file's mapping (``-`` in names read as ``_``, in sections too) and where each field
    is (``file:line``)."""
    data, _ = read_document(path, ConfigError, "config file")
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = _name(key)
        is_section = name in SECTIONS and isinstance(value, Mapping)
        values[name] = {_name(k): v for k, v in value.items()} if is_section else value
    # The document parsed above, so composing it again cannot fail; it gives every key's line.
    node = compose(read_text(path, ConfigError, "config file"))
    where = {p: f"config file {path}:{line}" for p, line in _key_lines(node, ())}
    return values, where


def _key_lines(node: yaml.Node | None, prefix: FieldPath) -> Iterable[tuple[FieldPath, int]]:
    """The 1-based line of every key of a mapping node and of the mappings of its sections."""
    if not isinstance(node, yaml.MappingNode):
        return
    for key, value in node.value:
        path = (*prefix, _name(key.value))
        yield path, key.start_mark.line + 1
        if not prefix and path[0] in SECTIONS:
            yield from _key_lines(value, path)


def load_settings(
    config_file: Path | None = None,
    *,
    service: Mapping[str, Any] | None = None,
    analysis: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> Settings:
    """Build the settings: flags (``overrides`` and the ``service`` / ``analysis`` mappings of
    flags; None = not given) > environment > YAML file > defaults.

    Every invalid value is reported in one ``ConfigError`` whose message has a line per problem:
    the field path (``service.interval``), where the value came from (``config file F:LINE``,
    ``environment L4_SERVE_INTERVAL`` or ``command line``), the value (secrets as ``***``) and why.
    """
    data: dict[str, Any] = {}
    where: dict[FieldPath, str] = {}
    if config_file:
        file_values, file_where = _read_yaml(config_file)
        _layer(
            data,
            where,
            file_values,
            lambda path: file_where.get(path, f"config file {config_file}"),
        )
    env_values, env_names = _env_values()
    _layer(data, where, env_values, lambda path: f"environment {env_names[path]}")
    flags: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    for section, given in (("service", service), ("analysis", analysis)):
        chosen = {k: v for k, v in (given or {}).items() if v is not None}
        if chosen:
            flags[section] = chosen
    _layer(data, where, flags, lambda path: "command line")
    try:
        return Settings(**data)
    except ValidationError as exc:
        problems = [_describe(err, where) for err in exc.errors()]
    if len(problems) == 1:
        raise ConfigError(problems[0]) from None
    raise ConfigError(f"{len(problems)} invalid settings:\n  " + "\n  ".join(problems)) from None


def _layer(
    data: dict[str, Any],
    where: dict[FieldPath, str],
    values: Mapping[str, Any],
    source: Callable[[FieldPath], str],
) -> None:
    """Put ``values`` over ``data`` (sections merged name by name), noting each field's source."""
    for key, value in values.items():
        if key not in SECTIONS or not isinstance(value, Mapping):
            data[key] = value
            where[(key,)] = source((key,))
            continue
        below = data.setdefault(key, {})
        if not isinstance(below, dict):
            continue  # the file's section is not a mapping: keep it, so that it is reported
        where.setdefault((key,), source((key,)))
        for sub, sub_value in value.items():
            below[str(sub)] = sub_value
            where[(key, str(sub))] = source((key, str(sub)))


def _describe(err: Any, where: Mapping[FieldPath, str]) -> str:
    """One line: ``invalid setting PATH (SOURCE): VALUE — why``, secrets and URLs redacted."""
    loc = tuple(str(p) for p in err["loc"])
    field = ".".join(loc) or "settings"
    source = next((where[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in where), "default")
    if err["type"] == "extra_forbidden":
        # The value of a misspelt name may be a secret (es_pasword: …): never shown.
        section = Settings.model_fields if len(loc) == 1 else SECTIONS[loc[0]][1].model_fields
        close = difflib.get_close_matches(loc[-1], list(section), n=1)
        hint = f" — did you mean {close[0]}?" if close else ""
        return f"invalid setting {field} ({source}): unknown setting{hint}"
    bad = err.get("input")
    if "password" in field or "api_key" in field:
        shown = "***"
    elif field.endswith("url") and isinstance(bad, str):
        shown = repr(redact_url(bad))
    else:
        shown = repr(bad)
    return f"invalid setting {field} ({source}): {shown} — {err['msg']}"


def _env_values() -> tuple[dict[str, Any], dict[FieldPath, str]]:
    """Non-empty ``L4_<NAME>``, ``L4_SERVE_<NAME>`` and ``L4_ANALYSIS_<NAME>`` variables as
    settings data, and the variable behind each field."""
    values: dict[str, Any] = {}
    names: dict[FieldPath, str] = {}
    for name in Settings.model_fields:
        if name in SECTIONS:
            continue
        env = os.environ.get(f"L4_{name.upper()}")
        if env:
            values[name] = env
            names[(name,)] = f"L4_{name.upper()}"
    for section, (prefix, model) in SECTIONS.items():
        for name in model.model_fields:
            env = os.environ.get(f"{prefix}{name.upper()}")
            if env:
                values.setdefault(section, {})[name] = env
                names[(section, name)] = f"{prefix}{name.upper()}"
                names[(section,)] = f"{prefix}*"
    return values, names
