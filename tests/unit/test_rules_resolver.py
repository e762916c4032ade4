"""Pre-resolution of expensive ``message`` values: its pieces, and identical results."""

from __future__ import annotations

from l4_plugin.rules.resolver import (
    TextValue,
    TokenRun,
    fold_case,
    include_pattern,
    needs_resolution,
    required_runs,
    selective,
)


def test_required_runs_are_anchored_by_whitespace_only() -> None:
    # A whole token (whitespace on both sides) is a dictionary look-up: it is used alone.
    whole = TokenRun("warn", left=True, right=True)
    assert required_runs("contains", "NCCL WARN NET/IB") == [[whole]]
    # Otherwise the two best token prefixes/suffixes/infixes.
    assert required_runs("contains", "Xid (PCI:*): 79,") == [
        [TokenRun("xid", right=True), TokenRun("79", left=True)]
    ]
    # A run at the edge of a value may continue in the line: no anchor there.
    assert required_runs("endswith", "fallen off") == [
        [TokenRun("fallen", right=True), TokenRun("off", left=True)]
    ]
    assert required_runs("contains", ":: --") is None


def test_required_runs_of_regexes_skip_optional_parts() -> None:
    alternatives = required_runs("re", "Connection (closed by remote peer|refused)")
    assert alternatives == [[TokenRun("connection", right=True)]]
    assert required_runs("re", "colou?r") == [[TokenRun("colo")]]
    assert required_runs("re", r"mlx5_core .*Port: \d+ Link DOWN") == [
        [TokenRun("link", left=True, right=True)]
    ]
    assert required_runs("re", "(JOB|STEP) ended") == [[TokenRun("ended", left=True)]]
    assert required_runs("re", "oom|killed") == [[TokenRun("oom")], [TokenRun("killed")]]
    assert required_runs("re", r"[0-9]+\s+GB") == [[TokenRun("gb")]]
    assert required_runs("re", r"[0-9]+\s+") is None
    assert required_runs("re", "a|[0-9]+") is None


def test_selective_prefers_long_anchored_runs() -> None:
    assert selective([[TokenRun("watchdog", left=True, right=True)]])
    assert not selective([[TokenRun("loss"), TokenRun("inf", left=True)]])


def test_include_patterns() -> None:
    assert include_pattern("contains", "a.b*c", True) == ".*a\\.b.*c.*"
    assert include_pattern("startswith", "Ok?", False) == "[oO][kK]..*"
    assert include_pattern("equals", "x y", True) == "x y"
    assert include_pattern("endswith", r"a\*", True) == ".*a\\*"
    assert include_pattern("re", "^ab[c-e]$", False) == "([aA][bB][c-eC-E])"
    # osmem reads an escaped backslash in ``include`` wrongly: such values keep the direct query.
    assert include_pattern("contains", r"C:\\temp", True) is None
    assert include_pattern("re", r"a\\b", True) is None


def test_fold_case_keeps_escapes_and_negation() -> None:
    assert fold_case(r"[^a-z]\.x") == r"[^a-zA-Z]\.[xX]"
    assert fold_case("[]a]") == "[]aA]"
    assert fold_case("é") == "é"


def test_text_values_are_canonical() -> None:
    assert TextValue.of("contains", "Loss Is NaN", False) == TextValue.of(
        "contains", "loss is nan", False
    )
    # Elasticsearch's case_insensitive is ASCII-only, so only ASCII is lowered.
    assert TextValue.of("contains", "ÉCOLE", False).value == "École"
    assert TextValue.of("contains", "ABC", True).value == "ABC"
    assert TextValue.of("re", "ABC", False).value == "ABC"
    assert needs_resolution("message", "contains", "x")
    assert needs_resolution("message", "startswith", "a*b")
    assert not needs_resolution("message", "startswith", "ab")
    assert not needs_resolution("host.name", "contains", "x")
