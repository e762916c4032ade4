"""Temporal pattern comparison (paper §5.3.2): failing stage, suspect iterations, stragglers.

* :class:`StageAnalyzer` — the last stage each node reached and the job's failing stage.
* :class:`IterationAnalyzer` — the paper's method: each iteration's event sequence against the
  previous ``window`` iterations by DTW, mean distance, three-sigma rule over the running
  distribution of those means; a suspect iteration comes with the events new in it (and those its
  window always had but it lacks — what a hung iteration never printed).
* :class:`StragglerDetector` — the first iteration from which one node's iteration durations
  depart from its peers' for several iterations in a row.
* :class:`SlowdownDetector` — the first iteration from which the whole job runs slower than its
  own earlier pace (in synchronous training a throttled GPU slows every rank alike).
* :func:`iteration_at` — the iteration a moment between two iteration lines fell in.
* :func:`waited` — how long a timeout says it waited: when the wait began.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from l4_plugin.analysis.dtw import BACKENDS, dtw_pairs
from l4_plugin.analysis.results import (
    IterationResult,
    IterationScore,
    NodeStage,
    Slowdown,
    StageResult,
    StageSpan,
    Straggler,
    StragglerResult,
)
from l4_plugin.errors import AnalysisError

# Distances within this of the threshold are equal: DTW sums of 0/2 costs are exact, but the square
# root and the running mean are not.
_EPS = 1e-9
# The iteration lines whose spacing gives a job's recent pace (iteration_at).
_PACE_POINTS = 6

# What a timeout says it waited, and the unit in seconds, as PyTorch words it: the NCCL watchdog
# ("WorkNCCL(…) ran for 600025 milliseconds before timing out"), Gloo's transport ("Timed out
# waiting 1800000ms for recv operation to complete"), ``monitored_barrier`` ("Rank 1 failed to
# pass monitoredBarrier in 2000 ms"), the NCCL heartbeat monitor ("watchdog got stuck for 480
# seconds without making progress") and the TCP store ("wait timeout after 300000ms").
_WAITED = (
    (re.compile(r"\bran for (\d+) milliseconds before timing out"), 1e-3),
    (re.compile(r"\bTimed out waiting (\d+) ?ms\b"), 1e-3),
    (re.compile(r"\bfailed to pass monitoredBarrier in (\d+) ms\b"), 1e-3),
    (re.compile(r"\bwatchdog got stuck for (\d+) seconds\b"), 1.0),
    (re.compile(r"\bwait timeout after (\d+) ?ms\b"), 1e-3),
    # the kernel's watchdogs: "BUG: soft lockup - CPU#21 stuck for 22s!", "INFO: task
    # python3:2456 blocked for more than 120 seconds." (the task was stuck that long at least)
    (re.compile(r"\bsoft lockup - CPU#\d+ stuck for (\d+)s\b"), 1.0),
    (re.compile(r"\bblocked for more than (\d+) seconds\b"), 1.0),
    # Ray's GCS marks a node dead after missing its health checks: by default five failed
    # probes three seconds apart, each waiting up to ten (health_check_failure_threshold,
    # health_check_period_ms, health_check_timeout_ms), and the driver hears of it after: about
    # half a minute. The line states no number: the defaults' wait.
    (
        re.compile(r"\bhas been marked dead because the detector has missed too many heartbeats"),
        30.0,
    ),
)


class StageAnalyzer:
    """The last stage reached per node and for the job.

    ``order`` lists the stages in their natural order (e.g. ``init``, ``data_loading``,
    ``training``…); stages not in it, or every stage when it is None, are ordered by the median of
    their first position over nodes. A node's last stage is the stage of its latest span end. The
    job's failing stage is the most common last stage (ties go to the later stage): in synchronous
    training the job stops where most ranks stop, while one rank's teardown line or one rank stuck
    behind must not move it. Nodes whose last stage comes before the job's are ``lagging`` — a rank
    that never got as far as the others is a suspect in its own right.

    ``default`` is the stage of lines no marker placed (a kernel log, the files of ranks that
    print no progress): a node's span of it never outlasts the node's own later stages, and
    nodes that never left it do not vote while other nodes did — a job whose ranks printed
    iterations was not in start-up, whatever its quiet files say.
    """

    def __init__(self, order: Sequence[str] | None = None, default: str | None = None) -> None:
        self.order = order
        self.default = default

    def fit(self, spans: Iterable[StageSpan]) -> StageAnalyzer:
        """Compute the stage result from per-node stage spans and return ``self``."""
        spans = list(spans)
        for s in spans:
            if math.isnan(s.first) or math.isnan(s.last) or s.last < s.first:
                raise AnalysisError(
                    f"stages: span of stage {s.stage!r} on node {s.node!r} has first={s.first} "
                    f"last={s.last}; hint: last must be >= first"
                )
        order = self._order(spans)
        rank = {st: k for k, st in enumerate(order)}
        marked = {s.node for s in spans if s.stage != self.default}
        last: dict[str, StageSpan] = {}
        for s in spans:
            if s.stage == self.default and s.node in marked:
                continue
            cur = last.get(s.node)
            if cur is None or (s.last, rank[s.stage]) > (cur.last, rank[cur.stage]):
                last[s.node] = s
        nodes = tuple(NodeStage(node, sp.stage, sp.last) for node, sp in sorted(last.items()))
        stage: str | None = None
        lagging: tuple[str, ...] = ()
        if nodes:
            tally: dict[str, int] = {}
            voters = [ns for ns in nodes if ns.node in marked] or list(nodes)
            for ns in voters:
                tally[ns.last_stage] = tally.get(ns.last_stage, 0) + 1
            stage = max(tally, key=lambda st: (tally[st], rank[st]))
            lagging = tuple(ns.node for ns in nodes if rank[ns.last_stage] < rank[stage])
        self.order_ = order
        self.result_ = StageResult(stage=stage, order=order, nodes=nodes, lagging=lagging)
        return self

    def _order(self, spans: Sequence[StageSpan]) -> tuple[str, ...]:
        given = list(self.order or ())
        if len(set(given)) != len(given):
            raise AnalysisError(f"stages: order lists a stage twice: {given}")
        firsts: dict[str, list[float]] = {}
        for s in spans:
            firsts.setdefault(s.stage, []).append(s.first)
        extra = sorted(
            (st for st in firsts if st not in given),
            key=lambda st: (float(np.median(firsts[st])), st),
        )
        return tuple(given + extra)


class IterationAnalyzer:
    """Finds iterations whose event sequence departs from the preceding ``window`` iterations.

    Each iteration's distance is the mean DTW distance (one-hot cost, see
    :mod:`l4_plugin.analysis.dtw`) to each of its up to ``window`` predecessors. An iteration is
    suspect when its distance exceeds the mean plus ``sigma`` standard deviations of the distances
    of all iterations before it, once at least ``min_history`` of them exist. ``backend`` is
    ``numpy`` (default: no compilation, batched) or ``tslearn``. Identical sequences are compared
    once, so a long, regular run costs little. With ``recurring_ok`` (default) an iteration whose
    exact sequence already occurred earlier in the job (outside its window: every 100th iteration
    saves a checkpoint) is not suspect — it is a known pattern, not new behaviour; set it False for
    the paper's plain rule. After :meth:`fit`, ``result_`` holds the
    :class:`IterationResult` and ``distances_`` the per-iteration mean distances.
    """

    def __init__(
        self,
        window: int = 10,
        sigma: float = 3.0,
        min_history: int = 5,
        backend: str = "numpy",
        recurring_ok: bool = True,
    ) -> None:
        self.window = window
        self.sigma = sigma
        self.min_history = min_history
        self.backend = backend
        self.recurring_ok = recurring_ok

    def _check_params(self) -> None:
        if self.window < 1:
            raise AnalysisError(f"iterations: window must be >= 1, got {self.window!r}")
        if self.sigma <= 0:
            raise AnalysisError(f"iterations: sigma must be > 0, got {self.sigma!r}")
        if self.min_history < 2:
            raise AnalysisError(f"iterations: min_history must be >= 2, got {self.min_history!r}")
        if self.backend not in BACKENDS:
            raise AnalysisError(
                f"iterations: unknown backend {self.backend!r}; use one of {BACKENDS}"
            )

    def fit(
        self, sequences: Sequence[Sequence[str]], iterations: Sequence[int] | None = None
    ) -> IterationAnalyzer:
        """Score iteration sequences (template ids in order, oldest iteration first).

        ``iterations`` are the iteration numbers (default ``0..n-1``), strictly increasing.
        """
        self._check_params()
        its = self._iterations(len(sequences), iterations)
        vocab: dict[str, int] = {}
        coded = [tuple(vocab.setdefault(t, len(vocab)) for t in seq) for seq in sequences]
        unique: dict[tuple[int, ...], int] = {}
        uid = [unique.setdefault(c, len(unique)) for c in coded]
        uniq_seqs = list(unique)

        needed: dict[tuple[int, int], int] = {}
        for i in range(1, len(coded)):
            for j in range(max(0, i - self.window), i):
                a, b = sorted((uid[i], uid[j]))
                if a != b:
                    needed.setdefault((a, b), len(needed))
        dist = dtw_pairs(uniq_seqs, list(needed), self.backend)

        def d(a: int, b: int) -> float:
            if a == b:
                return 0.0
            lo, hi = sorted((a, b))
            return float(dist[needed[(lo, hi)]])

        means = np.zeros(len(coded))
        for i in range(1, len(coded)):
            win = range(max(0, i - self.window), i)
            means[i] = float(np.mean([d(uid[i], uid[j]) for j in win]))
        first_index: dict[int, int] = {}
        recurring = [first_index.setdefault(u, i) < i for i, u in enumerate(uid)]
        self.distances_ = means
        self.result_ = self._judge(means, its, [set(s) for s in sequences], recurring)
        return self

    def fit_counts(
        self,
        counts: ArrayLike,
        iterations: Sequence[int] | None = None,
        templates: Sequence[str] | None = None,
    ) -> IterationAnalyzer:
        """Score iterations given as count vectors (iterations × templates) instead of sequences.

        Without order information DTW degenerates to a Euclidean distance between the iterations'
        ``log1p`` count vectors; the windowing and the three-sigma rule are the same.
        """
        self._check_params()
        c = np.asarray(counts, dtype=np.float64)
        if c.ndim != 2 or not np.isfinite(c).all() or (c < 0).any():
            raise AnalysisError("iterations: counts must be a finite non-negative 2-D matrix")
        ids = list(templates) if templates is not None else [str(j) for j in range(c.shape[1])]
        if len(ids) != c.shape[1]:
            raise AnalysisError(
                f"iterations: {len(ids)} template ids given for {c.shape[1]} count columns"
            )
        its = self._iterations(c.shape[0], iterations)
        x = np.log1p(c)
        means = np.zeros(c.shape[0])
        for i in range(1, c.shape[0]):
            lo = max(0, i - self.window)
            means[i] = float(np.linalg.norm(x[lo:i] - x[i], axis=1).mean())
        self.distances_ = means
        sets = [{ids[j] for j in np.flatnonzero(row > 0)} for row in c]
        self.result_ = self._judge(means, its, sets, [False] * c.shape[0])
        return self

    def _iterations(self, n: int, iterations: Sequence[int] | None) -> list[int]:
        if n == 0:
            raise AnalysisError("iterations: no iterations given")
        its = list(range(n)) if iterations is None else [int(i) for i in iterations]
        if len(its) != n:
            raise AnalysisError(f"iterations: {len(its)} iteration numbers for {n} sequences")
        if any(b <= a for a, b in itertools.pairwise(its)):
            raise AnalysisError("iterations: iteration numbers must be strictly increasing")
        return its

    def _judge(
        self,
        means: NDArray[np.float64],
        its: list[int],
        sets: list[set[str]],
        recurring: list[bool],
    ) -> IterationResult:
        scores: list[IterationScore] = []
        for i in range(len(means)):
            prior = means[1:i]
            threshold: float | None = None
            suspect = False
            if prior.size >= self.min_history:
                threshold = float(prior.mean() + self.sigma * prior.std())
                suspect = bool(means[i] > threshold + _EPS)
                if suspect and self.recurring_ok and recurring[i]:
                    suspect = False
            new: tuple[str, ...] = ()
            missing: tuple[str, ...] = ()
            if suspect:
                win = sets[max(0, i - self.window) : i]
                union = set().union(*win)
                common = set.intersection(*win) if win else set()
                new = tuple(sorted(sets[i] - union))
                missing = tuple(sorted(common - sets[i]))
            scores.append(IterationScore(its[i], float(means[i]), threshold, suspect, new, missing))
        suspects = tuple(
            sorted((s for s in scores if s.suspect), key=lambda s: (-s.distance, s.iteration))
        )
        return IterationResult(iterations=tuple(scores), suspects=suspects, backend=self.backend)


class StragglerDetector:
    """Finds nodes whose iteration durations depart from their peers' and stay departed.

    For every iteration, each node's duration gets a robust z-score against all nodes (median and
    1.4826 × MAD, the MAD floored at ``rel_floor`` of the median so perfectly synchronous peers do
    not make a 1 % jitter infinite). A node is a straggler from the first iteration of a run of
    ``sustain`` consecutive iterations with z above ``threshold`` and duration at least
    ``min_slowdown`` times the median. Needs three or more nodes: with two, "the peers" is one node.
    """

    def __init__(
        self,
        threshold: float = 3.5,
        sustain: int = 3,
        min_slowdown: float = 1.2,
        rel_floor: float = 0.02,
    ) -> None:
        self.threshold = threshold
        self.sustain = sustain
        self.min_slowdown = min_slowdown
        self.rel_floor = rel_floor

    def fit(
        self, durations: ArrayLike, nodes: Sequence[str], iterations: Sequence[int] | None = None
    ) -> StragglerDetector:
        """Judge a node × iteration duration matrix (seconds, NaN when unknown); return ``self``."""
        if self.sustain < 1:
            raise AnalysisError(f"stragglers: sustain must be >= 1, got {self.sustain!r}")
        d = np.asarray(durations, dtype=np.float64)
        if d.ndim != 2 or d.shape[0] != len(nodes):
            raise AnalysisError(
                f"stragglers: durations must be {len(nodes)} nodes × iterations, got {d.shape}"
            )
        if (d[~np.isnan(d)] < 0).any() or np.isinf(d).any():
            raise AnalysisError("stragglers: durations must be finite and non-negative (or NaN)")
        its = list(range(d.shape[1])) if iterations is None else [int(i) for i in iterations]
        if len(its) != d.shape[1]:
            raise AnalysisError(
                f"stragglers: {len(its)} iteration numbers for {d.shape[1]} duration columns"
            )
        found: list[Straggler] = []
        z = np.zeros_like(d)
        if d.shape[0] >= 3 and d.shape[1] > 0:
            with np.errstate(all="ignore"):
                med = _column_medians(d)
                mad = 1.4826 * _column_medians(np.abs(d - med))
                spread = np.maximum(mad, np.maximum(self.rel_floor * np.abs(med), 1e-9))
                z = (d - med) / spread
                ratio = d / np.where(med > 0, med, np.nan)
            hit = (z > self.threshold) & (ratio >= self.min_slowdown)
            for i in range(d.shape[0]):
                start = _first_run(hit[i], self.sustain)
                if start is None:
                    continue
                zs = z[i, start:][np.isfinite(z[i, start:])]
                rs = ratio[i, start:][np.isfinite(ratio[i, start:])]
                found.append(
                    Straggler(
                        node=nodes[i],
                        first_iteration=its[start],
                        median_z=float(np.median(zs)),
                        slowdown=float(np.median(rs)),
                    )
                )
        found.sort(key=lambda s: (s.first_iteration, -s.median_z, s.node))
        self.z_ = z
        self.result_ = StragglerResult(stragglers=tuple(found))
        return self


class SlowdownDetector:
    """Finds the iteration from which the job's seconds per iteration depart from its earlier pace.

    Synchronous data/tensor/pipeline parallelism makes every rank wait for the slowest one at each
    collective, so a throttled GPU slows the whole job and per-node comparison sees nothing. The
    job's own history does: a bucket is slow when its seconds per iteration are at least
    ``ratio`` times the median of every bucket before it (``min_reference`` or more of them). The
    onset is the first slow bucket of a run of ``sustain`` slow buckets, or of slow buckets up to
    the job's end when fewer remain (at least two) — a job that slows down and then fails.
    One slow bucket (a checkpoint save, a dataloader hiccup) is not a slowdown.
    """

    def __init__(self, ratio: float = 1.3, sustain: int = 3, min_reference: int = 3) -> None:
        self.ratio = ratio
        self.sustain = sustain
        self.min_reference = min_reference

    def fit(self, seconds: Sequence[float], iterations: Sequence[int]) -> SlowdownDetector:
        """Judge per-bucket seconds per iteration (NaN when unknown); ``result_`` is the
        :class:`Slowdown` (without events: the caller knows them) or None."""
        if self.ratio <= 1.0 or self.sustain < 1 or self.min_reference < 1:
            raise AnalysisError(
                f"slowdown: ratio must be > 1, sustain and min_reference >= 1; got "
                f"{self.ratio!r}, {self.sustain!r}, {self.min_reference!r}"
            )
        if len(seconds) != len(iterations):
            raise AnalysisError(
                f"slowdown: {len(iterations)} iteration numbers for {len(seconds)} durations"
            )
        pairs = [
            (int(it), float(s))
            for it, s in zip(iterations, seconds, strict=True)
            if math.isfinite(s) and s > 0
        ]
        self.result_: Slowdown | None = None
        values = [s for _, s in pairs]
        for i in range(self.min_reference, len(pairs)):
            reference = float(np.median(values[:i]))
            run = values[i : i + self.sustain]  # shorter only where it reaches the end
            if len(run) < min(self.sustain, 2):
                break
            if all(v >= self.ratio * reference for v in run):
                rest = values[i:]
                self.result_ = Slowdown(
                    first_iteration=pairs[i][0],
                    reference=reference,
                    ratio=float(np.median(rest)) / reference,
                )
                break
        return self


def _column_medians(d: NDArray[np.float64]) -> NDArray[np.float64]:
    """Each column's median over its numbers; NaN for a column of none (an iteration no node
    timed: torchrun's stdout alone times few lines) without numpy's warning about it."""
    out = np.full(d.shape[1], np.nan)
    some = ~np.isnan(d).all(axis=0)
    if some.any():
        out[some] = np.nanmedian(d[:, some], axis=0)
    return out


def _first_run(hit: NDArray[np.bool_], k: int) -> int | None:
    """Index where the first run of ``k`` consecutive true values starts, if any."""
    run = 0
    for j, h in enumerate(hit):
        run = run + 1 if h else 0
        if run == k:
            return j - k + 1
    return None


def iteration_at(
    starts: Mapping[int, float],
    spans: Mapping[int, int],
    bucket: int,
    t: float,
    resumed: float = -math.inf,
    pace: float | None = None,
    slack: int = 0,
    lag: float = 0.0,
    beyond: bool = False,
) -> int:
    """The iteration a moment ``t`` of the iteration bucket ``bucket`` fell in.

    ``starts`` holds when each bucket's first line was printed (its iteration line: the
    frameworks print it when the iteration completes), ``spans`` how many iterations a bucket
    holds. A line after the iteration line of ``bucket`` was printed during a later iteration;
    which one, the job's pace says (seconds per iteration between its last iteration lines):
    a job that prints progress every 10 iterations and fails 3 iterations after its last line
    failed in iteration ``bucket + 3``. A line later than the next iteration line would have
    come (a timeout that fired long after the job stopped) says only that the job got past
    ``bucket``: ``bucket + 1`` (the middle of the interval was tried: the first is where more
    failures struck); within an iteration past the moment it was due, the interval's last
    iteration (the pace is a median of the recent intervals'). Without a pace, ``bucket``.
    ``resumed``: when the job was last seen going on within the bucket (the end of a
    checkpoint's save, a progress line printed after the bucket's own): the iterations are
    counted from there, at ``pace`` seconds an iteration when given (the pace of training
    alone, the saves left out), else the buckets' own. ``slack``: iterations past the next
    line that still place ``t`` (when it bounds the moment from above, a report that came
    after it), in the iteration before the one it came in, no later than the next line's;
    later than that, it says nothing: ``bucket``. ``lag``: iterations at the pace that ran
    before ``t`` in the one it tells of (a slowdown's first line, once its first slow iteration
    had run: that long before ``t`` the iteration began; no earlier than the counting's start).
    ``beyond``: ``t`` is known to be a moment the job was still going forward (when its stuck
    collective began), so a moment past the next line's due says the lines were not printed,
    not that the job had stopped: counted at the pace however far.
    """
    start = starts.get(bucket)
    if start is None or not math.isfinite(start) or not math.isfinite(t) or t <= start:
        return bucket
    pairs = _recent_pairs(starts, bucket)
    if not pairs:
        return bucket
    if pace is None or not pace > 0:
        pace = float(np.median([secs / n for n, secs in pairs]))
    interval = max(spans.get(bucket, 1), int(np.median([n for n, _ in pairs])))
    if lag > 0:
        t = max(t - lag * pace, max(start, resumed) + 1e-3)
    # (at least one: a moment after the bucket's line is in a later iteration, even one that
    # comes before the last line seen of the bucket's own)
    steps = max(1, math.ceil((t - max(start, resumed)) / pace))
    if slack:
        # (the report came after the failure: a driver hearing of a dead worker, a transport
        # giving up after its retries; about an iteration of such a job)
        return bucket + min(max(1, steps - 1), interval) if steps <= interval + slack else bucket
    if steps == interval + 1:
        # (within an iteration past the moment the next line was due: the failure stopped the
        # job before it printed it, in the interval's last iteration; the pace is a median)
        return bucket + interval
    return bucket + steps if steps <= interval or beyond else bucket + 1


def line_interval(starts: Mapping[int, float], spans: Mapping[int, int], bucket: int) -> int:
    """How many iterations ``bucket``'s progress line covers, up to where the next was due:
    its span, or the usual distance between the job's recent progress lines when more (a job
    that prints every ten iterations keeps a bucket per line it printed); 0: no two lines
    before it say."""
    pairs = _recent_pairs(starts, bucket)
    if not pairs:
        return 0
    return max(spans.get(bucket, 1), int(np.median([n for n, _ in pairs])))


def _recent_pairs(starts: Mapping[int, float], bucket: int) -> list[tuple[int, float]]:
    """(iterations, seconds) between each two of the last buckets up to ``bucket`` that were
    printed in order."""
    before = sorted((b, s) for b, s in starts.items() if b <= bucket and math.isfinite(s))
    recent = before[-_PACE_POINTS:]
    pairs = [(b2 - b1, s2 - s1) for (b1, s1), (b2, s2) in itertools.pairwise(recent)]
    return [(n, secs) for n, secs in pairs if n > 0 and secs > 0]


def waited(message: str) -> float | None:
    """The seconds a timeout's message says it waited before it fired (None: it says none).
    A collective that timed out began that long before the line: the moment the job stopped
    going forward, where the line itself comes minutes later."""
    for pattern, unit in _WAITED:
        found = pattern.search(message)
        if found is not None:
            return int(found.group(1)) * unit if pattern.groups else unit
    return None


def progress_templates(
    iteration_cells: Iterable[tuple[int, str]], spans: Mapping[int, int]
) -> frozenset[str]:
    """The templates printed in most iteration buckets (at least three) of ``iteration_cells``
    ((bucket, template) pairs; ``spans``: the job's buckets): progress lines."""
    seen = Counter(tid for _, tid in iteration_cells)
    least = max(3, len(spans) / 2)
    return frozenset(t for t, n in seen.items() if n >= least)
