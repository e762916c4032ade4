"""The dev cases in other layouts: the same jobs, read as other platforms write them.

A metamorphic check of reading: a diagnosis must not depend on how a platform collected the
logs. Every run (failed, baselines) of every ``per_rank`` case of a corpus in the format of
``../shared/eval`` is rewritten, truth copied::

    python benchmarks/relayout.py /tmp/dev-26 /tmp/re-srunl srunl   # one srun -l stdout
    python benchmarks/relayout.py /tmp/dev-26 /tmp/re-mpirun mpirun # mpirun --tag-output
    python benchmarks/relayout.py /tmp/dev-26 /tmp/re-jsonl jsonl   # <host>.jsonl, a collector's
    python benchmarks/relayout.py /tmp/dev-26 /tmp/re-k8s k8s       # <pod>.log, kubectl stamps

Lines of a node's ranks are merged by the time they were printed (their own stamp; a line
without one in a burst with the stamped line before it, a traceback just before the next
stamp or the run's end: ``timed``), as one launcher stdout interleaves them; kernel logs go to
``syslog/<host>.<name>`` (srunl, mpirun), into the host's JSON lines (jsonl) or nowhere (k8s,
whose pods have none). Then ``../shared/eval/score.py --cases DST`` scores it like the original.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

from l4_plugin.ingest.header import parse_header, rank_prefix
from l4_plugin.ingest.jobdir import discover
from l4_plugin.ingest.logfile import LogFile
from l4_plugin.ingest.reader import read_blocks

Row = tuple[float, int, int, str]


def lines_of(path: Path) -> list[str]:
    return [line for b in read_blocks(path) for line in b.lines]


def timed(lines: list[str], span: tuple[float, float], year: int) -> list[tuple[float, int, str]]:
    """Each line with the time it was printed: its own stamp when it has one; else it came in
    a burst with the stamped line before it (a microsecond apart; before the first stamp, just
    before it), except a traceback: a process prints it as it dies, so from a "Traceback" line
    on, the lines without a stamp come together just before the next stamp, or the run's end
    (``span``) after a file's last stamp. Giving a crash the stamp before it would put its last
    words next to the start-up of a rank that stamps only its start-up. A stamp without a year
    (glog's) is read in the run's ``year``."""
    stamps = [parse_header(line, year).timestamp for line in lines]
    at: list[float] = [0.0] * len(lines)
    bounds = [i for i, t in enumerate(stamps) if t is not None]
    if not bounds:
        return [(span[1] - 1e-6 * (len(lines) - i), i, line) for i, line in enumerate(lines)]
    for i in bounds:
        at[i] = stamps[i] or 0.0
    for i in range(bounds[0]):
        at[i] = at[bounds[0]] - 1e-6 * (bounds[0] - i)
    for a, b in itertools.pairwise([*bounds, len(lines)]):
        end = at[b] if b < len(lines) else max(span[1], at[a])
        crash = next((i for i in range(a + 1, b) if "Traceback (most recent" in lines[i]), b)
        for i in range(a + 1, b):
            at[i] = at[a] + 1e-6 * (i - a) if i < crash else end - 1e-6 * (b - i)
    return [(at[i], i, line) for i, line in enumerate(lines)]


def run_span(files: list[LogFile], year: int) -> tuple[float, float]:
    """The first and last time any line of the run states."""
    times = [
        ts
        for f in files
        for line in lines_of(f.path)
        if (ts := parse_header(line, year).timestamp) is not None
    ]
    return (min(times), max(times)) if times else (0.0, 0.0)


_YEAR = re.compile(r"\b(20\d\d)-[01]\d-[0-3]\d[ T]\d\d:")


def run_year(files: list[LogFile]) -> int:
    """The year the run's dated stamps state most often (its year-less ones are in it too)."""
    years = Counter(
        m.group(1) for f in files for line in lines_of(f.path) for m in [_YEAR.search(line)] if m
    )
    return int(years.most_common(1)[0][0]) if years else 2025


def run_dir(src: Path, dst: Path, layout: str) -> None:
    """One run directory of ``src`` rewritten in ``layout`` into ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    if (src / "job.yaml").exists():
        shutil.copy(src / "job.yaml", dst / "job.yaml")
    files = discover(src)
    year = run_year(files)
    span = run_span(files, year)
    order = {n: i for i, n in enumerate(sorted({f.node for f in files}))}
    merged: list[tuple[float, str, int, int, str]] = []
    per_node: dict[str, list[Row]] = {}
    kernel: dict[str, tuple[str, list[str]]] = {}
    for f in files:
        if f.kind != "rank":
            kernel[f.node] = (Path(f.relative).name, lines_of(f.path))
            continue
        ni = order[f.node]
        for t, i, line in timed(lines_of(f.path), span, year):
            r = f.rank
            text = line
            if r is None:
                r, end = rank_prefix(line)
                text = line[end:] if r is not None else line
                r = r if r is not None else 0
            g = ni * 8 + (r % 8)
            merged.append((t, f.node, g, i, text))
            per_node.setdefault(f.node, []).append((t, g, i, text))
    merged.sort(key=lambda x: (x[0], x[2], x[3]))
    if layout in ("srunl", "mpirun"):
        _launcher_stdout(dst, layout, merged, kernel)
    elif layout == "jsonl":
        _json_lines(dst, per_node, kernel)
    elif layout == "k8s":
        _pod_logs(dst, per_node)
    else:
        raise SystemExit(f"unknown layout {layout!r}: srunl, mpirun, jsonl or k8s")


def _launcher_stdout(
    dst: Path,
    layout: str,
    merged: list[tuple[float, str, int, int, str]],
    kernel: dict[str, tuple[str, list[str]]],
) -> None:
    with open(dst / "slurm-4242.out", "w") as fh:
        for _, _, g, _, line in merged:
            fh.write((f"{g}: " if layout == "srunl" else f"[1,{g}]<stdout>:") + line + "\n")
    for node, (name, lines) in kernel.items():
        (dst / "syslog").mkdir(exist_ok=True)
        (dst / "syslog" / f"{node}.{name}").write_text("\n".join(lines) + "\n")


def _json_lines(
    dst: Path, per_node: dict[str, list[Row]], kernel: dict[str, tuple[str, list[str]]]
) -> None:
    for node, rows in per_node.items():
        rows.sort(key=lambda x: (x[0], x[1], x[2]))
        with open(dst / f"{node}.jsonl", "w") as fh:
            for t, g, _, line in rows:
                fh.write(json.dumps({"ts": t, "host": node, "rank": g, "msg": line}) + "\n")
            for line in kernel.get(node, ("", []))[1]:
                row = {"ts": None, "host": node, "stream": "kernel", "msg": line}
                fh.write(json.dumps(row) + "\n")


def _pod_logs(dst: Path, per_node: dict[str, list[Row]]) -> None:
    for node, rows in per_node.items():
        rows.sort(key=lambda x: (x[0], x[1], x[2]))
        with open(dst / f"{node}.log", "w") as fh:
            for t, g, _, line in rows:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
                fh.write(f"{stamp}.{int((t % 1) * 1e9):09d}Z [default{g % 8}]:{line}\n")


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    src, dst, layout = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    for case in sorted(src.iterdir()):
        truth = case / "truth.json"
        if not truth.exists():
            continue
        t = json.loads(truth.read_text())
        if t.get("layout") != "per_rank":
            continue
        out = dst / case.name
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(truth, out / "truth.json")
        for run in sorted(p for p in case.iterdir() if p.is_dir()):
            run_dir(run, out / run.name, layout)
        print(case.name, flush=True)


if __name__ == "__main__":
    main()
