"""Hostile inputs, measured: what gzip ratios real and generated logs have, and the two probes
of issue 34 (a gzip bomb and a 300 MB line in a 4-node simulated job).

``ratios DIR...``: every log file under the directories (``.log``, ``.out``, ``.err``,
``.txt``, their ``.gz``; a ``.gz`` is measured as found), gzipped at levels 6 (``gzip``'s
default) and 9; each directory's files concatenated in path order (one launcher's stdout of
the whole job) cut into windows of 1 MiB (the guard's), gzipped one by one; and that
concatenation gzipped (-9) as one stream read through the reader's guard
(``reader.GuardedGzip``) without a ratio limit: the highest ratio its windows measure, and how
fast it inflates. Prints the distributions (median, 99th percentile, maximum).

``probes OUT``: a 4-node simulated job (``l4 simulate --nodes 4 --iterations 200 --seed 3``)
and two copies of it: ``bomb`` with one ``.log.gz`` of ``--members`` concatenated gzip members,
each ``--member-gib`` GiB of one repeated line (written streaming: deflate's output only), and
``line`` with a ``--line-mb`` MB line without a newline in one file.

``run OUT``: ``l4 diagnose`` of the clean job and of each probe (``--workers`` given to
each), with wall time and the peak RSS of ``l4`` and its children (``wait4``'s rusage of the
process tree), and whether the top events and nodes are those of the clean job.

Usage: python benchmarks/bench_bombs.py ratios /tmp/ev/dev-26 /work/shared/eval/real-dev ...
       python benchmarks/bench_bombs.py probes /tmp/bombs
       python benchmarks/bench_bombs.py run /tmp/bombs [--workers 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

SUFFIXES = (".log", ".out", ".err", ".txt")
WINDOW = 1 << 20  # the guard's (limits.RATIO_WINDOW)


def _logs(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*") if p.is_file() and p.name.removesuffix(".gz").endswith(SUFFIXES)
    )


def _ratio(data: bytes, level: int) -> float:
    return len(data) / max(1, len(gzip.compress(data, compresslevel=level, mtime=0)))


def _stats(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (
        f"n={len(values):,} median {statistics.median(values):.1f} "
        f"p99 {p99:.1f} max {ordered[-1]:.1f}"
    )


def ratios(dirs: list[Path]) -> None:
    """Per directory: each file's gzip ratio (levels 6 and 9) and its windows' (level 9)."""
    for root in dirs:
        files = _logs(root)
        per_file: dict[int, list[float]] = {6: [], 9: []}
        shipped: list[float] = []
        total = inflated = 0
        stream = bytearray()
        windows: list[float] = []
        for path in files:
            raw = path.read_bytes()
            if raw[:2] == b"\x1f\x8b":
                data = gzip.decompress(raw)
                shipped.append(len(data) / max(1, len(raw)))
            else:
                data = raw
            total += len(data)
            inflated += len(data)
            if len(data) >= 1024:  # a few lines say nothing about a log's redundancy
                for level in per_file:
                    per_file[level].append(_ratio(data, level))
            stream += data
            while len(stream) >= WINDOW:
                windows.append(_ratio(bytes(stream[:WINDOW]), 9))
                del stream[:WINDOW]
        peak, speed = _guarded(files)
        big = max(per_file[9]) if per_file[9] else 0.0
        print(f"{root}: {len(files):,} files, {total / 1e6:,.1f} MB")
        print(f"  per file >= 1 KiB, gzip -6: {_stats(per_file[6])}")
        print(f"  per file >= 1 KiB, gzip -9: {_stats(per_file[9])}")
        if shipped:
            print(f"  .gz as shipped: {_stats(shipped)}")
        print(f"  1 MiB windows of the whole job, gzip -9: {_stats(windows)}")
        print(
            f"  the guard over the files concatenated (gzip -9): peak window ratio {peak:.1f}, "
            f"inflated and read at {speed:,.0f} MB/s"
        )
        print(
            f"  RATIO {root.name} file_max={big:.1f} window_max={max(windows, default=0):.1f} "
            f"guard_peak={peak:.1f}"
        )


def _guarded(files: list[Path]) -> tuple[float, float]:
    """The files concatenated and gzipped (-9) into one stream, read through the reader's
    guard with no ratio limit: the highest window ratio it measured, and MB/s inflated."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import tempfile

    from l4_plugin.ingest.reader import GuardedGzip
    from l4_plugin.limits import ReadLimits

    with tempfile.NamedTemporaryFile(suffix=".log.gz") as tmp:
        with gzip.open(tmp.name, "wb", compresslevel=9) as out:
            for path in files:
                raw = path.read_bytes()
                out.write(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        limits = ReadLimits(max_inflate_ratio=float("inf"))
        started = time.monotonic()
        with open(tmp.name, "rb") as fh, GuardedGzip(fh, tmp.name, limits) as gz:  # type: ignore[arg-type]
            while gz.read1(4 << 20):
                pass
        seconds = time.monotonic() - started
        return gz.peak_ratio, gz.inflated / 1e6 / max(seconds, 1e-9)


def _bomb(path: Path, members: int, member_gib: float) -> None:
    """``members`` gzip members of ``member_gib`` GiB of one line each, streamed to ``path``."""
    line = b"2026-11-27 10:00:00 INFO the same line again and again, forever\n"
    block = line * ((1 << 20) // len(line))
    blocks = int(member_gib * 1024)
    with open(path, "wb") as out:
        for _ in range(members):
            member = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: a gzip member
            for _ in range(blocks):
                out.write(member.compress(block))
            out.write(member.flush())  # with the member's gzip trailer


def _monster(path: Path, megabytes: int) -> None:
    chunk = b"x" * (1 << 20)
    with open(path, "wb") as out:
        out.write(b"2026-11-27 10:00:00 INFO a line that never ends: ")
        for _ in range(megabytes):
            out.write(chunk)


def _extra_file(job: Path, index: int, name: str) -> Path:
    """A new log file of the job's ``index``-th node (flat or nested layout): rank 99."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from l4_plugin.ingest.jobdir import discover

    node = sorted({f.node for f in discover(job)})[index]
    folder = job / node
    return folder / f"rank99.{name}" if folder.is_dir() else job / f"{node}-rank99.{name}"


def probes(out: Path, members: int, member_gib: float, line_mb: int) -> None:
    """The clean 4-node job and its two hostile copies under ``out``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulate"))
    from l4_simulate import simulate

    shutil.rmtree(out, ignore_errors=True)
    simulate(out / "clean", nodes=4, iterations=200, seed=3, baselines=1)
    for name in ("bomb", "line"):
        shutil.copytree(out / "clean", out / name)
    bomb = _extra_file(out / "bomb" / "job", 1, "log.gz")
    started = time.monotonic()
    _bomb(bomb, members, member_gib)
    print(
        f"bomb: {bomb}: {bomb.stat().st_size / 1e6:.1f} MB on disk, "
        f"{members * member_gib:.0f} GiB inflated ({time.monotonic() - started:.0f} s to write)"
    )
    line = _extra_file(out / "line" / "job", 2, "log")
    _monster(line, line_mb)
    print(f"line: {line}: {line.stat().st_size / 1e6:.1f} MB, one line without a newline")


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _hwm_mb(pid: int) -> float:
    """Peak RSS (VmHWM) of a Python process of L4's (0 for the cluster or one gone)."""
    try:
        if b"osmem" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return 0.0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _diagnose(job: Path, workers: int, out: Path) -> tuple[float, float, dict[str, Any]]:
    """``l4 diagnose`` of ``job`` with its own embedded cluster: wall seconds, the largest peak
    RSS (MB) of ``l4`` and its worker processes (sampled every 50 ms), and the report."""
    l4 = Path(sys.executable).parent / "l4"
    report = out / f"{job.parent.name}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")}
    env["L4_STATE_DIR"] = str(out / "state")  # never another session's `l4 cluster up`
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(l4), "diagnose", str(job), "--workers", str(workers), "--json", str(report)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    peak = 0.0
    while proc.poll() is None:
        peak = max([peak, *(_hwm_mb(p) for p in _tree(proc.pid))])
        time.sleep(0.05)
    wall = time.monotonic() - started
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"l4 diagnose {job} failed:\n{err}")
    for line in err.splitlines():
        if "cut" in line or "truncated" in line:
            print(f"  stderr: {line[:300]}")
    return wall, peak, json.loads(report.read_text())


