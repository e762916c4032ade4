"""`l4 rules test | match | new` end to end against the session's osmem-server."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from l4_plugin import cli
from l4_plugin.cli.rule_commands import Draft, write_draft
from l4_plugin.errors import L4Error
from l4_plugin.rules import ingest_snippet, load_rules, match_job
from l4_plugin.rules.harvest import suggested_rule_id
from l4_plugin.store import Store
from tests.l4cli import run_l4

IB = "2024-05-01 10:02:00 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<1> with error 12"
WATCHDOG = "2024-05-01 10:12:00 [rank{r}]:[E501] Watchdog caught collective operation timeout: x"


@pytest.fixture
def env(store: Store, osmem_url: str, tmp_path: Path) -> dict[str, str]:
    """The CLI pointed at the session server with the test store's prefix."""
    return {
        "L4_ES_URL": osmem_url,
        "L4_INDEX_PREFIX": store.names.prefix,
        "L4_STATE_DIR": str(tmp_path / "state"),
    }


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


L4 = Callable[..., Result]


@pytest.fixture
def l4(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> L4:
    """`l4 ARGS` in this process (no interpreter start-up), with the test's environment."""
    for key in list(os.environ):
        if key.startswith("L4_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    def run(*args: str) -> Result:
        capsys.readouterr()
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def _ingest(store: Store, job: str, nodes: dict[str, list[str]]) -> None:
    ingest_snippet(store, job, nodes)


def _ib_job(store: Store, job: str = "job-ib") -> None:
    nodes = {
        f"node-{i}": ["2024-05-01 10:00:00 INFO step 1", WATCHDOG.format(r=i)] for i in range(4)
    }
    nodes["node-2"].insert(1, IB)
    _ingest(store, job, nodes)


def _probe_rule(tmp_path: Path, expect: str) -> Path:
    path = tmp_path / "rules" / "framework" / "probe.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "id: probe\ntitle: Probe\nstatus: draft\ncategory: framework\nseverity: low\n"
        "role: symptom\ndescription: probe\ndetection:\n  e:\n    message|contains: boom\n"
        f"  condition: e\ntests:\n  - name: boom line\n    expect: {expect}\n"
        "    nodes: {n1: ['boom']}\n"
    )
    return path


def test_rules_test_library_passes_and_drops_scratch(env: dict[str, str], store: Store) -> None:
    res = run_l4("rules", "test", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    rules = load_rules()
    assert f"{len(rules)} of {len(rules)} rules passed" in res.stdout
    assert "PASS nccl-ib-completion-error (" in res.stdout
    scratch = [name for name, _ in store.indices() if "rules-test-" in name]
    assert scratch == []


def test_rules_test_reports_failing_rule(l4: L4, tmp_path: Path) -> None:
    path = _probe_rule(tmp_path, "no_match")
    res = l4("rules", "test", str(path))
    assert res.returncode == 1
    assert "FAIL probe" in res.stdout and "boom line: unexpected match on n1" in res.stdout
    assert "0 of 1 rules passed" in res.stdout
    ok = l4("rules", "test", str(_probe_rule(tmp_path, "match")))
    assert ok.returncode == 0 and "PASS probe (1 tests)" in ok.stdout


def test_rules_test_missing_path_is_one_line_error(l4: L4, tmp_path: Path) -> None:
    res = l4("rules", "test", str(tmp_path / "nope.yaml"))
    assert res.returncode == 1
    assert res.stderr.strip() == f"error: {tmp_path / 'nope.yaml'}: no such rule file or folder"


def test_rules_match_text_and_json(l4: L4, store: Store) -> None:
    _ib_job(store)
    res = l4("rules", "match", "job-ib")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("3 of ") and "matched job job-ib" in lines[0]
    assert lines[1].startswith("1. [cause] ")
    assert "nodes (1 of 4): node-2" in res.stdout
    assert "first seen: 2024-05-01T10:02:00+00:00" in res.stdout
    assert "diagnosis: " in res.stdout and "remediation: " in res.stdout
    js = l4("rules", "match", "job-ib", "--json")
    assert js.returncode == 0, js.stderr
    report = json.loads(js.stdout)
    ids = [m["rule"] for m in report]
    assert ids[-1] == "nccl-watchdog-timeout" and "nccl-ib-completion-error" in ids
    ib = report[ids.index("nccl-ib-completion-error")]
    assert ib["nodes"] == ["node-2"] and ib["first_seen"].startswith("2024-05-01T10:02:00")
    assert {"rule", "title", "nodes", "diagnosis", "remediation"} <= set(ib)


def test_rules_match_unknown_job(l4: L4) -> None:
    res = l4("rules", "match", "no-such-job")
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1
    assert res.stderr.startswith("error: unknown job 'no-such-job' — no document in ")


def _annotate(store: Store, job: str) -> None:
    """What `l4 diagnose` leaves in l4-annotations: ranked events, the stage, a suspect node."""
    tid = {line: store_tid(store, job, line) for line in (IB, WATCHDOG.format(r=2))}
    docs = [
        (
            "a1",
            {
                "l4.job.id": job,
                "l4.annotation.kind": "event",
                "l4.annotation.key": tid[IB],
                "l4.annotation.rank": 1,
                "l4.annotation.score": 0.97,
                "l4.annotation.nodes": ["node-2"],
                "l4.template.id": tid[IB],
                # The real ingest's template is the masked body, without the line's header.
                "l4.template.text": "NCCL WARN NET/IB : Got completion from peer <IP><<NUM>> "
                "with error <NUM>",
                "message": "IB completion error on node-2 only, absent in the baseline",
            },
        ),
        (
            "a2",
            {
                "l4.job.id": job,
                "l4.annotation.kind": "event",
                "l4.annotation.key": "no-such-template",
                "l4.annotation.rank": 2,
                "l4.annotation.score": 0.5,
                "l4.annotation.nodes": [],
                "message": "an event whose template text is nowhere: skipped",
            },
        ),
        (
            "a3",
            {
                "l4.job.id": job,
                "l4.annotation.kind": "stage",
                # The stage the ingest gave the lines: the snippet has no training markers.
                "l4.annotation.key": "init",
                "l4.annotation.rank": 1,
                "l4.stage": "init",
                "message": "failed in init",
            },
        ),
        (
            "a4",
            {
                "l4.job.id": job,
                "l4.annotation.kind": "node",
                "l4.annotation.key": "node-2",
                "l4.annotation.rank": 1,
                "l4.annotation.nodes": ["node-2"],
                "message": "most suspect node",
            },
        ),
    ]
    store.bulk_index(store.names.annotations, docs, refresh=True)


def store_tid(store: Store, job: str, line: str) -> str:
    body = {
        "size": 1,
        "query": {
            "bool": {"filter": [{"term": {"l4.job.id": job}}, {"term": {"message.keyword": line}}]}
        },
    }
    hit = store.search(store.names.lines, body)["hits"]["hits"][0]["_source"]
    return str(hit["l4.template.id"])


def test_rules_new_from_annotations_checks_and_matches(
    l4: L4, store: Store, tmp_path: Path
) -> None:
    _ib_job(store, "job-n")
    _annotate(store, "job-n")
    out = tmp_path / "drafts"
    out.mkdir()
    new = ("rules", "new", "--from-job", "job-n", "--id", "ib-draft", "--out", str(out))
    res = l4(*new)
    assert res.returncode == 0, res.stderr
    path = out / "framework" / "ib-draft.yaml"
    assert f"written to {path}" in res.stdout and res.stderr == ""
    rule = yaml.safe_load(path.read_text())
    assert rule["status"] == "draft" and rule["scope"] == "node"
    assert rule["detection"]["event_1"] == {
        "template|contains": "NCCL WARN NET/IB : Got completion from peer *<*> with error *",
        "log.level": "WARNING",
    }
    assert "Seen in stage init." in rule["description"]
    check = l4("rules", "check", str(path))
    assert check.returncode == 0, check.stderr
    tested = l4("rules", "test", str(path))
    assert tested.returncode == 0, tested.stdout
    [match] = match_job(store, "job-n", load_rules([path]))
    assert match.nodes == ("node-2",) and match.status == "draft"
    again = l4(*new)
    assert again.returncode == 1 and "file exists" in again.stderr


def test_rules_new_falls_back_to_error_lines(l4: L4, store: Store) -> None:
    common = "2024-05-01 10:05:00 ERROR dataloader retry"
    rare = "2024-05-01 10:06:00 ERROR RuntimeError: CUDA error: an illegal memory access"
    _ingest(
        store,
        "job-e",
        {"n1": ["2024-05-01 10:00:00 INFO ok", common, rare], "n2": [common], "n3": [common]},
    )
    res = l4("rules", "new", "--from-job", "job-e")
    assert res.returncode == 0, res.stderr
    assert res.stderr.startswith("note: job job-e has no event annotations yet")
    rule = yaml.safe_load(res.stdout)
    assert rule["status"] == "draft"
    # The template is the line's masked body: the header's level word is not in it.
    assert rule["id"] == "draft-runtimeerror-cuda-error-illegal-memory"
    # Rarest first: the single illegal-memory line, then the line every node printed.
    assert rule["detection"]["event_1"] == {
        "template|contains": "RuntimeError: CUDA error: an illegal memory access",
        "log.level": "ERROR",
    }
    assert rule["detection"]["event_2"]["template|contains"] == "dataloader retry"
    assert rule["tests"][0]["nodes"] == {"n1": [rare, common]}


def test_rules_new_unknown_job(l4: L4) -> None:
    res = l4("rules", "new", "--from-job", "ghost")
    assert res.returncode == 1
    assert res.stderr.startswith("error: unknown job 'ghost'") and res.stderr.count("\n") == 1


def test_write_draft_checks_the_layout(tmp_path: Path) -> None:
    draft = Draft("my-rule", "framework", "id: my-rule\n", "annotations")
    with pytest.raises(L4Error, match=r"must be named my-rule\.yaml"):
        write_draft(draft, tmp_path / "framework" / "other.yaml")
    with pytest.raises(L4Error, match=r"folder framework/"):
        write_draft(draft, tmp_path / "user" / "my-rule.yaml")
    assert write_draft(draft, tmp_path) == tmp_path / "framework" / "my-rule.yaml"
    new_dir = tmp_path / "new-rules"
    assert write_draft(draft, new_dir) == new_dir / "framework" / "my-rule.yaml"
    assert suggested_rule_id({"events": [{"template": "<*> NCCL WARN NET/IB : <NUM>"}]}) == (
        "draft-nccl-warn-net"
    )
