"""Reading a YAML file that must hold a mapping, with errors that name the file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from l4_plugin.errors import L4Error


def read_mapping(path: Path, error: type[L4Error], what: str) -> dict[str, Any]:
    """The mapping in ``path`` ({} for an empty file); ``error`` says ``file:line`` otherwise.

    ``what`` names the file's role in messages (``config file``, ``job.yaml``, ``stage rules``).
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{where}: invalid YAML in {what}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{path}:1: {what} must be a mapping, got {type(data).__name__}")
    return data
