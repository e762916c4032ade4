"""Stages, DTW iteration analysis (hung iteration, new events) and stragglers."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest

from l4_plugin.analysis.dtw import dtw_pairs
from l4_plugin.analysis.results import StageSpan
from l4_plugin.analysis.temporal import (
    IterationAnalyzer,
    SlowdownDetector,
    StageAnalyzer,
    StragglerDetector,
    iteration_at,
)
from l4_plugin.errors import AnalysisError

NORMAL = ["fwd", "bwd", "allreduce", "optim", "iter-line"]


def _run(n: int = 60) -> list[list[str]]:
    return [list(NORMAL) for _ in range(n)]


# --- stages --------------------------------------------------------------------------------------


def _spans() -> list[StageSpan]:
    spans = []
    for k in range(4):
        node = f"n{k}"
        spans += [StageSpan(node, "init", 0, 10), StageSpan(node, "data_loading", 11, 20)]
        if k != 3:
            spans.append(StageSpan(node, "training", 21, 500 + k))
    return spans


def test_stage_failing_and_lagging() -> None:
    res = StageAnalyzer().fit(_spans()).result_
    assert res.stage == "training"
    assert res.order == ("init", "data_loading", "training")
    assert res.lagging == ("n3",)
    assert {n.node: n.last_stage for n in res.nodes}["n3"] == "data_loading"


def test_stage_given_order_wins_and_empty() -> None:
    order = ("data_loading", "init", "training")
    assert StageAnalyzer(order=order).fit(_spans()).result_.order == order
    empty = StageAnalyzer().fit([]).result_
    assert empty.stage is None and empty.nodes == ()


def test_stage_errors() -> None:
    with pytest.raises(AnalysisError, match="last must be >= first"):
        StageAnalyzer().fit([StageSpan("n", "init", 5, 1)])
    with pytest.raises(AnalysisError, match="twice"):
        StageAnalyzer(order=["a", "a"]).fit([])


# --- iterations ----------------------------------------------------------------------------------


def test_hung_last_iteration_is_suspect() -> None:
    seqs = _run()
    seqs[-1] = ["fwd", "bwd"]  # starts normally, never ends
    res = IterationAnalyzer().fit(seqs, list(range(100, 160))).result_
    assert [s.iteration for s in res.suspects] == [159]
    hung = res.suspects[0]
    assert hung.missing_events == ("allreduce", "iter-line", "optim")
    assert hung.new_events == ()
    assert hung.distance == pytest.approx(np.sqrt(6.0))
    assert res.score_of(159) == 1.0 and res.score_of(100) == 0.0


def test_iteration_with_new_event() -> None:
    seqs = _run()
    seqs[40] = ["fwd", "bwd", "nccl-error", "allreduce", "optim", "iter-line"]
    res = IterationAnalyzer().fit(seqs).result_
    assert res.suspects[0].iteration == 40
    assert res.suspects[0].new_events == ("nccl-error",)


def test_regular_run_has_no_suspect_and_recurring_pattern_is_known() -> None:
    assert IterationAnalyzer().fit(_run()).result_.suspects == ()
    seqs = _run(80)
    for k in (20, 40, 60):
        seqs[k] = [*NORMAL, "checkpoint-saved"]
    assert [s.iteration for s in IterationAnalyzer().fit(seqs).result_.suspects] == [20]
    plain = IterationAnalyzer(recurring_ok=False).fit(seqs).result_
    assert [s.iteration for s in plain.suspects][:1] == [20] and len(plain.suspects) >= 2


def test_counts_mode() -> None:
    c = np.tile(np.array([[1.0, 1.0, 4.0, 0.0]]), (30, 1))
    c[-1] = [1.0, 0.0, 0.0, 0.0]
    res = IterationAnalyzer().fit_counts(c, templates=["a", "b", "c", "d"]).result_
    assert [s.iteration for s in res.suspects] == [29]
    assert res.suspects[0].missing_events == ("b", "c")


def test_iteration_errors() -> None:
    with pytest.raises(AnalysisError, match="window must be"):
        IterationAnalyzer(window=0).fit(_run())
    with pytest.raises(AnalysisError, match="unknown backend"):
        IterationAnalyzer(backend="cuda").fit(_run())
    with pytest.raises(AnalysisError, match="no iterations"):
        IterationAnalyzer().fit([])
    with pytest.raises(AnalysisError, match="strictly increasing"):
        IterationAnalyzer().fit(_run(3), [1, 1, 2])
    with pytest.raises(AnalysisError, match="iteration numbers for"):
        IterationAnalyzer().fit(_run(3), [1, 2])
    with pytest.raises(AnalysisError, match="non-negative 2-D"):
        IterationAnalyzer().fit_counts([1.0, 2.0])


@pytest.fixture(scope="module")
def tslearn_warm() -> Iterator[None]:
    """Pay tslearn's numba compilation once for the module, not per test."""
    dtw_pairs([[0, 1], [1]], [(0, 1)], backend="tslearn")
    yield


@pytest.mark.usefixtures("tslearn_warm")
def test_numpy_dtw_equals_tslearn() -> None:
    rng = np.random.default_rng(0)
    seqs = [list(rng.integers(0, 6, int(rng.integers(0, 12)))) for _ in range(25)]
    pairs = [(i, j) for i in range(25) for j in range(25)]
    a = dtw_pairs(seqs, pairs, backend="numpy")
    b = dtw_pairs(seqs, pairs, backend="tslearn")
    assert np.allclose(a, b)
    assert a[pairs.index((3, 3))] == 0.0


