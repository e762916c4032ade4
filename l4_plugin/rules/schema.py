"""Validation of a rule document (plain data from YAML) into a ``Rule``, with located errors.

``build_rule`` checks every key, collects every problem with the YAML line it comes from, and only
returns a ``Rule`` when there is none. ``json_schema`` is the published editor schema
(``rules/schema.json``); a test keeps the file equal to it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from l4_plugin.errors import RuleError
from l4_plugin.records import FAULT_CATEGORIES
from l4_plugin.rules.compiler import RegexTranslationError, python_re_to_lucene
from l4_plugin.rules.condition import ConditionSyntaxError, Expr, parse_condition
from l4_plugin.rules.render import TemplateProblem, check_template
from l4_plugin.rules.rule import FieldMatcher, Rule, RuleTest, Selection, Silence
from l4_plugin.store import fields as F

CATEGORIES = FAULT_CATEGORIES
SEVERITIES = ("info", "low", "medium", "high", "critical")
ROLES = ("cause", "symptom")
STATUSES = ("draft", "confirmed")
SCOPES = ("job", "node")
FIELDS = (
    "message",
    "template",
    "log.level",
    "host.name",
    F.STAGE,
    F.RANK,
    F.ITERATION,
    F.TEMPLATE_ID,
    "log.file.path",
)
NUMERIC_FIELDS = (F.RANK, F.ITERATION)
KIND_MODIFIERS = ("contains", "startswith", "endswith", "re", "gt", "gte", "lt", "lte")
FLAG_MODIFIERS = ("all", "cased")
MODIFIERS = KIND_MODIFIERS + FLAG_MODIFIERS
NUMERIC_KINDS = ("gt", "gte", "lt", "lte")
REQUIRED = ("id", "title", "status", "category", "severity", "role", "description", "detection")
OPTIONAL = (
    "references",
    "tags",
    "scope",
    "window",
    "max_node_fraction",
    "confidence",
    "evict",
    "diagnosis",
    "remediation",
    "tests",
    "author",
    "date",
)
RULE_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
SELECTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

Lines = Mapping[tuple[str | int, ...], int]


def _hint(value: str, options: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(value, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_duration(value: object) -> float:
    """``30s``, ``5m``, ``2h``, ``1d``, ``250ms`` or a number of seconds; raise ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"bad duration {value!r}")
    if isinstance(value, int | float):
        if value <= 0:
            raise ValueError(f"duration must be positive, got {value!r}")
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value.strip())
        if m and float(m.group(1)) > 0:
            return float(m.group(1)) * _UNITS[m.group(2)]
    raise ValueError(f"bad duration {value!r} (use e.g. 30s, 5m, 2h, 1d or seconds)")


class _Collector:
    """Accumulates ``RuleError`` objects located by YAML line."""

    def __init__(self, path: Path | None, lines: Lines) -> None:
        self.path = path
        self.lines = lines
        self.errors: list[RuleError] = []

    def location(self, keypath: tuple[str | int, ...]) -> str:
        name = str(self.path) if self.path else "<rule>"
        for end in range(len(keypath), -1, -1):
            line = self.lines.get(keypath[:end])
            if line is not None:
                return f"{name}:{line}"
        return name

    def add(self, keypath: tuple[str | int, ...], message: str, line: int | None = None) -> None:
        dotted = ".".join(str(k) if isinstance(k, str) else f"[{k}]" for k in keypath)
        dotted = dotted.replace(".[", "[")
        text = f"{dotted}: {message}" if dotted else message
        loc = self.location(keypath)
        if line is not None and ":" in loc:
            loc = f"{loc.rsplit(':', 1)[0]}:{int(loc.rsplit(':', 1)[1]) + line}"
        self.errors.append(RuleError(text, loc))


def _str(c: _Collector, data: Mapping[str, Any], key: str, required: bool = True) -> str:
    value = data.get(key)
    if value is None:
        if required:
            c.add((key,) if key in data else (), f"missing required key '{key}'")
        return ""
    if not isinstance(value, str) or not value.strip():
        c.add((key,), f"must be a non-empty string, got {value!r}")
        return ""
    return value


