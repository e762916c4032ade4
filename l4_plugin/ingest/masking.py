"""Masking of the variable parts of log lines (numbers, times, addresses, ids, paths...).

The rules are data (``ingest/masking.yaml``), applied in order, each as one ``re.sub``; a rule never
matches across ``\\n``, so ``mask("\\n".join(lines)).split("\\n")`` lines up with ``lines``.

Before the rules run, every ASCII digit becomes ``0`` (``normalise_digits``, on by default). That
makes ``mask(x) == mask(key(x))`` where ``key`` is a single C-level ``str.translate`` (~1 GB/s):
the parser dedups on ``key`` and runs the regexes (~40 MB/s each on digit-dense text, far too slow
for every line) only on distinct keys. The price: digits that no rule masks (``fp16``, ``c10d``,
versions) read as ``0`` in templates (``fp00``), which also keeps such templates stable across
nodes and releases.

``normalise_hex`` (on in the shipped rules) goes one step further for the lines that are new:
every hexadecimal literal written as a word of its own (``0x7f3a…``) reads as ``0x0`` before the
rules run. The parser looks a new key's folded form up (``Masker.fold``) before it runs the
regexes: NCCL prints a pointer unique to each rank and communicator in its ``comm 0x…`` lines,
so without it a job's distinct keys, and its masking, grow with its ranks.
"""

from __future__ import annotations

import re
import re._constants as _sre  # the parsed form of a pattern (``required_texts``)
import re._parser as _sre_parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from l4_plugin.errors import ConfigError
from l4_plugin.resources import data_path
from l4_plugin.yamldoc import compose, read_text

_GROUP_REF = re.compile(r"\\(\d+)|\\g<(\w+)>")
#: A hexadecimal literal that is a word of its own (``normalise_hex``), and what it reads as.
_HEX_LITERAL = re.compile(r"\b0[xX][0-9a-fA-F]+\b")
_HEX_FOLDED = "0x0"
_DIGITS = str.maketrans("123456789", "000000000")
#: One rule's prefilter: texts of which a match must contain one, for each inner tuple.
Needs = tuple[tuple[str, ...], ...]


def digit_key(text: str) -> str:
    """``text`` with every ASCII digit made "0": ``Masker.key`` when digits are normalised."""
    return text.translate(_DIGITS)


@dataclass(frozen=True, slots=True)
class MaskRule:
    """One masking rule: every match of ``pattern`` becomes ``replace`` (an ``re.sub`` template)."""

    name: str
    pattern: str
    replace: str
    location: str = ""


class Masker:
    """Applies an ordered list of masking rules to a line or to a newline-joined chunk of lines."""

    def __init__(
        self, rules: Sequence[MaskRule], normalise_digits: bool = True, normalise_hex: bool = False
    ) -> None:
        self.rules = tuple(rules)
        self.normalise_digits = normalise_digits
        self.normalise_hex = normalise_hex
        # Digits an ASCII text can hold when a rule runs: only "0" once they are normalised,
        # unless a replacement writes another digit (group references copy the text's own).
        written = "".join(_GROUP_REF.sub("", rule.replace) for rule in self.rules)
        digits = "0" if normalise_digits and not _NONZERO.search(written) else "0123456789"
        compiled: list[tuple[re.Pattern[str], re.Pattern[str], str, Needs]] = []
        for rule in self.rules:
            pattern = _compile(rule)
            needs = required_texts(pattern, digits)
            compiled.append((pattern, ascii_twin(pattern), rule.replace, needs))
        self._compiled = tuple(compiled)

    @classmethod
    def load(cls, path: Path | None = None) -> Masker:
        """Load the rules from ``path`` (default: the shipped ``ingest/masking.yaml``).

        Every problem is a ``ConfigError`` that names ``file:line``, the rule and the bad value.
        """
        path = path if path is not None else data_path("ingest", "masking.yaml")
        text = read_text(path, ConfigError, "masking rules")
        rules, normalise_digits, normalise_hex = parse_rules(text, str(path))
        return cls(rules, normalise_digits, normalise_hex)

    def key(self, text: str) -> str:
        """The cheap dedup key of ``text`` (digits normalised); ``mask(key(x)) == mask(x)``."""
        return digit_key(text) if self.normalise_digits else text

    def fold(self, key: str) -> str:
        """A coarser dedup key of a ``key`` (one regex pass, for keys not seen before): its hex
        literals read as ``0x0`` when ``normalise_hex``; ``mask(fold(k)) == mask(k)``."""
        if self.normalise_hex and ("0x" in key or "0X" in key):
            return _HEX_LITERAL.sub(_HEX_FOLDED, key)
        return key

    def mask(self, text: str) -> str:
        """Return ``text`` with every rule applied in order; newlines are never added or removed."""
        if self.normalise_digits:
            text = text.translate(_DIGITS)
        return self.mask_folded(self.fold(text))

    def mask_folded(self, text: str) -> str:
        """``mask`` of a text already normalised (``fold(key(x))``): the rules alone."""
        for pattern, on_ascii, replace, needs in self._compiled:
            if not text.isascii():  # O(1); a replacement may write non-ASCII text
                text = pattern.sub(replace, text)
                continue
            # A rule that cannot match is skipped: on ASCII text every match holds one of each
            # of its ``needs`` (``required_texts``). Most distinct lines come a few at a time,
            # and most rules have nothing to mask in them.
            for alternatives in needs:
                for needed in alternatives:
                    if needed in text:
                        break
                else:
                    break
            else:
                text = on_ascii.sub(replace, text)
        return text


