"""`l4 simulate`, `l4 parse --jsonl`, `l4 rules check` and `l4 dashboards export` end to end."""

from __future__ import annotations

import json
from pathlib import Path

from tests.l4cli import run_l4


def test_simulate_then_parse_jsonl(tmp_path: Path) -> None:
    res = run_l4(
        "simulate",
        str(tmp_path / "sim"),
        "--nodes",
        "3",
        "--iterations",
        "12",
        "--fault",
        "oom",
        "--seed",
        "5",
        "--baselines",
        "1",
    )
    assert res.returncode == 0, res.stderr
    truth = json.loads((tmp_path / "sim" / "truth.json").read_text())
    assert truth["fault"] == "oom" and truth["faulty_nodes"]
    log = next(p for p in sorted((tmp_path / "sim" / "job").rglob("*rank*.log")))
    res = run_l4("parse", str(log), "--jsonl")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    text = log.read_text()
    expected_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    assert [r["line"] for r in rows] == list(range(1, expected_lines + 1))
    assert all(set(r) == {"line", "template_id", "template"} for r in rows)
    # Identical templates share one id.
    by_text: dict[str, set[str]] = {}
    for r in rows:
        by_text.setdefault(r["template"], set()).add(r["template_id"])
    assert all(len(ids) == 1 for ids in by_text.values())


def test_simulate_unknown_fault_is_a_one_line_error(tmp_path: Path) -> None:
    res = run_l4("simulate", str(tmp_path / "x"), "--fault", "cosmic-ray")
    assert res.returncode == 1
    assert res.stderr.startswith("error: unknown fault kind") and "cosmic-ray" in res.stderr


def test_parse_missing_file(tmp_path: Path) -> None:
    res = run_l4("parse", str(tmp_path / "none.log"))
    assert res.returncode == 1
    assert "none.log" in res.stderr and "Traceback" not in res.stderr


def test_rules_check_library_and_broken_rule(tmp_path: Path) -> None:
    res = run_l4("rules", "check")
    assert res.returncode == 0, res.stderr
    assert "rules OK" in res.stdout
    bad = tmp_path / "network" / "bad-rule.yaml"
    bad.parent.mkdir()
    bad.write_text(
        "id: bad-rule\ntitle: x\nstatus: confirmed\ncategory: hardware/network\n"
        "severity: high\ndetection:\n  sel:\n    message|contians: boom\n"
        "  condition: sel\n"
    )
    res = run_l4("rules", "check", str(bad))
    assert res.returncode == 1
    assert "bad-rule.yaml" in res.stderr and "contians" in res.stderr


def test_dashboards_export_matches_shipped_files(tmp_path: Path) -> None:
    res = run_l4("dashboards", "export", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    root = Path(__file__).resolve().parents[2] / "kibana_saved_objects"
    for flavour in ("kibana", "opensearch-dashboards"):
        assert (tmp_path / flavour / "l4.ndjson").read_text() == (
            root / flavour / "l4.ndjson"
        ).read_text()