def _choice(c: _Collector, data: Mapping[str, Any], key: str, options: tuple[str, ...]) -> str:
    value = _str(c, data, key)
    if value and value not in options:
        c.add(
            (key,), f"unknown value {value!r}{_hint(value, options)}; one of {', '.join(options)}"
        )
    return value


def _values(c: _Collector, kp: tuple[str | int, ...], raw: object) -> list[str | int | float]:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        c.add(kp, "empty value list")
    out: list[str | int | float] = []
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            c.add(kp + ((i,) if isinstance(raw, list) else ()), f"bad value {item!r}")
            continue
        if isinstance(item, str) and item == "":
            c.add(kp, "empty string value")
            continue
        out.append(item)
    return out


def _matcher(
    c: _Collector, kp: tuple[str | int, ...], key: str, raw: object
) -> FieldMatcher | None:
    field, *mods = key.split("|")
    ok = True
    if field not in FIELDS:
        c.add(kp, f"unknown field {field!r}{_hint(field, FIELDS)}; fields: {', '.join(FIELDS)}")
        ok = False
    kinds: list[str] = []
    flags: set[str] = set()
    for mod in mods:
        if mod in KIND_MODIFIERS:
            kinds.append(mod)
        elif mod in FLAG_MODIFIERS:
            flags.add(mod)
        else:
            c.add(kp, f"unknown modifier {mod!r}{_hint(mod, MODIFIERS)}")
            ok = False
    if len(kinds) > 1:
        c.add(kp, f"modifiers {' and '.join(repr(k) for k in kinds)} cannot be combined")
        ok = False
    kind = kinds[0] if kinds else "equals"
    numeric = field in NUMERIC_FIELDS
    if numeric and kind not in (*NUMERIC_KINDS, "equals"):
        c.add(kp, f"modifier {kind!r} needs a text field; {field!r} is numeric (use gt/gte/lt/lte)")
        ok = False
    if not numeric and kind in NUMERIC_KINDS and field in FIELDS:
        c.add(kp, f"modifier {kind!r} needs a numeric field ({F.RANK}, {F.ITERATION})")
        ok = False
    if numeric and "cased" in flags:
        c.add(kp, f"modifier 'cased' has no meaning on numeric field {field!r}")
        ok = False
    values = _values(c, kp, raw)
    for value in values:
        if numeric and not isinstance(value, int | float):
            c.add(kp, f"{field!r} is numeric; bad value {value!r}")
            ok = False
        if not numeric and not isinstance(value, str):
            values = [str(v) for v in values]
        if kind == "re" and isinstance(value, str):
            try:
                python_re_to_lucene(value)
            except RegexTranslationError as exc:
                c.add(kp, f"bad regular expression {value!r}: {exc}")
                ok = False
    if kind in NUMERIC_KINDS and len(values) > 1:
        c.add(kp, f"modifier {kind!r} takes one value")
        ok = False
    if not ok or not values:
        return None
    return FieldMatcher(field, kind, tuple(values), "cased" in flags, "all" in flags)


def _selection(c: _Collector, name: str, raw: object) -> Selection | None:
    kp: tuple[str | int, ...] = ("detection", name)
    if not SELECTION_NAME.match(name):
        c.add(kp, "selection names are identifiers (letters, digits, '_')")
        return None
    if isinstance(raw, Mapping) and set(raw) == {"silence"}:
        spec = raw["silence"]
        if not isinstance(spec, Mapping) or set(spec) != {"min_gap"}:
            c.add((*kp, "silence"), "expected {min_gap: DURATION}")
            return None
        try:
            return Selection(name, silence=Silence(parse_duration(spec["min_gap"])))
        except ValueError as exc:
            c.add((*kp, "silence", "min_gap"), str(exc))
            return None
    alternatives_raw = raw if isinstance(raw, list) else [raw]
    alternatives: list[tuple[FieldMatcher, ...]] = []
    for i, alt in enumerate(alternatives_raw):
        akp = kp + ((i,) if isinstance(raw, list) else ())
        if not isinstance(alt, Mapping) or not alt:
            c.add(akp, "a selection is a mapping of field|modifiers to values (or a list of them)")
            continue
        if "silence" in alt:
            c.add((*akp, "silence"), "'silence' must be the only key of its selection")
            continue
        matchers = [_matcher(c, (*akp, str(k)), str(k), v) for k, v in alt.items()]
        if all(m is not None for m in matchers):
            alternatives.append(tuple(m for m in matchers if m is not None))
    if len(alternatives) != len(alternatives_raw):
        return None
    return Selection(name, tuple(alternatives))