def _gist(report: dict[str, Any]) -> dict[str, object]:
    """What must not change: the top events, the most suspect node and the verdict."""
    verdict = report["verdict"]
    return {
        "events": [e["template_id"] for e in report["events"][:5]],
        "top node": report["nodes"][0]["node"] if report["nodes"] else None,
        "verdict": [verdict[k] for k in ("category", "blame", "evict", "restart")],
    }


def run(out: Path, workers: int) -> None:
    """Diagnose the clean job and each probe; compare their top events, node and verdict."""
    results = out / "reports"
    results.mkdir(exist_ok=True)
    clean: dict[str, object] | None = None
    for name in ("clean", "bomb", "line"):
        wall, rss, report = _diagnose(out / name / "job", workers, results)
        gist = _gist(report)
        clean = clean or gist
        nodes = [(n["node"], n["score"]) for n in report["nodes"]]
        print(
            f"{name}: {wall:.1f} s wall, peak RSS {rss:,.0f} MB (l4 and its workers); "
            f"top events, top node and verdict as the clean job's: {gist == clean}"
        )
        print(f"  nodes: {nodes}")
        for note in report.get("notes", []):
            if "cut" in note:
                print(f"  note: {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("ratios")
    r.add_argument("dirs", nargs="+", type=Path)
    p = sub.add_parser("probes")
    p.add_argument("out", type=Path)
    p.add_argument("--members", type=int, default=20)
    p.add_argument("--member-gib", type=float, default=1.0)
    p.add_argument("--line-mb", type=int, default=300)
    g = sub.add_parser("run")
    g.add_argument("out", type=Path)
    g.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if args.cmd == "ratios":
        ratios(args.dirs)
    elif args.cmd == "probes":
        probes(args.out, args.members, args.member_gib, args.line_mb)
    else:
        run(args.out, args.workers)


if __name__ == "__main__":
    main()
