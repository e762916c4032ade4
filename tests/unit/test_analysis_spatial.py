"""Spatial analysis on synthetic node × template matrices that model the hard cases."""

from __future__ import annotations

import numpy as np
import pytest

from l4_plugin.analysis.spatial import SpatialAnalyzer
from l4_plugin.errors import AnalysisError

N_NODES = 64
CULPRIT, PEER_A, PEER_B, BENIGN_WARN, BENIGN_INFO = 17, 16, 18, 40, 50


def _scenario(seed: int = 0) -> tuple[np.ndarray, list[str], list[str], list[str | None]]:
    """An IB port failure: a quiet culprit, loud ring neighbours, watchdog everywhere, noise."""
    rng = np.random.default_rng(seed)
    templates = [f"periodic-{k}" for k in range(10)] + [
        "watchdog-timeout",
        "ib-port-error",
        "ib-completion-error",
        "slow-ckpt-warn",
        "info-oddity",
    ]
    levels: list[str | None] = [*(["INFO"] * 10), "ERROR", "ERROR", "ERROR", "WARN", "INFO"]
    # Nodes log different amounts (rank 0 chattier, some ran longer): up to 4x.
    length = rng.uniform(0.5, 2.0, N_NODES)
    c = np.zeros((N_NODES, len(templates)))
    c[:, :10] = rng.poisson(100.0, (N_NODES, 10)) * length[:, None]
    c[:, 10] = 8
    c[CULPRIT, 11] = 3
    c[CULPRIT, 12] = 5
    c[[PEER_A, PEER_B], 12] = 300
    c[BENIGN_WARN, 13] = 50
    c[BENIGN_INFO, 14] = 200
    return np.round(c), [f"node-{i:02d}" for i in range(N_NODES)], templates, levels


def test_quiet_culprit_ranks_first_over_loud_neighbours() -> None:
    c, nodes, templates, levels = _scenario()
    res = SpatialAnalyzer().fit(c, nodes, templates, levels).result_
    assert res.defined and res.method == "combined"
    assert res.nodes[0].node == nodes[CULPRIT]
    assert res.suspects[0] == nodes[CULPRIT]
    assert {nodes[PEER_A], nodes[PEER_B]} <= set(res.suspects[:4])
    assert res.nodes[0].attributions[0].template_id == "ib-port-error"
    assert res.nodes[0].attributions[0].direction == "excess"
    assert all(0.0 <= n.score <= 1.0 for n in res.nodes)


def test_length_differences_alone_do_not_make_suspects() -> None:
    c, nodes, templates, levels = _scenario()
    c[5, :10] *= 6  # a node that logged 6x more of everything periodic
    res = SpatialAnalyzer().fit(c, nodes, templates, levels).result_
    assert nodes[5] not in res.suspects
    score = {n.node: n.score for n in res.nodes}
    assert score[nodes[5]] < 0.3 * score[nodes[CULPRIT]]


def test_template_weights_silence_baseline_noise() -> None:
    c, nodes, templates, levels = _scenario()
    weights = np.ones(len(templates))
    weights[[13, 14]] = 0.0  # the cross-job filter dropped the benign templates
    res = SpatialAnalyzer().fit(c, nodes, templates, levels, weights).result_
    assert nodes[BENIGN_WARN] not in res.suspects
    assert nodes[BENIGN_INFO] not in res.suspects
    assert res.nodes[0].node == nodes[CULPRIT]


def test_plain_iforest_method_available_for_ablation() -> None:
    c, nodes, templates, levels = _scenario()
    sa = SpatialAnalyzer(method="iforest", normalization="count").fit(c, nodes, templates, levels)
    res = sa.result_
    assert res.method == "iforest"
    # The reason "combined" exists: on raw counts the forest isolates long or loud nodes first.
    assert res.nodes[0].node != nodes[CULPRIT]
    assert all(n.rarity == 0.0 for n in res.nodes)
    assert all(0.0 < n.score <= 1.0 for n in res.nodes)
    assert sa.score_samples().shape == (N_NODES,)


