"""Silent nodes: a hung rank stops logging; its peers go on printing watchdog timeouts."""

from __future__ import annotations

import numpy as np
import pytest

from l4_plugin.analysis.silence import SilenceDetector
from l4_plugin.errors import AnalysisError

NODES = [f"n{i}" for i in range(16)]
TEMPLATES = ["iter-line", "watchdog-timeout", "init-done"]


def _hang(silent: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    last_ts = 1000.0 + 600.0 + rng.uniform(0, 5, len(NODES))  # peers: watchdog ~10 min later
    last_it = np.full(len(NODES), 120.0)
    seen = np.empty((len(NODES), len(TEMPLATES)))
    seen[:, 0] = 1000.0 + rng.uniform(0, 3, len(NODES))
    seen[:, 1] = last_ts
    seen[:, 2] = 10.0
    last_ts[silent] = 1000.5
    seen[silent, 1] = np.nan
    return last_ts, last_it, seen


def test_hung_node_found_with_what_it_did_not_print() -> None:
    last_ts, last_it, seen = _hang()
    det = SilenceDetector().fit(NODES, last_ts, last_it, seen, TEMPLATES)
    res = det.result_
    assert res.nodes == ("n5",)
    s = res.silent[0]
    assert s.missing_new == ("watchdog-timeout",)
    assert s.missing_periodic == ()  # peers' iteration lines stopped too (collective blocked)
    assert s.lag_seconds is not None and s.lag_seconds > 500
    assert 0.5 < s.score <= 1.0
    assert det.score_samples().shape == (len(NODES),)
    assert int(np.argmin(det.score_samples())) == 5


def test_dead_node_misses_periodic_lines() -> None:
    last_ts = np.array([5000.0] * 7 + [2000.0])
    last_it = np.array([500.0] * 7 + [200.0])
    seen = np.array([[5000.0]] * 7 + [[2000.0]])
    res = SilenceDetector().fit(NODES[:8], last_ts, last_it, seen, ["iter-line"]).result_
    assert res.nodes == ("n7",)
    assert res.silent[0].missing_periodic == ("iter-line",)
    assert res.silent[0].lag_iterations == pytest.approx(300.0)


def test_small_skew_is_tolerated() -> None:
    rng = np.random.default_rng(1)
    last_ts = 1000.0 + rng.uniform(0, 20, len(NODES))
    last_it = np.array([100.0] * 15 + [99.0])  # one iteration behind: ordinary skew
    assert SilenceDetector().fit(NODES, last_ts, last_it).result_.silent == ()


def test_global_stop_has_no_silent_node() -> None:
    assert SilenceDetector().fit(NODES, np.full(len(NODES), 7.0)).result_.silent == ()


def test_two_nodes_leave_one_out() -> None:
    res = SilenceDetector().fit(["a", "b"], [1000.0, 100.0]).result_
    assert res.nodes == ("b",)


def test_iteration_only() -> None:
    it = np.array([300.0] * 9 + [250.0])
    res = SilenceDetector().fit(NODES[:10], last_iteration=it).result_
    assert res.nodes == ("n9",)
    assert res.silent[0].last_ts is None


def test_errors() -> None:
    with pytest.raises(AnalysisError, match="last_ts or last_iteration"):
        SilenceDetector().fit(NODES)
    with pytest.raises(AnalysisError, match="one value per node"):
        SilenceDetector().fit(NODES, [1.0, 2.0])
    with pytest.raises(AnalysisError, match="no nodes"):
        SilenceDetector().fit([], [])
    with pytest.raises(AnalysisError, match="needs the template ids"):
        SilenceDetector().fit(NODES[:2], [1.0, 2.0], last_seen=[[1.0], [2.0]])
    with pytest.raises(AnalysisError, match="needs last_ts"):
        SilenceDetector().fit(NODES[:2], None, [1.0, 2.0], [[1.0], [2.0]], ["t"])
    with pytest.raises(AnalysisError, match="call fit"):
        SilenceDetector().score_samples()
