"""End-to-end ingest on the embedded cluster: a simulated 64-node x 8-rank job of >= 5 M lines.

Prints lines, seconds, lines/s, index documents per raw line and the osmem-server's peak memory.
Usage: python benchmarks/bench_ingest.py [--nodes 64] [--iterations 2000] [--lines-per-iteration 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.simulate import simulate
from l4_plugin.store import EmbeddedCluster, IndexNames, OpenSearchStore


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--lines-per-iteration", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        simulate(
            Path(tmp),
            nodes=args.nodes,
            iterations=args.iterations,
            fault="nccl-ib-error",
            seed=7,
            baselines=0,
            lines_per_iteration=args.lines_per_iteration,
        )
        print(f"simulate: {time.monotonic() - t0:.1f} s")
        with EmbeddedCluster() as cluster:
            store = OpenSearchStore(cluster.url, IndexNames("l4-"), request_timeout=300)
            store.install_templates()
            summary = ingest_job(store, Path(tmp) / "job")
            docs = summary.events_docs + summary.lines_docs + summary.new_templates + 1
            print(f"lines: {summary.lines:,}  files: {summary.files}  nodes: {summary.nodes}")
            print(
                f"ingest: {summary.seconds:.1f} s = {summary.lines / summary.seconds:,.0f} lines/s"
            )
            print(
                f"documents: {summary.events_docs:,} rollups + {summary.lines_docs:,} kept lines"
                f" + {summary.new_templates} templates = {docs / summary.lines:.5f} per raw line"
            )
            print(f"osmem-server peak RSS: {_peak_rss_mb(cluster.pid or 0):,.0f} MB")


if __name__ == "__main__":
    main()
