"""Sandboxed Jinja for a rule's ``diagnosis`` and ``remediation`` texts.

The context a template sees (every key always present):

``job_id`` (str), ``rule`` (dict: ``id``, ``title``, ``category``, ``severity``, ``role``),
``nodes`` (sorted list of matched node names), ``node_count`` (int), ``total_nodes`` (int, nodes
that logged anything in the job), ``first_ts`` (ISO-8601 string of the first matched line, or
``"unknown"``), ``counts`` (dict selection -> matching lines), ``node_counts`` (dict selection ->
distinct nodes), ``samples`` (dict selection -> list of ``{"message", "node", "rank",
"timestamp"}``, earliest first, at most 3), ``sample`` (dict selection -> first sample message or
``""``), ``silent_nodes`` (list of nodes that stopped logging early, from ``silence`` selections).

Templates run in ``SandboxedEnvironment`` with ``StrictUndefined``. At load time each template is
parsed, statically checked (no ``_``-prefixed attribute or item, no unknown variable) and rendered
once with a dummy context; any ``SecurityError`` or undefined name makes the rule fail to load.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.exceptions import SecurityError, TemplateSyntaxError, UndefinedError
from jinja2.sandbox import SandboxedEnvironment

CONTEXT_KEYS = (
    "job_id",
    "rule",
    "nodes",
    "node_count",
    "total_nodes",
    "first_ts",
    "counts",
    "node_counts",
    "samples",
    "sample",
    "silent_nodes",
)

_ENV = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, trim_blocks=True)


class TemplateProblem(ValueError):
    """A template is unsafe or invalid; ``line`` is 1-based inside the template, if known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(message)


def dummy_context(selections: Iterable[str]) -> dict[str, Any]:
    """A context with the documented shape and placeholder values, for load-time checks."""
    names = list(selections)
    sample = {"message": "example line", "node": "node-1", "rank": 0, "timestamp": "unknown"}
    return {
        "job_id": "job-0",
        "rule": {"id": "rule", "title": "", "category": "", "severity": "", "role": "cause"},
        "nodes": ["node-1"],
        "node_count": 1,
        "total_nodes": 2,
        "first_ts": "unknown",
        "counts": dict.fromkeys(names, 1),
        "node_counts": dict.fromkeys(names, 1),
        "samples": {n: [sample] for n in names},
        "sample": dict.fromkeys(names, "example line"),
        "silent_nodes": ["node-1"],
    }


def _static_check(source: str) -> None:
    ast = _ENV.parse(source)
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        name: object = None
        if isinstance(node, nodes.Getattr):
            name = node.attr
        elif isinstance(node, nodes.Getitem):
            arg = node.arg
            name = arg.value if isinstance(arg, nodes.Const) else None
        if isinstance(name, str) and name.startswith("_"):
            raise TemplateProblem(f"access to {name!r} is not allowed", node.lineno)
    unknown = sorted(meta.find_undeclared_variables(ast) - set(CONTEXT_KEYS) - set(_ENV.globals))
    if unknown:
        raise TemplateProblem(
            f"undefined variable {unknown[0]!r} (available: {', '.join(CONTEXT_KEYS)})"
        )


def check_template(source: str, selections: Iterable[str]) -> None:
    """Raise ``TemplateProblem`` unless ``source`` is safe over the documented context."""
    try:
        _static_check(source)
        _ENV.from_string(source).render(dummy_context(selections))
    except TemplateSyntaxError as exc:
        raise TemplateProblem(f"template syntax error: {exc.message}", exc.lineno) from exc
    except SecurityError as exc:
        raise TemplateProblem(f"unsafe template: {exc}") from exc
    except UndefinedError as exc:
        raise TemplateProblem(f"undefined value in template: {exc.message}") from exc
    except TemplateProblem:
        raise
    except Exception as exc:  # a filter failing on the dummy context, e.g. int("x")
        raise TemplateProblem(f"template failed on the documented context: {exc}") from exc


def render(source: str, context: Mapping[str, Any]) -> str:
    """Render a checked template; a run-time failure yields a message instead of raising."""
    try:
        return _ENV.from_string(source).render(dict(context)).strip()
    except (jinja2.TemplateError, SecurityError, TypeError, ValueError, KeyError) as exc:
        return f"(template could not be rendered: {exc})"