@pytest.mark.usefixtures("tslearn_warm")
def test_iteration_backends_agree() -> None:
    seqs = _run()
    seqs[-1] = ["fwd"]
    a = IterationAnalyzer(backend="numpy").fit(seqs).result_
    b = IterationAnalyzer(backend="tslearn").fit(seqs).result_
    assert a.iterations == b.iterations


# --- stragglers ----------------------------------------------------------------------------------


def test_straggler_from_iteration_30() -> None:
    rng = np.random.default_rng(0)
    d = 10.0 + rng.normal(0, 0.1, (32, 60))
    d[9, 30:] *= 1.5
    d[3, 12] *= 2.0  # a one-off hiccup, not sustained
    res = StragglerDetector().fit(d, [f"n{i}" for i in range(32)], list(range(1000, 1060))).result_
    assert [(s.node, s.first_iteration) for s in res.stragglers] == [("n9", 1030)]
    assert res.stragglers[0].slowdown == pytest.approx(1.5, rel=0.05)


def test_no_straggler_with_jitter_or_two_nodes() -> None:
    rng = np.random.default_rng(2)
    d = 10.0 + rng.normal(0, 0.1, (16, 50))
    assert StragglerDetector().fit(d, [f"n{i}" for i in range(16)]).result_.stragglers == ()
    two = np.array([[10.0] * 10, [20.0] * 10])
    assert StragglerDetector().fit(two, ["a", "b"]).result_.stragglers == ()


def test_iterations_no_node_timed_are_skipped_quietly() -> None:
    # torchrun's stdout alone: most iterations carry no node's time; a column of NaN has no
    # median (numpy warns of it, an error under this suite) and singles out nobody.
    rng = np.random.default_rng(3)
    d = 10.0 + rng.normal(0, 0.1, (4, 12))
    d[:, 3:9] = np.nan
    d[2, 9:] *= 1.8
    res = StragglerDetector(sustain=3).fit(d, ["a", "b", "c", "d"]).result_
    assert [(s.node, s.first_iteration) for s in res.stragglers] == [("c", 9)]


def test_straggler_errors() -> None:
    with pytest.raises(AnalysisError, match="nodes × iterations"):
        StragglerDetector().fit(np.ones((3, 4)), ["a", "b"])
    with pytest.raises(AnalysisError, match="non-negative"):
        StragglerDetector().fit(-np.ones((3, 4)), ["a", "b", "c"])
    with pytest.raises(AnalysisError, match="sustain"):
        StragglerDetector(sustain=0).fit(np.ones((3, 4)), ["a", "b", "c"])


def test_job_slowdown_onset() -> None:
    rng = np.random.default_rng(3)
    secs = list(2.3 * (1 + rng.uniform(-0.03, 0.03, 40)))
    secs[10] *= 2.5  # a checkpoint save: one slow bucket is not a slowdown
    for k in range(25, 40):
        secs[k] *= 1.0 + 0.35 * (k - 24)
    res = SlowdownDetector().fit(secs, list(range(15001, 15041))).result_
    assert res is not None and res.first_iteration == 15026
    assert res.reference == pytest.approx(2.3, rel=0.05) and res.ratio > 2.5


def test_slowdown_up_to_the_end_and_none() -> None:
    its = list(range(20))
    steady = [1.0] * 20
    assert SlowdownDetector().fit(steady, its).result_ is None
    # slow for the last two buckets only: the job slowed and then failed
    assert SlowdownDetector().fit([1.0] * 18 + [2.0, 2.2], its).result_.first_iteration == 18
    # the last bucket alone is not enough, and neither is a gentle drift
    assert SlowdownDetector().fit([1.0] * 19 + [3.0], its).result_ is None
    assert SlowdownDetector().fit([1.0 + 0.01 * k for k in its], its).result_ is None
    # unknown durations are skipped, not read as zero
    nan = [1.0, float("nan"), 1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    assert SlowdownDetector().fit(nan, list(range(8))).result_.first_iteration == 5
    with pytest.raises(AnalysisError, match="ratio must be > 1"):
        SlowdownDetector(ratio=1.0).fit(steady, its)
    with pytest.raises(AnalysisError, match="iteration numbers"):
        SlowdownDetector().fit(steady, its[:3])


# A job printing its progress every 10 iterations, 5 s each: iteration lines 100..290.
_STARTS = {b: 1000.0 + 5.0 * b for b in range(100, 300, 10)}
_SPANS = dict.fromkeys(_STARTS, 10)


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        (_STARTS[290] + 2.0, 291),  # during the iteration after the last line
        (_STARTS[290] + 12.0, 293),  # three iterations on
        (_STARTS[290] + 49.0, 300),  # the last before the next line was due
        (_STARTS[290] + 53.0, 300),  # a little past it (a pace of medians): still the last
        (_STARTS[290] + 56.0, 291),  # an iteration past it: only "past 290"
        (_STARTS[290] + 1800.0, 291),  # a timeout long after the job stopped: only "past 290"
        (_STARTS[290] - 1.0, 290),  # before the line (another host's clock): the bucket
        (math.inf, 290),  # no time
    ],
)
def test_iteration_at_follows_the_jobs_pace(t: float, expected: int) -> None:
    assert iteration_at(_STARTS, _SPANS, 290, t) == expected


def test_iteration_at_without_a_pace_is_the_bucket() -> None:
    assert iteration_at({290: 2450.0}, {290: 10}, 290, 2460.0) == 290
    assert iteration_at({}, {}, 290, 2460.0) == 290
