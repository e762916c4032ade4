"""Silent nodes: a hung rank stops logging; its peers go on printing watchdog timeouts."""

from __future__ import annotations

from dataclasses import replace

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


def test_a_node_its_peers_name_is_silent_when_a_witness_spoke_after_its_last_line() -> None:
    # A node crashed (a machine check) 30 s after its last step line. Its peers' NCCL warnings
    # name its address; they have no stamp of their own and took each witness's last step
    # line's, one a second before the dead node's own, the other two after it: a witness spoke
    # after the node went quiet, and the node is as silent as one lost an hour before.
    from l4_plugin.analysis.evidence import event_stats
    from l4_plugin.analysis.params import DEFAULT_OPTIONS
    from l4_plugin.analysis.peers import NamedNode, PeerResult
    from l4_plugin.analysis.recipe import _silence
    from l4_plugin.analysis.tables import Cell, JobData, JobDoc, TemplateInfo

    t0 = 1_748_842_262.0
    nodes = ["a", "b", "c", "dead"]
    cells = {(n, "step"): Cell(12, t0 - 600.0, t0 + (1.0 if n != "dead" else 0.0)) for n in nodes}
    for n, at in (("a", t0 - 1.3), ("b", t0 + 1.0), ("c", t0 + 2.3)):
        cells[(n, "peer")] = Cell(1, at, at)
        cells[(n, "wd")] = Cell(1, t0 + 38.0, t0 + 38.0)
    data = JobData(
        job=JobDoc("j", "failed", "fp", tuple(nodes), 100, t0 - 600.0, t0 + 40.0),
        time_unit="ts",
        cells=cells,
        templates={
            "step": TemplateInfo("step: <NUM> loss: <NUM>"),
            "peer": TemplateInfo(
                "NCCL WARN NET/IB : Got completion from peer <IP><<NUM>> with status=12"
            ),
            "wd": TemplateInfo("Process group watchdog thread terminated with exception"),
        },
        stage_spans={},
        iteration_cells={},
        iteration_spans={},
        node_iteration_start={},
        node_last_iteration={},
    )
    peers = PeerResult(
        named=(NamedNode("dead", ("a", "b", "c"), ("peer",), 1.0),),
        witnesses={"a": ("dead",), "b": ("dead",), "c": ("dead",)},
        addresses=4,
    )
    events = event_stats(data)
    result = _silence(data, events, nodes, frozenset(), peers, DEFAULT_OPTIONS)
    assert [s.node for s in result.silent] == ["dead"]
    # every witness before its last line: it went on after them, no sign it died
    early = {k: (Cell(1, t0 - 5.0, t0 - 5.0) if k[1] == "peer" else c) for k, c in cells.items()}
    quiet = _silence(replace(data, cells=early), events, nodes, frozenset(), peers, DEFAULT_OPTIONS)
    assert "dead" not in [s.node for s in quiet.silent]
