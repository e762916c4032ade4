"""Spatial pattern comparison (paper §5.3.1): which nodes log differently from their peers.

Input is one job's node × template count matrix. Two methods:

* ``iforest`` — the paper: an Isolation Forest over the nodes' event vectors; the node score is
  scikit-learn's anomaly score ``2 ** (-E[h(x)] / c(n))`` (in (0, 1], 0.5 ≈ nothing special).
* ``combined`` (default) — the forest plus *rarity* evidence. In real failures the culprit is often
  not the loudest node: its ring or pipeline neighbours print hundreds of loud errors naming it and
  every other rank prints the same watchdog timeouts, while the culprit prints a few lines nobody
  else prints (the IB port error, the Xid). A forest on counts isolates the loud neighbours first.
  Presence of a template on exactly one or a few nodes, weighted by log level, is what singles the
  culprit out; absence of a template that all but a few nodes print (the dead rank's missing
  watchdog lines) is weaker evidence for the few. The forest keeps a minority weight so that
  count-shaped anomalies without a rare template still rank.

Normalisation (``normalization="rate"``, the default): nodes print different amounts for benign
reasons (rank 0 logs more, a node that died early logs less), and a node must not look anomalous
for being longer. Each node's counts are divided by a DESeq-style size factor — the median, over
the templates every node prints, of the node's count over that template's geometric mean across
nodes — which, unlike dividing by the row total, is not moved by the one template that explodes
on the culprit. Then ``log1p`` compresses the heavy tails (10,000 repeats of a retry line are not
10,000 times the evidence of one). ``log1p`` (no size factor), ``presence`` (0/1) and ``count``
(raw, as in the paper) are available for the ablation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.ensemble import IsolationForest

from l4_plugin.analysis.results import Attribution, NodeScore, SpatialResult
from l4_plugin.errors import AnalysisError
from l4_plugin.records import Level

_METHODS = ("combined", "iforest")
_NORMALIZATIONS = ("rate", "log1p", "presence", "count")


def level_weight(level: str | None, error_weight: float) -> float:
    """Weight of a template's log level as evidence: errors count ``error_weight``, warnings and
    unknown levels 1, info/debug 0.5 (benign per-node noise is mostly informational)."""
    parsed = Level.parse(level)
    if parsed is None:
        return 1.0
    if parsed.is_error:
        return error_weight
    return 1.0 if parsed.is_flagged else 0.5


class SpatialAnalyzer:
    """Scores every node of a job by how differently it logs, and explains the top nodes.

    Hyper-parameters: ``method`` (``combined`` | ``iforest``), ``n_estimators``, ``max_samples`` and
    ``random_state`` of the Isolation Forest, ``normalization`` (see the module docstring),
    ``rare_fraction`` (a template on at most ``max(1, rare_fraction * n_nodes)`` nodes is rare),
    ``error_weight`` (weight of ERROR-level templates), ``iforest_weight`` (share of the forest in
    the combined score), ``max_suspects``, ``suspect_ratio`` and ``min_suspect_score`` (a suspect
    scores at least ``suspect_ratio`` times the best and at least ``min_suspect_score``), and
    ``n_attributions`` (templates listed per node). After :meth:`fit`, ``result_`` holds the
    :class:`SpatialResult` and ``scores_`` the anomaly scores in input order.
    """

    def __init__(
        self,
        method: str = "combined",
        n_estimators: int = 200,
        max_samples: int | str = "auto",
        random_state: int | None = 0,
        normalization: str = "rate",
        rare_fraction: float = 0.05,
        error_weight: float = 2.0,
        iforest_weight: float = 0.3,
        max_suspects: int = 8,
        suspect_ratio: float = 0.5,
        min_suspect_score: float = 0.3,
        n_attributions: int = 5,
    ) -> None:
        self.method = method
        self.n_estimators = n_estimators
        self.max_samples = max_samples
        self.random_state = random_state
        self.normalization = normalization
        self.rare_fraction = rare_fraction
        self.error_weight = error_weight
        self.iforest_weight = iforest_weight
        self.max_suspects = max_suspects
        self.suspect_ratio = suspect_ratio
        self.min_suspect_score = min_suspect_score
        self.n_attributions = n_attributions

    def _check_params(self) -> None:
        if self.method not in _METHODS:
            raise AnalysisError(f"spatial: unknown method {self.method!r}; use one of {_METHODS}")
        if self.normalization not in _NORMALIZATIONS:
            raise AnalysisError(
                f"spatial: unknown normalization {self.normalization!r}; "
                f"use one of {_NORMALIZATIONS}"
            )
        if not 0.0 <= self.iforest_weight <= 1.0:
            raise AnalysisError(
                f"spatial: iforest_weight must be in [0, 1], got {self.iforest_weight!r}"
            )
        if self.n_estimators < 1:
            raise AnalysisError(f"spatial: n_estimators must be >= 1, got {self.n_estimators!r}")

    def fit(
        self,
        counts: ArrayLike,
        nodes: Sequence[str],
        templates: Sequence[str],
        levels: Sequence[str | None] | None = None,
        template_weights: ArrayLike | None = None,
    ) -> SpatialAnalyzer:
        """Score the nodes of one job and return ``self``.

        ``counts[i, j]`` is how often node ``nodes[i]`` printed template ``templates[j]``;
        ``levels[j]`` is the template's log level; ``template_weights[j]`` in [0, 1] says how much
        the template may count as evidence (give 0 to templates the cross-job filter dropped: they
        still help normalise node lengths but never make a node suspect).
        """
        self._check_params()
        c, w, lw = self._validate(counts, nodes, templates, levels, template_weights)
        n_nodes = c.shape[0]
        self.nodes_ = tuple(nodes)
        self.templates_ = tuple(templates)
        if n_nodes == 1:
            only = NodeScore(nodes[0], 0.0, 0.0, 0.0, ())
            self.scores_ = np.zeros(1)
            self.iforest_scores_ = np.zeros(1)
            self.rarity_scores_ = np.zeros(1)
            self.result_ = SpatialResult(
                nodes=(only,),
                suspects=(),
                method=self.method,
                defined=False,
                note="spatial comparison needs at least two nodes; the job has one",
            )
            return self

        x = self._features(c)
        present = c > 0
        k = present.sum(axis=0)
        # A column that no node may use as evidence or that is the same everywhere carries no
        # information for the forest; dropping it also keeps 2,000 × 2,000 inputs fast.
        informative = (w > 0) & (np.ptp(x, axis=0) > 0)
        iforest = self._iforest(x[:, informative])
        if self.method == "iforest":
            scores = iforest.copy()
            rarity = np.zeros(n_nodes)
        else:
            rarity = self._rarity(present, k, w * lw)
            scores = (1.0 - self.iforest_weight) * rarity + self.iforest_weight * _relative(iforest)
        if not informative.any():
            # Identical nodes: nothing distinguishes anyone; make that explicit rather than let
            # floating-point noise pick a "winner".
            scores = np.zeros(n_nodes)
        self.scores_ = scores
        self.iforest_scores_ = iforest
        self.rarity_scores_ = rarity

        attributions = self._attributions(x, k, w * lw)
        order = sorted(range(n_nodes), key=lambda i: (-scores[i], nodes[i]))
        node_scores = tuple(
            NodeScore(
                node=nodes[i],
                score=float(scores[i]),
                iforest=float(iforest[i]),
                rarity=float(rarity[i]),
                attributions=attributions[i],
            )
            for i in order
        )
        self.result_ = SpatialResult(
            nodes=node_scores,
            suspects=self._suspects(node_scores),
            method=self.method,
            defined=True,
            note="" if informative.any() else "all nodes log the same templates alike",
        )
        return self

    def score_samples(self) -> NDArray[np.float64]:
        """Normality of each fitted node in input order, ``1 - score``: lower is more abnormal."""
        if not hasattr(self, "scores_"):
            raise AnalysisError("spatial: call fit() before score_samples()")
        return np.asarray(1.0 - self.scores_, dtype=np.float64)

    # --- steps -------------------------------------------------------------------------------

    def _validate(
        self,
        counts: ArrayLike,
        nodes: Sequence[str],
        templates: Sequence[str],
        levels: Sequence[str | None] | None,
        template_weights: ArrayLike | None,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        c = np.asarray(counts, dtype=np.float64)
        if c.ndim != 2:
            raise AnalysisError(
                f"spatial: counts must be a 2-D node × template matrix, got {c.ndim}-D"
            )
        if c.shape[0] == 0:
            raise AnalysisError("spatial: counts has no nodes")
        if c.shape != (len(nodes), len(templates)):
            raise AnalysisError(
                f"spatial: counts shape {c.shape} does not match {len(nodes)} nodes × "
                f"{len(templates)} templates"
            )
        if not np.isfinite(c).all() or (c < 0).any():
            raise AnalysisError("spatial: counts must be finite and non-negative")
        if len(set(nodes)) != len(nodes):
            raise AnalysisError("spatial: node names must be unique")
        if levels is not None and len(levels) != len(templates):
            raise AnalysisError(
                f"spatial: {len(levels)} levels given for {len(templates)} templates"
            )
        if template_weights is None:
            w = np.ones(c.shape[1])
        else:
            w = np.asarray(template_weights, dtype=np.float64)
            if w.shape != (c.shape[1],) or not np.isfinite(w).all() or (w < 0).any():
                raise AnalysisError(
                    "spatial: template_weights must be one finite non-negative weight per template"
                )
        lv = [None] * c.shape[1] if levels is None else list(levels)
        lw = np.array([level_weight(x, self.error_weight) for x in lv], dtype=np.float64)
        return c, w, lw

    def _features(self, c: NDArray[np.float64]) -> NDArray[np.float64]:
        if self.normalization == "count":
            return c
        if self.normalization == "presence":
            return (c > 0).astype(np.float64)
        if self.normalization == "log1p":
            return np.log1p(c)
        return np.log1p(c / _size_factors(c)[:, None])

    def _iforest(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        n = x.shape[0]
        if x.shape[1] == 0:
            return np.full(n, 0.5)
        forest = IsolationForest(
            n_estimators=self.n_estimators,
            max_samples=self.max_samples,
            random_state=self.random_state,
        ).fit(x)
        return np.asarray(-forest.score_samples(x), dtype=np.float64)

    def _rarity(
        self, present: NDArray[np.bool_], k: NDArray[np.int64], weight: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        n = present.shape[0]
        r_max = max(1, math.floor(self.rare_fraction * n))
        rare = (k >= 1) & (k <= r_max)
        # Presence of a template on few nodes: each of the k nodes gets 1/k of its weight.
        excess = (present[:, rare] * (weight[rare] / k[rare])).sum(axis=1)
        # Absence of a template (almost) everybody prints: each of the few gets half the weight.
        absent_k = n - k
        near_all = (absent_k >= 1) & (absent_k <= r_max) & (k >= 2)
        deficit = ((~present[:, near_all]) * (0.5 * weight[near_all] / absent_k[near_all])).sum(
            axis=1
        )
        evidence = excess + deficit
        # Saturating map: one node-unique ERROR template (evidence 2) gives 0.86, one unique INFO
        # line (0.5) 0.39 — absolute, so a lone benign line does not become a 1.0 suspect.
        return np.asarray(1.0 - np.exp(-evidence), dtype=np.float64)

    def _attributions(
        self, x: NDArray[np.float64], k: NDArray[np.int64], weight: NDArray[np.float64]
    ) -> list[tuple[Attribution, ...]]:
        n = x.shape[0]
        med = np.median(x, axis=0)
        mad = np.median(np.abs(x - med), axis=0) * 1.4826
        # A floor on the spread: most columns of a rare template have MAD 0, and one extra line
        # must not become an infinite z-score.
        floor = 0.5 if self.normalization in ("rate", "log1p") else 1.0
        z = (x - med) / np.maximum(mad, floor)
        idf_excess = np.log((n + 1) / np.maximum(k, 1))
        idf_deficit = 0.5 * np.log((n + 1) / np.maximum(n - k, 1))
        contrib = np.where(z > 0, z * idf_excess, -z * idf_deficit) * weight
        contrib[np.abs(z) < 1.0] = 0.0
        out: list[tuple[Attribution, ...]] = []
        top_n = min(self.n_attributions, x.shape[1])
        for i in range(n):
            row = contrib[i]
            if top_n == 0 or not (row > 0).any():
                out.append(())
                continue
            part = (
                np.argpartition(-row, top_n - 1)[:top_n]
                if top_n < row.size
                else np.arange(row.size)
            )
            idx = sorted((int(j) for j in part if row[j] > 0), key=lambda j: (-row[j], j))
            out.append(
                tuple(
                    Attribution(
                        template_id=self.templates_[j],
                        weight=float(row[j]),
                        value=float(x[i, j]),
                        median=float(med[j]),
                        direction="excess" if z[i, j] > 0 else "deficit",
                        nodes_with_template=int(k[j]),
                    )
                    for j in idx
                )
            )
        return out

    def _suspects(self, ranked: tuple[NodeScore, ...]) -> tuple[str, ...]:
        if not ranked or ranked[0].score <= 0.0:
            return ()
        if self.method == "iforest":
            # scikit-learn's own "auto" offset: above 0.5 means shorter-than-average paths.
            picked = [s.node for s in ranked if s.score > 0.5]
        else:
            floor = max(self.min_suspect_score, self.suspect_ratio * ranked[0].score)
            picked = [s.node for s in ranked if s.score >= floor]
        return tuple(picked[: self.max_suspects])


def _size_factors(c: NDArray[np.float64]) -> NDArray[np.float64]:
    """DESeq median-of-ratios size factor per node (row), robust to a few exploding templates."""
    common = (c > 0).all(axis=0)
    if common.any():
        logs = np.log(c[:, common])
        ratios = logs - logs.mean(axis=0)
        s = np.exp(np.median(ratios, axis=1))
    else:
        totals = c.sum(axis=1)
        med = float(np.median(totals))
        s = totals / med if med > 0 else np.ones(c.shape[0])
    return np.where(s > 0, s, 1.0)


def _relative(a: NDArray[np.float64]) -> NDArray[np.float64]:
    """Forest scores rescaled so the median node is 0 and the most isolated node is 1."""
    med = float(np.median(a))
    top = float(a.max())
    if top - med <= 1e-12:
        return np.zeros_like(a)
    return np.asarray(np.clip((a - med) / (top - med), 0.0, 1.0), dtype=np.float64)
