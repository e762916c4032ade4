"""Masking of the variable parts of log lines (numbers, times, addresses, ids, paths...).

The rules are data (``ingest/masking.yaml``), applied in order, each as one ``re.sub``; a rule never
matches across ``\\n``, so ``mask("\\n".join(lines)).split("\\n")`` lines up with ``lines``.

Before the rules run, every ASCII digit becomes ``0`` (``normalise_digits``, on by default). That
makes ``mask(x) == mask(key(x))`` where ``key`` is a single C-level ``str.translate`` (~1 GB/s):
the parser dedups on ``key`` and runs the regexes (~40 MB/s each on digit-dense text, far too slow
for every line) only on distinct keys. The price: digits that no rule masks (``fp16``, ``c10d``,
versions) read as ``0`` in templates (``fp00``), which also keeps such templates stable across
nodes and releases.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from l4_plugin.errors import ConfigError
from l4_plugin.resources import data_path
from l4_plugin.yamldoc import compose, read_text

_GROUP_REF = re.compile(r"\\(\d+)|\\g<(\w+)>")
_DIGITS = str.maketrans("123456789", "000000000")


@dataclass(frozen=True, slots=True)
class MaskRule:
    """One masking rule: every match of ``pattern`` becomes ``replace`` (an ``re.sub`` template)."""

    name: str
    pattern: str
    replace: str
    location: str = ""


class Masker:
    """Applies an ordered list of masking rules to a line or to a newline-joined chunk of lines."""

    def __init__(self, rules: Sequence[MaskRule], normalise_digits: bool = True) -> None:
        self.rules = tuple(rules)
        self.normalise_digits = normalise_digits
        compiled: list[tuple[re.Pattern[str], str]] = []
        for rule in self.rules:
            compiled.append((_compile(rule), rule.replace))
        self._compiled = tuple(compiled)

    @classmethod
    def load(cls, path: Path | None = None) -> Masker:
        """Load the rules from ``path`` (default: the shipped ``ingest/masking.yaml``).

        Every problem is a ``ConfigError`` that names ``file:line``, the rule and the bad value.
        """
        path = path if path is not None else data_path("ingest", "masking.yaml")
        text = read_text(path, ConfigError, "masking rules")
        rules, normalise_digits = parse_rules(text, str(path))
        return cls(rules, normalise_digits)

    def key(self, text: str) -> str:
        """The cheap dedup key of ``text`` (digits normalised); ``mask(key(x)) == mask(x)``."""
        return text.translate(_DIGITS) if self.normalise_digits else text

    def mask(self, text: str) -> str:
        """Return ``text`` with every rule applied in order; newlines are never added or removed."""
        if self.normalise_digits:
            text = text.translate(_DIGITS)
        for pattern, replace in self._compiled:
            text = pattern.sub(replace, text)
        return text


def parse_rules(text: str, source: str = "<string>") -> tuple[list[MaskRule], bool]:
    """Parse the YAML text of a masking file into (rules, normalise_digits), validating all."""
    try:
        root = compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"invalid YAML in masking rules — {where} — {problem}") from exc
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"masking rules must be a mapping with a 'rules' list — {source}")
    rules_node = None
    normalise_digits = True
    for key, value in root.value:
        name = key.value if isinstance(key, yaml.ScalarNode) else None
        if name == "rules":
            rules_node = value
        elif name == "normalise_digits":
            if not isinstance(value, yaml.ScalarNode) or value.value not in ("true", "false"):
                raise ConfigError(
                    f"'normalise_digits' must be true or false — "
                    f"{source}:{value.start_mark.line + 1} — got {value.value!r}"
                )
            normalise_digits = value.value == "true"
        else:
            raise ConfigError(
                f"unknown key {name!r} in masking rules — {source}:{key.start_mark.line + 1} — "
                "allowed: normalise_digits, rules"
            )
    if not isinstance(rules_node, yaml.SequenceNode):
        line = root.start_mark.line + 1
        raise ConfigError(f"masking rules need a 'rules' list — {source}:{line}")
    rules: list[MaskRule] = []
    seen: set[str] = set()
    for index, item in enumerate(rules_node.value):
        where = f"{source}:{item.start_mark.line + 1}"
        if not isinstance(item, yaml.MappingNode):
            raise ConfigError(f"masking rule #{index + 1} must be a mapping — {where}")
        fields: dict[str, str] = {}
        for key, value in item.value:
            if not isinstance(value, yaml.ScalarNode) or value.tag != "tag:yaml.org,2002:str":
                raise ConfigError(
                    f"masking rule #{index + 1} field {key.value!r} must be a string — "
                    f"{source}:{value.start_mark.line + 1} — got {value.value!r}"
                )
            fields[str(key.value)] = str(value.value)
        unknown = sorted(set(fields) - {"name", "pattern", "replace"})
        if unknown:
            raise ConfigError(
                f"masking rule #{index + 1} has unknown field(s) {unknown} — {where} — "
                "allowed: name, pattern, replace"
            )
        for required in ("name", "pattern", "replace"):
            if required not in fields:
                raise ConfigError(f"masking rule #{index + 1} lacks {required!r} — {where}")
        name = fields["name"]
        if name in seen:
            raise ConfigError(f"duplicate masking rule name {name!r} — {where}")
        seen.add(name)
        rule = MaskRule(name, fields["pattern"], fields["replace"], where)
        _compile(rule)
        rules.append(rule)
    return rules, normalise_digits


def _compile(rule: MaskRule) -> re.Pattern[str]:
    """Compile a rule and check its replacement template, naming the rule on failure."""
    where = f" — {rule.location}" if rule.location else ""
    try:
        pattern = re.compile(rule.pattern)
    except re.error as exc:
        raise ConfigError(
            f"masking rule {rule.name!r}: bad regex ({exc}){where} — {rule.pattern!r}"
        ) from exc
    if pattern.search("") is not None:
        # A rule that matches the empty string would insert its token between every character.
        raise ConfigError(
            f"masking rule {rule.name!r}: pattern matches the empty string{where} — "
            f"{rule.pattern!r}"
        )
    if pattern.search("\n") is not None:
        raise ConfigError(
            f"masking rule {rule.name!r}: pattern matches a newline, which would misalign "
            f"chunk masking{where} — {rule.pattern!r}"
        )
    if "\n" in rule.replace:
        raise ConfigError(
            f"masking rule {rule.name!r}: replacement contains a newline{where} — {rule.replace!r}"
        )
    for number, name in _GROUP_REF.findall(rule.replace):
        if name.isdigit():
            number, name = name, ""
        if (number and int(number) > pattern.groups) or (name and name not in pattern.groupindex):
            raise ConfigError(
                f"masking rule {rule.name!r}: replacement refers to a group the pattern does not "
                f"have{where} — {rule.replace!r}"
            )
    return pattern
