"""Benchmark: match the whole fault library against a 1,000-node job on an embedded osmem-server.

Run: ``python benchmarks/bench_rules.py [--nodes 1000] [--lines 50]``. Prints the ingest time and
the matching time (target: matching <= 5 s).
"""

from __future__ import annotations

import argparse
import time

from l4_plugin.rules import load_rules, match_job
from l4_plugin.rules.testing import line_docs
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
    args = parser.parse_args()
    rules = load_rules()
    with EmbeddedCluster() as cluster:
        store = OpenSearchStore(cluster.url, IndexNames("bench-l4-"))
        store.install_templates()
        t0 = time.perf_counter()
        docs = line_docs("bench-job", job_lines(args.nodes, args.lines))
        store.bulk_index(store.names.lines, docs["lines"])
        store.bulk_index(store.names.events, docs["events"])
        store.bulk_index(store.names.templates, docs["templates"])
        for index in (store.names.lines, store.names.events, store.names.templates):
            store.refresh(index)
        t1 = time.perf_counter()
        matches = match_job(store, "bench-job", rules)
        t2 = time.perf_counter()
        store.close()
    print(f"rules={len(rules)} nodes={args.nodes} lines={len(docs['lines'])}")
    print(f"ingest_seconds={t1 - t0:.2f}")
    print(f"match_seconds={t2 - t1:.2f}")
    for m in matches:
        print(f"  {m.role:7s} {m.rule_id:40s} nodes={len(m.nodes)}")


if __name__ == "__main__":
    main()
