"""Cross-job filtering: frequent baseline templates dropped, rare ones and bursts kept."""

from __future__ import annotations

import math

import pytest

from l4_plugin.analysis.crossjob import CrossJobFilter
from l4_plugin.analysis.results import BaselineStat, JobTemplateStat
from l4_plugin.errors import AnalysisError

BASELINE = {
    "iter-line": BaselineStat(jobs=4, total_jobs=4, node_fraction=1.0, rate=100.0),
    "benign-warn": BaselineStat(jobs=4, total_jobs=4, node_fraction=0.5, rate=2.0),
    "rare-retry": BaselineStat(jobs=1, total_jobs=4, node_fraction=0.01, rate=0.01),
}


def _job(**rates: float) -> list[JobTemplateStat]:
    return [JobTemplateStat(t.replace("_", "-"), int(r * 10), 10, r) for t, r in rates.items()]


def test_frequent_dropped_absent_and_rare_kept() -> None:
    res = (
        CrossJobFilter()
        .fit(BASELINE)
        .transform(_job(iter_line=90.0, benign_warn=2.5, rare_retry=0.02, ib_error=0.3))
    )
    assert not res.no_baseline
    assert {d.template_id for d in res.dropped} == {"iter-line", "benign-warn"}
    assert res.reason_of("ib-error") == "absent-in-baseline"
    assert res.reason_of("rare-retry") == "rare-in-baseline"
    assert res.reason_of("iter-line") is None
    assert all(d.reason == "frequent-in-baseline" for d in res.dropped)
    assert math.isinf(next(k for k in res.kept if k.template_id == "ib-error").rate_ratio)


def test_burst_of_baseline_template_is_kept() -> None:
    res = (
        CrossJobFilter(burst_factor=10.0)
        .fit(BASELINE)
        .transform(_job(benign_warn=500.0, iter_line=100.0))
    )
    kept = {k.template_id: k for k in res.kept}
    assert kept["benign-warn"].reason == "burst-vs-baseline"
    assert kept["benign-warn"].rate_ratio == pytest.approx(250.0)
    assert "iter-line" not in kept


def test_small_burst_needs_min_count() -> None:
    # rate 20x the baseline but only 2 occurrences: noise, not a burst.
    stat = [JobTemplateStat("benign-warn", 2, 1, 40.0)]
    res = CrossJobFilter(min_burst_count=5).fit(BASELINE).transform(stat)
    assert res.kept == ()


def test_threshold_controls_frequent() -> None:
    strict = CrossJobFilter(threshold=0.2).fit(BASELINE).transform(_job(rare_retry=0.01))
    assert [d.template_id for d in strict.dropped] == ["rare-retry"]


def test_min_baselines() -> None:
    one = {"x": BaselineStat(jobs=1, total_jobs=1, node_fraction=1.0, rate=1.0)}
    assert CrossJobFilter(min_baselines=2).fit(one).transform(_job(x=1.0)).reason_of("x") == (
        "rare-in-baseline"
    )
    assert CrossJobFilter(min_baselines=1).fit(one).transform(_job(x=1.0)).kept == ()


def test_no_baseline_keeps_all() -> None:
    res = CrossJobFilter().fit({}).transform(_job(a=1.0, b=2.0))
    assert res.no_baseline
    assert [k.template_id for k in res.kept] == ["a", "b"]
    assert {k.reason for k in res.kept} == {"no-baseline"}
    assert res.dropped == ()


def test_errors() -> None:
    with pytest.raises(AnalysisError, match="threshold must be in"):
        CrossJobFilter(threshold=0.0).fit(BASELINE)
    with pytest.raises(AnalysisError, match="call fit"):
        CrossJobFilter().transform([])
    with pytest.raises(AnalysisError, match="disagree on total_jobs"):
        CrossJobFilter().fit({"a": BaselineStat(1, 2, 1.0, 1.0), "b": BaselineStat(1, 3, 1.0, 1.0)})
    with pytest.raises(AnalysisError, match="inconsistent"):
        CrossJobFilter().fit({"a": BaselineStat(5, 2, 1.0, 1.0)})
    with pytest.raises(AnalysisError, match="given twice"):
        CrossJobFilter().fit(BASELINE).transform(_job(a=1.0) + _job(a=2.0))
