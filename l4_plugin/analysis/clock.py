"""A progress bar's own clock: when a job whose progress lines carry no time of their own
printed its last iteration, and at what pace it went.

tqdm and Lightning draw ``N/TOTAL [elapsed<remaining, rate]``: the elapsed time is the bar's
clock, started when the bar was. A bar on stdout, flushed at exit or redrawn with carriage
returns, has no timestamp, so the job's timeline cannot say when its last iteration came or
how long one took; the bar can, once its start is known. Every bar line takes the time of the
last stamped line before it (``JobData.progress_lines``), which was printed no later than the
frame: the line's time less its elapsed time is a moment the bar had started by, and the
latest such moment is the nearest to its start the stamps allow (a "Running training" line
right before frame 0, a checkpoint's end right before the next frame). The clock is read from
the last run of the bar: one restarted (a new epoch's bar, a restarted attempt) starts again
from zero. The elapsed time between frames is exact where the rate tqdm shows is smoothed: it
says where a slowdown began (``slowed_from``). A job without such a bar may still say where it
stood at a known time: a stamped line that states a step (a checkpoint's, ``step_anchor``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from l4_plugin.analysis.tables import Cell

# tqdm's "440/862 [1:01:34<59:03, …": the iteration, the total, then the elapsed time (M:SS or
# H:MM:SS).
_FRAME = re.compile(r"(\d+)/(\d+) \[(?:(\d+):)?(\d{1,2}):(\d{2})<")
# (an exact one: tqdm's "global_step=1e+3" is the bar's batch count's business)
_GLOBAL_STEP = re.compile(r"\bglobal_step=(\d+)(?:\.\d+)?(?=[,\]\s]|$)")
_PACE_POINTS = 5  # the last frames whose elapsed times give the pace
#: Steps past the last iteration a job printed that a stated step may lie and still count the
#: job's iterations (a bar on stdout loses what its buffer held at a kill: a few dozen frames);
#: further, it counts something else (DeepSpeed's micro-steps) or a failure long after the job
#: stopped going on.
CLOCK_STEPS = 64


@dataclass(frozen=True, slots=True)
class BarClock:
    """The clock of the bar one node drew: ``start`` (epoch seconds) and its frames
    ``(iteration, elapsed seconds)`` of its last run, ascending."""

    node: str
    start: float
    frames: tuple[tuple[int, float], ...]

    @property
    def last(self) -> tuple[int, float]:
        """The last iteration the bar showed and when (epoch seconds)."""
        it, elapsed = self.frames[-1]
        return it, self.start + elapsed

    @property
    def pace(self) -> float | None:
        """Seconds per iteration over the last frames (None: no two frames apart in both)."""
        recent = self.frames[-_PACE_POINTS:]
        paces = [
            (e2 - e1) / (i2 - i1)
            for (i1, e1), (i2, e2) in itertools.pairwise(recent)
            if i2 > i1 and e2 > e1
        ]
        return float(np.median(paces)) if paces else None


def frame_of(line: str) -> tuple[int, int, float] | None:
    """``(iteration, total, elapsed seconds)`` of the frame a bar's line shows (its last), None
    when ``line`` shows none."""
    shown = list(_FRAME.finditer(line))
    if not shown:
        return None
    found = shown[-1]
    hours, minutes, seconds = found.group(3), found.group(4), found.group(5)
    elapsed = int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)
    # Lightning's bar shows the trainer's global step too: the job's iteration number, as its
    # progress lines are read (``stages.yaml``: lightning-global-step); the bar counts batches.
    step = _GLOBAL_STEP.search(line, found.end())
    it = int(step.group(1)) if step is not None else int(found.group(1))
    return it, int(found.group(2)), float(elapsed)


def bar_clock(
    lines: Iterable[tuple[str, str, int | None, float, str]], progress: Collection[str]
) -> BarClock | None:
    """The clock of the bar that got furthest, from ``(node, template, bucket, time, line)``
    progress lines
    (the time: the last stamp before the line) of the ``progress`` templates (the iteration
    lines: not a bar that loads a model's shards), and the first frame of the same bar (its
    "0/TOTAL [00:00<?" line is a template of its own); None when no bar has two frames and a
    stamp."""
    per_node: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    totals: dict[str, set[int]] = defaultdict(set)
    zeros: list[tuple[str, int, float]] = []
    for node, tid, _, t, line in lines:
        frame = frame_of(line)
        if frame is None:
            continue
        it, total, elapsed = frame
        if tid not in progress:
            if it == 0:
                zeros.append((node, total, t))
            continue
        totals[node].add(total)
        seen = per_node[node].get(it)
        if seen is None or t < seen[1]:
            per_node[node][it] = (elapsed, t)
    for node, total, t in zeros:
        if total in totals[node] and 0 not in per_node[node]:
            per_node[node][0] = (0.0, t)
    clocks = [c for node, fr in per_node.items() if (c := _clock(node, fr)) is not None]
    if not clocks:
        return None
    return max(clocks, key=lambda c: (c.frames[-1][0], len(c.frames), c.node))


def _clock(node: str, frames: dict[int, tuple[float, float]]) -> BarClock | None:
    ordered = sorted(frames.items())
    # The last run: back from the last frame while the elapsed time falls with the iteration.
    first = len(ordered) - 1
    while first > 0 and ordered[first - 1][1][0] <= ordered[first][1][0]:
        first -= 1
    run = ordered[first:]
    bounds = [t - elapsed for _, (elapsed, t) in run if math.isfinite(t)]
    if len(run) < 2 or not bounds:
        return None
    return BarClock(node, max(bounds), tuple((it, elapsed) for it, (elapsed, _) in run))


# A step a stamped line states: a checkpoint's "for step 90", "step=89", DeepSpeed's
# "global_step60", HF's "checkpoint-60", Megatron's "at iteration 100".
_STATED_STEP = re.compile(r"(?:\bstep[= ]|global_step|checkpoint-|\b(?:at|for) iteration )(\d+)\b")


def unheld(start: float, end: float, least: float, held: Sequence[tuple[float, float]]) -> float:
    """The seconds from ``start`` to ``end`` less the parts the ``held`` spans cover, no less
    than ``least`` (nor than nothing held)."""
    covered = 0.0
    cursor = start
    for a, b in sorted(held):
        a, b = max(a, cursor), min(b, end)
        if b > a:
            covered += b - a
            cursor = b
    took = end - start
    return took if not covered else max(took - covered, min(least, took))


# A run that begins training at a step it names, the steps before it done (a resumed run's, or
# a fresh one's step 0): torchtitan's "Training starts at step 61" (the step about to run: 60
# done), transformers' Trainer "Continuing training from global step 60", Megatron-LM's
# "successfully loaded checkpoint from … at iteration 60" (the steps done).
_STARTS_AT = re.compile(r"\b[Tt]raining starts at step (\d+)\b")
_RESUMED = re.compile(
    r"\bContinuing training from global step \d+|\bsuccessfully loaded checkpoint from .* at "
    r"iteration \d+|" + _STARTS_AT.pattern
)


def stated_step(message: str) -> int | None:
    """The step a line states, None when it names none. A line that names two (NeMo's "save
    for step 80 (…step=79-…) finalized": the count of steps done, and the checkpoint's name,
    numbered as the progress lines number them, "global_step: 79") states the smaller: the
    last iteration done, as a progress line would number it. A run's start names the step it
    is about to run: the one before it is done."""
    starts = _STARTS_AT.search(message)
    if starts is not None:
        return int(starts.group(1)) - 1
    steps = [int(found.group(1)) for found in _STATED_STEP.finditer(message)]
    return min(steps) if steps else None


def resumed_step(message: str) -> int | None:
    """The last step done when a line says training begins (or resumes) right after it (the
    lines ``_RESUMED`` knows); None for any other line."""
    return stated_step(message) if _RESUMED.search(message) else None


def stated_times(points: Iterable[tuple[float, int]]) -> dict[int, tuple[float, float]]:
    """Per step, of ``(time, step)`` a job's stamped lines state, the first and the last time
    one states it: when the job had reached it (a save's first line) and when it was still
    there (a save's last: a save holds up the iterations until it ends)."""
    times: dict[int, tuple[float, float]] = {}
    for t, step in points:
        if not math.isfinite(t):
            continue
        first, last = times.get(step, (t, t))
        times[step] = (min(first, t), max(last, t))
    return times


def stated_pace(times: dict[int, tuple[float, float]]) -> float | None:
    """Seconds per step between the steps lines state (``stated_times``), from when the job
    was last at one to when it reached the next (the saves' own time left out); the median;
    None: fewer than two steps, or none apart in time."""
    ordered = sorted(times.items())
    paces = [
        (reached - left) / (s2 - s1)
        for (s1, (_, left)), (s2, (reached, _)) in itertools.pairwise(ordered)
        if reached > left
    ]
    return float(np.median(paces)) if paces else None


def step_anchor(
    lines: Iterable[tuple[float, str]],
    last: int | None,
    reach: int,
    counted: Iterable[tuple[float, int]] = (),
) -> tuple[int, float] | None:
    """The latest ``(step, time)`` the stamped ``lines`` state (or ``counted``, steps
    ``periodic_steps`` counted), of the steps the job's progress makes plausible (no more than
    ``reach`` past ``last``, the last iteration it printed: DeepSpeed's "step=1600" counts
    micro-steps; None: the job printed no progress); None: none states one."""
    stated = [(t, s) for t, m in lines if (s := stated_step(m)) is not None]
    anchors = [
        (t, step)
        for t, step in (*stated, *counted)
        if math.isfinite(t) and (last is None or step <= last + reach)
    ]
    if not anchors:
        return None
    t, step = max(anchors)
    return step, t


# How far a periodic line's intervals may stray from their median and still be one schedule.
_SCHEDULE_SLACK = 0.25


def periodic_steps(seen: Sequence[tuple[float, int]], cell: Cell) -> tuple[float, int] | None:
    """The step of a node's last line of a template that states one at a fixed stride (a
    checkpoint saved every 10 steps), when the index kept only its first lines (``seen``:
    (time, step) of the lines kept; ``cell``: the node's count of the template and the times
    of its first and last lines): its first step plus a stride per line, at the time of its
    last. None unless the kept lines begin with its first and keep one schedule, in steps and
    in time, which the last line's time also keeps."""
    seen = sorted(set(seen))
    if len(seen) < 2 or cell.count <= len(seen) or seen[0][0] != cell.first_ts:
        return None
    strides = {b - a for (_, a), (_, b) in itertools.pairwise(seen)}
    gaps = [t2 - t1 for (t1, _), (t2, _) in itertools.pairwise(seen)]
    if len(strides) != 1 or (stride := strides.pop()) <= 0 or min(gaps) <= 0:
        return None
    gap = float(np.median(gaps))
    span = cell.last_ts - seen[0][0]
    steady = all(abs(g - gap) <= _SCHEDULE_SLACK * gap for g in gaps)
    if not steady or abs(span - gap * (cell.count - 1)) > _SCHEDULE_SLACK * gap:
        return None
    return cell.last_ts, seen[0][1] + stride * (cell.count - 1)


_STAYS = 5  # intervals after a slow one that must mostly be slow too (a save is one slow interval)


def slowed_from(
    frames: Sequence[tuple[int, float]],
    reference: float,
    after: int,
    held: Sequence[tuple[float, float]] = (),
) -> int | None:
    """The first slow iteration by a clock's ``frames`` ((iteration, seconds), each drawn when
    its iteration completed: a bar's own, or the times of the job's iteration lines), for a
    job that slowed down from ``reference`` seconds per iteration and stayed slow past
    iteration ``after`` (the onset its stated rates gave: tqdm smooths its rate, the elapsed
    time between frames is exact; a coarse bucket of iterations holds the onset somewhere).

    The slow pace is the median between the frames past ``after``; the first interval between
    two frames slower than halfway, followed by mostly slow ones, holds the onset: within it,
    the iteration from which the frames' elapsed time is the slow pace's (none: None).
    ``held``: spans (on the frames' clock) a checkpoint's save held the iterations up: an
    interval's time less what of it they cover (no less than its iterations at ``reference``)."""
    steps = [
        (i1, i2, unheld(e1, e2, (i2 - i1) * reference, held))
        for (i1, e1), (i2, e2) in itertools.pairwise(frames)
        if i2 > i1 and e2 >= e1
    ]
    later = [d / (i2 - i1) for i1, i2, d in steps if i1 >= after]
    if not later or reference <= 0:
        return None
    slow = float(np.median(later))
    if slow <= reference:
        return None
    half = (reference + slow) / 2
    paces = [d / (i2 - i1) for i1, i2, d in steps]
    for k, (i1, i2, d) in enumerate(steps):
        if i1 > after or paces[k] <= half:
            continue
        following = paces[k + 1 : k + 1 + _STAYS]
        if following and (
            following[0] <= half or sum(p > half for p in following) * 2 <= len(following)
        ):
            # one slow interval: a checkpoint's save, not the slowdown (which stays: the
            # interval after it is slow too, even when it began soon after the save)
            continue
        if k > 0 and paces[k - 1] > reference + (slow - reference) / 10:
            i1, i2, d = steps[k - 1]  # it began late in the interval before: slower already
        # iterations i1+1..j at the reference pace, j+1..i2 at the slow one
        j = (i2 * slow - i1 * reference - d) / (slow - reference)
        return int(min(max(round(j), i1), i2 - 1)) + 1
    return None
