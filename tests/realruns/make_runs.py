#!/usr/bin/env python3
"""Produce the real-run corpus: failed multi-node torchrun jobs and successful baselines.

Run as root on Linux with the torch venv described in README.md:

    python3 tests/realruns/make_runs.py --out tests/realruns/cases [--only CASE,...] [--list]

Every case runs in fresh network namespaces (netns.py) under a scratch directory; what a platform
would collect (each node's torchrun --log-dir tree, the agent's output, Flight Recorder dumps,
py-spy stacks) is copied to OUT/<case>/failed/<host>/, the style's baseline run to
OUT/<case>/baseline-1/, and truth.json is written from the case's definition (cases.py) and what
the run did (the step at which the orchestration acted, the ranks of each host, the first
collective where the Flight Recorder dumps disagree). Namespaces, mounts and processes are
removed when a run ends, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import netns
from cases import BASELINES, CASES, Case
from facts import hang_facts
from launch import JobSpec, dump_json, run_job


def run_once(spec: JobSpec, case: Case | None, scratch: Path) -> tuple[Path, dict]:
    """Run one job in fresh namespaces; returns the run directory and the facts."""
    run_dir = scratch / "run"
    ckpt = scratch / "ckpt"
    ckpt.mkdir(parents=True, exist_ok=True)
    netns.build(spec.hosts)
    helpers: list[subprocess.Popen[bytes]] = []
    try:
        if case is not None and case.prepare is not None:
            helpers = case.prepare(spec, scratch, ckpt)
        actions = case.actions(spec, ckpt) if case is not None and case.actions else []
        facts = run_job(spec, run_dir, ckpt, actions)
    finally:
        for p in helpers:
            p.kill()
            p.wait()
        netns.teardown()
    return run_dir, facts


def collect(run_dir: Path, dest: Path, job_id: str, status: str, spec: JobSpec) -> None:
    """Copy each node's tree (without checkpoints) and write job.yaml."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for host_dir in sorted(run_dir.iterdir()):
        target = dest / host_dir.name
        shutil.copytree(host_dir, target)
        for sub in ("fr", "stacks"):
            folder = target / sub
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    lines = [f'id: "{job_id}"', f"status: {status}", "config:"]
    for key, value in spec.config().items():
        lines.append(f"  {key}: {json.dumps(value)}")
    (dest / "job.yaml").write_text("\n".join(lines) + "\n")


def make_baseline(style: str, out: Path) -> Path:
    spec = BASELINES[style]
    dest = out.parent / "baselines" / style
    with tempfile.TemporaryDirectory(prefix="l4rr-") as tmp:
        run_dir, facts = run_once(spec, None, Path(tmp))
        ok = all(rc == 0 for rc in facts["returncodes"].values())
        print(f"baseline {style}: {facts['returncodes']} in {facts['seconds']}s", flush=True)
        if not ok:
            raise SystemExit(f"baseline {style} did not succeed: {facts}")
        collect(run_dir, dest, f"baseline-{style}", "succeeded", spec)
    return dest


def make_case(case: Case, out: Path, baseline: Path | None) -> None:
    dest = out / case.name
    with tempfile.TemporaryDirectory(prefix="l4rr-") as tmp:
        run_dir, facts = run_once(case.spec, case, Path(tmp))
        print(
            f"{case.name}: {facts['returncodes']} in {facts['seconds']}s {facts['events']}",
            flush=True,
        )
        if dest.exists():
            shutil.rmtree(dest)
        collect(run_dir, dest / "failed", f"{case.name}-job", "failed", case.spec)
    if baseline is not None:
        shutil.copytree(baseline, dest / "baseline-1")
    run = {
        k: facts.get(k)
        for k in (
            "events",
            "returncodes",
            "seconds",
            "stacks",
            "ranks",
            "fault_steps",
            "last_step_at_limit",
            "last_step",
        )
    }
    write_truth(case, dest, run)


def write_truth(case: Case, dest: Path, run: dict) -> None:
    """truth.json from the case's definition and what the run did (kept under "run")."""
    truth = case.truth(dest / "failed", run)
    truth["ranks"] = run.get("ranks") or {}
    world = len(case.spec.hosts) * case.spec.nproc
    hang = hang_facts(dest / "failed", world)
    if case.hang:
        truth["hang"] = {**case.hang, **hang}
    truth["run"] = run
    dump_json(dest / "truth.json", truth)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "cases")
    ap.add_argument("--only", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument(
        "--truth-only",
        action="store_true",
        help="rewrite truth.json from cases.py and the recorded run, run nothing",
    )
    a = ap.parse_args()
    if a.list:
        for c in CASES:
            print(f"{c.name:34} {c.spec.style:9} {len(c.spec.hosts)}x{c.spec.nproc} {c.fault}")
        return 0
    if a.truth_only:
        for c in CASES:
            path = a.out / c.name / "truth.json"
            if path.exists():
                write_truth(c, a.out / c.name, json.loads(path.read_text())["run"])
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    chosen = [c for c in CASES if not a.only or c.name in a.only.split(",")]
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        baselines: dict[str, Path] = {}
        for style in sorted({c.spec.style for c in chosen}):
            existing = a.out.parent / "baselines" / style
            baselines[style] = existing if existing.exists() else make_baseline(style, a.out)
        for case in chosen:
            make_case(case, a.out, baselines[case.spec.style] if case.baseline else None)
    finally:
        netns.teardown()
        for leftover in Path("/tmp").glob("l4rr-fifo-*"):
            leftover.unlink()
    print(f"done in {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
