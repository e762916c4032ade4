"""Ingest throughput: the parse side alone (read, mask, scan, Drain) and end to end (+ writes).

Two kinds of job:
* simulated (default): ``l4 simulate``'s ``nccl-ib-error`` job, ``--nodes`` x 8 ranks;
* realistic (``--realistic DIR``): the ``failed/`` logs of every case of an extracted
  ``dev-cases.tar.gz`` (``tar xzf ../shared/eval/dev-cases.tar.gz -C /tmp`` → ``/tmp/dev-26``),
  every file repeated ``--repeat`` times over (one node directory per case and node).

``--workers 1,2`` measures each worker count; ``--parse-only`` skips the cluster. Prints lines,
MB, wall and CPU seconds (this process and its workers), lines/s, MB/s, lines/s per CPU-second,
parallel efficiency against the first worker count (by wall time and by CPU), peak RSS of L4
(reducer, largest worker) and of the cluster, and index documents per raw line.
``--rounds R`` measures the worker counts R times, interleaved, and adds their median walls (a
shared machine's speed wanders by more than the differences measured). ``--ceiling`` (with
``--parse-only``) measures in each round what the machine itself gives two processes: two
independent one-worker parses of the job at once, started together, against one alone. Their
efficiency is the best any split of the work can reach by wall time on these cores.
Usage: python benchmarks/bench_ingest.py [--nodes 64] [--iterations 2000] [--workers 1,2]
       python benchmarks/bench_ingest.py --realistic /tmp/dev-26 --repeat 20 --parse-only
       python benchmarks/bench_ingest.py --realistic /tmp/dev-26 --parse-only --rounds 5 --ceiling
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The simulator is its own distribution in simulate/ (see README, "Layout").
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulate"))

from l4_plugin.ingest.jobdir import discover
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.ingest.sources import file_streams
from l4_plugin.store import EmbeddedCluster, IndexNames, OpenSearchStore
from l4_simulate import simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scan_once import scan


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu() -> float:
    """CPU seconds of this process (the reducer; the scan too when it runs in-process)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def realistic_job(cases: Path, out: Path, repeat: int) -> None:
    """Every case's ``failed/`` files, each repeated ``repeat`` times (gzip stays gzip)."""
    for case in sorted(p for p in cases.iterdir() if (p / "failed").is_dir()):
        failed = case / "failed"
        for path in sorted(failed.rglob("*")):
            if not path.is_file() or path.name == "job.yaml":
                continue
            rel = path.relative_to(failed)
            if len(rel.parts) > 1:
                target = out / f"{case.name}-{rel.parts[0]}" / Path(*rel.parts[1:])
            else:
                target = out / f"{case.name}-{rel.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            data = path.read_bytes()
            compressed = data[:2] == b"\x1f\x8b"
            if compressed:  # the corpus has truncated .gz files: keep what decompresses
                data = zlib.decompressobj(31).decompress(data)
            if data and not data.endswith(b"\n"):
                data += b"\n"
            data *= repeat
            target.write_bytes(gzip.compress(data, 6) if compressed else data)


def parse_only(
    job: Path, workers: int, before: Callable[[], object] | None = None
) -> dict[str, float]:
    """Read, mask, scan and Drain every file of ``job`` (no cluster), as ``l4 ingest`` without
    baselines does: the scanners keep no samples of the kinds no rare template can have.
    ``before`` is called between the discovery and the timed part."""
    disc0, wall0 = _cpu(), time.monotonic()
    files = discover(job)
    discovery, discovery_wall = _cpu() - disc0, time.monotonic() - wall0
    size = sum(f.path.stat().st_size for f in files)
    if before is not None:
        before()
    cpu0, t0 = _cpu(), time.monotonic()
    parser = LineParser()
    result = scan(file_streams(files), parser, workers, len({f.node for f in files}))
    parser.finish()
    wall, reducer = time.monotonic() - t0, _cpu() - cpu0
    # Worker processes are the forkserver's children, not ours: they report their own CPU.
    cpu = reducer + result.worker_cpu
    lines = sum(d.lines for d in result.digests)
    return {
        "lines": lines,
        "bytes": size,
        "wall": wall,
        "cpu": cpu,
        "worker_cpu": result.worker_cpu,
        "files": len(files),
        "worker_rss": result.worker_rss_kb / 1024,
        "discovery": discovery,
        "discovery_wall": discovery_wall,
    }


