"""DTW cost for the iteration analysis: tslearn (numba) against the batched numpy implementation.

Run in a fresh process (``python benchmarks/bench_dtw.py``) so that tslearn's first call pays its
numba compilation here. Workload: 1,000 iterations × window 10 = 10,000 sequence pairs of 8–16
template ids (a training iteration prints a dozen distinct templates), every iteration slightly
different so no pair is deduplicated away; then the same through ``IterationAnalyzer`` on a
realistic run (identical iterations plus a few odd ones), where duplicates are compared once.
"""

from __future__ import annotations

import time

import numpy as np

from l4_plugin.analysis.dtw import dtw_pairs
from l4_plugin.analysis.temporal import IterationAnalyzer

N_ITER = 1000
WINDOW = 10


def _workload(seed: int = 0) -> tuple[list[list[int]], list[tuple[int, int]]]:
    rng = np.random.default_rng(seed)
    base = list(range(12))
    seqs: list[list[int]] = []
    for _ in range(N_ITER):
        s = list(base)
        for _ in range(int(rng.integers(0, 4))):
            op = int(rng.integers(0, 3))
            pos = int(rng.integers(0, len(s)))
            if op == 0 and len(s) > 8:
                del s[pos]
            elif op == 1 and len(s) < 16:
                s.insert(pos, int(rng.integers(0, 40)))
            else:
                s[pos] = int(rng.integers(0, 40))
        seqs.append(s)
    pairs = [(i, j) for i in range(1, N_ITER) for j in range(max(0, i - WINDOW), i)]
    return seqs, pairs


def _realistic() -> list[list[str]]:
    normal = [f"t{k}" for k in range(12)]
    seqs = [list(normal) for _ in range(N_ITER)]
    for k in range(100, N_ITER, 100):
        seqs[k] = [*normal, "checkpoint-saved"]
    seqs[-1] = normal[:4]  # hung last iteration
    return seqs


def main() -> None:
    """Print first-call, steady-state and end-to-end timings, and check equal results."""
    seqs, pairs = _workload()
    print(f"workload: {len(pairs)} pairs, lengths {min(map(len, seqs))}-{max(map(len, seqs))}")

    t0 = time.perf_counter()
    dtw_pairs(seqs, pairs[:1], backend="tslearn")
    first = time.perf_counter() - t0
    print(f"tslearn first call (import + numba compile): {first:.2f} s")

    t0 = time.perf_counter()
    ts = dtw_pairs(seqs, pairs, backend="tslearn")
    ts_time = time.perf_counter() - t0
    print(f"tslearn steady state, {len(pairs)} pairs: {ts_time:.3f} s")

    t0 = time.perf_counter()
    npy = dtw_pairs(seqs, pairs, backend="numpy")
    np_time = time.perf_counter() - t0
    print(f"numpy batched (no compile), {len(pairs)} pairs: {np_time:.3f} s")
    print(f"max |tslearn - numpy| = {float(np.abs(ts - npy).max()):.3e}")

    real = _realistic()
    for backend in ("numpy", "tslearn"):
        t0 = time.perf_counter()
        res = IterationAnalyzer(window=WINDOW, backend=backend).fit(real).result_
        took = time.perf_counter() - t0
        print(
            f"IterationAnalyzer({backend}) realistic {N_ITER} iterations: {took:.3f} s, "
            f"suspects {[s.iteration for s in res.suspects]}"
        )


if __name__ == "__main__":
    main()
