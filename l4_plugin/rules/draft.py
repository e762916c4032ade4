"""Turning a confirmed diagnosis into a draft rule (the paper's "confirm a fault pattern" step).

``draft_rule`` takes the facts an SRE confirmed for one job — typically the top ``events`` of the
JSON report (ARCHITECTURE.md, *The report*) — and writes the YAML of a ``status: draft`` rule: one
``template|contains`` selection per event (masked variables become ``*`` wildcards), the level
when the sample line names it, ``all of event_*`` as the condition, the sample lines as a positive
test and a benign line as a negative test. The draft is validated before it is returned.

Accepted ``diagnosis_facts`` keys: ``job_id``, ``title``, ``category``, ``severity``, ``role``,
``scope`` (``node``/``job``), ``stage``, ``description`` and ``events``: a list (best first) of
``{"template": str, "level": str?, "nodes": [str]?, "sample": str?, "stage": str?}``. The stage
is recorded in the description; ``level`` becomes a ``log.level`` condition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from l4_plugin.errors import RuleError
from l4_plugin.ingest.header import parse_header
from l4_plugin.rules.loader import parse_yaml
from l4_plugin.rules.schema import CATEGORIES, ROLES, RULE_ID, SEVERITIES, build_rule

# Drain's "<*>" and the maskers' "<NUM>", "<IP>", "<HEX>", "<PATH>"... placeholders.
_MASK = re.compile(r"<[A-Za-z0-9_:*]*>")
_MAX_EVENTS = 3
_NEGATIVE_LINE = "2024-01-01T00:00:00Z INFO iteration 10 | lm loss 2.000000E+00 | grad norm 1.0"


def template_pattern(template: str) -> str:
    """A Sigma wildcard value matching every line of a masked template."""
    escaped = template.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?")
    # Escaping turned "<*>" into "<\*>", so masks are matched after escaping.
    pattern = re.sub(r"<[A-Za-z0-9_:\\*]*>", "*", escaped)
    return re.sub(r"\*+", "*", pattern).strip() or "*"


def _events(facts: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    events = facts.get("events")
    if not isinstance(events, Sequence) or not events:
        raise RuleError("diagnosis facts need a non-empty 'events' list", "draft")
    good = [e for e in events if isinstance(e, Mapping) and isinstance(e.get("template"), str)]
    if not good:
        raise RuleError("no event in 'events' has a 'template' text", "draft")
    return good[:_MAX_EVENTS]


def _pick(facts: Mapping[str, Any], key: str, options: tuple[str, ...], default: str) -> str:
    value = facts.get(key, default)
    if value not in options:
        raise RuleError(f"{key}: unknown value {value!r}; one of {', '.join(options)}", "draft")
    return str(value)


def draft_rule(diagnosis_facts: dict[str, Any], rule_id: str) -> str:
    """YAML text of a ``status: draft`` rule built from one job's confirmed top events."""
    if not RULE_ID.match(rule_id):
        raise RuleError(f"rule ids are kebab-case (a-z, 0-9, '-'), got {rule_id!r}", "draft")
    facts = diagnosis_facts
    events = _events(facts)
    category = _pick(facts, "category", CATEGORIES, "framework")
    severity = _pick(facts, "severity", SEVERITIES, "high")
    role = _pick(facts, "role", ROLES, "cause")
    job_id = str(facts.get("job_id", "unknown job"))
    detection: dict[str, Any] = {}
    positive: dict[str, list[str]] = {}
    node_sets: list[set[str]] = []
    # The stage goes into the description, not the selections: the same fault in another stage
    # is still the same fault, and a snippet of a few lines rarely shows the stage's markers.
    stages: list[str] = []
    for i, event in enumerate(events, start=1):
        # ``contains``: a template is the line's body; the line may carry a header around it.
        pattern = template_pattern(str(event["template"]))
        selection: dict[str, Any] = {"template|contains": pattern}
        stage = event.get("stage", facts.get("stage"))
        if isinstance(stage, str) and stage and stage not in stages:
            stages.append(stage)
        detection[f"event_{i}"] = selection
        nodes = [str(n) for n in event.get("nodes", []) if isinstance(n, str)]
        node_sets.append(set(nodes))
        node = nodes[0] if nodes else "node-1"
        sample = event.get("sample")
        line = sample if isinstance(sample, str) and sample else _MASK.sub("0", event["template"])
        positive.setdefault(node, []).append(line)
        level = event.get("level")
        # Only a level the embedded test reproduces (the ingest reads it from the sample) is kept.
        if isinstance(level, str) and level and parse_header(line).level == level:
            selection["log.level"] = level
    detection["condition"] = "all of event_*" if len(events) > 1 else "event_1"
    common = set.intersection(*node_sets) if all(node_sets) else set()
    scope = _pick(facts, "scope", ("job", "node"), "node" if common else "job")
    if scope == "node" and len(positive) > 1:
        merged = [line for lines in positive.values() for line in lines]
        positive = {next(iter(positive)): merged}
    title = str(facts.get("title") or f"Draft pattern from job {job_id}")
    description = str(
        facts.get("description")
        or f"Drafted from the confirmed diagnosis of job {job_id}; review before confirming."
    )
    if stages:
        description += f" Seen in stage {', '.join(stages)}."
    rule: dict[str, Any] = {
        "id": rule_id,
        "title": title,
        "status": "draft",
        "category": category,
        "severity": severity,
        "role": role,
        "description": description,
        "references": [f"l4 job {job_id}"],
        "scope": scope,
        "detection": detection,
        "diagnosis": (
            "{{ rule.title }} on {{ nodes | join(', ') }} (first seen {{ first_ts }}): "
            "{{ sample.event_1 }}"
        ),
        "remediation": "Review the matched lines and write the remediation before confirming.",
        "tests": [
            {"name": "the confirmed job's lines", "expect": "match", "nodes": positive},
            {
                "name": "a healthy node",
                "expect": "no_match",
                "nodes": {"node-ok": [_NEGATIVE_LINE]},
            },
        ],
    }
    text = yaml.safe_dump(rule, sort_keys=False, allow_unicode=True, width=100)
    data, lines = parse_yaml(text, f"{rule_id}.yaml")
    _, errors = build_rule(data, lines)
    if errors:
        raise errors[0]
    return text
