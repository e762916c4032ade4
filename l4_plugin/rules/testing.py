"""Running the ``tests:`` embedded in rule files, and a minimal direct ingest for them.

``run_rule_tests`` ingests every test's log snippet under its own scratch job id (through the
``ingest`` callable the caller provides; CI and ``l4 rules test`` pass ``direct_ingest``),
refreshes once, matches each rule against its scratch jobs and compares with ``expect`` /
``expect_nodes``.

``direct_ingest`` is a deliberately small stand-in for the real ingest, used by the rule tests and
the rule benchmark: it keeps every line, takes the template id as the SHA-1 of the raw line and
reads only an ISO-8601 timestamp prefix, a level word (named as the real ingest names levels:
``WARNING``, ``CRITICAL``) and a ``[rankN]`` prefix.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from l4_plugin.rules.engine import RuleStore, match_job
from l4_plugin.rules.model import Rule, RuleTest

_TS = re.compile(r"^\[?(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?")
_LEVEL = re.compile(r"\b(CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG)\b")
_GLOG_LEVEL = re.compile(r"\[([EWIF])\d{3,4} ")
_RANK = re.compile(r"\[rank(\d+)\]")
# The real ingest's level vocabulary (l4_plugin.ingest.header): rules and drafts can use it.
_GLOG = {"E": "ERROR", "W": "WARNING", "I": "INFO", "F": "CRITICAL"}
_LEVEL_NAMES = {"WARN": "WARNING", "FATAL": "CRITICAL"}


class WritableStore(RuleStore, Protocol):
    """A store that can also write and refresh (what the rule tests need)."""

    def bulk_index(
        self, index: str, docs: Iterable[tuple[str, dict[str, Any]]], *, refresh: bool = False
    ) -> int: ...

    def refresh(self, index: str) -> None: ...


Ingest = Callable[[WritableStore, str, dict[str, list[str]]], None]


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


def _parse(line: str, previous: str | None) -> tuple[str | None, str | None, int | None]:
    ts = previous
    m = _TS.match(line)
    if m:
        frac = (m.group(3) or "0")[:3].ljust(3, "0")
        ts = f"{m.group(1)}T{m.group(2)}.{frac}Z"
    level = None
    lm = _LEVEL.search(line)
    if lm:
        level = _LEVEL_NAMES.get(lm.group(1), lm.group(1))
    else:
        gm = _GLOG_LEVEL.search(line)
        level = _GLOG[gm.group(1)] if gm else None
    rm = _RANK.search(line)
    return ts, level, int(rm.group(1)) if rm else None


def line_level(line: str) -> str | None:
    """The level ``direct_ingest`` reads from a line (None when the line names none)."""
    return _parse(line, None)[1]


def line_docs(
    job_id: str, nodes: Mapping[str, Sequence[str]]
) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """``l4-lines``, ``l4-events`` and ``l4-templates`` documents for a small snippet."""
    lines: list[tuple[str, dict[str, Any]]] = []
    events: dict[tuple[str, str], dict[str, Any]] = {}
    templates: dict[str, dict[str, Any]] = {}
    for node, raw_lines in nodes.items():
        ts: str | None = None
        for pos, line in enumerate(raw_lines):
            ts, level, rank = _parse(line, ts)
            tid = hashlib.sha1(line.encode("utf-8")).hexdigest()
            doc: dict[str, Any] = {
                "message": line,
                "host.name": node,
                "l4.job.id": job_id,
                "l4.template.id": tid,
                "l4.line": pos + 1,
                "log.file.path": f"{node}/rank.log",
                "log.offset": pos,
            }
            if ts is not None:
                doc["@timestamp"] = ts
            if level is not None:
                doc["log.level"] = level
            if rank is not None:
                doc["l4.rank"] = rank
            lines.append((f"{job_id}:{node}:{pos}", doc))
            templates[tid] = {"l4.template.id": tid, "l4.template.text": line}
            event = events.get((node, tid))
            if event is None:
                event = {
                    "message": line,
                    "host.name": node,
                    "l4.job.id": job_id,
                    "l4.template.id": tid,
                    "l4.template.text": line,
                    "l4.count": 0,
                    "l4.first_pos": pos,
                    "l4.bucket": "all",
                }
                if level is not None:
                    event["log.level"] = level
                events[(node, tid)] = event
            event["l4.count"] += 1
            event["l4.last_pos"] = pos
            if ts is not None:
                event.setdefault("l4.first_ts", ts)
                event.setdefault("@timestamp", ts)
                event["l4.last_ts"] = ts
    return {
        "lines": lines,
        "events": [(f"{job_id}:{n}:{t}", doc) for (n, t), doc in events.items()],
        "templates": list(templates.items()),
    }


def direct_ingest(store: WritableStore, job_id: str, nodes: dict[str, list[str]]) -> None:
    """Write a snippet straight into the indices (every line kept); does not refresh."""
    docs = line_docs(job_id, nodes)
    store.bulk_index(store.names.lines, docs["lines"])
    store.bulk_index(store.names.events, docs["events"])
    store.bulk_index(store.names.templates, docs["templates"])


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


def run_rule_tests(
    store: WritableStore, rules: Sequence[Rule], ingest: Ingest
) -> list[RuleTestResult]:
    """Ingest every rule's tests under scratch job ids, refresh once, match and compare."""
    plan: list[tuple[Rule, RuleTest, str]] = []
    for rule in rules:
        for i, test in enumerate(rule.tests):
            job_id = scratch_job_id(rule.id, i)
            ingest(store, job_id, {node: list(lines) for node, lines in test.nodes.items()})
            plan.append((rule, test, job_id))
    if not plan:
        return []
    for index in (store.names.lines, store.names.events, store.names.templates):
        store.refresh(index)
    results: list[RuleTestResult] = []
    for rule, test, job_id in plan:
        found = match_job(store, job_id, [rule])
        results.append(_judge(test, rule.id, list(found[0].nodes) if found else None))
    return results
