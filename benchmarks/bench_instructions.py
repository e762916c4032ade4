"""The parse side's cost in instructions: per raw line and fixed, repeatable on a busy machine.

Wall times on a shared machine wander by ±40% from one minute to the next, more than most
changes to the scan are worth. ``valgrind --tool=callgrind`` counts the instructions a process
executes: the same total for the same code and input whatever else the machine does. This
script counts them for the parse side of ``bench_ingest.py --realistic --parse-only``
(discover, then read, mask, scan and Drain with one worker) on the realistic job at 1x and 2x,
and once more for a process that only imports, discovers the job and builds the parser; the
difference is the timed part. Between 1x and 2x (the same 2,701 files, each file's lines twice
over) it splits into a cost per raw line and a fixed one (masking each distinct line, opening
each file, warming the caches), and projects both to the 4x and 16x jobs ``bench_ingest.py``
times. Instructions are not seconds (a cache miss costs more than an add), but a change that
saves a tenth of the instructions of this Python code saves about that much of its time.

``--code DIR``: count another checkout's code instead (a ``git worktree`` of the commit to
compare), with this script's job and method. Each count takes about a minute per million
lines under callgrind; the six runs go two at a time.
Usage: python benchmarks/bench_instructions.py --realistic /tmp/dev-26 [--code /tmp/base]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_COLLECTED = re.compile(r"Collected : (\d+)")


def _child(mode: str, job: Path) -> None:
    """In a process under callgrind: the counted work (``code`` is first on ``sys.path``)."""
    from l4_plugin.ingest.jobdir import discover
    from l4_plugin.ingest.parser import LineParser
    from l4_plugin.ingest.pipeline import rare_limit
    from l4_plugin.ingest.sources import file_streams
    from l4_plugin.ingest.stages import default_stage_rules
    from l4_plugin.ingest.workers import scan_streams

    files = discover(job)
    parser = LineParser()
    default_stage_rules()
    if mode == "full":
        limit = rare_limit(len({f.node for f in files}))
        scan_streams(file_streams(files), parser, workers=1, rare_limit=limit)
        parser.finish()


def count(code: Path, mode: str, job: Path) -> int:
    """Instructions callgrind counted for one child run of ``mode`` over ``job``."""
    out = tempfile.NamedTemporaryFile(prefix="l4-callgrind-", delete=False)  # noqa: SIM115
    out.close()
    cmd = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out.name}",
        sys.executable,
        __file__,
        "--child",
        mode,
        "--code",
        str(code),
        str(job),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    finally:
        os.unlink(out.name)
    found = _COLLECTED.search(run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed ({mode}, {job}): {run.stderr[-800:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--realistic", type=Path, help="extracted dev cases (e.g. /tmp/dev-26)")
    ap.add_argument("--code", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--child", choices=("full", "disc"))
    ap.add_argument("job", nargs="?", type=Path)
    args = ap.parse_args()
    if args.child:
        sys.path.insert(0, str(args.code.resolve()))
        _child(args.child, args.job)
        return
    if args.realistic is None:
        ap.error("--realistic DIR is required")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_ingest import parse_only, realistic_job

    with tempfile.TemporaryDirectory(prefix="l4-bench-") as tmp:
        jobs = {}
        for repeat in (1, 2):
            jobs[repeat] = Path(tmp) / f"job{repeat}"
            realistic_job(args.realistic, jobs[repeat], repeat)
        lines = int(parse_only(jobs[1], 1)["lines"])  # raw lines, as the scan counts them
        runs = [(mode, repeat) for repeat in (1, 2) for mode in ("full", "disc")]
        with ThreadPoolExecutor(2) as pool:
            counts = dict(
                zip(runs, pool.map(lambda r: count(args.code, r[0], jobs[r[1]]), runs), strict=True)
            )
    timed = {r: counts[("full", r)] - counts[("disc", r)] for r in (1, 2)}
    per_copy = timed[2] - timed[1]
    fixed = timed[1] - per_copy
    print(f"code: {args.code}")
    print(f"realistic job 1x: {lines:,} lines; instructions of the timed part (callgrind):")
    print(f"  1x {timed[1] / 1e9:.3f} G, 2x {timed[2] / 1e9:.3f} G")
    print(f"  per raw line {per_copy / lines:,.0f}; fixed {fixed / 1e9:.3f} G")
    for repeat in (4, 16):
        print(f"  {repeat}x job (projected): {(fixed + repeat * per_copy) / 1e9:.2f} G")


if __name__ == "__main__":
    main()
