"""The typed report: one ``to_json`` (key order is the contract), and ``from_json`` its inverse."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

import pytest

from l4_plugin.diagnosis.assembly import findings
from l4_plugin.diagnosis.storage import summary_text
from l4_plugin.records import Verdict
from l4_plugin.report.attempts import ReportAttempt, ReportAttempts
from l4_plugin.report.hangs import (
    ReportCollective,
    ReportHang,
    ReportRank,
    ReportStackGroup,
    ReportStacks,
)
from l4_plugin.report.model import (
    Report,
    ReportEvent,
    ReportFiltering,
    ReportIteration,
    ReportNode,
    ReportRuleMatch,
    ReportSlowdown,
    ReportSpatial,
    ReportStraggler,
)

# The report's sections, in the order ``l4 diagnose --json`` writes them.
REPORT_KEYS = [
    "job_id",
    "status",
    "stage",
    "baseline_jobs",
    "rule_matches",
    "events",
    "nodes",
    "iterations",
    "silent_nodes",
    "verdict",
    "hang",
    "attempts",
    "stragglers",
    "slowdown",
    "lagging_nodes",
    "filtering",
    "spatial",
    "notes",
    "time_unit",
    "analyzer_version",
    "timings",
]
EVENT_KEYS = [
    "template_id",
    "template",
    "sample",
    "sample_node",
    "score",
    "nodes",
    "count",
    "first_seen",
    "level",
    "stage",
    "reasons",
]


def full_hang() -> ReportHang:
    """A ``hang`` section with every field set."""
    odd = ReportStackGroup("barrier (torch/distributed/distributed_c10d.py)", (3,), ("n2",))
    return ReportHang(
        collectives=(
            ReportCollective(
                attempt=1,
                process_group="default_pg",
                kind="mismatch",
                seq=48,
                op="nccl:all_reduce",
                summary="default_pg: collective #48 (nccl:all_reduce); in another op: 3",
                ranks_in_op=(0, 1),
                ranks_in_other_op=((3, "nccl:barrier"),),
                ranks_other_shape=((2, '[[4]]->[[4]] ["Float"]->["Float"]'),),
                ranks_behind=(4,),
                ranks_without_dump=(5,),
                culprits=(3,),
                culprit_nodes=("n2",),
                ranks=(ReportRank(3, "n2", 48, "nccl:barrier", "started"),),
            ),
        ),
        stacks=(
            ReportStacks(
                1,
                (
                    ReportStackGroup(
                        "all_reduce (torch/distributed/distributed_c10d.py)", (0, 1), ("n1",)
                    ),
                    odd,
                ),
                odd,
                ("barrier (torch/distributed/distributed_c10d.py:5356)",),
            ),
        ),
        nodes=("n2",),
        category="user/code",
        why="ranks called different collectives at #48",
        problems=("dump n2/fr/trace_9 not read: not a plain pickle",),
    )


def full_report() -> Report:
    """A report with every field set to something other than its empty value."""
    return Report(
        job_id="job-1",
        status="failed",
        stage="training",
        baseline_jobs=("base-1", "base-2"),
        rule_matches=(
            ReportRuleMatch(
                rule="nccl-ib-completion-error",
                title="IB completion error",
                category="hardware/network",
                severity="critical",
                role="cause",
                confidence=0.9,
                nodes=("n3",),
                first_seen="2024-08-05T09:39:59.421000+00:00",
                counts={"n3": 4},
                samples={"n3": ({"message": "NET/IB : Got completion with error 12"},)},
                diagnosis="IB errors on n3",
                remediation="drain n3",
                references=("https://example.org/ib",),
            ),
        ),
        events=(
            ReportEvent(
                template_id="t1",
                template="NET/IB : Got completion with error <*>",
                sample="NET/IB : Got completion with error 12",
                sample_node="n3",
                score=0.9731,
                nodes=("n3", "n4"),
                count=17,
                first_seen="2024-08-05T09:39:59.421+00:00",
                level="WARN",
                stage="training",
                reasons=("spatial", "earliest-evidence"),
            ),
        ),
        nodes=(ReportNode("n3", 0.88, ("t1",), ("spatial-outlier",)),),
        iterations=(
            ReportIteration(511, 1.0, "slowdown", None, None, ("t1",), ("t8",), slowdown=1.8),
            ReportIteration(530, 0.5, "dtw", 3.25, 1.5, ("t1",), ("t9",)),
        ),
        silent_nodes=("n5",),
        verdict=Verdict(
            "hardware/network", "infrastructure", ("n3",), "after-eviction", 0.85, ("rule x",)
        ),
        hang=full_hang(),
        attempts=ReportAttempts(
            lead=0,
            why="attempt 0 is the last that got past start-up",
            bound=("n2",),
            note="n2 is the culprit in every attempt (0, 1)",
            attempts=(
                ReportAttempt(
                    0,
                    "training",
                    "user/code",
                    ("n2",),
                    ("n1", "n2"),
                    "2024-08-05T09:00:00+00:00",
                    "2024-08-05T09:39:59+00:00",
                ),
            ),
        ),
        stragglers=(ReportStraggler("n4", 500, 1.4),),
        slowdown=ReportSlowdown(511, 0.52, 1.8, ("t1",), ("n3",)),
        lagging_nodes=("n5",),
        filtering=ReportFiltering(True, 59, 24, 35, 5090),
        spatial=ReportSpatial(True, "combined", ("n3",)),
        notes=("a note",),
        time_unit="line position",  # not the default, so a dropped key shows
        analyzer_version="l4-0.2.0",
        timings={"analyse": 1.25},
    )


def test_round_trip_through_json_text() -> None:
    report = full_report()
    text = json.dumps(report.to_json(), indent=2, ensure_ascii=False)
    assert Report.from_json(json.loads(text)) == report
    # And the JSON of the read-back report is the same bytes (``l4 report --json``).
    assert json.dumps(Report.from_json(json.loads(text)).to_json(), indent=2) == json.dumps(
        report.to_json(), indent=2
    )


def _records(value: Any) -> list[Any]:
    """``value`` and every record inside it."""
    if isinstance(value, tuple):
        return [r for v in value for r in _records(v)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [value] + [
            r for f in dataclasses.fields(value) for r in _records(getattr(value, f.name))
        ]
    return []


def _empty_fields(report: Report) -> list[str]:
    """Fields left at an empty value anywhere in ``report``: they would not catch a drop."""
    empty = []
    for record in _records(report):
        for f in dataclasses.fields(record):
            value = getattr(record, f.name)
            if isinstance(record, ReportIteration) and f.name in ("distance", "threshold"):
                value = value if record.why == "dtw" else 0.0  # a slowdown entry has none
            if isinstance(record, ReportIteration) and f.name == "slowdown":
                value = value if record.why == "slowdown" else 0.0  # only a slowdown entry has it
            if value is None or value == "" or value == () or value == {}:
                empty.append(f"{type(record).__name__}.{f.name}")
    return empty


def test_a_dropped_field_breaks_the_round_trip() -> None:
    # Every field of the fixture is set, so a field that to_json forgets (or from_json does not
    # read back) comes back empty and the round trip above fails; this keeps the fixture honest.
    report = full_report()
    assert _empty_fields(report) == []
    # And every field is written under its own name, in the contract's order.
    assert list(report.to_json()) == REPORT_KEYS == [f.name for f in dataclasses.fields(Report)]
    assert list(report.events[0].to_json()) == EVENT_KEYS
    for part in (
        report.events[0],
        report.nodes[0],
        report.rule_matches[0],
        report.stragglers[0],
        report.slowdown,
        report.filtering,
        report.spatial,
        report.verdict,
        report.hang,
        report.hang and report.hang.collectives[0],
        report.hang and report.hang.collectives[0].ranks[0],
        report.hang and report.hang.stacks[0],
        report.hang and report.hang.stacks[0].odd,
        report.attempts,
        report.attempts and report.attempts.attempts[0],
    ):
        assert part is not None
        assert list(part.to_json()) == [f.name for f in dataclasses.fields(part)]


@pytest.mark.parametrize(
    "drop", [f.name for f in dataclasses.fields(Report) if f.name not in ("job_id", "status")]
)
def test_each_dropped_key_is_noticed(drop: str) -> None:
    raw = full_report().to_json()
    del raw[drop]
    assert Report.from_json(raw) != full_report()


def test_iteration_keys_follow_their_kind() -> None:
    slow, dtw = full_report().iterations
    assert list(slow.to_json()) == [
        "iteration",
        "score",
        "why",
        "distance",
        "threshold",
        "slowdown",
        "events",
        "missing_events",
    ]
    assert "slowdown" not in dtw.to_json()


def test_numbers_keep_their_json_type() -> None:
    raw = full_report().to_json()
    raw["rule_matches"][0]["confidence"] = 1
    assert json.dumps(Report.from_json(raw).to_json()) == json.dumps(raw)


def test_a_report_without_dumps_or_restarts_has_no_key_for_them() -> None:
    # A job whose ranks left no traces or stacks keeps the JSON it always had.
    raw = dataclasses.replace(full_report(), hang=None, attempts=None).to_json()
    assert "hang" not in raw and "attempts" not in raw
    assert list(raw) == [k for k in REPORT_KEYS if k not in ("hang", "attempts")]
    assert Report.from_json(raw).hang is None and Report.from_json(raw).attempts is None


def test_a_stored_report_without_newer_sections_reads() -> None:
    report = Report.from_json({"job_id": "old", "status": "failed", "stage": "training"})
    assert report.verdict is None and report.slowdown is None and report.events == ()
    assert report.filtering == ReportFiltering()
    assert summary_text(report) == "job old (failed) stopped in stage training"
    assert [f.kind for f in findings(report, [])] == ["stage"]


def test_findings_read_the_typed_report() -> None:
    kinds = [f.kind for f in findings(full_report(), [])]
    assert kinds == ["event", "node", "iteration", "iteration", "verdict", "stage"]
    slow = next(f for f in findings(full_report(), []) if f.kind == "iteration")
    assert "1.80× slower from iteration 511" in slow.explanation


def test_report_is_frozen_and_typed() -> None:
    report = full_report()
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.job_id = "other"  # type: ignore[misc]
    hints = typing.get_type_hints(Report)
    assert hints["events"] == tuple[ReportEvent, ...]
    assert hints["verdict"] == Verdict | None
