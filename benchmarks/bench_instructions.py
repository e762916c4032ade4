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

``--workers N``: what N scanners execute in all against one, on the 2x job (callgrind follows
the worker processes, ``--trace-children=yes``). A worker process is forked from the scan's
forkserver and starts with the server's instructions counted: the server's own total is
subtracted from each (the few it executes per fork are left in, a few million). Discovery's
probe processes are counted in the full and the import-only runs alike, so they cancel out.
Usage: python benchmarks/bench_instructions.py --realistic /tmp/dev-26 [--code /tmp/base]
       python benchmarks/bench_instructions.py --realistic /tmp/dev-26 --workers 2
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
from typing import Any

from scan_once import scan

_COLLECTED = re.compile(r"Collected : (\d+)")
_PROCESS = re.compile(r"^==(\d+)== (Command|Collected) ?: (.*)$", re.MULTILINE)


def _child(mode: str, job: Path, workers: int = 1, follow: bool = False) -> None:
    """In a process under callgrind: the counted work (``code`` is first on ``sys.path``)."""
    from l4_plugin.ingest.jobdir import discover
    from l4_plugin.ingest.parser import LineParser
    from l4_plugin.ingest.procs import start_server
    from l4_plugin.ingest.sources import file_streams
    from l4_plugin.ingest.stages import default_stage_rules

    if follow:
        start_server()  # in every run compared: the server's instructions cancel out
    files = discover(job)
    parser = LineParser()
    default_stage_rules()
    if mode == "full":
        scan(file_streams(files), parser, workers, len({f.node for f in files}))
        parser.finish()


def count(code: Path, mode: str, job: Path, workers: int = 1, follow: bool = False) -> int:
    """Instructions callgrind counted for one child run of ``mode`` over ``job`` with
    ``workers`` scanners (``follow``: of every process it started, see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="l4-callgrind-") as out:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}/cg.%p",
            *(["--trace-children=yes"] if follow else []),
            sys.executable,
            __file__,
            "--child",
            mode,
            "--code",
            str(code),
            "--workers",
            str(workers),
            *(["--follow"] if follow else []),
            str(job),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if run.returncode != 0 or _COLLECTED.search(run.stderr) is None:
        raise SystemExit(f"callgrind run failed ({mode}, {job}): {run.stderr[-800:]}")
    return _all_processes(run.stderr) if follow else int(_COLLECTED.findall(run.stderr)[-1])


def _all_processes(log: str) -> int:
    """The instructions of every process of a ``--trace-children`` log: a process that never
    ran a command of its own was forked from the forkserver (the one whose command names
    ``forkserver``) and has the server's total taken off."""
    commands: dict[str, str] = {}
    collected: dict[str, int] = {}
    for pid, what, value in _PROCESS.findall(log):
        if what == "Command":
            commands[pid] = value
        else:
            collected[pid] = int(value)
    server = next((collected[p] for p, c in commands.items() if "forkserver" in c), 0)
    return sum(n - (0 if pid in commands else server) for pid, n in collected.items())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--realistic", type=Path, help="extracted dev cases (e.g. /tmp/dev-26)")
    ap.add_argument("--code", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--workers", type=int, default=1, help="scanners to compare with one")
    ap.add_argument("--follow", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", choices=("full", "disc"))
    ap.add_argument("job", nargs="?", type=Path)
    args = ap.parse_args()
    if args.child:
        sys.path.insert(0, str(args.code.resolve()))
        _child(args.child, args.job, args.workers, args.follow)
        return
    if args.realistic is None:
        ap.error("--realistic DIR is required")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_ingest import parse_only, realistic_job

    if args.workers > 1:
        _compare_workers(args.code, args.realistic, args.workers, realistic_job)
        return
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


def _compare_workers(code: Path, cases: Path, workers: int, realistic_job: Any) -> None:
    """The 2x job's timed part with one scanner and with ``workers``, all processes counted."""
    with tempfile.TemporaryDirectory(prefix="l4-bench-") as tmp:
        job = Path(tmp) / "job2"
        realistic_job(cases, job, 2)
        runs = [("full", 1), ("full", workers), ("disc", workers)]
        with ThreadPoolExecutor(2) as pool:
            counts = list(pool.map(lambda r: count(code, r[0], job, r[1], follow=True), runs))
    one, many = counts[0] - counts[2], counts[1] - counts[2]
    print(f"code: {code}")
    print("realistic job 2x, instructions of the timed part, every process (callgrind):")
    extra = many / one - 1
    print(f"  1 scanner {one / 1e9:.3f} G; {workers} scanners {many / 1e9:.3f} G ({extra:+.1%})")


if __name__ == "__main__":
    main()
