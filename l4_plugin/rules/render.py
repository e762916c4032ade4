"""Sandboxed Jinja for a rule's ``diagnosis`` and ``remediation`` texts.

The context a template sees (every key always present):

``job_id`` (str), ``rule`` (dict: ``id``, ``title``, ``category``, ``severity``, ``role``),
``nodes`` (sorted list of matched node names), ``node_count`` (int), ``total_nodes`` (int, nodes
that logged anything in the job), ``first_ts`` (ISO-8601 string of the first matched line, or
``"unknown"``), ``counts`` (dict selection -> matching lines), ``node_counts`` (dict selection ->
distinct nodes), ``samples`` (dict selection -> list of ``{"message", "node", "rank",
"timestamp"}``, earliest first, at most 3), ``sample`` (dict selection -> first sample message or
``""``), ``silent_nodes`` (list of nodes that stopped logging early, from ``silence`` selections).

Templates run in ``ImmutableSandboxedEnvironment`` with ``StrictUndefined``. At load time each
template is parsed, statically checked (no ``_``-prefixed attribute or item, no unknown variable)
and rendered once with a dummy context; any ``SecurityError`` or undefined name makes the rule fail
to load.

Rendering is bounded (``BudgetExceeded``): a wall-clock budget (``RENDER_SECONDS``, checked on every
line the template or a filter runs, so nested ``range`` loops stop), an output budget
(``MAX_OUTPUT`` characters), and operations that could build a huge value in one step — ``*``,
``**``, ``+``, ``~``, ``%``, ``str.format`` and the padding filters and methods — are checked before
they run (``MAX_VALUE`` characters or items, ``MAX_INT_BITS`` bits).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError, TemplateSyntaxError, UndefinedError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

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

#: Wall-clock budget of one render (seconds).
RENDER_SECONDS = 1.0
#: Longest rendered text (characters).
MAX_OUTPUT = 20_000
#: Largest string or sequence one operation may build (characters or items).
MAX_VALUE = 100_000
#: Largest integer one operation may build (bits).
MAX_INT_BITS = 4_096

_SEQUENCES = (str, bytes, list, tuple)
# A dynamic width: ``%*d`` / ``%.*f`` or a nested field in a ``str.format`` spec (``{:{w}}``).
_FORMAT_SPEC = re.compile(r"%[#0 +\-]*[\d.*]*|\{[^{}]*:[^{}]*\}")
_DYNAMIC_WIDTH = re.compile(r"%[#0 +\-]*\*|%[#0 +\-]*\d*\.\*|\{[^{}]*:[^{}]*\{")


class BudgetExceeded(SecurityError):
    """A template needed more time, output or memory than a rule's text may take."""


def _length(value: object) -> int:
    return len(value) if isinstance(value, _SEQUENCES) else 0


def _check_size(size: int, what: str) -> None:
    if size > MAX_VALUE:
        raise BudgetExceeded(
            f"{what} would build {size:,} characters or items (limit {MAX_VALUE:,})"
        )


def _check_int(bits: int, what: str) -> None:
    if bits > MAX_INT_BITS:
        raise BudgetExceeded(f"{what} would build a {bits:,}-bit number (limit {MAX_INT_BITS:,})")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_format(fmt: str, args: Iterable[object]) -> None:
    """Refuse widths and precisions over ``MAX_VALUE``, literal (``%9999999s``, ``{:.9999999f}``)
    or given as an argument (``%*s``, ``{:{w}}``)."""
    for spec in _FORMAT_SPEC.findall(fmt):
        for number in re.findall(r"\d+", spec):
            if len(number) > len(str(MAX_VALUE)) or int(number) > MAX_VALUE:
                shown = number if len(number) <= 20 else number[:17] + "..."
                raise BudgetExceeded(f"format width {shown} is over the limit of {MAX_VALUE:,}")
    if _DYNAMIC_WIDTH.search(fmt):
        for arg in args:
            if _is_int(arg) and abs(arg) > MAX_VALUE:  # type: ignore[arg-type]
                raise BudgetExceeded(f"format width {arg} is over the limit of {MAX_VALUE:,}")


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles ``a ~ b`` through ``environment.bounded_concat`` (the size check)."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The sandbox rules render in, with size checks on the operations that could explode."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self) -> None:
        super().__init__(undefined=jinja2.StrictUndefined, autoescape=False, trim_blocks=True)
        # lipsum(n=10**6) writes megabytes in one call; no rule needs placeholder text.
        self.globals.pop("lipsum", None)
        for name, check in _FILTER_CHECKS.items():
            self.filters[name] = _checked_filter(self.filters[name], check)

    def bounded_concat(self, parts: Iterable[object]) -> str:
        texts = [str(p) for p in parts]
        _check_size(sum(len(t) for t in texts), "'~'")
        return "".join(texts)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            if isinstance(left, _SEQUENCES) and _is_int(right):
                _check_size(len(left) * max(right, 0), "'*'")
            elif isinstance(right, _SEQUENCES) and _is_int(left):
                _check_size(len(right) * max(left, 0), "'*'")
            elif _is_int(left) and _is_int(right):
                _check_int(left.bit_length() + right.bit_length(), "'*'")
        elif operator == "**":
            if _is_int(left) and _is_int(right) and abs(left) > 1 and right > 0:
                _check_int(left.bit_length() * right, "'**'")
        elif operator == "+":
            if isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
                _check_size(len(left) + len(right), "'+'")
        elif operator == "%" and isinstance(left, str):
            _check_format(left, right if isinstance(right, tuple) else (right,))
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = str(value.__self__)

        def checked(*args: Any, **kwargs: Any) -> str:
            _check_format(fmt, [*args, *kwargs.values()])
            return wrapped(*args, **kwargs)

        return checked

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str | bytes):
            if name in ("ljust", "rjust", "center", "zfill") and args and _is_int(args[0]):
                _check_size(args[0], f"str.{name}")
            elif name == "expandtabs":
                tab = args[0] if args else kwargs.get("tabsize", 8)
                _check_size(len(owner) * (tab if _is_int(tab) else 8), "str.expandtabs")
            elif name == "replace" and len(args) >= 2:
                _check_replace(owner, args[0], args[1])
            elif name == "join" and args:
                _check_join(owner, args[0])
        return super().call(__context, __obj, *args, **kwargs)