def pair_walls(job: Path) -> list[float]:
    """Two independent one-worker parses of ``job`` at once (two processes, each discovers the
    job first, then both start on a signal): the wall of each."""
    cmd = [sys.executable, __file__, "--pair-child", str(job)]
    children = [
        subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    walls = []
    for child in children:
        out, _ = child.communicate()
        walls.append(float(out.split()[-1]))
    return walls


def _pair_child(job: Path) -> None:
    def ready() -> None:
        print("ready", flush=True)
        sys.stdin.readline()

    print(f"wall {parse_only(job, 1, before=ready)['wall']:.4f}", flush=True)


def end_to_end(job: Path, workers: int) -> dict[str, float]:
    """``ingest_job`` into a fresh embedded cluster."""
    files = discover(job)
    size = sum(f.path.stat().st_size for f in files)
    with EmbeddedCluster() as cluster:
        store = OpenSearchStore(cluster.url, IndexNames("l4-"), request_timeout=300)
        store.install_templates()
        cpu0, t0 = _cpu(), time.monotonic()
        summary = ingest_job(store, job, workers=workers)
        wall, reducer = time.monotonic() - t0, _cpu() - cpu0
        cpu = reducer + summary.worker_cpu
        docs = summary.events_docs + summary.lines_docs + summary.new_templates + 1
        return {
            "lines": summary.lines,
            "bytes": size,
            "wall": wall,
            "cpu": cpu,
            "worker_cpu": summary.worker_cpu,
            "worker_rss": summary.worker_rss_mb,
            "files": summary.files,
            "nodes": summary.nodes,
            "events": summary.events_docs,
            "kept": summary.lines_docs,
            "templates": summary.new_templates,
            "docs": docs,
            "cluster_rss": _peak_rss_mb(cluster.pid or 0),
            **{f"step {k}": v for k, v in summary.steps.items()},
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--lines-per-iteration", type=int, default=4)
    ap.add_argument("--realistic", type=Path, help="extracted dev cases (e.g. /tmp/dev-26)")
    ap.add_argument("--repeat", type=int, default=10, help="--realistic: copies of each file")
    ap.add_argument("--workers", default="1,2", help="worker counts to measure, e.g. 1,2")
    ap.add_argument("--parse-only", action="store_true", help="no cluster: read, mask, scan, Drain")
    ap.add_argument("--rounds", type=int, default=1, help="measure each worker count N times")
    ap.add_argument(
        "--ceiling", action="store_true", help="--parse-only: two one-worker parses at once too"
    )
    ap.add_argument("--pair-child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.pair_child:
        _pair_child(args.pair_child)
        return
    with tempfile.TemporaryDirectory(prefix="l4-bench-") as tmp:
        t0 = time.monotonic()
        if args.realistic:
            job = Path(tmp) / "job"
            realistic_job(args.realistic, job, args.repeat)
            print(
                f"realistic job from {args.realistic} x{args.repeat}: {time.monotonic() - t0:.1f} s"
            )
        else:
            simulate(
                Path(tmp),
                nodes=args.nodes,
                iterations=args.iterations,
                fault="nccl-ib-error",
                seed=7,
                baselines=0,
                lines_per_iteration=args.lines_per_iteration,
            )
            job = Path(tmp) / "job"
            print(f"simulate: {time.monotonic() - t0:.1f} s")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        first: tuple[int, float, float] | None = None
        walls: dict[str, list[float]] = {}
        per_round = [int(w) for w in args.workers.split(",")]
        counts = per_round * args.rounds
        for i, n in enumerate(counts):
            if args.ceiling and args.parse_only and i % len(per_round) == 0:  # a round starts
                pair = pair_walls(job)
                walls.setdefault("pair", []).append(sum(pair) / 2)
                print(f"two one-worker parses at once: {pair[0]:.2f} s and {pair[1]:.2f} s wall")
            r = parse_only(job, n) if args.parse_only else end_to_end(job, n)
            walls.setdefault(str(n), []).append(r["wall"])
            rate = r["lines"] / r["wall"]
            first = first or (n, rate, r["cpu"])
            efficiency = rate / (first[1] * n / first[0])
            by_cpu = first[2] / r["cpu"]  # the same work: the CPU it took with first[0] workers
            print(
                f"workers={n} {'parse side' if args.parse_only else 'end to end'}: "
                f"{r['lines']:,.0f} lines, {r['files']:,.0f} files, {r['bytes'] / 1e6:,.1f} MB in "
                f"{r['wall']:.2f} s wall = {rate:,.0f} lines/s, "
                f"{r['bytes'] / 1e6 / r['wall']:,.1f} MB/s; CPU {r['cpu']:.2f} s (in worker "
                f"processes {r['worker_cpu']:.2f} s) = "
                f"{r['lines'] / r['cpu']:,.0f} lines per CPU-second; "
                f"parallel efficiency vs workers={first[0]}: {efficiency:.0%} by wall time, "
                f"{by_cpu:.0%} by CPU; "
                f"largest worker peak RSS {r['worker_rss']:,.0f} MB"
            )
            if args.parse_only:
                # This process: its own scans (some of the batches when workers > 1) and merges.
                here = r["cpu"] - r["worker_cpu"]
                print(
                    f"  this process's CPU (its scans and the merge) {here:.2f} s; "
                    "discovery (before the timed part) "
                    f"{r['discovery_wall']:.2f} s wall, {r['discovery']:.2f} s CPU in this process "
                    "(a large job's files are probed in worker processes)"
                )
            if not args.parse_only:
                print(
                    f"  documents: {r['events']:,.0f} rollups + {r['kept']:,.0f} kept lines + "
                    f"{r['templates']:,.0f} templates + 1 job = {r['docs'] / r['lines']:.5f} per "
                    f"raw line ({r['nodes']:,.0f} nodes); cluster peak RSS "
                    f"{r['cluster_rss']:,.0f} MB"
                )
                steps = ", ".join(f"{k[5:]} {v:.2f} s" for k, v in r.items() if k[:5] == "step ")
                print(f"  wall per step: {steps}")
        if args.rounds > 1 or args.ceiling:
            _medians(walls, int(counts[0]))
        me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"L4 peak RSS of this process (reducer, all runs): {me:,.0f} MB")


def _medians(walls: dict[str, list[float]], base: int) -> None:
    """The median wall of each worker count over the rounds, the parallel efficiency from the
    medians, and the machine's own (two independent parses at once)."""
    med = {k: statistics.median(v) for k, v in walls.items()}
    ref = med[str(base)] * base
    for k, v in walls.items():
        if k == "pair":
            continue
        n = int(k)
        runs = ", ".join(f"{x:.2f}" for x in v)
        print(
            f"median of {len(v)} runs, workers={n}: {med[k]:.2f} s wall (runs: {runs}); "
            f"parallel efficiency {ref / (n * med[k]):.0%}"
        )
    if "pair" in med:
        ceiling = ref / med["pair"]
        print(
            f"median of {len(walls['pair'])} pairs, two one-worker parses at once: "
            f"{med['pair']:.2f} s wall each; the machine's own efficiency at two processes "
            f"{ceiling:.0%}"
        )
        if "2" in med and base != 2:
            print(f"  workers=2 reach {ref / (2 * med['2']) / ceiling:.0%} of it")


if __name__ == "__main__":
    main()
