"""Pure tests of the rule engine: loading, located errors, condition language, sandbox, compiler."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from l4_plugin.errors import RuleError
from l4_plugin.rules import check_paths, draft_rule, json_schema, load, load_rules
from l4_plugin.rules.compiler import (
    RegexTranslationError,
    python_re_to_lucene,
    selection_query,
    value_query,
)
from l4_plugin.rules.condition import (
    ConditionSyntaxError,
    SelectionFacts,
    evaluate,
    parse_condition,
)
from l4_plugin.rules.loader import default_rule_dir, rule_files
from l4_plugin.rules.schema import CATEGORIES, parse_duration

GOOD = """\
id: foo
title: Foo
status: confirmed
category: hardware/network
severity: high
role: cause
description: A test rule.
scope: node
detection:
  sel1:
    message|contains: "NET/IB"
  condition: sel1
diagnosis: "{{ nodes | join(', ') }}: {{ sample.sel1 }}"
tests:
  - name: hit
    expect: match
    nodes: {n1: ["NET/IB error"]}
  - name: miss
    expect: no_match
    nodes: {n1: ["fine"]}
"""


def write(
    tmp_path: Path, text: str, rule_id: str = "foo", category: str = "hardware/network"
) -> Path:
    path = tmp_path / "rules" / category / f"{rule_id}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_good_rule_loads(tmp_path: Path) -> None:
    [rule] = load_rules([write(tmp_path, GOOD)])
    assert rule.id == "foo" and rule.scope == "node" and rule.role == "cause"
    assert len(rule.tests) == 2


def test_unknown_modifier_has_line_and_hint(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("message|contains", "message|contians"))
    with pytest.raises(
        RuleError,
        match=r"foo\.yaml:11: detection\.sel1\.message\|contians: unknown modifier 'contians' "
        r"\(did you mean 'contains'\?\)",
    ):
        load_rules([path])


def test_collect_errors_reports_every_problem(tmp_path: Path) -> None:
    bad = (
        GOOD.replace("message|contains", "mesage|contains")
        .replace("severity: high", "severity: hihg")
        .replace("condition: sel1", "condition: sel1 and sel2")
    )
    errors = check_paths([write(tmp_path, bad)])
    text = "\n".join(str(e) for e in errors)
    assert "foo.yaml:5: severity: unknown value 'hihg' (did you mean 'high'?)" in text
    assert "unknown field 'mesage' (did you mean 'message'?)" in text
    assert "unknown selection 'sel2'" in text
    rules, errs = load([write(tmp_path, bad)], collect_errors=True)
    assert rules == [] and len(errs) == len(errors) >= 3


def test_id_must_match_file_and_folder(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD, rule_id="bar")
    with pytest.raises(RuleError, match=r"bar\.yaml:1: id: id 'foo' differs from the file name"):
        load_rules([path])
    path = write(tmp_path, GOOD, category="platform")
    with pytest.raises(
        RuleError, match=r"category: file must live in a folder 'hardware/network/'"
    ):
        load_rules([path])


def test_kebab_case_ids(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("id: foo", "id: Foo_Bar"), rule_id="Foo_Bar")
    with pytest.raises(RuleError, match="rule ids are kebab-case"):
        load_rules([path])


def test_yaml_syntax_error_is_located(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("  sel1:\n", "  sel1: [\n"))
    with pytest.raises(RuleError, match=r"foo\.yaml:\d+: invalid YAML"):
        load_rules([path])


def test_duplicate_keys_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "severity: low\n")
    with pytest.raises(RuleError, match=r"foo\.yaml:\d+: duplicate key 'severity'"):
        load_rules([path])


def test_duplicate_rule_ids(tmp_path: Path) -> None:
    a = write(tmp_path, GOOD)
    b = tmp_path / "other" / "hardware" / "network" / "foo.yaml"
    b.parent.mkdir(parents=True)
    b.write_text(GOOD)
    with pytest.raises(RuleError, match="duplicate rule id 'foo'"):
        load_rules([a, b])


def test_confirmed_rule_needs_both_tests(tmp_path: Path) -> None:
    text = GOOD.split("tests:")[0]
    with pytest.raises(RuleError, match="needs at least one 'match' and one 'no_match' test"):
        load_rules([write(tmp_path, text)])
    [rule] = load_rules([write(tmp_path, text.replace("confirmed", "draft"))])
    assert rule.status == "draft"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("message|contains", "l4.rank|contains"), r"modifier 'contains' needs a text field"),
        (("message|contains", "message|gt"), r"modifier 'gt' needs a numeric field"),
        (("message|contains", "message|contains|re"), r"cannot be combined"),
        (('"NET/IB"', '"(?=x)y"'), r"^(?!)"),
        (("condition: sel1", "condition: sel1 and"), r"expected a selection"),
        (("condition: sel1", "condition: 2 of sel*"), r"unexpected '2'"),
        (("condition: sel1", "condition: all of x*"), r"pattern 'x\*' matches no selection"),
        (("scope: node", "scope: nodes"), r"unknown value 'nodes' \(did you mean 'node'\?\)"),
        (("scope: node", "scope: node\nwindow: 5 minutes"), r"window: bad duration"),
        (("scope: node", "scope: node\nmax_node_fraction: 2"), r"must be a number in \(0, 1\]"),
        (("expect: match", "expect: matches"), r"expect must be 'match' or 'no_match'"),
        (("role: cause", "role: root"), r"role: unknown value 'root'"),
        (("title: Foo\n", ""), r"missing required key 'title'"),
        (("scope: node", "scope: node\nsevrity: low"), r"unknown key 'sevrity' \(did you mean"),
    ],
)
def test_user_facing_errors(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    text = GOOD.replace(*change)
    if message == r"^(?!)":
        text = GOOD.replace("message|contains", "message|re").replace(*change)
        message = r"bad regular expression .*lookarounds"
    with pytest.raises(RuleError, match=message):
        load_rules([write(tmp_path, text)])


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{% if false %}{{ job_id.__class__ }}{% endif %}",
        "{{ rule['__class__'] }}",
        "{{ lipsum.__globals__['os'] }}",
    ],
)
def test_unsafe_templates_fail_to_load(tmp_path: Path, template: str) -> None:
    text = GOOD.replace(
        "diagnosis: \"{{ nodes | join(', ') }}: {{ sample.sel1 }}\"",
        f"diagnosis: {json.dumps(template)}",
    )
    with pytest.raises(RuleError, match=r"diagnosis: (access to '_\w+' is not allowed|unsafe)"):
        load_rules([write(tmp_path, text)])


def test_undefined_template_variable_fails_to_load(tmp_path: Path) -> None:
    text = GOOD.replace("{{ sample.sel1 }}", "{{ hostname }}")
    with pytest.raises(RuleError, match=r"diagnosis: undefined variable 'hostname'"):
        load_rules([write(tmp_path, text)])
    text = GOOD.replace("{{ sample.sel1 }}", "{{ counts.nope + 1 }}")
    with pytest.raises(RuleError, match=r"diagnosis: undefined value in template"):
        load_rules([write(tmp_path, text)])


def test_template_syntax_error_points_into_block(tmp_path: Path) -> None:
    text = GOOD.replace(
        "diagnosis: \"{{ nodes | join(', ') }}: {{ sample.sel1 }}\"",
        "diagnosis: |\n  line one\n  {{ nodes | join(', ') }\n",
    )
    with pytest.raises(RuleError, match=r"foo\.yaml:15: diagnosis: template syntax error"):
        load_rules([write(tmp_path, text)])


def facts(**kw: tuple[int, float | None]) -> dict[str, SelectionFacts]:
    return {k: SelectionFacts(c, 1 if c else 0, t, t) for k, (c, t) in kw.items()}


def test_condition_language() -> None:
    names = ["a", "b", "c_1", "c_2"]
    f = facts(a=(2, 10.0), b=(1, 20.0), c_1=(0, None), c_2=(1, 5.0))
    assert evaluate(parse_condition("a and not c_1", names), f).ok
    assert evaluate(parse_condition("1 of c_*", names), f).ok
    assert not evaluate(parse_condition("all of c_*", names), f).ok
    assert evaluate(parse_condition("count(a) >= 2 and nodes(b) == 1", names), f).ok
    assert not evaluate(parse_condition("count(a) > 2", names), f).ok
    assert evaluate(parse_condition("a then b", names), f).ok
    assert not evaluate(parse_condition("b then a", names), f).ok
    assert evaluate(parse_condition("(b then a) OR c_2", names), f).ok
    truth = evaluate(parse_condition("all of them", names[:2]), f)
    assert truth.ok and truth.span == 10.0


def test_condition_errors_have_columns() -> None:
    with pytest.raises(ConditionSyntaxError, match=r"unknown selection 'sel3' \(did you mean"):
        parse_condition("sel1 or sel3", ["sel1", "sel2"])
    with pytest.raises(ConditionSyntaxError, match="expected '\\)'") as info:
        parse_condition("(sel1 or sel2", ["sel1", "sel2"])
    assert info.value.column == 14
    with pytest.raises(ConditionSyntaxError, match="unexpected character"):
        parse_condition("sel1 && sel2", ["sel1", "sel2"])


def test_regex_translation() -> None:
    assert python_re_to_lucene(r"Port: \d+ Link DOWN") == ".*(Port: [0-9]+ Link DOWN).*"
    assert python_re_to_lucene(r"^NCCL (?:WARN|INFO)$") == "(NCCL (WARN|INFO))"
    assert python_re_to_lucene("peer <1>") == r".*(peer \<1\>).*"
    for bad in (r"\bword", "a*?b", "(?=x)", "a^b", r"\S+"):
        with pytest.raises(RegexTranslationError):
            python_re_to_lucene(bad)


def test_value_queries_use_keyword_and_case_insensitivity() -> None:
    q = value_query("message.keyword", "contains", "NET/IB *error", cased=False)
    assert q == {
        "wildcard": {"message.keyword": {"value": "*NET/IB *error*", "case_insensitive": True}}
    }
    assert value_query("log.level", "equals", "ERROR", cased=True) == {
        "term": {"log.level": {"value": "ERROR"}}
    }
    assert value_query("message.keyword", "startswith", r"a\*b", cased=False) == {
        "prefix": {"message.keyword": {"value": "a*b", "case_insensitive": True}}
    }
    assert value_query("l4.rank", "gte", 8, cased=False) == {"range": {"l4.rank": {"gte": 8}}}


def test_template_selection_resolves_through_ids(tmp_path: Path) -> None:
    text = GOOD.replace('message|contains: "NET/IB"', 'template|contains: "completion"')
    [rule] = load_rules([write(tmp_path, text)])
    query = selection_query(rule.selections["sel1"], lambda m: ["t2", "t1"])
    assert query == {"terms": {"l4.template.id": ["t1", "t2"]}}


def test_durations() -> None:
    assert (
        parse_duration("5m") == 300 and parse_duration("250ms") == 0.25 and parse_duration(30) == 30
    )
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration("5 minutes")


def test_library_is_large_and_clean() -> None:
    assert check_paths() == []
    rules = load_rules()
    confirmed = [r for r in rules if r.status == "confirmed"]
    assert len(confirmed) >= 30
    assert {r.category for r in rules} == set(CATEGORIES)
    for rule in rules:
        assert rule.path is not None and rule.path.stem == rule.id
        assert rule.references, rule.id
        assert {t.expect for t in rule.tests} == {"match", "no_match"}, rule.id
    assert any(r.role == "symptom" for r in rules) and any(r.max_node_fraction for r in rules)


def test_published_schema_is_current() -> None:
    published = json.loads((default_rule_dir() / "schema.json").read_text())
    assert published == json_schema()


def test_library_validates_against_json_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json_schema()
    for path in rule_files([default_rule_dir()]):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_draft_rule_round_trips(tmp_path: Path) -> None:
    facts_ = {
        "job_id": "job-42",
        "category": "hardware/network",
        "events": [
            {
                "template": "NET/IB : Got completion from peer <IP> with error <NUM>",
                "level": "WARN",
                "nodes": ["node-7"],
                "sample": "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with error 12",
            },
            {"template": "Watchdog caught collective operation timeout <*>", "nodes": ["node-7"]},
        ],
    }
    text = draft_rule(facts_, "ib-error-job-42")
    data = yaml.safe_load(text)
    assert data["status"] == "draft" and data["scope"] == "node"
    assert (
        data["detection"]["event_1"]["template|contains"]
        == "NET/IB : Got completion from peer * with error *"
    )
    assert data["detection"]["condition"] == "all of event_*"
    [rule] = load_rules([write(tmp_path, text, "ib-error-job-42")])
    assert rule.status == "draft"
    with pytest.raises(RuleError, match="kebab-case"):
        draft_rule(facts_, "Bad Id")
    with pytest.raises(RuleError, match="non-empty 'events'"):
        draft_rule({"events": []}, "x")


def test_readme_documents_the_context() -> None:
    readme = (default_rule_dir() / "README.md").read_text()
    for word in ("|contains", "then", "silence", "max_node_fraction", "sample", "l4 rules check"):
        assert word in readme, word
    assert textwrap.dedent(readme).startswith("# ")
