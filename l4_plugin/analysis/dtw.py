"""Dynamic time warping between template-id sequences, in numpy or with tslearn.

Template ids are categorical, so a sequence is encoded one-hot: the local cost between two events
is the squared Euclidean distance of their one-hot vectors — 0 for the same template, 2 for any two
different ones — and the DTW distance is the square root of the cheapest warping path's summed
cost, exactly what ``tslearn.metrics.dtw`` returns for one-hot inputs. An integer encoding would
make template 3 "closer" to template 4 than to template 900, which means nothing; an embedding
would need a model per job and gains nothing for "same event or not". With one-hot costs a hung
iteration that starts normally but never ends pays 2 for every missing closing event.

The numpy backend computes many pairs at once: it keeps two rows of the cost matrix per pair and
walks the cells in Python while numpy works across pairs, so a batch of 10,000 short pairs costs
about as much as one pair's cell loop. It needs no compilation; tslearn's first call in a process
compiles with numba for several seconds (see ``benchmarks/bench_dtw.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from l4_plugin.errors import AnalysisError

BACKENDS = ("numpy", "tslearn")


def dtw_pairs(
    sequences: Sequence[Sequence[int]],
    pairs: Sequence[tuple[int, int]],
    backend: str = "numpy",
) -> NDArray[np.float64]:
    """DTW distances (one-hot cost) for ``pairs`` of indices into integer-coded ``sequences``.

    An empty sequence is at distance ``sqrt(2 * len(other))`` from another (every event of the
    other pays a full mismatch) and 0 from an empty one, so a bucket with no events is comparable.
    """
    if backend not in BACKENDS:
        raise AnalysisError(f"dtw: unknown backend {backend!r}; use one of {BACKENDS}")
    out = np.zeros(len(pairs), dtype=np.float64)
    todo: list[int] = []
    for p, (a, b) in enumerate(pairs):
        la, lb = len(sequences[a]), len(sequences[b])
        if la == 0 or lb == 0:
            out[p] = math.sqrt(2.0 * (la + lb))
        else:
            todo.append(p)
    if not todo:
        return out
    if backend == "numpy":
        seqs = [np.asarray(s, dtype=np.int64) for s in sequences]
        out[todo] = _dtw_batch([seqs[pairs[p][0]] for p in todo], [seqs[pairs[p][1]] for p in todo])
    else:
        out[todo] = [_dtw_tslearn(sequences[pairs[p][0]], sequences[pairs[p][1]]) for p in todo]
    return out


def _dtw_batch(
    left: Sequence[NDArray[np.int64]], right: Sequence[NDArray[np.int64]]
) -> NDArray[np.float64]:
    """Batched one-hot DTW: all pairs advance through the cells together, two rows at a time."""
    n = len(left)
    la = np.array([a.size for a in left])
    lb = np.array([b.size for b in right])
    rows, cols = int(la.max()), int(lb.max())
    # -1 and -2 paddings never equal each other or a real id; padded cells are never read back.
    a = np.full((n, rows), -1, dtype=np.int64)
    b = np.full((n, cols), -2, dtype=np.int64)
    for p in range(n):
        a[p, : la[p]] = left[p]
        b[p, : lb[p]] = right[p]
    prev = np.full((n, cols + 1), np.inf)
    prev[:, 0] = 0.0
    result = np.zeros(n)
    for i in range(rows):
        cost = 2.0 * (a[:, i : i + 1] != b)
        cur = np.empty((n, cols + 1))
        cur[:, 0] = np.inf
        for j in range(cols):
            best = np.minimum(np.minimum(prev[:, j], prev[:, j + 1]), cur[:, j])
            cur[:, j + 1] = cost[:, j] + best
        done = la == i + 1
        if done.any():
            result[done] = cur[done, lb[done]]
        prev = cur
    return np.asarray(np.sqrt(result), dtype=np.float64)


def _dtw_tslearn(a: Sequence[int], b: Sequence[int]) -> float:
    """One pair through ``tslearn.metrics.dtw`` on one-hot vectors over the pair's vocabulary."""
    from tslearn.metrics import dtw  # imported lazily: importing tslearn alone costs ~1 s

    vocab = {t: k for k, t in enumerate(sorted(set(a) | set(b)))}
    ea = np.zeros((len(a), len(vocab)))
    eb = np.zeros((len(b), len(vocab)))
    ea[np.arange(len(a)), [vocab[t] for t in a]] = 1.0
    eb[np.arange(len(b)), [vocab[t] for t in b]] = 1.0
    return float(dtw(ea, eb))
