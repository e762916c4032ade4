#!/usr/bin/env python3
"""Sanity checks of the real-run corpus (in the spirit of the shared gen3 check.py).

For every CASE/truth.json:
  * failed/ and each baseline hold job.yaml with exactly the keys id, status, config; status is
    `failed` for the failed run and `succeeded` for the baselines; config is a flat mapping and the
    baseline ran the same script style;
  * every root_events regex matches (re.search) at least one line of the failed run and no line of
    any baseline; every related_events regex compiles and matches a line of the failed run;
  * every host in nodes and silent_nodes (and the hang's culprit host) is a node directory of the
    failed run; when a hang has Flight Recorder or py-spy findings, the culprit's ranks are among
    the ranks they single out;
  * the truth has case, fault, category, stage, root_events, related_events, nodes, silent_nodes,
    failed, baselines; the attempts counted match the attempt_<k> directories.
Binary files (the pickled Flight Recorder dumps) are not read as lines.
Prints one line per case and `N passed, M failed`; exit status 1 when any case failed.

    python3 tests/realruns/check_cases.py [DIR]
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

KEYS = (
    "case",
    "fault",
    "category",
    "stage",
    "root_events",
    "related_events",
    "nodes",
    "silent_nodes",
    "failed",
    "baselines",
)


def read_job_yaml(path: Path) -> dict[str, object]:
    """The two-level job.yaml make_runs.py writes (values are JSON scalars)."""
    out: dict[str, object] = {}
    config: dict[str, object] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if line.startswith(" "):
            config[key] = json.loads(value)
        elif key == "config":
            out[key] = config
        else:
            out[key] = json.loads(value) if value.startswith('"') else value
    return out


def run_lines(run_dir: Path) -> Iterator[str]:
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file() and p.name != "job.yaml"):
        data = path.read_bytes()
        if b"\0" in data[:4096]:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        yield from text.splitlines()


def check_regexes(truth: dict, failed: list[str], base: list[str], notes: list[str]) -> None:
    for kind in ("root_events", "related_events"):
        for rx in truth.get(kind, []):
            try:
                c = re.compile(rx)
            except re.error as e:
                notes.append(f"{kind} /{rx}/ does not compile: {e}")
                continue
            if not any(c.search(t) for t in failed):
                notes.append(f"{kind} /{rx}/ matches no line of the failed run")
            hit = next((t for t in base if c.search(t)), None)
            if kind == "root_events" and hit is not None:
                notes.append(f"root /{rx}/ matches a baseline line: {hit[:120]}")


def check_hang(truth: dict, failed_dir: Path, notes: list[str]) -> None:
    hang = truth.get("hang")
    if not hang:
        return
    host = hang.get("culprit_host")
    if host and not (failed_dir / host).is_dir():
        notes.append(f"hang culprit {host} is not a node of the failed run")
    ranks = truth.get("ranks", {}).get(host, {})
    for attempt, finding in (hang.get("flight_recorder") or {}).items():
        if not finding:
            continue
        named = set(finding["ranks_behind"]) | {int(r) for r in finding["ranks_in_other_op"]}
        named |= set(finding["ranks_without_dump"])
        if ranks.get(attempt) and not named & set(ranks[attempt]):
            notes.append(f"{attempt}: the Flight Recorder finding names none of {host}'s ranks")


def check_case(case_dir: Path) -> tuple[dict, list[str]]:
    notes: list[str] = []
    truth = json.loads((case_dir / "truth.json").read_text())
    notes += [f"truth.json lacks {k}" for k in KEYS if k not in truth]
    runs = [truth["failed"], *truth.get("baselines", [])]
    styles = set()
    for i, run in enumerate(runs):
        job_yaml = case_dir / run / "job.yaml"
        if not job_yaml.exists():
            notes.append(f"{run}: no job.yaml")
            continue
        job = read_job_yaml(job_yaml)
        if set(job) != {"id", "status", "config"}:
            notes.append(f"{run}: job.yaml keys {sorted(job)}")
        if job.get("status") != ("failed" if i == 0 else "succeeded"):
            notes.append(f"{run}: status {job.get('status')!r}")
        config = job.get("config")
        if not isinstance(config, dict) or any(isinstance(v, dict | list) for v in config.values()):
            notes.append(f"{run}: config is not a flat mapping")
        else:
            styles.add(config.get("script_style"))
    if len(styles) > 1:
        notes.append(f"the baselines ran another script style: {sorted(styles)}")
    failed_dir = case_dir / truth["failed"]
    failed = list(run_lines(failed_dir))
    base = [t for b in truth.get("baselines", []) for t in run_lines(case_dir / b)]
    check_regexes(truth, failed, base, notes)
    for host in [*truth.get("nodes", []), *truth.get("silent_nodes", [])]:
        if not (failed_dir / host).is_dir():
            notes.append(f"host {host} is not a node of the failed run")
    attempts = {p.name for p in failed_dir.glob("*/logs/*/attempt_*")}
    if truth.get("attempts") != len(attempts):
        notes.append(f"attempts {truth.get('attempts')} but directories {sorted(attempts)}")
    check_hang(truth, failed_dir, notes)
    if not truth.get("stage"):
        notes.append("no stage")
    return truth, notes


def main(root: Path) -> int:
    ok = bad = 0
    for case_dir in sorted(p for p in root.iterdir() if (p / "truth.json").exists()):
        truth, notes = check_case(case_dir)
        ok += not notes
        bad += bool(notes)
        status = "ok" if not notes else "FAIL: " + "; ".join(notes)
        print(f"{case_dir.name:28} {truth.get('category', '?'):18} {status}")
    print(f"{ok} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    here = Path(__file__).resolve().parent / "cases"
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else here))
