"""Analysis time after ingest: ``diagnose_job`` on a simulated 1,024-node job, step by step.

Simulates a failed job of ``--nodes`` nodes (8 ranks each) and its two baselines, ingests them into
the embedded cluster (baselines first), then times ``diagnose_job(..., rules=[], write=True)``
(every step of ``report["timings"]`` and the total) ``--repeat`` times. Then, on a smaller job, the
iteration analysis with ``dtw_backend="tslearn"`` against ``"numpy"``: the first tslearn diagnosis
in a process pays numba's compilation, which is what a CLI user waits for on every invocation.
Run it in a fresh process so that cost is measured.

Usage: python benchmarks/bench_analysis.py [--nodes 1024] [--iterations 30] [--repeat 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The simulator is its own distribution in simulate/ (see README, "Layout").
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulate"))

from l4_plugin.config import load_settings
from l4_plugin.diagnosis import AnalysisOptions, diagnose_job
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.store import EmbeddedCluster, Store
from l4_plugin.store.connect import connect
from l4_simulate import simulate


def _ingest(store: Store, out: Path) -> tuple[str, int, float]:
    started = time.monotonic()
    for base in sorted((out / "baselines").iterdir()):
        b = ingest_job(store, base, status="succeeded")
        print(f"  baseline {b.job.id}: {b.lines:,} lines, {b.files} files, {b.seconds:.1f} s")
    summary = ingest_job(store, out / "job")
    steps = ", ".join(f"{k} {v:.2f}" for k, v in summary.steps.items())
    print(
        f"  job {summary.job.id}: {summary.lines:,} lines, {summary.files} files, "
        f"{summary.events_docs:,} rollups, {summary.lines_docs:,} kept lines, "
        f"{summary.seconds:.1f} s ({steps})"
    )
    return summary.job.id, summary.lines, time.monotonic() - started


def _timed_diagnosis(store: Store, job_id: str, options: AnalysisOptions, write: bool) -> float:
    started = time.monotonic()
    d = diagnose_job(store, job_id, options=options, rules=[], write=write)
    total = time.monotonic() - started
    timings = d.report.timings
    steps = ", ".join(f"{k} {v:.2f}" for k, v in timings.items())
    # The report is built before the annotations are written: their time is the remainder.
    rest = total - sum(timings.values())
    print(f"  total {total:.2f} s — {steps}, build report + write annotations {rest:.2f}")
    top = d.report.nodes[0].node if d.report.nodes else "–"
    print(f"  {len(d.report.events)} events, top node {top}, stage {d.report.stage}")
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--lines-per-iteration", type=int, default=1)
    ap.add_argument("--fault", default="nccl-ib-error")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dtw-nodes", type=int, default=16)
    ap.add_argument("--dtw-iterations", type=int, default=200)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="l4-bench-") as tmp, EmbeddedCluster() as cluster:
        store = connect(load_settings(None), cluster.url, flavour="opensearch")
        store.install_templates()
        big = Path(tmp) / "big"
        t0 = time.monotonic()
        simulate(
            big,
            nodes=args.nodes,
            iterations=args.iterations,
            fault=args.fault,
            seed=args.seed,
            baselines=2,
            lines_per_iteration=args.lines_per_iteration,
        )
        print(f"simulate {args.nodes} nodes x 8 ranks + 2 baselines: {time.monotonic() - t0:.1f} s")
        job_id, _, seconds = _ingest(store, big)
        print(f"ingest (2 baselines + job): {seconds:.1f} s")
        totals = []
        for k in range(1, args.repeat + 1):
            print(f"diagnose_job {job_id} rules=[] write=True, run {k}:")
            totals.append(_timed_diagnosis(store, job_id, AnalysisOptions(), write=True))
        print(f"analysis after ingest: best {min(totals):.2f} s, first {totals[0]:.2f} s")

        small = Path(tmp) / "small"
        simulate(
            small,
            nodes=args.dtw_nodes,
            iterations=args.dtw_iterations,
            fault="straggler",
            seed=args.seed,
            baselines=2,
        )
        # Its own index prefix: the big job's baselines (same seed, same configuration
        # fingerprint) must not join the small job's baseline pool.
        store.close()
        store = connect(
            load_settings(None, index_prefix="l4-dtw-"), cluster.url, flavour="opensearch"
        )
        store.install_templates()
        small_id, small_lines, _ = _ingest(store, small)
        print(
            f"\nDTW backends on {small_id} ({args.dtw_nodes} nodes, {args.dtw_iterations} "
            f"iterations, {small_lines:,} lines), write=False:"
        )
        for label, backend in (
            ("numpy, first", "numpy"),
            ("numpy, second", "numpy"),
            ("tslearn, first in process (numba compile)", "tslearn"),
            ("tslearn, second", "tslearn"),
        ):
            print(f"{label}:")
            _timed_diagnosis(store, small_id, AnalysisOptions(dtw_backend=backend), write=False)
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
