"""Rule engine against a real osmem-server: the library's embedded tests and engine behaviour."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from l4_plugin.rules import (
    RuleTestResult,
    ingest_snippet,
    load_rules,
    match_job,
    run_rule_tests,
)
from l4_plugin.store import IndexNames, OpenSearchStore, Store
from l4_plugin.store import fields as F

LIBRARY = load_rules()


@pytest.fixture(scope="module")
def library_results(osmem_url: str) -> Iterator[dict[tuple[str, str], RuleTestResult]]:
    """Every library test ingested under its own job id, one refresh, then matched."""
    store = OpenSearchStore(osmem_url, IndexNames("rules-lib-l4-"), retry_backoff=0.05)
    store.install_templates()
    results = run_rule_tests(store, LIBRARY)
    yield {(r.rule_id, r.test_name): r for r in results}
    store.drop_indices()
    store.close()


@pytest.mark.parametrize(
    ("rule_id", "test_name"),
    [(rule.id, test.name) for rule in LIBRARY for test in rule.tests],
)
def test_library_rule(
    library_results: dict[tuple[str, str], RuleTestResult], rule_id: str, test_name: str
) -> None:
    result = library_results[(rule_id, test_name)]
    assert result.passed, str(result)


def _ingest(store: Store, job: str, nodes: dict[str, list[str]]) -> None:
    ingest_snippet(store, job, nodes)


def test_match_job_leads_with_causes(store: Store) -> None:
    ib = "2024-05-01 10:02:00 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<1> with error 12"
    wd = "2024-05-01 10:12:00 [rank{r}]:[E501] Watchdog caught collective operation timeout: x"
    nodes = {f"node-{i}": ["2024-05-01 10:00:00 INFO step 1", wd.format(r=i)] for i in range(4)}
    nodes["node-2"].insert(1, ib)
    _ingest(store, "job-a", nodes)
    matches = match_job(store, "job-a", LIBRARY)
    ids = [m.rule_id for m in matches]
    assert ids.index("ib-error-before-collective-timeout") < ids.index("nccl-watchdog-timeout")
    assert ids[0] in {"nccl-ib-completion-error", "ib-error-before-collective-timeout"}
    ib_match = next(m for m in matches if m.rule_id == "nccl-ib-completion-error")
    assert ib_match.nodes == ("node-2",) and ib_match.role == "cause"
    assert "node-2" in ib_match.diagnosis and "error 12" in ib_match.diagnosis
    assert ib_match.samples["ib_completion"][0]["node"] == "node-2"
    watchdog = next(m for m in matches if m.rule_id == "nccl-watchdog-timeout")
    assert watchdog.counts == {"watchdog": 4} and watchdog.total_nodes == 4
    report = watchdog.to_report()
    assert report["rule"] == "nccl-watchdog-timeout" and report["nodes"] == [
        f"node-{i}" for i in range(4)
    ]
    finding = ib_match.to_finding("job-a", 1)
    assert finding.kind == "rule_match" and finding.rule_id == "nccl-ib-completion-error"


def test_other_jobs_do_not_leak(store: Store) -> None:
    _ingest(store, "job-x", {"n1": ["CUDA error: an illegal memory access was encountered"]})
    _ingest(store, "job-y", {"n1": ["INFO all good"]})
    assert [m.rule_id for m in match_job(store, "job-x", LIBRARY)] == ["cuda-illegal-memory-access"]
    assert match_job(store, "job-y", LIBRARY) == []


def _rule(tmp_path: Path, body: str, rule_id: str = "probe") -> list:
    path = tmp_path / "framework" / f"{rule_id}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"id: {rule_id}\ntitle: Probe\nstatus: draft\ncategory: framework\nseverity: low\n"
        f"role: symptom\ndescription: probe\n{body}"
    )
    return load_rules([path])


def test_template_regexp_cased_and_numeric_matchers(store: Store, tmp_path: Path) -> None:
    _ingest(
        store,
        "job-t",
        {
            "n1": ["[rank9]: ERROR Xid 79 on GPU", "[rank1]: Warn lower"],
            "n2": ["[rank2]: error xid 48 on GPU"],
        },
    )
    rules = _rule(
        tmp_path,
        "scope: node\ndetection:\n"
        # Template texts are masked ("Xid <NUM> on GPU"), as the ingest writes them.
        "  tpl:\n    template|re: 'Xid <[A-Z]+> on'\n"
        "  cased:\n    message|contains|cased: 'ERROR'\n"
        "  high_rank:\n    l4.rank|gte: 8\n"
        "  condition: tpl and cased and high_rank\n",
    )
    [match] = match_job(store, "job-t", rules)
    assert match.nodes == ("n1",) and match.counts["tpl"] == 1


def test_count_window_and_max_node_fraction(store: Store, tmp_path: Path) -> None:
    lines = {
        "n1": [
            "2024-05-01 10:00:00 E1 boom",
            "2024-05-01 10:00:10 E1 boom",
            "2024-05-01 11:00:00 E2",
        ],
        "n2": ["2024-05-01 10:00:00 E1 boom", "2024-05-01 10:00:05 E2"],
        "n3": ["2024-05-01 10:00:00 INFO ok"],
    }
    _ingest(store, "job-w", lines)
    counted = _rule(
        tmp_path,
        "scope: node\ndetection:\n  e1:\n    message|contains: E1\n"
        "  e2:\n    message|contains: E2\n  condition: count(e1) >= 2 or (e1 and e2)\n",
    )
    assert match_job(store, "job-w", counted)[0].nodes == ("n1", "n2")
    windowed = _rule(
        tmp_path,
        "scope: node\nwindow: 1m\ndetection:\n  e1:\n    message|contains: E1\n"
        "  e2:\n    message|contains: E2\n  condition: e1 then e2\n",
    )
    assert match_job(store, "job-w", windowed)[0].nodes == ("n2",)
    guarded = _rule(
        tmp_path,
        "scope: node\nmax_node_fraction: 0.34\ndetection:\n  e1:\n    message|contains: E1\n"
        "  condition: e1\n",
    )
    assert match_job(store, "job-w", guarded) == []


def test_failing_rule_test_is_reported(store: Store, tmp_path: Path) -> None:
    rules = _rule(
        tmp_path,
        "detection:\n  e:\n    message|contains: boom\n  condition: e\n"
        "tests:\n  - name: wrong\n    expect: no_match\n    nodes: {n1: [boom]}\n"
        "  - name: right\n    expect: match\n    expect_nodes: [n1]\n    nodes: {n1: [boom]}\n",
    )
    results = run_rule_tests(store, rules)
    assert [r.passed for r in results] == [False, True]
    assert "unexpected match on n1" in str(results[0])


ITERATION = (
    "2024-05-01 10:00:00,000 INFO iteration      100/  100000 | consumed samples: 51200 | "
    "lm loss: 2.314E+00 | grad norm: 0.912 |"
)
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "train.py", line 7, in <module>',
    "RuntimeError: boom",
]


def test_rule_tests_see_what_the_production_ingest_records(store: Store, tmp_path: Path) -> None:
    """Stage, iteration and joined tracebacks come from the real ingest: a snippet without an
    iteration line is still in ``init``, and a traceback is one line document."""
    tests = {
        "in training": ("match", [ITERATION, "2024-05-01 10:01:00,000 ERROR boom", *TRACEBACK]),
        "before training": ("no_match", ["2024-05-01 10:01:00,000 ERROR boom", *TRACEBACK]),
    }
    body = "".join(
        f"  - name: {name}\n    expect: {expect}\n    nodes: {{n1: {json.dumps(lines)}}}\n"
        for name, (expect, lines) in tests.items()
    )
    rules = _rule(
        tmp_path,
        "scope: node\ndetection:\n"
        "  boom:\n    message|contains: boom\n    l4.stage: training\n    l4.iteration|gte: 100\n"
        "  record:\n    message|contains|all: [Traceback, 'RuntimeError: boom']\n"
        "  condition: count(boom) == 2 and record\n"
        f"tests:\n{body}",
    )
    results = run_rule_tests(store, rules)
    assert [r.passed for r in results] == [True, True], [str(r) for r in results]


def test_rules_see_each_nodes_own_line_in_a_pack(store: Store, tmp_path: Path) -> None:
    # Every node prints the same warning (but for its digits): the ingest packs those lines
    # into one document (store/line_packs.py). The rules must still see each node's own time
    # and count: n2's warning is 56 s before its error, the pack's earliest (n0's) 65 s.
    warn = "2024-05-01 10:00:0{s} WARNING dataloader batch {s} took {s} s on worker {s}"
    nodes = {f"n{i}": [warn.format(s=i)] for i in range(6)}
    nodes["n2"] = [warn.format(s=9), "2024-05-01 10:01:05 ERROR E2 boom"]
    nodes["n5"].append("2024-05-01 10:05:00 WARNING dataloader batch 77 took 77 s on worker 7")
    _ingest(store, "job-p", nodes)
    job = {"term": {F.JOB_ID: "job-p"}}
    packed = {"bool": {"filter": [job, {"exists": {"field": F.NODES}}]}}
    assert store.count(store.names.lines, packed) == 1  # every node's first warning
    assert store.count(store.names.lines, job) == 3  # and n5's second, n2's error
    windowed = _rule(
        tmp_path,
        "scope: node\nwindow: 1m\ndetection:\n  w:\n    message|contains: dataloader\n"
        "  e2:\n    message|contains: E2\n  condition: w then e2\n",
    )
    [match] = match_job(store, "job-p", windowed)
    assert match.nodes == ("n2",)
    counted = _rule(
        tmp_path,
        "scope: node\ndetection:\n  w:\n    message|contains: dataloader\n"
        "  condition: count(w) >= 2\n",
    )
    [match] = match_job(store, "job-p", counted)
    assert match.nodes == ("n5",) and match.counts == {"w": 2}
    assert {s["node"] for s in match.samples["w"]} == {"n5"}  # n5's own lines, not n0's
    everywhere = _rule(
        tmp_path,
        "scope: node\ndetection:\n  w:\n    message|contains: dataloader\n  condition: w\n",
    )
    [match] = match_job(store, "job-p", everywhere)
    assert match.nodes == tuple(f"n{i}" for i in range(6)) and match.counts == {"w": 7}
    guarded = _rule(
        tmp_path,
        "scope: node\nmax_node_fraction: 0.5\ndetection:\n  w:\n    message|contains: dataloader\n"
        "  condition: w\n",
    )
    assert match_job(store, "job-p", guarded) == []  # printed everywhere: not a local fault