def parse_rules(text: str, source: str = "<string>") -> tuple[list[MaskRule], bool, bool]:
    """Parse the YAML text of a masking file into (rules, normalise_digits, normalise_hex),
    validating all."""
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
    switches = {"normalise_digits": True, "normalise_hex": False}
    for key, value in root.value:
        name = key.value if isinstance(key, yaml.ScalarNode) else None
        if name == "rules":
            rules_node = value
        elif name in switches:
            if not isinstance(value, yaml.ScalarNode) or value.value not in ("true", "false"):
                raise ConfigError(
                    f"{name!r} must be true or false — "
                    f"{source}:{value.start_mark.line + 1} — got {value.value!r}"
                )
            switches[name] = value.value == "true"
        else:
            raise ConfigError(
                f"unknown key {name!r} in masking rules — {source}:{key.start_mark.line + 1} — "
                "allowed: normalise_digits, normalise_hex, rules"
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
    return rules, switches["normalise_digits"], switches["normalise_hex"]


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


_NONZERO = re.compile("[1-9]")
_ASCII = frozenset(map(chr, range(128)))
#: Alternatives a run of fixed characters may grow to before it is cut (``required_texts``).
_MAX_ALTERNATIVES = 8
_SPACE = frozenset(" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f")
_WORD = frozenset(c for c in _ASCII if c.isalnum() or c == "_")
_CATEGORIES = {
    _sre.CATEGORY_DIGIT: frozenset("0123456789"),
    _sre.CATEGORY_NOT_DIGIT: _ASCII - frozenset("0123456789"),
    _sre.CATEGORY_SPACE: _SPACE,
    _sre.CATEGORY_NOT_SPACE: _ASCII - _SPACE,
    _sre.CATEGORY_WORD: _WORD,
    _sre.CATEGORY_NOT_WORD: _ASCII - _WORD,
}
_REPEATS = (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT)
_ZERO_WIDTH = (_sre.AT, _sre.ASSERT, _sre.ASSERT_NOT)


def ascii_twin(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """``pattern`` compiled with ``re.ASCII`` when it matches exactly as ``pattern`` does on
    every ASCII text, else ``pattern`` itself.

    In a str pattern ``\\d``, ``\\w`` and ``\\b`` ask the Unicode database of each character
    (a call per character and category, a quarter of the masking's time on the realistic
    logs); with ``re.ASCII`` they are table lookups. On ASCII text the two readings agree but
    for ``\\s``/``\\S``, whose Unicode reading also takes the separators \\x1c–\\x1f: a
    pattern with either keeps its own. A non-ASCII literal (``µs``) matches no ASCII text
    either way, unless case is ignored: the long s and the Kelvin sign fold to ASCII letters
    only in the Unicode reading, so such a pattern keeps its own too.
    """
    if pattern.flags & (re.ASCII | re.LOCALE):
        return pattern
    parsed = _sre_parse.parse(pattern.pattern, pattern.flags)
    if _mentions(parsed, _SPACE_CATEGORIES):
        return pattern
    if not pattern.pattern.isascii() and _ignores_case(pattern.flags, parsed):
        return pattern
    try:
        return re.compile(pattern.pattern, (pattern.flags & ~re.UNICODE) | re.ASCII)
    except (re.error, ValueError):  # an inline (?u) in the pattern
        return pattern


_SPACE_CATEGORIES = (_sre.CATEGORY_SPACE, _sre.CATEGORY_NOT_SPACE)


def _ignores_case(flags: int, node: Any) -> bool:
    """Whether any part of a parsed pattern matches case-insensitively (``(?i)``, ``(?i:…)``)."""
    if flags & re.IGNORECASE:
        return True
    if isinstance(node, _sre_parse.SubPattern):
        node = node.data
    if isinstance(node, tuple) and len(node) == 2 and node[0] is _sre.SUBPATTERN:
        return bool(node[1][1] & re.IGNORECASE) or _ignores_case(0, node[1][3])
    if isinstance(node, (list, tuple)):
        return any(_ignores_case(0, item) for item in node)
    return False


def _mentions(node: Any, constants: tuple[Any, ...]) -> bool:
    """Whether a parsed pattern holds one of ``constants`` (named opcodes, by identity)."""
    if isinstance(node, _sre_parse.SubPattern):
        node = node.data
    if isinstance(node, (list, tuple)):
        return any(_mentions(item, constants) for item in node)
    return any(node is constant for constant in constants)


def required_texts(pattern: re.Pattern[str], digits: str = "0123456789") -> Needs:
    """What every match of ``pattern`` in an ASCII text holds: for each tuple, one of its
    texts (``()``: nothing is known). ``digits`` are the only digits such a text can have.

    Derived from the parsed pattern: a run of items that each match one of a few characters
    (a literal, ``\\d`` when digits are normalised, ``[-/]``, a fixed repeat of those) is text
    the match holds verbatim; zero-width items (``\\b``, lookarounds) do not cut a run; a
    repeated group needed at least once adds what it needs; each branch of an alternation
    adds its longest needed text. Character classes are taken over ASCII only, with each
    category widened where Unicode and ASCII readings could differ, so a need is never
    stricter than the pattern.
    """
    if pattern.flags & re.IGNORECASE:
        return ()
    allowed = _ASCII - (frozenset("0123456789") - frozenset(digits))
    any_char = allowed if pattern.flags & re.DOTALL else allowed - {"\n"}
    needs: list[tuple[str, ...]] = []
    walk = _Walk(allowed, any_char, needs)
    walk.items(_sre_parse.parse(pattern.pattern, pattern.flags))
    walk.cut()
    # Most selective first (the longest shortest alternative; none at all: a text no ASCII
    # text holds, such as a digit other than 0 once digits are normalised).
    unique = sorted(set(needs), key=lambda alternatives: (-_shortest(alternatives), alternatives))
    return tuple(unique[:4])


def _shortest(alternatives: tuple[str, ...]) -> int:
    return min(map(len, alternatives), default=1 << 30)


class _Walk:
    """One pass over a parsed pattern's items for ``required_texts``."""

    def __init__(self, allowed: frozenset[str], any_char: frozenset[str], needs: list[Any]) -> None:
        self.allowed = allowed
        self.any_char = any_char
        self.needs = needs
        self.run: set[str] = {""}

    def cut(self) -> None:
        if "" not in self.run:
            self.needs.append(tuple(sorted(self.run)))
        self.run = {""}

    def chars(self, op: Any, av: Any) -> frozenset[str] | None:
        """The ASCII characters a one-character item matches (None: not such an item)."""
        if op is _sre.LITERAL:
            return frozenset({chr(av)}) & self.allowed if av < 128 else frozenset({chr(av)})
        if op is _sre.ANY:
            return self.any_char
        if op is _sre.NOT_LITERAL:
            return self.allowed - {chr(av)}
        if op is not _sre.IN:
            return None
        found: set[str] = set()
        negate = False
        for kind, arg in av:
            if kind is _sre.NEGATE:
                negate = True
            elif kind is _sre.LITERAL:
                found.add(chr(arg))
            elif kind is _sre.RANGE:
                found.update(map(chr, range(arg[0], min(arg[1], 127) + 1)))
            elif kind is _sre.CATEGORY and arg in _CATEGORIES:
                found |= _CATEGORIES[arg]
            else:
                return self.allowed  # unknown: anything
        return (self.allowed - found) if negate else (frozenset(found) & self.allowed)

    def extend(self, chars: frozenset[str], times: int) -> None:
        for _ in range(times):
            if len(self.run) * len(chars) <= _MAX_ALTERNATIVES:
                self.run = {r + c for r in self.run for c in chars}
            else:
                self.cut()
                self.run = set(chars) if len(chars) <= _MAX_ALTERNATIVES else {""}

    def items(self, items: Any) -> None:
        for op, av in items:
            chars = self.chars(op, av)
            if chars is not None:
                self.extend(chars, 1)
            elif op in _ZERO_WIDTH:
                continue  # the characters around it are adjacent in the text
            elif op is _sre.SUBPATTERN:
                if av[1] & re.IGNORECASE:  # (?i:…)
                    self.cut()
                    continue
                self.items(av[3])
            elif op in _REPEATS:
                self.repeat(*av)
            elif op is _sre.BRANCH:
                self.branch(av[1])
            else:
                self.cut()

    def repeat(self, low: int, high: Any, sub: Any) -> None:
        if low == 0:
            self.cut()
            return
        if len(sub) == 1:
            chars = self.chars(*sub[0])
            if chars is not None:
                self.extend(chars, low)
                if high != low:
                    # More may follow, but the last one is next to what comes after.
                    self.cut()
                    self.run = set(chars) if len(chars) <= _MAX_ALTERNATIVES else {""}
                return
        self.cut()
        inner = _Walk(self.allowed, self.any_char, self.needs)
        inner.items(sub)
        inner.cut()

    def branch(self, alternatives: Any) -> None:
        self.cut()
        best: list[str] = []
        for alternative in alternatives:
            found: list[tuple[str, ...]] = []
            inner = _Walk(self.allowed, self.any_char, found)
            inner.items(alternative)
            inner.cut()
            if not found:
                return  # one branch needs nothing: neither does the alternation
            chosen: tuple[str, ...] = max(found, key=_shortest)
            best.extend(chosen)
        if len(best) <= 2 * _MAX_ALTERNATIVES:
            self.needs.append(tuple(sorted(set(best))))


_DEFAULT: Masker | None = None


def default_masker() -> Masker:
    """The shipped rules, loaded and compiled once per process (not once per file)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Masker.load()
    return _DEFAULT
