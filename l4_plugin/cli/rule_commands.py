"""The work behind ``l4 rules test | match | new`` (``cli/rules.py`` parses arguments and prints).

``library_tests`` runs every rule's embedded tests in a scratch index prefix
(``<prefix>rules-test-``) on the configured or embedded cluster and drops its indices afterwards
(the prefix's index templates stay, and the next run reuses them). ``match_text`` renders matches
for a terminal. ``draft_from_job`` drafts a ``status: draft`` rule from a job's diagnosis.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from l4_plugin.config import Settings
from l4_plugin.errors import L4Error
from l4_plugin.rules.draft import draft_rule
from l4_plugin.rules.engine import RuleMatch, match_job
from l4_plugin.rules.harvest import job_diagnosis_facts, require_job, suggested_rule_id
from l4_plugin.rules.loader import check_paths, load_rules
from l4_plugin.rules.port import RuleStorePort
from l4_plugin.rules.rule import Rule
from l4_plugin.rules.testing import RuleTestResult, run_rule_tests
from l4_plugin.store import Store, open_cluster

SCRATCH = "rules-test-"


def checked_rules(paths: Sequence[Path]) -> list[Rule]:
    """Load rules (default: the library); every problem in one ``L4Error``, one per line."""
    problems = check_paths(list(paths) or None)
    if problems:
        raise L4Error("\nerror: ".join(str(p) for p in problems))
    return load_rules(list(paths) or None)


def scratch_settings(settings: Settings) -> Settings:
    """The same cluster with the rule tests' own index prefix."""
    return settings.model_copy(update={"index_prefix": settings.index_prefix + SCRATCH})


def library_tests(settings: Settings, rules: Sequence[Rule]) -> list[RuleTestResult]:
    """Run the rules' embedded tests in the scratch prefix; its indices are dropped afterwards."""
    with open_cluster(scratch_settings(settings)) as store:
        store.drop_indices()  # leftovers of an interrupted run
        store.install_templates()
        try:
            return run_rule_tests(store, rules)
        finally:
            store.drop_indices()


@dataclass(frozen=True, slots=True)
class TestSummary:
    """Per-rule outcome lines and the overall verdict."""

    lines: list[str]
    failed: int
    rules: int

    @property
    def ok(self) -> bool:
        return self.failed == 0


def summarize(rules: Sequence[Rule], results: Sequence[RuleTestResult]) -> TestSummary:
    """``PASS rule-id (n tests)`` or ``FAIL rule-id`` with every failing test's detail."""
    by_rule: dict[str, list[RuleTestResult]] = {r.id: [] for r in rules}
    for result in results:
        by_rule[result.rule_id].append(result)
    lines: list[str] = []
    failed = 0
    for rule_id, rows in by_rule.items():
        bad = [r for r in rows if not r.passed]
        if not rows:
            lines.append(f"SKIP {rule_id} (no tests)")
        elif bad:
            failed += 1
            lines.append(f"FAIL {rule_id}")
            lines.extend(f"     {r.test_name}: {r.detail}" for r in bad)
        else:
            lines.append(f"PASS {rule_id} ({len(rows)} tests)")
    return TestSummary(lines, failed, len(by_rule))


def matches_for(store: Store, job_id: str, rules: Sequence[Rule]) -> list[RuleMatch]:
    """Matches of ``rules`` on an ingested job; an unknown job is a one-line error."""
    require_job(store, job_id)
    return match_job(store, job_id, rules)


def matches_json(matches: Sequence[RuleMatch]) -> str:
    """The ``rule_matches`` list of the JSON report (ARCHITECTURE.md, *The report*)."""
    return json.dumps([m.to_report() for m in matches], indent=2, ensure_ascii=False)


def _when(ts: float | None) -> str:
    return "unknown" if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def match_text(job_id: str, matches: Sequence[RuleMatch], rules: int) -> str:
    """A terminal rendering: causes first, each with nodes, first seen and the rendered text."""
    if not matches:
        return f"no rule of {rules} matched job {job_id}"
    out = [f"{len(matches)} of {rules} rules matched job {job_id}"]
    for i, m in enumerate(matches, 1):
        nodes = ", ".join(m.nodes[:10]) + (
            f" … (+{len(m.nodes) - 10})" if len(m.nodes) > 10 else ""
        )
        of = f" of {m.total_nodes}" if m.total_nodes else ""
        out.append(f"{i}. [{m.role}] {m.rule_id} — {m.title}")
        out.append(
            f"   {m.category}, severity {m.severity}, confidence {m.confidence:.2f}"
            + ("" if m.status == "confirmed" else f", {m.status}")
        )
        out.append(f"   nodes ({len(m.nodes)}{of}): {nodes or '—'}")
        out.append(f"   first seen: {_when(m.first_ts)}")
        out.append(f"   diagnosis: {m.diagnosis}")
        out.append(f"   remediation: {m.remediation}")
    return "\n".join(out)


@dataclass(frozen=True, slots=True)
class Draft:
    """A drafted rule and what it was drafted from."""

    rule_id: str
    category: str
    yaml: str
    source: str


def draft_from_job(store: RuleStorePort, job_id: str, rule_id: str | None) -> Draft:
    """YAML of a draft rule from the job's top events (annotations, else kept error lines)."""
    diagnosis = job_diagnosis_facts(store, job_id)
    rid = rule_id or suggested_rule_id(diagnosis.facts)
    text = draft_rule(diagnosis.facts, rid)
    category = str(diagnosis.facts.get("category", "framework"))
    return Draft(rid, category, text, diagnosis.source)


def write_draft(draft: Draft, out: Path) -> Path:
    """Write the YAML to ``out``: a rules folder (existing, or a path without a suffix;
    ``<category>/<id>.yaml`` is created inside) or a new ``…/<category>/<id>.yaml`` file, the
    layout ``l4 rules check`` requires."""
    expected = Path(draft.category) / f"{draft.rule_id}.yaml"
    path = out / expected if out.is_dir() or not out.suffix else out
    if path.suffix != ".yaml" or path.stem != draft.rule_id:
        raise L4Error(
            f"cannot write the draft rule — {out} — the file must be named {draft.rule_id}.yaml "
            f"(the rule id) — hint: pass a folder, or --id {path.stem}"
        )
    if path.parent.name != Path(draft.category).name:
        raise L4Error(
            f"cannot write the draft rule — {out} — it must live in a folder {draft.category}/ "
            f"— hint: --out RULES_DIR/{expected}"
        )
    if path.exists():
        raise L4Error(f"cannot write the draft rule — {path} — file exists; choose another --id")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(draft.yaml, encoding="utf-8")
    return path
