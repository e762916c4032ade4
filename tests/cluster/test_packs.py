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
from l4_plugin.diagnosis.queries import read_job_tables
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.rules.engine import JobFacts
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
    data = read_job_tables(store, "j")
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
