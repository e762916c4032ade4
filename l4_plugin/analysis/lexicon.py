"""The failure lexicon (``rules/lexicon.yaml``): what a single line's words say went wrong.

Rules match whole fault patterns against the cluster; the lexicon reads one line at a time, for
the verdict's category when no cause rule names the culprit and as a prior when there is nothing
to compare a job with. Entries are tried in order and the first match wins; ``cascade`` entries
name consequences (watchdog timeouts, the launcher tearing a job down) and ``benign`` entries
conditions that were handled (a corrected PCIe error, a GPU at its software power cap): neither
gives a category, both rank a line after what explains the failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from l4_plugin.errors import ConfigError
from l4_plugin.records import FAULT_CATEGORIES
from l4_plugin.resources import data_path
from l4_plugin.yamldoc import read_mapping

_DEFAULT_WEIGHT = 0.8


@dataclass(frozen=True, slots=True)
class Term:
    """One lexicon entry: words (a regex), the category they indicate, how strongly."""

    pattern: re.Pattern[str]
    category: str
    weight: float
    cascade: bool = False
    benign: bool = False

    @property
    def says_cause(self) -> bool:
        """True when the words name a failure (not a consequence, not a handled condition)."""
        return not (self.cascade or self.benign)


class Lexicon:
    """The compiled lexicon; :meth:`classify` a line."""

    def __init__(self, terms: list[Term]) -> None:
        self.terms = terms

    @classmethod
    def load(cls, path: Path | None = None) -> Lexicon:
        """Load and validate; errors name the file, the entry and the bad value."""
        path = path or data_path("rules", "lexicon.yaml")
        data = read_mapping(path, ConfigError, "failure lexicon")
        entries = data.get("entries")
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: entries: expected a list of entries")
        return cls([_term(path, i, e) for i, e in enumerate(entries)])

    def classify(self, text: str) -> Term | None:
        """The first entry whose words the text holds (None: the lexicon knows none)."""
        for term in self.terms:
            if term.pattern.search(text):
                return term
        return None

    def classify_record(self, text: str) -> Term | None:
        """A record's words: its last line first (a traceback says what went wrong there),
        then the whole record."""
        return self.classify(last_line(text)) or self.classify(text)


def last_line(text: str) -> str:
    """The last line of a record ('' for an empty one)."""
    stripped = text.strip()
    return stripped.splitlines()[-1] if stripped else ""


@lru_cache(maxsize=1)
def default_lexicon() -> Lexicon:
    """The shipped lexicon, loaded once."""
    return Lexicon.load()


def _term(path: Path, i: int, entry: Any) -> Term:
    where = f"{path}: entries[{i}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a mapping with pattern and category, got {entry!r}")
    unknown = set(entry) - {"pattern", "category", "weight", "cascade", "benign"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    pattern, category = entry.get("pattern"), entry.get("category")
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"{where}.pattern: expected a regex string, got {pattern!r}")
    benign = entry.get("benign", False)
    if not isinstance(benign, bool):
        raise ConfigError(f"{where}.benign: expected true or false, got {benign!r}")
    if benign and category is None:
        category = "hardware/node"  # never reported: benign words give no category
    if category not in FAULT_CATEGORIES:
        raise ConfigError(
            f"{where}.category: expected one of {', '.join(FAULT_CATEGORIES)}, got {category!r}"
        )
    weight = entry.get("weight", _DEFAULT_WEIGHT)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= 1:
        raise ConfigError(f"{where}.weight: expected a number in (0, 1], got {weight!r}")
    cascade = entry.get("cascade", False)
    if not isinstance(cascade, bool):
        raise ConfigError(f"{where}.cascade: expected true or false, got {cascade!r}")
    try:
        compiled = re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ConfigError(f"{where}.pattern: invalid regex {pattern!r}: {exc}") from None
    if benign and cascade:
        raise ConfigError(f"{where}: an entry is either benign or cascade, not both")
    return Term(compiled, str(category), float(weight), cascade, benign)
