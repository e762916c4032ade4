"""Silent nodes: the paper's blind spot — a hung or dead rank prints nothing at all.

A node whose GPU hangs or whose kernel panics stops logging while its peers go on (heartbeat
monitors, watchdog timeouts, IB completion errors). Nothing it printed is anomalous; what is
anomalous is *when it stopped* and *what it did not print*. This module compares each node's last
activity (last timestamp and/or last iteration reached) with its peers' using robust statistics
(median and MAD, so a few other late or early nodes do not move the reference) and a minimum lag
(so the ordinary skew of a few seconds between ranks is never flagged), then lists the templates
the peers printed after the node went quiet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from l4_plugin.analysis.results import SilenceResult, SilentNode
from l4_plugin.errors import AnalysisError

# Below this many nodes the reference for a node is computed without the node itself: with two or
# three nodes the node would otherwise pull the median and the MAD half-way towards itself.
_LEAVE_ONE_OUT_MAX = 50


class SilenceDetector:
    """Finds nodes whose logging stops clearly before their peers'.

    A node is silent when its lag behind the peers' median last timestamp is at least
    ``min_lag_seconds`` and more than ``threshold`` robust standard deviations (1.4826 × MAD), or
    likewise for the last iteration with ``min_lag_iterations``. For a silent node, a template is
    reported missing when at least ``peer_fraction`` of the non-silent peers printed it after the
    node's last line (plus ``min_lag_seconds / 2`` of tolerance); at most ``max_missing`` are
    listed. After :meth:`fit`, ``result_`` holds the :class:`SilenceResult`.
    """

    def __init__(
        self,
        threshold: float = 5.0,
        min_lag_seconds: float = 60.0,
        min_lag_iterations: float = 2.0,
        peer_fraction: float = 0.9,
        max_missing: int = 20,
    ) -> None:
        self.threshold = threshold
        self.min_lag_seconds = min_lag_seconds
        self.min_lag_iterations = min_lag_iterations
        self.peer_fraction = peer_fraction
        self.max_missing = max_missing

    def fit(
        self,
        nodes: Sequence[str],
        last_ts: ArrayLike | None = None,
        last_iteration: ArrayLike | None = None,
        last_seen: ArrayLike | None = None,
        templates: Sequence[str] | None = None,
    ) -> SilenceDetector:
        """Judge every node and return ``self``.

        ``last_ts[i]`` / ``last_iteration[i]`` are node ``nodes[i]``'s last timestamp and last
        iteration reached (NaN when unknown; at least one of the two is required).
        ``last_seen[i, j]`` is the last timestamp of template ``templates[j]`` on node ``i`` (NaN
        when the node never printed it); it is optional and only feeds the missing-template lists.
        """
        n = len(nodes)
        if n == 0:
            raise AnalysisError("silence: no nodes given")
        if len(set(nodes)) != n:
            raise AnalysisError("silence: node names must be unique")
        if last_ts is None and last_iteration is None:
            raise AnalysisError("silence: give last_ts or last_iteration (or both)")
        ts = _vector(last_ts, n, "last_ts")
        it = _vector(last_iteration, n, "last_iteration")
        seen: NDArray[np.float64] | None = None
        if last_seen is not None:
            if templates is None:
                raise AnalysisError("silence: last_seen needs the template ids (templates=...)")
            seen = np.asarray(last_seen, dtype=np.float64)
            if seen.shape != (n, len(templates)):
                raise AnalysisError(
                    f"silence: last_seen shape {seen.shape} does not match {n} nodes × "
                    f"{len(templates)} templates"
                )
            if ts is None:
                raise AnalysisError("silence: last_seen needs last_ts to know when a node stopped")

        lag_ts, cut_ts = _lags(ts, self.min_lag_seconds, self.threshold)
        lag_it, cut_it = _lags(it, self.min_lag_iterations, self.threshold)
        silent_mask = np.zeros(n, dtype=bool)
        score = np.zeros(n)
        for lag, cut in ((lag_ts, cut_ts), (lag_it, cut_it)):
            if lag is None or cut is None:
                continue
            hit = np.nan_to_num(lag, nan=-np.inf) >= cut
            silent_mask |= hit
            # Saturating in the lag: at the cut-off 0.63, at three times the cut-off 0.95.
            # (fmax: the lags of the nodes not hit, some far below zero, would overflow the exp.)
            s = np.where(hit, 1.0 - np.exp(-np.fmax(lag, 0.0) / cut), 0.0)
            score = np.maximum(score, s)

        silent: list[SilentNode] = []
        for i in (int(x) for x in np.flatnonzero(silent_mask)):
            periodic: tuple[str, ...] = ()
            new: tuple[str, ...] = ()
            if seen is not None and ts is not None and templates is not None:
                periodic, new = self._missing(i, seen, ts, silent_mask, templates)
            silent.append(
                SilentNode(
                    node=nodes[i],
                    score=float(score[i]),
                    last_ts=_opt(ts, i),
                    last_iteration=None if it is None or math.isnan(it[i]) else int(it[i]),
                    lag_seconds=_opt(lag_ts, i),
                    lag_iterations=_opt(lag_it, i),
                    missing_periodic=periodic,
                    missing_new=new,
                )
            )
        silent.sort(key=lambda s: (-s.score, s.node))
        self.silent_mask_ = silent_mask
        self.scores_ = score
        self.result_ = SilenceResult(
            silent=tuple(silent),
            median_last_ts=_nanmedian(ts),
            median_last_iteration=_nanmedian(it),
        )
        return self

    def score_samples(self) -> NDArray[np.float64]:
        """Normality of each fitted node in input order, ``1 - silence score`` (lower = silent)."""
        if not hasattr(self, "scores_"):
            raise AnalysisError("silence: call fit() before score_samples()")
        return np.asarray(1.0 - self.scores_, dtype=np.float64)

    def _missing(
        self,
        i: int,
        seen: NDArray[np.float64],
        ts: NDArray[np.float64],
        silent_mask: NDArray[np.bool_],
        templates: Sequence[str],
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        peers = ~silent_mask
        if not peers.any() or math.isnan(ts[i]):
            return (), ()
        after = ts[i] + self.min_lag_seconds / 2.0
        peer_seen = seen[peers]
        frac = (np.nan_to_num(peer_seen, nan=-np.inf) > after).mean(axis=0)
        cols = [int(j) for j in np.flatnonzero(frac >= self.peer_fraction)]
        cols.sort(key=lambda j: (-frac[j], templates[j]))
        periodic = [templates[j] for j in cols if not math.isnan(seen[i, j])]
        new = [templates[j] for j in cols if math.isnan(seen[i, j])]
        return tuple(periodic[: self.max_missing]), tuple(new[: self.max_missing])


def _vector(values: ArrayLike | None, n: int, name: str) -> NDArray[np.float64] | None:
    if values is None:
        return None
    v = np.asarray(values, dtype=np.float64)
    if v.shape != (n,):
        raise AnalysisError(f"silence: {name} must have one value per node ({n}), got {v.shape}")
    if np.isinf(v).any():
        raise AnalysisError(f"silence: {name} contains infinite values")
    return v


def _lags(
    v: NDArray[np.float64] | None, min_lag: float, threshold: float
) -> tuple[NDArray[np.float64] | None, NDArray[np.float64] | None]:
    """Each node's lag behind its peers' median and the per-node cut-off for calling it silent."""
    if v is None or np.isnan(v).all():
        return None, None
    n = v.size
    if n <= _LEAVE_ONE_OUT_MAX:
        ref = np.full(n, np.nan)
        spread = np.full(n, np.nan)
        for i in range(n):
            others = np.delete(v, i)
            others = others[~np.isnan(others)]
            if others.size:
                ref[i] = np.median(others)
                spread[i] = 1.4826 * np.median(np.abs(others - ref[i]))
    else:
        med = float(np.nanmedian(v))
        ref = np.full(n, med)
        spread = np.full(n, 1.4826 * float(np.nanmedian(np.abs(v - med))))
    lag = ref - v
    cut = np.maximum(min_lag, threshold * np.nan_to_num(spread, nan=0.0))
    return lag, np.asarray(cut, dtype=np.float64)


def _opt(v: NDArray[np.float64] | None, i: int) -> float | None:
    if v is None or math.isnan(v[i]):
        return None
    return float(v[i])


def _nanmedian(v: NDArray[np.float64] | None) -> float | None:
    if v is None or np.isnan(v).all():
        return None
    return float(np.nanmedian(v))
