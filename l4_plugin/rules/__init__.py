"""The fault-pattern rule engine and the confirmed fault library (ARCHITECTURE.md, *Rules*).

Rules are YAML files (``rules/<category>/<id>.yaml``) validated with located errors, compiled to
plain Elasticsearch/OpenSearch queries and evaluated on aggregated facts; see ``rules/README.md``.
"""

from __future__ import annotations

from l4_plugin.rules.draft import draft_rule
from l4_plugin.rules.engine import RuleMatch, match_job
from l4_plugin.rules.loader import check_paths, default_rule_dir, load, load_rules
from l4_plugin.rules.port import RuleStorePort
from l4_plugin.rules.rule import Rule, RuleTest
from l4_plugin.rules.schema import json_schema
from l4_plugin.rules.testing import RuleTestResult, ingest_snippet, run_rule_tests

__all__ = [
    "Rule",
    "RuleMatch",
    "RuleStorePort",
    "RuleTest",
    "RuleTestResult",
    "check_paths",
    "default_rule_dir",
    "draft_rule",
    "ingest_snippet",
    "json_schema",
    "load",
    "load_rules",
    "match_job",
    "run_rule_tests",
]
