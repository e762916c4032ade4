"""Diagnose every case of one or more evaluation corpora and keep the JSON reports, timings removed.

A refactoring that must not change any diagnosis is checked by running this with the ``l4`` of
the commit before it and with the ``l4`` after it, then diffing the two output directories::

    python benchmarks/diagnose_corpus.py --l4 /tmp/before/.venv/bin/l4 --out /tmp/before-json \\
        /tmp/ev/dev-26 /work/shared/eval/real-dev
    python benchmarks/diagnose_corpus.py --l4 .venv/bin/l4 --out /tmp/after-json \\
        /tmp/ev/dev-26 /work/shared/eval/real-dev
    diff -r /tmp/before-json /tmp/after-json

Each case is run the way ``/work/shared/eval/score.py`` runs it (``l4 diagnose CASE/JOB
--baseline CASE/B … --json OUT``, the job and baselines named by ``truth.json``), in a scratch
directory with a HOME of its own, so every case gets its own embedded cluster and no settings
file or running ``l4 cluster up`` of this machine is used. The report's ``timings`` are removed;
everything else is written as ``l4`` wrote it, so ``diff`` shows any other change.
``OUT/<corpus>/<case>.json`` is the report, ``OUT/<corpus>/<case>.err`` what ``l4`` printed on
stderr when it failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TIMING_KEYS = ("timings",)


def command(l4: str, case: Path, out_json: Path) -> list[str]:
    """The ``l4 diagnose`` command line of one case, as the evaluation scorer builds it."""
    truth = json.loads((case / "truth.json").read_text("utf-8"))
    job = truth.get("failed") or ("job" if (case / "job").is_dir() else "failed")
    argv = [l4, "diagnose", str(case / job)]
    for name in truth.get("baselines", []):
        argv += ["--baseline", str(case / name)]
    return [*argv, "--json", str(out_json)]


def run_case(l4: str, case: Path, out_dir: Path, timeout: float) -> str:
    """Diagnose one case; write its report without timings. Returns a one-line status."""
    with tempfile.TemporaryDirectory(prefix="l4corpus-") as tmp:
        out_json = Path(tmp) / "report.json"
        env = dict(os.environ, HOME=tmp)
        try:
            done = subprocess.run(
                command(l4, case, out_json),
                cwd=tmp,
                env=env,
                timeout=timeout,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                check=False,
            )
        except subprocess.TimeoutExpired:
            (out_dir / f"{case.name}.err").write_text(f"timeout after {timeout} s\n", "utf-8")
            return f"{case.name}: timeout"
        if done.returncode != 0 or not out_json.exists():
            (out_dir / f"{case.name}.err").write_bytes(done.stderr)
            return f"{case.name}: exit {done.returncode}"
        report = json.loads(out_json.read_text("utf-8"))
    for key in TIMING_KEYS:
        report.pop(key, None)
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    (out_dir / f"{case.name}.json").write_text(text, "utf-8")
    return f"{case.name}: ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpora", nargs="+", type=Path, help="directories of cases (truth.json each)")
    ap.add_argument("--l4", required=True, help="the l4 executable to run")
    ap.add_argument("--out", required=True, type=Path, help="where to write OUT/<corpus>/<case>")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="cases run at once")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per case")
    a = ap.parse_args()
    l4 = str(Path(a.l4).resolve())
    tasks = []
    for corpus in a.corpora:
        out_dir = a.out / corpus.resolve().name
        out_dir.mkdir(parents=True, exist_ok=True)
        cases = sorted(p for p in corpus.resolve().iterdir() if (p / "truth.json").is_file())
        tasks += [(case, out_dir) for case in cases]
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        results = list(pool.map(lambda t: run_case(l4, t[0], t[1], a.timeout), tasks))
    for line in results:
        print(line)
    failed = sum(1 for line in results if not line.endswith(": ok"))
    print(f"{len(results)} cases, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
