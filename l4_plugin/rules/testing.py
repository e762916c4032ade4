"""Running the ``tests:`` embedded in rule files through the production ingest.

``run_rule_tests`` ingests every test's log snippet under its own scratch job id with
``l4_plugin.ingest.pipeline.ingest_streams`` — the path every job directory and index source
takes — fed one in-memory stream per node of the snippet (``snippet_streams``). Templates,
template ids, times, levels, stages, iterations, joined tracebacks and the choice of kept lines
therefore come from the real parser and rollups, so a rule that passes its own examples matches
the same lines in a real job. Each rule is then matched against its scratch jobs and compared
with ``expect`` / ``expect_nodes``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from l4_plugin.ingest.jobdir import JobMeta
from l4_plugin.ingest.pipeline import IngestSummary, ingest_streams
from l4_plugin.ingest.reader import Block
from l4_plugin.ingest.sources import LogStream
from l4_plugin.rules.engine import match_job
from l4_plugin.rules.rule import Rule, RuleTest
from l4_plugin.store import Store

# Ingest scans in-memory streams in the calling process (no worker pool): a snippet is tiny.
_WORKERS = 1


@dataclass(frozen=True, slots=True)
class RuleTestResult:
    """Outcome of one embedded rule test."""

    rule_id: str
    test_name: str
    expect: str
    passed: bool
    matched_nodes: tuple[str, ...]
    detail: str

    def __str__(self) -> str:
        state = "PASS" if self.passed else "FAIL"
        return f"{state} {self.rule_id} :: {self.test_name} — {self.detail}"


def scratch_job_id(rule_id: str, index: int) -> str:
    """The job id a rule's ``index``-th test is ingested under."""
    return f"rule-test--{rule_id}--{index}"


def _reader(lines: Sequence[str]) -> Callable[[], Iterator[Block]]:
    """A stream's ``open``: the snippet as one block, readable any number of times."""
    # A file's reader splits on "\n": a snippet line holding one is read as the lines it holds.
    split = [part for line in lines for part in line.split("\n")]
    return lambda: iter([Block(list(split))])


def snippet_streams(nodes: Mapping[str, Sequence[str]]) -> list[LogStream]:
    """One in-memory ``LogStream`` per node (``<node>/train.log``, no file rank), in the order
    ``jobdir.scan`` sorts a job directory's files: by node."""
    return [
        LogStream(node, None, f"{node}/train.log", _reader(lines))
        for node, lines in sorted(nodes.items())
    ]


def ingest_snippet(
    store: Store, job_id: str, nodes: Mapping[str, Sequence[str]], *, status: str = "failed"
) -> IngestSummary:
    """Ingest a snippet (lines per node) as job ``job_id`` through ``ingest_streams``.

    The generation hashes the snippet, so ingesting the same lines again rewrites nothing new;
    the indices are refreshed by the ingest itself.
    """
    generation = hashlib.sha1(json.dumps(nodes, sort_keys=True).encode()).hexdigest()[:16]
    return ingest_streams(
        store,
        JobMeta(job_id, status),
        snippet_streams(nodes),
        generation,
        where=f"the snippet of {job_id}",
        workers=_WORKERS,
    )


def _judge(test: RuleTest, rule_id: str, matched: Sequence[str] | None) -> RuleTestResult:
    nodes = tuple(matched or ())
    if test.expect == "no_match":
        ok = matched is None
        detail = "no match as expected" if ok else f"unexpected match on {', '.join(nodes)}"
    elif matched is None:
        ok, detail = False, "expected a match, got none"
    elif test.expect_nodes is not None and set(test.expect_nodes) != set(nodes):
        ok = False
        detail = f"matched {sorted(nodes)}, expected nodes {sorted(test.expect_nodes)}"
    else:
        ok, detail = True, f"matched {', '.join(nodes)}"
    return RuleTestResult(rule_id, test.name, test.expect, ok, nodes, detail)


def run_rule_tests(store: Store, rules: Sequence[Rule]) -> list[RuleTestResult]:
    """Ingest every rule's tests under scratch job ids (``ingest_snippet``), match and compare.

    ``store`` is a whole ``Store`` because the production ingest writes through it; matching
    reads only what ``rules.port.RuleStorePort`` names.
    """
    plan: list[tuple[Rule, RuleTest, str]] = []
    for rule in rules:
        for i, test in enumerate(rule.tests):
            job_id = scratch_job_id(rule.id, i)
            ingest_snippet(store, job_id, test.nodes)
            plan.append((rule, test, job_id))
    results: list[RuleTestResult] = []
    for rule, test, job_id in plan:
        found = match_job(store, job_id, [rule])
        results.append(_judge(test, rule.id, list(found[0].nodes) if found else None))
    return results