def _tests(c: _Collector, raw: object) -> list[RuleTest]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        c.add(("tests",), "must be a list of tests")
        return []
    out: list[RuleTest] = []
    for i, item in enumerate(raw):
        kp: tuple[str | int, ...] = ("tests", i)
        if not isinstance(item, Mapping):
            c.add(kp, "a test is a mapping with name, expect, nodes")
            continue
        unknown = set(item) - {"name", "expect", "nodes", "expect_nodes"}
        for key in sorted(unknown):
            c.add((*kp, key), f"unknown key {key!r}{_hint(key, ['name', 'expect', 'nodes'])}")
        name = item.get("name")
        expect = item.get("expect")
        nodes = item.get("nodes")
        if not isinstance(name, str) or not name:
            c.add(kp, "missing test 'name'")
        if expect not in ("match", "no_match"):
            c.add((*kp, "expect"), f"expect must be 'match' or 'no_match', got {expect!r}")
        good_nodes: dict[str, tuple[str, ...]] = {}
        if not isinstance(nodes, Mapping) or not nodes:
            c.add((*kp, "nodes"), "nodes must map node names to lists of log lines")
        else:
            for node, lines in nodes.items():
                if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
                    c.add((*kp, "nodes", str(node)), "must be a list of log lines (strings)")
                    continue
                good_nodes[str(node)] = tuple(lines)
        expect_nodes = item.get("expect_nodes")
        if expect_nodes is not None:
            if expect != "match":
                c.add((*kp, "expect_nodes"), "only meaningful with expect: match")
            elif not isinstance(expect_nodes, list) or not all(
                isinstance(x, str) for x in expect_nodes
            ):
                c.add((*kp, "expect_nodes"), "must be a list of node names")
            else:
                missing = sorted(set(expect_nodes) - set(good_nodes))
                if missing and good_nodes:
                    c.add((*kp, "expect_nodes"), f"node {missing[0]!r} is not in 'nodes'")
        if isinstance(name, str) and expect in ("match", "no_match") and good_nodes:
            out.append(
                RuleTest(
                    name,
                    expect,
                    good_nodes,
                    tuple(expect_nodes) if isinstance(expect_nodes, list) else None,
                )
            )
    return out


