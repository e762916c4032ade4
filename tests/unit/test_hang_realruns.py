"""The dumps of the real-run fixtures (``tests/realruns/cases``: real torch with gloo, real
py-spy) read and compared as their ``truth.json`` says the runs went: the collective where the
ranks part, who is in another op, behind or without a dump, each rank's last sequence number,
the rank whose stack stands apart, and the culprit node named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from l4_plugin.analysis import hang
from l4_plugin.ingest.dumps import read_dumps
from l4_plugin.ingest.jobdir import scan

CASES = Path(__file__).resolve().parents[1] / "realruns" / "cases"


def _truth(case: Path) -> dict[str, Any]:
    return dict(json.loads((case / "truth.json").read_text()))


ALL = sorted(p.name for p in CASES.glob("*") if (p / "truth.json").exists())
WITH_HANG = [c for c in ALL if _truth(CASES / c).get("hang")]


def _analyse(case: str) -> tuple[dict[str, Any], hang.HangResult | None]:
    job = CASES / case / "failed"
    found = scan(job)
    nodes = sorted({f.node for f in found.files})
    return _truth(CASES / case), hang.analyse(read_dumps(job, found.dumps, set(nodes)), nodes)


@pytest.mark.skipif(not WITH_HANG, reason="the real-run fixtures are not in this checkout")
@pytest.mark.parametrize("case", WITH_HANG)
def test_flight_recorder_finding_matches_the_run(case: str) -> None:
    truth, result = _analyse(case)
    assert result is not None
    for attempt, want in truth["hang"]["flight_recorder"].items():
        found = next(f for f in result.collectives if f"attempt_{f.attempt}" == attempt)
        assert found.seq == want["collective_seq_id"] and found.op == want["op"]
        assert list(found.in_op) == want["ranks_in_op"]
        assert {str(r): op for r, op in found.other_op} == want["ranks_in_other_op"]
        assert list(found.behind) == want["ranks_behind"]
        assert list(found.missing) == want["ranks_without_dump"]
        assert {str(p.rank): p.seq for p in found.positions} == want["last_seq_by_rank"]
        assert found.culprit_nodes == (truth["hang"]["culprit_host"],)


@pytest.mark.skipif(not WITH_HANG, reason="the real-run fixtures are not in this checkout")
@pytest.mark.parametrize("case", WITH_HANG)
def test_the_stack_apart_is_the_culprits(case: str) -> None:
    truth, result = _analyse(case)
    assert result is not None
    for attempt, want in truth["hang"]["stacks"].items():
        found = next(s for s in result.stacks if f"attempt_{s.attempt}" == attempt)
        assert found.odd is not None and list(found.odd.ranks) == want["odd_ranks"]
        assert found.odd.nodes == (truth["hang"]["culprit_host"],)
    assert list(result.evidence) == [truth["hang"]["culprit_host"]]


@pytest.mark.skipif(not ALL, reason="the real-run fixtures are not in this checkout")
@pytest.mark.parametrize("case", ALL)
def test_a_dump_names_the_culprit_or_no_one(case: str) -> None:
    """Wherever the dumps name a node it is the culprit (a network cut names no one)."""
    truth, result = _analyse(case)
    if result is not None and result.evidence:
        assert set(result.evidence) == set(truth["nodes"])
