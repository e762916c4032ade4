"""One log-level vocabulary: :class:`l4_plugin.records.Level` and the spellings it reads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from l4_plugin.analysis.evidence import inferred_level
from l4_plugin.ingest import header
from l4_plugin.records import LEVEL_SPELLINGS, Level, level_label

PACKAGE = Path(__file__).resolve().parents[2] / "l4_plugin"
# Words that name a level in some log; a collection literal holding two of them is a vocabulary.
_LEVEL_WORDS = {w for w in LEVEL_SPELLINGS if len(w) > 2}
# The one module allowed to spell levels in a collection: the vocabulary itself. (The
# simulator writes logs in every spelling but is its own package, outside l4_plugin.)
_ALLOWED = {"records.py"}
_ALLOWED_DIRS: tuple[str, ...] = ()


@pytest.mark.parametrize("word", sorted(LEVEL_SPELLINGS))
def test_every_spelling_parses_in_any_case(word: str) -> None:
    level = Level.parse(word.lower())
    assert level is LEVEL_SPELLINGS[word]
    assert Level.parse(word) is level
    assert Level.parse(level.name) is level and Level.parse(level.label) is level


def test_what_ingest_stores_is_the_vocabulary() -> None:
    # Every level the parser can emit is a Level's name: ingest and analysis read one list.
    emitted = {header.normalise_level(w) for w in LEVEL_SPELLINGS} | set(header.LEVELS)
    emitted |= {header.infer_level("Traceback (most recent call last):")}
    emitted |= {header.infer_level("warning: disk almost full")}
    assert emitted - {None} == {level.name for level in Level}
    assert header.normalise_level("nonsense") is None and Level.parse("nonsense") is None


def test_what_the_analysis_reports_parses_back() -> None:
    labels = {level_label(w) for w in LEVEL_SPELLINGS}
    labels |= {inferred_level("Kernel panic"), inferred_level("link retry")}
    assert labels == {level.label for level in Level}
    assert all(Level.parse(label) is not None for label in labels)
    assert level_label("warning") == "WARN" and level_label("fatal") == "CRITICAL"


def test_levels_are_ordered_by_severity() -> None:
    assert [level.name for level in sorted(Level)] == [
        "DEBUG",
        "INFO",
        "WARNING",
        "ERROR",
        "CRITICAL",
    ]
    assert Level.ERROR.is_error and not Level.WARNING.is_error and Level.WARNING.is_flagged
    assert not Level.INFO.is_flagged


def _vocabularies(tree: ast.AST) -> list[int]:
    """Lines of collection literals (set, tuple, list, dict keys and values) of level words only,
    two or more of them (rule severities such as ``("info", "low", …)`` are another scale)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            items = [*node.keys, *node.values]
        elif isinstance(node, ast.Set | ast.Tuple | ast.List):
            items = list(node.elts)
        else:
            continue
        words = {
            i.value.upper()
            for i in items
            if isinstance(i, ast.Constant) and isinstance(i.value, str)
        }
        if len(words & _LEVEL_WORDS) >= 2 and words <= set(LEVEL_SPELLINGS):
            found.append(node.lineno)
    return found


def test_no_second_level_vocabulary() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in _ALLOWED or rel.startswith(_ALLOWED_DIRS):
            continue
        for line in _vocabularies(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{rel}:{line}")
    assert not offenders, f"level names listed outside records.Level: {offenders}"


def test_the_scan_finds_a_vocabulary() -> None:
    assert _vocabularies(ast.parse('X = frozenset({"WARN", "ERROR"})')) == [1]
    assert _vocabularies(ast.parse('Y = {"warning": "WARN"}')) == [1]
    assert _vocabularies(ast.parse('Z = ("ERROR",)')) == []
    assert _vocabularies(ast.parse('S = ("info", "low", "critical")')) == []