def _number(c: _Collector, data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        c.add((key,), f"must be a number in (0, 1], got {value!r}")
        return None
    return float(value)


def _check_keys(c: _Collector, data: Mapping[str, Any]) -> None:
    for key in data:
        if key not in REQUIRED + OPTIONAL:
            c.add((str(key),), f"unknown key {key!r}{_hint(str(key), REQUIRED + OPTIONAL)}")
    for key in REQUIRED:
        if key not in data:
            c.add((), f"missing required key '{key}'")


def _identity(c: _Collector, data: Mapping[str, Any], path: Path | None) -> dict[str, Any]:
    """``id`` to ``scope``: the rule's names and classification, checked against its path."""
    rule_id = _str(c, data, "id", required=False)
    if rule_id and not RULE_ID.match(rule_id):
        c.add(("id",), f"rule ids are kebab-case (a-z, 0-9, '-'), got {rule_id!r}")
    if rule_id and path is not None and path.stem != rule_id:
        c.add(("id",), f"id {rule_id!r} differs from the file name {path.name!r}")
    title = _str(c, data, "title", required=False)
    status = _choice(c, data, "status", STATUSES) if "status" in data else ""
    category = _choice(c, data, "category", CATEGORIES) if "category" in data else ""
    if category in CATEGORIES and path is not None:
        parts = tuple(category.split("/"))
        if path.parent.parts[-len(parts) :] != parts:
            c.add(
                ("category",), f"file must live in a folder '{category}/' (it is in {path.parent})"
            )
    return {
        "id": rule_id,
        "title": title,
        "status": status,
        "category": category,
        "severity": _choice(c, data, "severity", SEVERITIES) if "severity" in data else "",
        "role": _choice(c, data, "role", ROLES) if "role" in data else "",
        "description": _str(c, data, "description", required=False),
        "scope": _choice(c, data, "scope", SCOPES) if "scope" in data else "job",
    }


def _options(c: _Collector, data: Mapping[str, Any]) -> dict[str, Any]:
    """``references`` to ``evict``: lists, the window and the numeric and boolean options."""
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("references", "tags"):
        raw = data.get(key, [])
        if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
            c.add((key,), "must be a list of strings")
            raw = []
        lists[key] = tuple(raw)
    window = None
    if data.get("window") is not None:
        try:
            window = parse_duration(data["window"])
        except ValueError as exc:
            c.add(("window",), str(exc))
    max_fraction = _number(c, data, "max_node_fraction")
    confidence = _number(c, data, "confidence")
    evict = data.get("evict")
    if evict is not None and not isinstance(evict, bool):
        c.add(("evict",), f"must be true or false, got {evict!r}")
        evict = None
    return {
        **lists,
        "window": window,
        "max_node_fraction": max_fraction,
        "confidence": confidence,
        "evict": evict,
    }


def _detection(
    c: _Collector, data: Mapping[str, Any]
) -> tuple[dict[str, Selection], str, Expr | None, list[str]]:
    """The selections, the condition's text and parsed form, and the selection names."""
    selections: dict[str, Selection] = {}
    condition_text = ""
    detection = data.get("detection")
    if "detection" in data and not isinstance(detection, Mapping):
        c.add(("detection",), "must be a mapping of selections plus 'condition'")
    elif isinstance(detection, Mapping):
        for name, raw in detection.items():
            if name == "condition":
                continue
            sel = _selection(c, str(name), raw)
            if sel is not None:
                selections[sel.name] = sel
        cond = detection.get("condition")
        if not isinstance(cond, str) or not cond.strip():
            c.add(("detection",), "missing 'condition' (e.g. 'condition: sel1 and not sel2')")
        else:
            condition_text = cond.strip()
        if len(detection) == (1 if "condition" in detection else 0):
            c.add(("detection",), "no selections defined")
    names = (
        [str(n) for n in (detection or {}) if n != "condition"]
        if isinstance(detection, Mapping)
        else []
    )
    condition = None
    if condition_text:
        try:
            condition = parse_condition(condition_text, names)
        except ConditionSyntaxError as exc:
            c.add(("detection", "condition"), f"{exc} (column {exc.column})")
    return selections, condition_text, condition, names


def _templates(
    c: _Collector, data: Mapping[str, Any], names: list[str], lines: Lines
) -> dict[str, str]:
    """``diagnosis`` and ``remediation``, each checked as a sandboxed Jinja template."""
    templates: dict[str, str] = {}
    for key in ("diagnosis", "remediation"):
        text = data.get(key, "")
        if not isinstance(text, str):
            c.add((key,), "must be a string (a Jinja template)")
            continue
        templates[key] = text
        try:
            check_template(text, names)
        except TemplateProblem as exc:
            offset = None
            if exc.line is not None and isinstance(lines.get((key,)), int):
                # Block scalars start on the line after the key.
                offset = exc.line if text.count("\n") >= 1 else exc.line - 1
            c.add((key,), str(exc), offset)
    return templates


def build_rule(
    data: object, lines: Lines, path: Path | None = None
) -> tuple[Rule | None, list[RuleError]]:
    """Validate one rule document; return the rule (or None) and every problem found.

    The checks run in the order of a rule file's keys, so ``l4 rules check`` lists the problems
    of one file top to bottom and the fail-fast API raises the first of them.
    """
    c = _Collector(path, lines)
    if not isinstance(data, Mapping):
        c.add((), "a rule file must contain one YAML mapping")
        return None, c.errors
    _check_keys(c, data)
    identity = _identity(c, data, path)
    options = _options(c, data)
    selections, condition_text, condition, names = _detection(c, data)
    templates = _templates(c, data, names, lines)
    tests = _tests(c, data.get("tests"))
    if identity["status"] == "confirmed":
        expects = {t.expect for t in tests}
        if expects != {"match", "no_match"}:
            c.add(
                ("tests",) if "tests" in data else (),
                "a confirmed rule needs at least one 'match' and one 'no_match' test",
            )
    if c.errors or condition is None:
        return None, c.errors
    rule = Rule(
        **identity,
        **options,
        selections=selections,
        condition=condition,
        condition_text=condition_text,
        diagnosis=templates.get("diagnosis", ""),
        remediation=templates.get("remediation", ""),
        tests=tuple(tests),
        path=path,
    )
    return rule, []


def raise_first(errors: list[RuleError]) -> None:
    """Raise the first error of a non-empty list (the API's fail-fast mode)."""
    if errors:
        raise errors[0]


def _duration_schema() -> dict[str, Any]:
    return {
        "oneOf": [
            {"type": "number", "exclusiveMinimum": 0},
            {"type": "string", "pattern": r"^\d+(\.\d+)?(ms|s|m|h|d)$"},
        ]
    }


def _selection_schema() -> dict[str, Any]:
    """A selection: a field map, a list of field maps (OR), or a node-silence mapping."""
    mods = "|".join(MODIFIERS)
    key_pattern = rf"^({'|'.join(re.escape(f) for f in FIELDS)})(\|({mods}))*$"
    scalar = {"type": ["string", "number"]}
    value = {"oneOf": [scalar, {"type": "array", "items": scalar, "minItems": 1}]}
    field_map = {
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": key_pattern},
        "additionalProperties": value,
    }
    silence = {
        "type": "object",
        "required": ["silence"],
        "additionalProperties": False,
        "properties": {
            "silence": {
                "type": "object",
                "required": ["min_gap"],
                "additionalProperties": False,
                "properties": {"min_gap": _duration_schema()},
            }
        },
    }
    return {
        "oneOf": [
            silence,
            {**field_map, "not": {"required": ["silence"]}},
            {"type": "array", "minItems": 1, "items": field_map},
        ]
    }


def _test_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["name", "expect", "nodes"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "expect": {"enum": ["match", "no_match"]},
            "nodes": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": {"type": "array", "items": {"type": "string"}},
            },
            "expect_nodes": {"type": "array", "items": {"type": "string"}},
        },
    }


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a rule file, as published in ``rules/schema.json``."""
    fraction = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
    text = {"type": "string", "minLength": 1}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://l4.invalid/rules/schema.json",
        "title": "L4 fault rule",
        "description": "One confirmed or draft fault pattern (rules/<category>/<id>.yaml).",
        "type": "object",
        "required": list(REQUIRED),
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string", "pattern": RULE_ID.pattern},
            "title": text,
            "status": {"enum": list(STATUSES)},
            "category": {"enum": list(CATEGORIES)},
            "severity": {"enum": list(SEVERITIES)},
            "role": {"enum": list(ROLES)},
            "description": text,
            "references": {"type": "array", "items": text},
            "tags": {"type": "array", "items": text},
            "author": {"type": "string"},
            "date": {"type": "string"},
            "scope": {"enum": list(SCOPES)},
            "window": _duration_schema(),
            "max_node_fraction": fraction,
            "confidence": fraction,
            "evict": {"type": "boolean"},
            "diagnosis": {"type": "string"},
            "remediation": {"type": "string"},
            "detection": {
                "type": "object",
                "required": ["condition"],
                "properties": {"condition": text},
                "propertyNames": {"pattern": SELECTION_NAME.pattern},
                "additionalProperties": _selection_schema(),
            },
            "tests": {"type": "array", "items": _test_schema()},
        },
    }
