"""The index templates shipped in ``ingest/index_templates/`` and how they become API bodies."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from l4_plugin.errors import ConfigError
from l4_plugin.resources import data_path
from l4_plugin.store.names import INDEX_KINDS, IndexNames


def template_dir() -> Path:
    """The folder holding one ``<kind>.json`` file per index kind."""
    return data_path("ingest", "index_templates")


def load_template(kind: str, directory: Path | None = None) -> dict[str, Any]:
    """The JSON body (``template`` + ``_meta``) of one index kind, as shipped."""
    path = (directory or template_dir()) / f"{kind}.json"
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read index template {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(body, dict) or "template" not in body:
        raise ConfigError(f"{path}: expected an object with a 'template' key")
    return body


def template_bodies(names: IndexNames, directory: Path | None = None) -> dict[str, dict[str, Any]]:
    """Composable index-template bodies keyed by template name, for the given prefix.

    The template name equals the index name, and each template matches exactly its index, so two
    prefixes on one cluster (tests, staging) never share or fight over a template.
    """
    bodies: dict[str, dict[str, Any]] = {}
    for kind in INDEX_KINDS:
        shipped = load_template(kind, directory)
        name = names.of(kind)
        body: dict[str, Any] = {
            "index_patterns": [name],
            "priority": 200,
            "template": copy.deepcopy(shipped["template"]),
        }
        if "_meta" in shipped:
            body["_meta"] = shipped["_meta"]
        bodies[name] = body
    return bodies
