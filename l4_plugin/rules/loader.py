"""Reading rule files: YAML with line numbers, every problem collected, fail-fast by default.

A rule folder is searched recursively for ``*.yaml`` / ``*.yml``; ``schema.json`` and README files
are ignored. Line numbers come from the YAML composer's node marks, so an error points at the key
that caused it (``rules/hardware/network/foo.yaml:12: detection.sel1: unknown modifier ...``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from l4_plugin.analysis.lexicon import Lexicon
from l4_plugin.errors import ConfigError, RuleError
from l4_plugin.resources import data_path
from l4_plugin.rules.rule import Rule
from l4_plugin.rules.schema import build_rule, raise_first
from l4_plugin.yamldoc import BoundedLoader, read_text

KeyPath = tuple[str | int, ...]


def default_rule_dir() -> Path:
    """The shipped fault library."""
    return data_path("rules")


def _walk(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int], errors: list[str]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[object] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            if key in seen:
                errors.append(f"{key_node.start_mark.line + 1}:duplicate key {key!r}")
            seen.add(key)
            lines[(*path, key)] = key_node.start_mark.line + 1
            _walk(value_node, (*path, key), lines, errors)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _walk(item, (*path, i), lines, errors)


def parse_yaml(text: str, name: str) -> tuple[Any, dict[KeyPath, int]]:
    """Parse one YAML document (safe loader) and map every key path to its 1-based line."""
    try:
        loader = BoundedLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise RuleError("empty rule file", name)
            lines: dict[KeyPath, int] = {}
            dupes: list[str] = []
            _walk(node, (), lines, dupes)
            if dupes:
                line, message = dupes[0].split(":", 1)
                raise RuleError(message, f"{name}:{line}")
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}" if mark else name
        raise RuleError(f"invalid YAML: {exc.problem or exc.context}", where) from exc
    except yaml.YAMLError as exc:
        raise RuleError(f"invalid YAML: {exc}", name) from exc
    except RecursionError:
        raise RuleError("invalid YAML: nested too deeply", name) from None
    return data, lines


def load_file(path: Path, collect_errors: bool = False) -> tuple[Rule | None, list[RuleError]]:
    """Load one rule file; with ``collect_errors`` return every problem instead of raising."""
    try:
        text = read_text(path, RuleError, "rule file")
    except RuleError as err:
        if collect_errors:
            return None, [err]
        raise
    try:
        data, lines = parse_yaml(text, str(path))
    except RuleError as err:
        if collect_errors:
            return None, [err]
        raise
    rule, errors = build_rule(data, lines, path)
    if not collect_errors:
        raise_first(errors)
    return rule, errors


#: The failure lexicon beside the rules (``rules/lexicon.yaml``): not a rule.
LEXICON_FILE = "lexicon.yaml"


def rule_files(paths: Iterable[Path]) -> list[Path]:
    """Every rule file under ``paths`` (files are taken as given), sorted, without duplicates."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(
                p
                for p in path.rglob("*")
                if p.suffix in (".yaml", ".yml")
                and p.is_file()
                and not (p.parent == path and p.name == LEXICON_FILE)
            )
        else:
            found.append(path)
    return sorted(dict.fromkeys(found))


def load(
    paths: Sequence[Path] | None = None, collect_errors: bool = False
) -> tuple[list[Rule], list[RuleError]]:
    """Load rules from files/folders (default: the shipped library), checking unique ids."""
    files = rule_files(paths if paths is not None else [default_rule_dir()])
    rules: list[Rule] = []
    errors: list[RuleError] = []
    seen: dict[str, Path] = {}
    for file in files:
        if not file.exists():
            err = RuleError("no such rule file or folder", str(file))
            if not collect_errors:
                raise err
            errors.append(err)
            continue
        rule, problems = load_file(file, collect_errors)
        errors.extend(problems)
        if rule is None:
            continue
        if rule.id in seen:
            err = RuleError(f"duplicate rule id {rule.id!r} (also in {seen[rule.id]})", str(file))
            if not collect_errors:
                raise err
            errors.append(err)
            continue
        seen[rule.id] = file
        rules.append(rule)
    return rules, errors


def load_rules(paths: Sequence[Path] | None = None) -> list[Rule]:
    """Load and validate rules (default: the shipped library); raise the first ``RuleError``."""
    rules, _ = load(paths, collect_errors=False)
    return rules


def check_paths(paths: Sequence[Path] | None = None) -> list[RuleError]:
    """Every problem in every rule file under ``paths`` (``l4 rules check``); empty when clean."""
    _, errors = load(paths, collect_errors=True)
    dirs = [p for p in (paths if paths is not None else [default_rule_dir()]) if p.is_dir()]
    for lexicon in (d / LEXICON_FILE for d in dirs):
        if lexicon.is_file():
            try:
                Lexicon.load(lexicon)
            except ConfigError as exc:
                errors.append(RuleError(str(exc)))
    return errors
