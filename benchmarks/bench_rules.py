"""Benchmark: match the whole fault library against a 1,000-node job on an embedded osmem-server.

Run: ``python benchmarks/bench_rules.py [--nodes 1000] [--lines 50] [--direct]``. Prints the
ingest time and the matching time (target: matching <= 5 s). The job goes through the production
ingest (``ingest_streams`` on in-memory streams, ``--full``: every line in ``l4-lines``), so
matching reads rollups, lines, templates and the ``l4-jobs`` document as a real job leaves them.
``--direct`` also times, on the same data, matching with every ``message`` value sent as its
direct regexp/wildcard query (``match_job(..., resolve_messages=False)``, what the engine did
before values were resolved per job) and checks that both give the same matches.
"""

from __future__ import annotations

import argparse
import time

from l4_plugin.ingest.jobdir import JobMeta
from l4_plugin.ingest.pipeline import ingest_streams
from l4_plugin.rules import load_rules, match_job
from l4_plugin.rules.testing import snippet_streams
from l4_plugin.store import EmbeddedCluster, IndexNames, OpenSearchStore


def job_lines(nodes: int, per_node: int) -> dict[str, list[str]]:
    """A job where one node has IB errors, every node times out, and one node went quiet."""
    out: dict[str, list[str]] = {}
    for n in range(nodes):
        lines = [
            f"2024-05-01 10:{i // 60:02d}:{i % 60:02d},000 INFO iteration {i:6d} | lm loss: 2.3 "
            f"| node {n} rank {n * 8 + i % 8}"
            for i in range(per_node - 2)
        ]
        if n == 17:
            lines.append(
                "2024-05-01 10:40:00,000 NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1> "
                "with error 12, opcode 0, len 0, vendor err 129"
            )
        if n == 523:
            lines = lines[:5]
        lines.append(
            f"2024-05-01 10:50:00,000 [rank{n * 8}]:[E501] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE) ran for 600060 milliseconds"
        )
        out[f"node-{n:04d}"] = lines
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--lines", type=int, default=50)
    parser.add_argument(
        "--direct", action="store_true", help="also time matching without message resolution"
    )
    args = parser.parse_args()
    rules = load_rules()
    with EmbeddedCluster() as cluster:
        store = OpenSearchStore(cluster.url, IndexNames("bench-l4-"))
        store.install_templates()
        t0 = time.perf_counter()
        nodes = job_lines(args.nodes, args.lines)
        streams = snippet_streams(nodes)
        summary = ingest_streams(
            store, JobMeta("bench-job", "failed"), streams, "bench", where="bench", full=True
        )
        t1 = time.perf_counter()
        matches = match_job(store, "bench-job", rules)
        t2 = time.perf_counter()
        if args.direct:
            direct = match_job(store, "bench-job", rules, resolve_messages=False)
            t3 = time.perf_counter()
        store.close()
    print(f"rules={len(rules)} nodes={args.nodes} lines={summary.lines_docs}")
    print(f"ingest_seconds={t1 - t0:.2f}")
    print(f"match_seconds={t2 - t1:.2f}")
    if args.direct:
        same = [m.to_report() for m in direct] == [m.to_report() for m in matches]
        print(f"direct_match_seconds={t3 - t2:.2f} same_matches={same}")
    for m in matches:
        print(f"  {m.role:7s} {m.rule_id:40s} nodes={len(m.nodes)}")


if __name__ == "__main__":
    main()
