"""Packed rollups (store/packs.py) read back as the documents they replace.

Each job is ingested twice into its own indices: once as shipped (the healthy majority's rollups
packed) and once with packing off (``MAX_PACK_NODES = 1``: one document per node, as before
packs). Every table the diagnosis reads, the rule engine's silence facts and the diagnosis itself
must be the same; only the documents differ.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from l4_plugin.diagnosis import diagnose_job
from l4_plugin.diagnosis.queries import read_job, read_job_tables
from l4_plugin.ingest import documents
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.rules.engine import JobFacts, compile_rule, match_job
from l4_plugin.rules.loader import load_rules
from l4_plugin.store import Store, packs
from l4_plugin.store import fields as F
from l4_simulate import simulate


def _ingest(store: Store, job: Path, monkeypatch: pytest.MonkeyPatch, pack: bool) -> None:
    with monkeypatch.context() as m:
        if not pack:
            m.setattr(packs, "MAX_PACK_NODES", 1)
        ingest_job(store, job, job_id="j", workers=1)


def _events(store: Store) -> list[dict[str, Any]]:
    res = store.search(store.names.events, {"size": 10_000, "query": {"match_all": {}}})
    return [h["_source"] for h in res["hits"]["hits"]]


def _tables(store: Store) -> dict[str, Any]:
    data = read_job_tables(store, read_job(store, "j"))
    return {f.name: getattr(data, f.name) for f in dataclasses.fields(data) if f.name != "job"}


@pytest.mark.parametrize("fault", ["hang", "nccl-ib-error"])
def test_packed_rollups_read_back_as_one_document_per_node(
    store: Store, es_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    simulate(tmp_path, nodes=8, iterations=60, fault=fault, seed=11, baselines=0)
    job = tmp_path / "job"
    _ingest(store, job, monkeypatch, pack=True)
    _ingest(es_store, job, monkeypatch, pack=False)

    packed, plain = _events(store), _events(es_store)
    assert not any(F.NODES in d for d in plain)
    shared = [d for d in packed if F.NODES in d]
    assert shared and len(packed) < len(plain) / 2  # the healthy majority is written once
    # Per node, the counts a terms aggregation sums are the same (host.name is multi-valued).
    assert sum(d[F.COUNT] * d.get(F.NODES, 1) for d in packed) == sum(d[F.COUNT] for d in plain)
    assert sum(d[F.COUNT_ALL] for d in packed) == sum(d[F.COUNT_ALL] for d in plain)

    assert _tables(store) == _tables(es_store)
    facts, facts_plain = JobFacts(store, "j"), JobFacts(es_store, "j")
    assert facts.node_last_ts() == facts_plain.node_last_ts()
    gaps = (1.0, 20.0, 600.0)
    for gap in gaps:
        assert facts.silent_nodes(gap) == facts_plain.silent_nodes(gap)
    assert any(facts.silent_nodes(gap) for gap in gaps)  # quiet nodes found through packs

    def report(s: Store) -> dict[str, Any]:
        out: dict[str, Any] = diagnose_job(s, "j", write=False).report.to_json()
        out.pop("timings", None)
        return out

    assert report(store) == report(es_store)


def test_folded_lines_count_as_the_raw_lines_they_stand_for(
    store: Store, es_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rank of nearly every node prints the watchdog cascade: folded, each node writes one
    line per template; the rules see the same counts and times as with every line written."""
    # 29 of the 32 nodes print the cascade: a majority (documents.MAJORITY).
    simulate(tmp_path, nodes=32, iterations=30, fault="nccl-ib-error", seed=11, baselines=0)
    job = tmp_path / "job"
    ingest_job(store, job, job_id="j", workers=1)
    with monkeypatch.context() as m:
        m.setattr(documents, "_fold_ranks", lambda docs: docs)
        ingest_job(es_store, job, job_id="j", workers=1)
    folded, plain = store.count(store.names.lines), es_store.count(es_store.names.lines)
    assert folded < 0.6 * plain

    rules = load_rules()

    def facts(s: Store) -> dict[str, Any]:
        f = JobFacts(s, "j")
        f.resolve_messages(rules)
        queries = {
            f"{rule.id}.{name}": q for rule in rules for name, q in compile_rule(f, rule)[0].items()
        }
        return f.node_facts(queries)

    seen = facts(store)
    assert seen == facts(es_store)
    assert any(
        c.count > 1 for per in seen.values() for k, c in per.items() if k.endswith(".watchdog")
    )

    def matches(s: Store) -> list[tuple[Any, ...]]:
        return [
            (m.rule_id, m.nodes, m.counts, m.node_counts, m.first_ts, m.diagnosis)
            for m in match_job(s, "j", rules)
        ]

    assert matches(store) == matches(es_store)


def test_packs_read_for_a_few_nodes_are_those_of_every_pack_kept_for_them(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_packs(..., nodes=...)`` asks the cluster only for the packs holding those nodes:
    their members are those of reading every pack, kept for those nodes, in the same order."""
    simulate(tmp_path, nodes=8, iterations=60, fault="nccl-ib-error", seed=11, baselines=0)
    _ingest(store, tmp_path / "job", monkeypatch, pack=True)
    query = {"term": {F.JOB_ID: "j"}}
    every = packs.read_packs(store, store.names.events, query, messages=True)
    nodes = sorted({m.node for m in every})
    tids = sorted({m.template_id for m in every})
    assert len(nodes) >= 4 and tids
    for few in ([nodes[0]], nodes[1:4], [nodes[-1], "no-such-node"], nodes, ["no-such-node"]):
        for templates in (tids, tids[:1]):
            want = [m for m in every if m.node in few and m.template_id in templates]
            got = packs.read_packs(
                store, store.names.events, query, messages=True, templates=templates, nodes=few
            )
            assert [m for m in got if m.node in few] == want
            assert len(got) < len(every) or few == nodes
    assert packs.read_packs(store, store.names.events, query, nodes=[]) == []
