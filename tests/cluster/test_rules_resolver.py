"""Pre-resolution of expensive ``message`` values: its pieces, and identical results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from l4_plugin.rules import ingest_snippet, load_rules, match_job
from l4_plugin.rules.engine import JobFacts
from l4_plugin.rules.rule import Rule
from l4_plugin.store import Store

LINES = [
    "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.",
    "nvrm: xid (pci:0000:06:00): 13, other",
    "lm loss: inf | grad norm: nan",
    "INFO iteration 5 loss: 2.3",
    "Connection reset by peer",
    "connection timed out after 30s",
    "line one\nTraceback two: boom",
    "Straße ok",
    "e.g. x.y:z don't",
    'a\\b "q" <x> #y @z &w ~v',
    "colour and color",
    "*** JOB 12 ON n1 CANCELLED AT 2024-05-01T10:00:00 ***",
    "mlx5_core 0000:3b:00.0: Port: 1 Link DOWN",
    "XID79xid79",
    "trailing space ",
    "prefix-match here",
]

SPECS: list[tuple[str, object]] = [
    ("message|contains", "Xid (PCI:*): 79,"),
    ("message|contains|cased", "XID"),
    ("message|contains", "loss: inf"),
    ("message|contains|cased", "loss: INF"),
    ("message|re", "Connection (reset by peer|timed out)"),
    ("message|re", "^connection"),
    ("message|re|cased", "[a-z]+ ok$"),
    ("message|re", "colou?r"),
    ("message|re", r"\d+s$"),
    ("message|re", "one.Traceback"),
    ("message|contains", "one\nTraceback"),
    ("message|contains", "Straße"),
    ("message|contains", "a\\b"),
    ("message|endswith", "ok"),
    ("message|startswith", "prefix*here"),
    ("message", "*CANCELLED AT*"),
    ("message|contains", "e.g. x"),
    ("message|contains", "don't"),
    ("message|contains", "#y @z"),
    ("message|re", r"mlx5_core .*Port: \d+ Link DOWN"),
    ("message|contains", "space "),
    ("message|contains", "xid79"),
    ("message|contains|all", ["pci:0000", "79"]),
    ("message|contains", ["nomatch-anywhere", "fallen off"]),
]


def _rules(tmp_path: Path) -> list[Rule]:
    paths = []
    for i, (key, value) in enumerate(SPECS):
        path = tmp_path / "framework" / f"spec-{i}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"id: spec-{i}\ntitle: Spec {i}\nstatus: draft\ncategory: framework\n"
            "severity: low\nrole: symptom\ndescription: spec\nscope: node\n"
            f"detection:\n  sel:\n    {json.dumps(key)}: {json.dumps(value)}\n  condition: sel\n",
            encoding="utf-8",
        )
        paths.append(path)
    return load_rules(paths)


def test_resolution_gives_the_direct_queries_results(store: Store, tmp_path: Path) -> None:
    nodes = {f"n{i:02d}": [line] for i, line in enumerate(LINES)}
    nodes["n99"] = ["2024-05-01 10:00:00 INFO nothing to see"]
    ingest_snippet(store, "job-r", nodes)
    rules = _rules(tmp_path)

    def summary(resolve: bool) -> list[tuple[str, tuple[str, ...], dict[str, int]]]:
        found = match_job(store, "job-r", rules, resolve_messages=resolve)
        return sorted((m.rule_id, m.nodes, m.counts) for m in found)

    resolved, direct = summary(True), summary(False)
    assert resolved == direct
    matched = {rule_id: nodes for rule_id, nodes, _ in resolved}
    assert matched["spec-0"] == ("n00",)
    assert matched["spec-2"] == ("n02",) and "spec-3" not in matched
    assert matched["spec-4"] == ("n04", "n05")
    assert len(matched) >= 18
    facts = JobFacts(store, "job-r")
    facts.resolve_messages(rules)
    assert facts.messages is not None and facts.messages.requests < len(SPECS)
    unresolved = [tv.value for tv, v in facts.messages.resolved.items() if v is None]
    assert unresolved == ["a\\b"]


@pytest.mark.parametrize("resolve", [True, False])
def test_library_on_a_noisy_job(store: Store, resolve: bool) -> None:
    lines = [
        f"2024-05-01 10:00:{i:02d} INFO iteration {i} | lm loss: 2.{i} | grad norm: 1.0"
        for i in range(50)
    ]
    ib = "2024-05-01 10:01:00 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<1> with error 12"
    ingest_snippet(store, "job-q", {"a": lines, "b": [*lines, ib], "c": lines})
    found = match_job(store, "job-q", load_rules(), resolve_messages=resolve)
    assert [(m.rule_id, m.nodes) for m in found] == [("nccl-ib-completion-error", ("b",))]


def test_silence_from_the_job_record_equals_the_full_scan(store: Store) -> None:
    def lines(last_minute: int) -> list[str]:
        return [f"2024-05-01 10:{m:02d}:00 INFO step {m}" for m in range(last_minute + 1)]

    nodes = {"a": lines(40), "b": lines(39), "c": lines(12), "d": lines(30)}
    ingest_snippet(store, "job-s", nodes)  # the job document records the four nodes
    facts = JobFacts(store, "job-s")
    assert facts.total_nodes() == 4
    for gap in (60.0, 600.0, 601.0, 3600.0):
        assert facts.silent_nodes(gap) == facts._silent_from_all(gap), gap
    assert set(facts.silent_nodes(600.0)) == {"c", "d"}
    assert set(facts.silent_nodes(601.0)) == {"c"}