def _check_replace(text: object, old: object, new: object) -> None:
    if isinstance(text, str | bytes) and isinstance(old, str | bytes):
        hits = text.count(old) if old else len(text) + 1  # type: ignore[arg-type]
        _check_size(len(text) + hits * max(_length(new) - len(old), 0), "replace")


def _check_join(sep: object, items: object) -> None:
    if isinstance(items, list | tuple):
        size = sum(len(str(i)) for i in items[: MAX_VALUE + 1]) + len(items) * _length(sep)
        _check_size(size, "join")


def _center(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    width = args[1] if len(args) > 1 else kwargs.get("width", 80)
    if _is_int(width):
        _check_size(width, "center")


def _indent(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    width = args[1] if len(args) > 1 else kwargs.get("width", 4)
    text = str(args[0]) if args else ""
    if _is_int(width):
        _check_size(len(text) + width * (text.count("\n") + 1), "indent")


def _format(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    if args:
        _check_format(str(args[0]), [*args[1:], *kwargs.values()])


def _replace(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    if len(args) >= 3:
        _check_replace(str(args[0]), str(args[1]), str(args[2]))


def _join(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    if args:
        items = args[0]
        sep = args[1] if len(args) > 1 else kwargs.get("d", "")
        _check_join(sep, list(items) if isinstance(items, list | tuple) else items)


def _batch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    count = args[1] if len(args) > 1 else kwargs.get("linecount", 1)
    if _is_int(count):
        _check_size(count, "batch")


_FILTER_CHECKS: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], None]] = {
    "center": _center,
    "indent": _indent,
    "format": _format,
    "replace": _replace,
    "join": _join,
    "batch": _batch,
}


def _checked_filter(
    func: Callable[..., Any], check: Callable[[tuple[Any, ...], dict[str, Any]], None]
) -> Callable[..., Any]:
    # Filters decorated with pass_eval_context / pass_environment get that object first.
    passes = getattr(func, "jinja_pass_arg", None)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check(args[1:] if passes is not None else args, kwargs)
        return func(*args, **kwargs)

    if passes is not None:
        wrapper.jinja_pass_arg = passes  # type: ignore[attr-defined]
    return wrapper


_ENV = BoundedSandbox()


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


def _bounded_render(template: jinja2.Template, context: dict[str, Any]) -> str:
    """Render within ``RENDER_SECONDS`` and ``MAX_OUTPUT``; ``BudgetExceeded`` otherwise.

    The clock is read on every line event of the render (template code and the Python filters
    it calls), so a loop stops at the deadline; a tracer that was set (a debugger, coverage)
    is put back afterwards.
    """
    deadline = time.monotonic() + RENDER_SECONDS

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if time.monotonic() > deadline:
            line = ""
            f: FrameType | None = frame
            while f is not None:
                if f.f_code.co_filename == "<template>":
                    line = f" (template line {template.get_corresponding_lineno(f.f_lineno)})"
                    break
                f = f.f_back
            raise BudgetExceeded(f"rendering took longer than {RENDER_SECONDS:g} s{line}")
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        parts: list[str] = []
        size = 0
        for chunk in template.generate(context):
            size += len(chunk)
            if size > MAX_OUTPUT:
                raise BudgetExceeded(f"rendered text is over {MAX_OUTPUT:,} characters")
            parts.append(chunk)
        return "".join(parts)
    finally:
        sys.settrace(previous)


def check_template(source: str, selections: Iterable[str]) -> None:
    """Raise ``TemplateProblem`` unless ``source`` is safe over the documented context."""
    try:
        _static_check(source)
        _bounded_render(_ENV.from_string(source), dummy_context(selections))
    except TemplateSyntaxError as exc:
        raise TemplateProblem(f"template syntax error: {exc.message}", exc.lineno) from exc
    except BudgetExceeded as exc:
        raise TemplateProblem(f"template exceeds its budget: {exc}") from exc
    except RecursionError as exc:
        raise TemplateProblem("template recurses too deeply") from exc
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
        return _bounded_render(_ENV.from_string(source), dict(context)).strip()
    except (
        jinja2.TemplateError,
        SecurityError,
        TypeError,
        ValueError,
        KeyError,
        OverflowError,
        RecursionError,
    ) as exc:
        return f"(template could not be rendered: {exc})"