def test_score_samples_lower_is_more_abnormal_and_shapes() -> None:
    c, nodes, templates, levels = _scenario()
    sa = SpatialAnalyzer().fit(c, nodes, templates, levels)
    s = sa.score_samples()
    assert s.shape == (N_NODES,) and sa.scores_.shape == (N_NODES,)
    assert int(np.argmin(s)) == CULPRIT
    assert np.allclose(s, 1.0 - sa.scores_)


def test_deterministic_with_random_state() -> None:
    c, nodes, templates, levels = _scenario()
    a = SpatialAnalyzer(random_state=3).fit(c, nodes, templates, levels)
    b = SpatialAnalyzer(random_state=3).fit(c, nodes, templates, levels)
    other = SpatialAnalyzer(random_state=4).fit(c, nodes, templates, levels)
    assert np.array_equal(a.iforest_scores_, b.iforest_scores_)
    assert a.result_ == b.result_
    assert not np.array_equal(a.iforest_scores_, other.iforest_scores_)


def test_identical_nodes_no_suspects() -> None:
    c = np.tile(np.array([[100.0, 5.0, 1.0]]), (8, 1))
    res = SpatialAnalyzer().fit(c, [f"n{i}" for i in range(8)], ["a", "b", "c"]).result_
    assert res.defined
    assert res.suspects == ()
    assert len({n.score for n in res.nodes}) == 1
    assert res.note


def test_one_node_is_undefined_not_a_crash() -> None:
    res = SpatialAnalyzer().fit(np.array([[3.0, 1.0]]), ["only"], ["a", "b"]).result_
    assert not res.defined
    assert res.suspects == ()
    assert [n.node for n in res.nodes] == ["only"]
    assert "two nodes" in res.note


def test_two_nodes() -> None:
    c = np.array([[100.0, 0.0], [100.0, 4.0]])
    res = SpatialAnalyzer().fit(c, ["a", "b"], ["iter", "xid"], ["INFO", "ERROR"]).result_
    assert res.nodes[0].node == "b"
    assert res.suspects == ("b",)


def test_large_matrix_finds_the_culprit() -> None:
    # 2,000 nodes × 2,000 templates (the size); its speed is measured by
    # benchmarks/bench_analysis.py, not asserted here.
    rng = np.random.default_rng(1)
    c = rng.poisson(3.0, (2000, 2000)).astype(float)
    c[:, 1500:] = 0
    c[7, 1999] = 2
    res = SpatialAnalyzer().fit(c, [f"n{i}" for i in range(2000)], [f"t{j}" for j in range(2000)])
    assert res.result_.nodes[0].node == "n7"


@pytest.mark.parametrize(
    ("kwargs", "counts", "match"),
    [
        ({"method": "pca"}, [[1.0]], "unknown method"),
        ({"normalization": "zscore"}, [[1.0]], "unknown normalization"),
        ({"iforest_weight": 2.0}, [[1.0]], "iforest_weight"),
        ({}, [1.0, 2.0], "2-D"),
        ({}, [[1.0, 2.0]], "does not match"),
        ({}, [[-1.0]], "non-negative"),
        ({}, [[float("nan")]], "finite"),
    ],
)
def test_invalid_input(kwargs: dict[str, object], counts: object, match: str) -> None:
    with pytest.raises(AnalysisError, match=match):
        SpatialAnalyzer(**kwargs).fit(counts, ["n0"], ["t0"])  # type: ignore[arg-type]


def test_invalid_names_and_weights() -> None:
    with pytest.raises(AnalysisError, match="unique"):
        SpatialAnalyzer().fit([[1.0], [2.0]], ["a", "a"], ["t"])
    with pytest.raises(AnalysisError, match="levels"):
        SpatialAnalyzer().fit([[1.0], [2.0]], ["a", "b"], ["t"], ["INFO", "ERROR"])
    with pytest.raises(AnalysisError, match="template_weights"):
        SpatialAnalyzer().fit([[1.0], [2.0]], ["a", "b"], ["t"], None, [-1.0])
    with pytest.raises(AnalysisError, match="no nodes"):
        SpatialAnalyzer().fit(np.zeros((0, 2)), [], ["a", "b"])
    with pytest.raises(AnalysisError, match="call fit"):
        SpatialAnalyzer().score_samples()
