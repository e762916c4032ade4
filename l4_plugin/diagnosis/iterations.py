"""Where a failed job stood: the iterations a report names (``Report.iterations``).

The failure's iteration bucket comes from the best-ranked event that has one (or the iteration
an error states); within the bucket, from the job's pace and the moment the job stopped going
on (a timeout's stated wait, the end of a checkpoint's save). Where the progress lines carry no
time of their own, a progress bar's own clock or a stamped line that states a step places it
(:mod:`l4_plugin.analysis.clock`), else the iteration after the last one printed. A job that
slowed down names where the slowdown began first; the DTW suspects follow.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from l4_plugin.analysis.clock import (
    CLOCK_STEPS,
    BarClock,
    bar_clock,
    resumed_step,
    slowed_from,
    stated_step,
    stated_times,
    step_anchor,
    unheld,
)
from l4_plugin.analysis.recipe import Analysis, bucket_medians
from l4_plugin.analysis.results import Slowdown
from l4_plugin.analysis.tables import JobData, TemplateInfo
from l4_plugin.analysis.temporal import iteration_at, line_interval, progress_templates, waited
from l4_plugin.ingest.stages import default_stage_rules
from l4_plugin.records import Level
from l4_plugin.report.model import ReportIteration


def failure_iteration(data: JobData, analysis: Analysis) -> tuple[int, str] | None:
    """The iteration the job failed in: where the best-ranked event that has one was first
    printed (its bucket by the iteration lines, or placed by time on the job's timeline; within
    the bucket by the job's pace, ``temporal.iteration_at``)."""
    saving = analysis.fusion.stage == "checkpointing"
    return _placed(data, _job_iteration_starts(data), _failure_cell(data, analysis), saving)


def _placed(
    data: JobData, starts: dict[int, float], cell: tuple[int, str] | None, saving: bool = False
) -> tuple[int, str] | None:
    """The iteration of a failure's ``cell`` (bucket, template) within its bucket."""
    if cell is None:
        return None
    bucket, tid = cell
    return _within(data, starts, bucket, (tid,), saving), tid


def _failure_cell(data: JobData, analysis: Analysis) -> tuple[int, str] | None:
    """The bucket and template of the best-ranked event that has a bucket (its first)."""
    # Its first bucket by time; by number only where no copy has a time (a copy of the line
    # placed without one may sit in an early bucket).
    first: dict[str, int] = {}
    for (it, tid), _ in sorted(
        data.iteration_cells.items(),
        key=lambda kv: (not math.isfinite(kv[1][0]), kv[1][0], kv[0][0]),
    ):
        first.setdefault(tid, it)
    for event in analysis.fusion.events:
        tid = event.template_id
        if tid in first:
            return first[tid], tid
        stated = _stated_bucket(data, tid)
        if stated is not None:
            return stated, tid
    return None


def _stated_bucket(data: JobData, tid: str) -> int | None:
    """The bucket of the iteration a template's words state (``_STATED_ITERATION``), for a line
    nothing placed on the timeline (a rank that prints no progress of its own, no time)."""
    info = data.templates.get(tid)
    found = _STATED_ITERATION.search(info.message) if info is not None else None
    if found is None:
        return None
    number = int(found.group(1))
    below = [b for b in data.iteration_spans if b <= number]
    return max(below) if below else None


def _onset(data: JobData, starts: dict[int, float], slow: Slowdown) -> int | None:
    """The iteration a slowdown began in: where the first of the lines that started with it
    was printed, when that falls in its onset bucket or the next (the pace is judged over
    whole buckets; the line says when; None: none came there). The line came once the first
    slow iteration had run (a throttle counter, a slow-step warning report what they
    measured): the iterations before that one ran at the pace the job had (a kernel's
    throttling line two minutes after an iteration line, at one minute an iteration that is
    now two, came in the second iteration after it, not the third)."""
    bucket, tids = slow.first_iteration, slow.events
    end = _onset_end(data, bucket)
    first: tuple[float, int, str] | None = None
    for (it, tid), (ts, _) in data.iteration_cells.items():
        if (
            tid in tids
            and bucket <= it < end
            and math.isfinite(ts)
            and (first is None or (ts, it) < first[:2])
        ):
            first = (ts, it, tid)
    if first is None:
        return None
    # (the slow iteration at the pace the moment is counted at, times how much slower: the
    # stated rates' own scale may not be the clock's)
    lag = slow.ratio if slow.ratio > 1 else 0.0
    return max(bucket, _within(data, starts, first[1], (first[2],), failing=False, lag=lag))


def _job_iteration_starts(data: JobData) -> dict[int, float]:
    """When each iteration bucket's first line was printed anywhere in the job."""
    starts: dict[int, float] = {}
    for (_, it), ts in data.node_iteration_start.items():
        starts[it] = min(ts, starts.get(it, math.inf))
    return starts


# An error that says which iteration it struck (Megatron-LM's result validation: "Rank 41,
# node n, device 1, iteration 794: Unexpected result tensor(nan, …)").
_STATED_ITERATION = re.compile(r"\biteration (\d+): ")


def _within(
    data: JobData,
    starts: dict[int, float],
    bucket: int,
    tids: Sequence[str],
    saving: bool = False,
    failing: bool = True,
    lag: float = 0.0,
) -> int:
    """The iteration of ``bucket`` its events ``tids`` began in: the one an error among them
    states when it falls before the next bucket (its own words are exact), else by the job's
    pace (``temporal.iteration_at``). ``saving``: the job failed while saving a checkpoint;
    the save whose line last came before the failure is of the iteration completed when it
    began, and no iteration went on while it ran; an error that names the checkpoint's step
    ("tmp-checkpoint-560") is of that step. ``failing`` False: the events are not the
    failure's (where a slowdown began): a stamp they share with an iteration line is theirs.
    ``lag``: iterations, at the pace they are counted at, that the one they tell of took
    before them (a slowdown's first line: its first slow iteration, the slowdown's ratio)."""
    for t in tids:
        stated = _stated_by(data, bucket, t, saving)
        if stated is not None:
            return stated
    cells = data.iteration_cells
    first = min((cells[(bucket, t)][0] for t in tids if (bucket, t) in cells), default=math.inf)
    stalled = _stalled(data, bucket)
    borrowed = failing and _lent(data, bucket, first)
    moment = stalled if borrowed and math.isfinite(stalled) else min(first, stalled)
    # (a borrowed time and no timeout's wait: when the job noticed it, the failure came no
    # later, nor past the next progress line, which never came)
    noticed = _noticed(data, first) if borrowed and not math.isfinite(stalled) else None
    if noticed is not None and _saving(data, first, noticed):
        noticed = None  # (a save begun meanwhile held the iterations up for how long?)
    # (from the iteration the bucket's first line states: a bucket of 15 whose first line is
    # "step: 400" began at 400, not at 391)
    starts, spans, key = _line_numbered(data, starts, bucket)
    if noticed is not None:
        # (counted from the job's last sign of life in the bucket before it noticed)
        seen = _resumed(data, bucket, noticed)
        placed = iteration_at(starts, spans, key, noticed, seen, None, _NOTICING)
        if placed > key:  # (a report long after the next line was due says nothing)
            return placed
    alive = _resumed(data, bucket, first if math.isfinite(first) else moment)
    began = _save_began(data, bucket, moment) if saving else None
    if began is not None:
        # (a line after the bucket's is in a later iteration: the save's is the one before)
        return max(bucket, iteration_at(starts, spans, key, began) - 1)
    counted = _from_the_save(data, starts, spans, key, moment, alive)
    if counted is not None:
        return counted
    # (counted from the end of a save, at the pace of training alone where the stated steps
    # give it: the buckets' own pace holds the saves)
    start = starts.get(key, math.inf)
    pace = data.step_pace if alive > start else None
    held = _held_within(data, bucket, start, alive)
    # (the moment the job's stuck collective began, as its timeouts tell, long after the next
    # line was due and no save between: the job went on without its lines, which the process
    # held in a buffer when it was aborted; counted at the pace up to the stall)
    unprinted = (
        failing
        and math.isfinite(stalled)
        and moment == stalled
        and not _saving(data, max(start, alive), stalled)
    )
    if held > 0:
        # (a save in the middle of the bucket: the iterations before it count too)
        alive, moment = -math.inf, moment - held
    placed = iteration_at(starts, spans, key, moment, alive, pace, lag=lag, beyond=unprinted)
    if unprinted and placed > _stated_total(data, key):
        # (more iterations than the job was to run: it did not go on unseen, it stalled before
        # the stuck collective began — a save, a slow step —, so the moment says only that it
        # got past its last line)
        return iteration_at(starts, spans, key, moment, alive, pace, lag=lag)
    return placed


#: A progress line's "N/TOTAL" ("step 20/40", "iteration        8/      40", tqdm's "450/1000").
_OF_TOTAL = re.compile(r"(?<![\d.])(\d+)\s*/\s*(\d+)(?![\d.])")


def _stated_total(data: JobData, bucket: int) -> float:
    """The iterations the job was to run, as its progress line of ``bucket`` states them after
    the bucket's own number ("step 20/40": 40); inf when none says."""
    for _, _, b, _, line in data.progress_lines:
        if b != bucket:
            continue
        for m in _OF_TOTAL.finditer(line):
            if int(m.group(1)) == bucket and int(m.group(2)) >= bucket:
                return int(m.group(2))
    return math.inf


def _from_the_save(
    data: JobData,
    starts: dict[int, float],
    spans: dict[int, int],
    key: int,
    moment: float,
    alive: float,
) -> int | None:
    """The iteration of ``moment`` counted from the end of the save the job was last seen at
    (``alive``, ``_resumed``), when the save's stamped lines state its step at or past the
    bucket's (``key``; "Checkpoint global_step60 is ready now!") and the stated steps give the
    pace of training alone (``JobData.step_pace``; else the seconds the progress lines state,
    tqdm's "s/it": ``_stated_pace``): the save began once its step was done and held the
    iterations up until it ended. The bucket's own time may be another line's (HF's loss line
    has no stamp: it takes the last stamped line before it, minutes earlier), its save's is its
    own. None: no such save, no pace, or a count past the next progress line, which never came
    (the moment says only that the job got past the save)."""
    pace = data.step_pace or _stated_pace(data)
    if pace is None or not pace > 0 or not math.isfinite(alive) or not alive < moment:
        return None
    interval = line_interval(starts, spans, key)
    saved = [step for t, step in _save_points(data) if t <= alive and key <= step < key + interval]
    if not interval or not saved:
        return None
    step = max(saved)
    done = step + max(1, math.ceil((moment - alive) / pace))
    if done <= key + interval:
        return done
    # (within an iteration past the next line's due moment: the interval's last iteration)
    return key + interval if done == key + interval + 1 else None


def _held_within(data: JobData, bucket: int, start: float, alive: float) -> float:
    """The seconds a checkpoint's save held the iterations of ``bucket`` up, when the job was
    last seen going on (``alive``, ``_resumed``) at that save's end and it began after the
    bucket's first line (``start``): from its first line there to ``alive``; 0: none did (a
    save at the bucket's first line, or one begun in the bucket before). A job that prints
    every ten iterations and saves every 320 may save in the middle of a bucket of 66: the
    iterations before the save count as much as those after it. Only a save the bucket holds
    once and whole: one of a template printed in most buckets (``periodic``), or whose first
    line there is of a template printed there half as often again as in most buckets that
    hold it, may be several saves; printed there less often, the save's lines fell in two
    buckets, and it began in the one before (its ranks' lines each where their node was)."""
    if not start < alive < math.inf:
        return 0.0
    progress = periodic(data)
    counts: dict[str, list[int]] = {}
    for (_, tid), (_, n) in data.iteration_cells.items():
        counts.setdefault(tid, []).append(n)
    # (the save's first line is another template's than its last: a template's first line in
    # the bucket and its last may be two saves', a late line of the one before)
    ending = {
        t for (it, t), (ts, _) in data.iteration_cells.items() if it == bucket and ts == alive
    }
    ending |= {t for (_, t), c in data.cells.items() if c.last_ts == alive}
    if any(t in progress for t in ending):
        return 0.0  # (the job went on after the save: it was seen there last)
    began = math.inf
    for (it, tid), (ts, n) in data.iteration_cells.items():
        if it != bucket or not start < ts <= alive or tid in ending or tid in progress:
            continue
        info = data.templates.get(tid)
        if info is not None and _saves(info) and ts < began:
            usual = statistics.median(counts[tid])
            if not usual <= n <= 1.5 * usual:
                return 0.0
            began = ts
    cells = data.iteration_cells.items()
    if any(it == bucket and began < ts < alive and t in progress for (it, t), (ts, _) in cells):
        return 0.0  # (iterations went on between: two saves' lines)
    return alive - began if began < alive else 0.0


def _line_numbered(
    data: JobData, starts: dict[int, float], bucket: int
) -> tuple[dict[int, float], dict[int, int], int]:
    """``starts`` and the buckets' spans keyed by the iteration each bucket's first progress
    line states, where the job's progress lines say it (``JobData.progress_lines``: a node's
    line at its start of the bucket), and ``bucket``'s key among them. The index buckets
    iterations in spans of its own; a job that prints every ten iterations begins a bucket of
    fifteen at whatever step it printed first in it."""
    rules = default_stage_rules()
    stated: dict[int, tuple[float, int]] = {}
    # (a node's first line in the bucket: every rank that prints progress states the same
    # iteration at about the same time; the job's first may be a node whose lines were not read)
    begun = data.node_iteration_start
    for node, tid, it, ts, message in data.progress_lines:
        if it is None or it not in starts or ts != begun.get((node, it)):
            continue
        info = data.templates.get(tid)
        rule = rules.role(info.text).iteration if info is not None else None
        number = rule.number_of(message) if rule is not None else None
        span = max(data.iteration_spans.get(it, 1), 1)
        if number is not None and it <= number < it + span:
            stated[it] = min(stated.get(it, (math.inf, number)), (ts, number))
    if not stated:
        return starts, data.iteration_spans, bucket
    keyed: dict[int, float] = {}
    spans: dict[int, int] = {}
    for b, t in starts.items():
        k = stated[b][1] if b in stated else b
        keyed[k] = t
        # (up to the number the next bucket's first line states: "step: 660" ends a bucket
        # of 628-660, "step: 670" begins the next, 661-693; 661-669 are this one's)
        end = b + max(data.iteration_spans.get(b, 1), 1)
        spans[k] = max((stated[end][1] if end in stated else end) - k, 1)
    return keyed, spans, stated[bucket][1] if bucket in stated else bucket


def _save_began(data: JobData, bucket: int, until: float) -> float | None:
    """When the save under way at ``until`` began in ``bucket``: the earliest of a
    checkpoint's lines (``_saves``) before ``until`` that came after the bucket's last
    progress line (its first says "Saving", a later one of another template came seconds on;
    None: the job was not saving). A node's last line of a save counts where it came after
    the bucket's first progress line: the job's buckets begin at its first node's line, and a
    node whose clock or progress ran a little behind printed its save's line in time before
    the bucket of the line it followed."""
    progress = periodic(data)
    saving = _save_templates(data)
    saves: list[float] = []
    going = -math.inf
    for (it, tid), (ts, _) in data.iteration_cells.items():
        if it != bucket or not ts < until:
            continue
        if tid in saving:
            saves.append(ts)
        elif tid in progress:
            going = max(going, ts)
    if not saves:
        return None
    for (_, tid), cell in data.cells.items():
        if tid in saving and going <= cell.last_ts < until:
            saves.append(cell.last_ts)
    return min((t for t in saves if t >= going), default=None)


def _resumed(data: JobData, bucket: int, until: float) -> float:
    """When the job was last seen going on in ``bucket`` before ``until``: the latest first
    time there of a checkpoint's lines (a save pauses the iterations: a minute's save is no ten
    iterations) or of a line it prints every interval (HF's loss line, printed after the bar
    whose line has no time of its own); -inf: none. Iterations are counted from there."""
    progress = periodic(data)
    saving = _save_templates(data)
    resumed = -math.inf
    for (it, tid), (ts, _) in data.iteration_cells.items():
        if it == bucket and resumed < ts < until and (tid in progress or tid in saving):
            resumed = ts
    # (a save's last line, when it came in the bucket: the iterations went on after it)
    begun = data.node_iteration_start
    start = min((t for (_, b), t in begun.items() if b == bucket), default=math.inf)
    for (_, tid), cell in data.cells.items():
        if start <= cell.last_ts < until and cell.last_ts > resumed and tid in saving:
            resumed = cell.last_ts
    return resumed


def periodic(data: JobData) -> frozenset[str]:
    """The job's progress lines (``temporal.progress_templates``)."""
    return progress_templates(data.iteration_cells, data.iteration_spans)


# NeMo 2's asynchronous save, scheduled and finalized (lightning/pytorch/callbacks/
# model_checkpoint.py): no checkpointing stage (it runs beside training), but a moment the job
# stood at a step, and a save the iterations may have waited for.
_ASYNC_SAVE = re.compile(r"\b[Aa]sync checkpoint save for\b")


def _saves(info: TemplateInfo) -> bool:
    """Whether a template's lines are a checkpoint's save: seen while saving, or a line that
    begins or completes one (``stages.yaml``; a rank that never printed the save's first line
    prints its last in whatever stage it was in; an asynchronous save's, ``_ASYNC_SAVE``)."""
    return (
        info.stage == "checkpointing"
        or default_stage_rules().role(info.text).stage == "checkpointing"
        or _ASYNC_SAVE.search(info.text) is not None
    )


def _stalled(data: JobData, bucket: int) -> float:
    """When the job stopped going forward in ``bucket``, as its timeouts tell: the earliest
    moment a timed-out wait began (the line's time less what it says it waited,
    ``temporal.waited``) that falls after the bucket's first line (inf: none says). A
    watchdog's line comes ten minutes or more after the job stopped; the wait it reports began
    where the job did."""
    if data.time_unit != "ts":
        return math.inf
    begun = min(
        (t for (_, b), t in data.node_iteration_start.items() if b == bucket), default=math.inf
    )
    waits = {t: w for t, info in data.templates.items() if (w := waited(info.message)) is not None}
    stalled = math.inf
    for (it, tid), (ts, _) in data.iteration_cells.items():
        wait = waits.get(tid)
        if wait is not None and it >= bucket and begun < ts - wait < stalled:
            stalled = ts - wait
    return stalled


def report_iterations(analysis: Analysis, data: JobData) -> tuple[ReportIteration, ...]:
    fusion = analysis.fusion
    top = max((s.distance for s in fusion.iterations), default=0.0)
    starts = _job_iteration_starts(data)
    # Within a suspect iteration's bucket, the best-ranked event says where the failure struck
    # (its words may state the iteration); the bucket's new events may be its consequences.
    cell = _failure_cell(data, analysis) if analysis.slowdown is None else None
    saving = fusion.stage == "checkpointing"
    iterations = [
        ReportIteration(
            iteration=_within(
                data,
                starts,
                s.iteration,
                (cell[1],) if cell is not None and cell[0] == s.iteration else s.new_events,
                saving,
            ),
            score=round(s.distance / top, 4) if top > 0 else 0.0,
            why="dtw",
            distance=round(s.distance, 4),
            threshold=None if s.threshold is None else round(s.threshold, 4),
            events=tuple(s.new_events),
            missing_events=tuple(s.missing_events),
        )
        for s in fusion.iterations
    ]
    slow = analysis.slowdown
    if not data.node_last_iteration:
        return _by_stated_steps(data, analysis)
    if slow is None and _unplaced_progress(starts) and not _states_its_iteration(data, cell):
        # Progress lines with no time of their own: the lines' times place nothing; a bar's
        # clock says when the last one came, else the last one printed says where the job
        # stopped.
        return (
            *(_by_the_clock(data, cell, saving) or _after_the_last(data)),
            *iterations,
        )
    if slow is None:
        failed = _placed(data, starts, cell, saving)
        if failed is None:
            return tuple(iterations) or _after_the_last(data)
        it, tid = failed
        # (a bar's own clock places it; a stamped step carried on is no better than the
        # buckets' own stamps)
        if _borrowed(data, starts, cell) and bar_clock(data.progress_lines, periodic(data)):
            clocked = _by_the_clock(data, cell, saving)
            if clocked:
                return (*clocked, *iterations)
        return _with_failure(data, iterations, (cell[0] if cell else it, tid), it, saving)
    # Where the job started to slow down comes first: the DTW suspect is then mostly where
    # the slowed job finally failed.
    iterations = [it for it in iterations if it.iteration != slow.first_iteration] or iterations
    first = ReportIteration(
        iteration=_slowed_by_the_bar(data, slow)
        or (_onset_by_the_clock(data, slow) if _unplaced_progress(starts) else None)
        or _onset(data, starts, slow)
        or _slowed_by_the_buckets(data, slow, starts)
        or _slowed_within(data, slow)
        or slow.first_iteration,
        score=1.0,
        why="slowdown",
        distance=None,
        threshold=None,
        slowdown=round(slow.ratio, 3),
        events=tuple(slow.events),
        missing_events=(),
    )
    return (first, *iterations)


def _with_failure(
    data: JobData,
    iterations: list[ReportIteration],
    cell: tuple[int, str],
    it: int,
    saving: bool,
) -> tuple[ReportIteration, ...]:
    """The suspects with where the failure began (``it``, the best-ranked event's ``cell``):
    alone when no iteration departs from its predecessors (a hang's last iteration, a crash in
    an iteration like the others); after them otherwise (the best-ranked event may have begun
    earlier than the failure: a flapping link); first when its own words state it (exact)."""
    bucket, tid = cell
    stated = _stated_by(data, bucket, tid, saving) == it
    if any(s.iteration == it for s in iterations):
        lead = [s for s in iterations if stated and s.iteration == it]
        return (*lead, *(s for s in iterations if s not in lead))
    began = ReportIteration(
        iteration=it,
        score=1.0 if not iterations else 0.0,
        why="failure",
        distance=None,
        threshold=None,
        events=(tid,),
        missing_events=(),
    )
    return (began, *iterations) if stated else (*iterations, began)


# Buckets that must be at hand to judge whether the job's progress lines carry time.
_FLAT_PAIRS = 4


def _unplaced_progress(starts: dict[int, float]) -> bool:
    """Whether the job's progress lines have no time of their own (``starts``: when each bucket
    began, ``_job_iteration_starts``): most consecutive buckets start no later than the one
    before (a rank's stdout flushed at exit gives every step the same stamp; a bar on stderr
    takes the last stamp before it, printed at start-up); or, in a short job, every one of at
    least three buckets starts at one stamp."""
    times = [t for _, t in sorted(starts.items())]
    pairs = [b <= a for a, b in itertools.pairwise(times) if math.isfinite(a + b)]
    if len(pairs) >= 2 and all(b == a for a, b in itertools.pairwise(times)):
        return True
    return len(pairs) >= _FLAT_PAIRS and sum(pairs) * 2 >= len(pairs)


def _borrowed(data: JobData, starts: dict[int, float], cell: tuple[int, str] | None) -> bool:
    """Whether the failure (``cell``: its bucket and template) sits in the last bucket printed
    with no time of its own in it: its first line's time is, to the millisecond, the
    bucket's line's or earlier (a worker's unstamped traceback took the stamp of the driver's
    line before it), so the bucket's start says nothing of when it struck."""
    if cell is None or not starts:
        return False
    bucket, tid = cell
    if bucket != max(starts):
        return False
    first = min((c.first_ts for (_, t), c in data.cells.items() if t == tid), default=math.inf)
    earlier = math.isfinite(first) and first % 1 != 0 and first < starts[bucket]
    return earlier or _lent(data, bucket, first)


def _lent(data: JobData, bucket: int, first: float) -> bool:
    """Whether a line first seen at ``first`` took the stamp of a node's iteration line in
    ``bucket``: the very time, to the millisecond (a traceback on stderr has none of its own):
    it says only that it came after; or, in the node's last bucket, a time among its ranks'
    lines of that step, which they printed within ``_RANKS_APART`` of each other (the line took
    its own rank's, in that rank's file). (In whole seconds, two lines of one second are no
    sign of that.)"""
    if first % 1 == 0:
        return False
    starts = {n: t for (n, b), t in data.node_iteration_start.items() if b == bucket}
    if first in starts.values():
        return True
    # (each rank of a node prints the step's line, to its own file, within a moment of the
    # others: a line there took its own rank's, between its node's first and last of them)
    progress = periodic(data)
    for (node, tid), cell in data.cells.items():
        start = starts.get(node)
        if (
            start is not None
            and tid in progress
            and data.node_last_iteration.get(node) == bucket
            and start <= first <= cell.last_ts <= start + _RANKS_APART
        ):
            return True
    return False


#: Seconds within which the ranks of one node print the same step's progress line.
_RANKS_APART = 1.0


def _stated_by(data: JobData, bucket: int, tid: str, saving: bool) -> int | None:
    """The iteration an error of ``bucket`` states it struck (``_STATED_ITERATION``), when
    that falls before the next bucket; failing while ``saving``, the step of the checkpoint it
    names ("tmp-checkpoint-560", "global_step120": the step it saved), from the bucket on,
    no further past the last iteration printed than a clock reaches (``CLOCK_STEPS``: a
    traceback's time, borrowed from a line before it, may lag its save by buckets). None: its
    words state none there."""
    info = data.templates.get(tid)
    if info is None:
        return None
    after = [b for b in data.iteration_spans if b > bucket]
    limit = min(after) if after else bucket + max(data.iteration_spans.get(bucket, 1), 1) * 100
    found = _STATED_ITERATION.search(info.message)
    if found is not None and bucket <= int(found.group(1)) < limit:
        return int(found.group(1))
    step = stated_step(info.message) if saving else None
    printed = max((b + max(n, 1) - 1 for b, n in data.iteration_spans.items()), default=bucket)
    return step if step is not None and bucket <= step <= printed + CLOCK_STEPS else None


def _states_its_iteration(data: JobData, cell: tuple[int, str] | None) -> bool:
    """Whether the best-ranked event with a bucket (``cell``: its bucket and template) states
    the iteration it struck."""
    info = data.templates.get(cell[1]) if cell is not None else None
    return info is not None and _STATED_ITERATION.search(info.message) is not None


def _after_the_last(data: JobData) -> tuple[ReportIteration, ...]:
    """The iteration after the last one the job printed, when nothing placed the failure on the
    timeline (progress on stdout with no time of its own, the errors on stderr): a job that
    stops in training stops in the iteration it never finished."""
    if not data.node_last_iteration:
        return ()
    last = max(data.node_last_iteration.values())
    return (
        ReportIteration(
            iteration=last + 1,
            score=1.0,
            why="last",
            distance=None,
            threshold=None,
            events=(),
            missing_events=(),
        ),
    )


#: Iterations a job may take to notice a failure (Ray's driver hearing a worker died).
_NOTICING = 2


def _by_the_clock(
    data: JobData, cell: tuple[int, str] | None, saving: bool = False
) -> tuple[ReportIteration, ...]:
    """The iteration a failure struck by the job's clock (:mod:`l4_plugin.analysis.clock`):
    from a point the job is known to have reached at a known time, counted at the job's pace
    to the moment the failure began (``_failure_moment``): its progress bar's last frame
    (within the interval the bar's lines came at, ``_clock_reach``); a job without such a bar,
    the latest step a stamped line states (a checkpoint's; within ``CLOCK_STEPS``). Empty
    when neither places it after an iteration the job printed. ``saving``: the job failed
    while saving a checkpoint: in the iteration the last save begun before the failure states
    (``_save_step``), where one does."""
    if cell is None or not data.node_last_iteration:
        return ()
    printed = max(data.node_last_iteration.values())
    saved = _save_step(data, cell[1], printed) if saving else None
    if saved is not None:
        return _clocked(saved, cell[1])
    clock = _pinned(data, _began(data, bar_clock(data.progress_lines, periodic(data))))
    # (a bar's own elapsed times first: its rate is an average over saves and slow starts)
    pace = (_training_pace(data, clock) if clock is not None else None) or _stated_pace(data)
    if pace is None:
        return ()
    # (a bar's frames say where the job stood better than a checkpoint's step does: where
    # there is a bar, the steps its lines state are left alone)
    anchor = (
        step_anchor(data.step_lines, printed, CLOCK_STEPS, data.step_counts)
        if clock is None
        else None
    )
    # (a bar's last frame may have been pinned to the very line that began a save; a stamped
    # step is often a save's last line)
    points = [(clock.last, clock.last[0] + _clock_reach(clock), 0.0)] if clock is not None else []
    # (a stamped step may lie far behind the progress printed: what a kill lost is counted
    # from the last iteration printed)
    if anchor is not None:
        points.append((_advanced(data, anchor, printed), printed + CLOCK_STEPS, _AFTER))
    for (last, shown), reach, after in points:
        moment = _failure_moment(data, cell[1], shown)
        # (else, by a bar's frames, when the job noticed it: the failure came no later, nor
        # past the point the bar's next line would have shown)
        bound = (
            moment is None
            and after == 0.0
            and clock is not None
            and (moment := _noticed(data, shown)) is not None
        )
        # A checkpoint's save after the point pauses the iterations for as long as it takes
        # (``_saved_between``); where no line says whether it had ended when the job failed
        # (the progress after it is what is missing): the iteration after the last printed.
        # (A report's moment: a save begun with the point's own line, too.)
        held = _saved_between(data, shown + (0.0 if bound else after), moment, saving)
        if moment is None or held is None:
            continue
        steps = max(1, math.ceil((moment - shown - held) / pace))
        if bound:
            steps -= 1  # (the report came about an iteration after: as ``iteration_at``'s)
        # (a moment the next line would have shown, or a little past it — the error is
        # printed after the failure, a report after the error: no later than that line; past
        # it, the moment says nothing. Unless it is when the job's stuck collective began and
        # the point is a stamped step: the job went forward till then, its lines lost with the
        # buffer a kill took, counted however far, as ``iteration_at``'s ``beyond``; a bar's
        # last frame placed by a borrowed stamp is no such sure point)
        if after == _AFTER and moment == _stall_moment(data, shown):
            if printed < last + steps:
                return _clocked(last + steps, cell[1])
            continue
        if steps > reach - last + _NOTICING:
            continue
        steps = min(max(1, steps), reach - last)
        if printed < last + steps <= reach:
            return _clocked(last + steps, cell[1])
    return ()


def _advanced(data: JobData, anchor: tuple[int, float], printed: int) -> tuple[int, float]:
    """The stamped step ``anchor`` (the iteration done, and when) carried on to the last
    iteration printed, ``printed``, by the seconds each iteration after it states it took
    (NeMo's "train_step_timing", Megatron's "elapsed time per iteration": a pace's error, times
    the iterations counted, is an iteration or two over a hundred); unchanged where one
    states none."""
    step, shown = anchor
    seconds: dict[int, float] = {}
    for (_, b), s in data.node_iteration_seconds.items():
        seconds[b] = max(s, seconds.get(b, 0.0))
    took, covered = 0.0, 0
    for b, span in sorted(data.iteration_spans.items()):
        done = range(max(b, step + 1), min(b + max(span, 1), printed + 1))
        if not done:
            continue
        if b not in seconds:
            return anchor
        took += seconds[b] * len(done)
        covered += len(done)
    if covered != printed - step:
        return anchor
    return printed, shown + took


def _save_step(data: JobData, tid: str, printed: int) -> int | None:
    """The step the latest stamped save line before the failure (``tid``'s first time) states
    ("Scheduled async checkpoint save for …step=459…": the step done when the save began), when
    it lies from the last iteration printed to ``CLOCK_STEPS`` past it (a bar's buffered
    frames lost at the kill); None: none does."""
    moment = _failure_moment(data, tid, -math.inf)
    if moment is None:
        return None
    saved = [
        (t, step)
        for t, step in _save_points(data)
        if t <= moment and printed <= step <= printed + CLOCK_STEPS
    ]
    return max(saved)[1] if saved else None


# A stamped line about a checkpoint's save (``step_lines`` hold every line stating a step).
_SAVE_LINE = re.compile(r"(?i)checkpoint")


def _save_points(data: JobData) -> list[tuple[float, int]]:
    """``(time, step)`` of the stamped lines about a checkpoint's save that state a step."""
    return [
        (t, step)
        for t, m in data.step_lines
        if _SAVE_LINE.search(m) and (step := stated_step(m)) is not None
    ]


def _clocked(iteration: int, tid: str) -> tuple[ReportIteration, ...]:
    """The iteration a clock placed the failure in, by the event ``tid``'s moment."""
    return (
        ReportIteration(
            iteration=iteration,
            score=1.0,
            why="clock",
            distance=None,
            threshold=None,
            events=(tid,),
            missing_events=(),
        ),
    )


_PACE_FRAMES = 9  # the bar's last frames whose intervals give its pace


def _training_pace(data: JobData, clock: BarClock) -> float | None:
    """Seconds per iteration between the bar's last frames, over the intervals in which no
    checkpoint was saved (a save every 30 iterations holds up one interval of three: the
    iterations after the last frame are counted at the pace of training); when every interval
    held one (a bar drawn every 10 iterations, a save every 10), each interval less the time
    its save's stamped lines say it held the iterations (``_held``); else the bar's own pace."""
    frames = clock.frames[-_PACE_FRAMES:]
    every = _every_interval_saved(data, frames)
    if every is not None:
        return every
    paces = _unsaved_paces(data, clock, frames)
    # (the saves between a node's first and last, whose lines the index did not keep: the
    # intervals half as slow again as the fastest held one)
    paces = [p for p in paces if p <= _HELD_PACE * min(paces, default=math.inf)]
    return float(np.median(paces)) if paces else clock.pace


def _every_interval_saved(data: JobData, frames: Sequence[tuple[int, float]]) -> float | None:
    """Seconds per iteration of training alone when the job saved a checkpoint at least once
    in every interval between the bar's ``frames`` (saves every 10 iterations, a line of the
    bar every 10): each interval less its saves, each holding the iterations up as long as the
    median of the spans the saves' stamped lines show (``_held``: "Scheduled … step=19" to
    "save for step 20 … finalized"), at the stride their steps keep. None: fewer than two saves
    state their steps, or their stride is longer than the bar's (some intervals saved
    nothing: ``_unsaved_paces``)."""
    spans = stated_times(_save_points(data))
    steps = sorted(spans)
    held = [b - a for a, b in spans.values() if b > a]
    gaps = [n for (i1, _), (i2, _) in itertools.pairwise(frames) if (n := i2 - i1) > 0]
    if len(steps) < 2 or not held or not gaps:
        return None
    stride = float(np.median(np.diff(steps)))
    if not 0 < stride <= min(gaps):
        return None
    hold = float(np.median(held))
    paces = [
        (e2 - e1 - (i2 - i1) / stride * hold) / (i2 - i1)
        for (i1, e1), (i2, e2) in itertools.pairwise(frames)
        if i2 > i1 and e2 > e1
    ]
    paces = [p for p in paces if p > 0]
    return float(np.median(paces)) if paces else None


def _unsaved_paces(
    data: JobData, clock: BarClock, frames: Sequence[tuple[int, float]]
) -> list[float]:
    """Seconds per iteration between consecutive ``frames`` of ``clock``, over the intervals
    in which no checkpoint's save began (``_save_times``)."""
    saved = _save_times(data)
    return [
        (e2 - e1) / (i2 - i1)
        for (i1, e1), (i2, e2) in itertools.pairwise(frames)
        if i2 > i1 and e2 > e1 and not any(clock.start + e1 < t < clock.start + e2 for t in saved)
    ]


#: An interval between a bar's frames this much slower than the fastest held a save.
_HELD_PACE = 1.5


def _by_stated_steps(data: JobData, analysis: Analysis) -> tuple[ReportIteration, ...]:
    """Where a job that printed no progress stood when it failed in training: the latest step
    a stamped line states (a checkpoint's save, ``clock.step_anchor``), counted at the pace the
    step lines keep (``JobData.step_pace``) to the moment the failure began (the best-ranked
    event's first time, or where a timeout's wait began: ``_failure_moment``), no more than
    ``CLOCK_STEPS`` on; without a pace, at the pace of the job's start to that step (a bound:
    start-up included). Empty when nothing says (the failure began before that step)."""
    pace = data.step_pace
    stage = analysis.fusion.stage
    if data.time_unit != "ts" or stage not in ("training", "checkpointing"):
        return ()
    anchor = step_anchor(data.step_lines, None, 0, data.step_counts)
    first = next(iter(analysis.fusion.events), None)
    if anchor is None or first is None:
        return ()
    step, shown = anchor
    if pace is None:
        began = _first_step(data, step, shown, first.template_id)
        # (one save and no pace: the time to reach its step from the job's start, start-up
        # included, bounds an iteration's; the failure came at least that many steps on)
        start = data.job.start_ts
        if began or start is None or not start < shown or step <= 0:
            return began
        pace = (shown - start) / step
    moment = _failure_moment(data, first.template_id, shown)
    if moment is None or (stage == "training" and _saving(data, shown + _AFTER, moment)):
        return ()
    steps = 0 if stage == "checkpointing" else max(1, math.ceil((moment - shown) / pace))
    if steps > CLOCK_STEPS:
        return ()
    return _clocked(step + steps, first.template_id)


def _first_step(data: JobData, step: int, shown: float, tid: str) -> tuple[ReportIteration, ...]:
    """A run that printed no progress and keeps no pace: when the latest stated step is where
    training began (``clock.resumed_step``: "Training starts at step 61") and the failure came
    after it, the job failed in the first step it ran; nothing says it got further. Empty
    otherwise."""
    began = any(
        t == shown and resumed_step(m) == step for t, m in data.step_lines if math.isfinite(t)
    )
    moment = _failure_moment(data, tid, shown)
    if not began or moment is None or moment < shown:
        return ()
    return _clocked(step + 1, tid)


def _slowed_by_the_bar(data: JobData, slow: Slowdown) -> int | None:
    """The first slow iteration by the job's progress bar's frames (``clock.slowed_from``),
    when that falls no later than the onset the stated rates gave (None: no bar, or it does
    not say)."""
    clock = bar_clock(data.progress_lines, periodic(data))
    if clock is None:
        return None
    held = [(a - clock.start, b - clock.start) for a, b in _held(data)]
    found = slowed_from(clock.frames, slow.reference, slow.first_iteration, held)
    return found if found is not None and found <= slow.first_iteration else None


def _onset_by_the_clock(data: JobData, slow: Slowdown) -> int | None:
    """Where a slowdown began in a job whose progress lines have no time of their own (the
    buckets' times are borrowed, ``_unplaced_progress``, and so is where the index placed the
    lines that started with it): the first of those lines placed on the bar's clock
    (``_pinned``). As in ``_onset``, it came once the first slow iteration had run: the
    iterations after the bar's frame before it at the pace the job had trained at until then
    (its intervals without a save), the slow one at the slowdown's ratio; when that falls in
    the onset's bucket or the next. None: no bar, no such line, or elsewhere."""
    clock = _pinned(data, _began(data, bar_clock(data.progress_lines, periodic(data))))
    firsts = [
        cell.first_ts
        for (_, tid), cell in data.cells.items()
        if tid in slow.events and math.isfinite(cell.first_ts)
    ]
    if clock is None or not firsts:
        return None
    seen = min(firsts) - clock.start
    before = [(i, e) for i, e in clock.frames if e <= seen]
    paces = _unsaved_paces(data, clock, before[-_PACE_FRAMES:])
    if not paces:
        return None
    pace = float(np.median(paces))
    last, shown = before[-1]
    held = [(a - clock.start, b - clock.start) for a, b in _held(data)]
    lag = slow.ratio if slow.ratio > 1 else 0.0
    onset = last + max(0, int(unheld(shown, seen, 0.0, held) / pace - lag)) + 1
    nxt = [i for i, e in clock.frames if e > seen]
    onset = min(onset, nxt[0]) if nxt else onset
    return onset if slow.first_iteration <= onset < _onset_end(data, slow.first_iteration) else None


def _onset_end(data: JobData, bucket: int) -> float:
    """Where the bucket after the one after a slowdown's onset bucket ends: a line that started
    with the slowdown places it within its onset bucket or the next (``_onset``)."""
    spans = data.iteration_spans
    after = sorted(b for b in spans if b > bucket)[:2]
    return after[-1] + max(spans.get(after[-1], 1), 1) if after else math.inf


def _slowed_by_the_buckets(data: JobData, slow: Slowdown, starts: dict[int, float]) -> int | None:
    """The first slow iteration by the times the job's iteration buckets began (``starts``,
    ``clock.slowed_from``), when that falls within the onset's bucket (the rates are judged
    over whole buckets: where in a bucket of eleven iterations the job slowed, the time the
    bucket took says). None: it does not say."""
    if data.time_unit != "ts" or data.iteration_spans.get(slow.first_iteration, 1) <= 1:
        return None  # (a bucket of one iteration: its stated rate says where)
    frames = sorted((b, t) for b, t in starts.items() if math.isfinite(t))
    found = slowed_from(frames, slow.reference, slow.first_iteration, _held(data))
    after = [b for b in data.iteration_spans if b > slow.first_iteration]
    end = min(after) if after else math.inf
    return found if found is not None and slow.first_iteration <= found <= end else None


def _slowed_within(data: JobData, slow: Slowdown) -> int | None:
    """The first slow iteration within the onset bucket, by the durations its iteration lines
    state: a bucket's stated seconds are the mean of its lines' (``l4.iteration_seconds``), so
    one that lies between the pace before (``slow.reference``) and the pace of the buckets after
    it says what share of its lines came slow, the last ones. The first of them printed the
    first slow iteration or came up to a stride of lines after it: the middle of that stretch.
    None: no lines state durations there, or the bucket's mean lies outside the two paces."""
    bucket = slow.first_iteration
    per = bucket_medians(data.node_iteration_seconds)
    later = [per[b] for b in sorted(per) if b > bucket][:_SLOW_AFTER]
    mean, before = per.get(bucket), slow.reference
    if mean is None or not later or not 0 < before < mean < (after := statistics.median(later)):
        return None
    span = max(data.iteration_spans.get(bucket, 1), 1)
    lines = _marker_lines(data, bucket)
    if lines <= 0:
        return None
    stride = max(span / lines, 1.0)
    slow_lines = round((mean - before) / (after - before) * span / stride)
    first_slow = bucket + span - slow_lines * stride
    return round(first_slow - (stride - 1) / 2)


#: Buckets after a slowdown's onset whose stated paces say how slow the job then ran.
_SLOW_AFTER = 3


def _marker_lines(data: JobData, bucket: int) -> float:
    """How many iteration lines each node that prints them printed in a bucket: of the
    iteration-marker template with the most lines there, its lines over the nodes printing it
    (0: none)."""
    rules = default_stage_rules()
    here = {
        tid: count
        for (b, tid), (_, count) in data.iteration_cells.items()
        if b == bucket
        and (info := data.templates.get(tid)) is not None
        and rules.role(info.text).iteration is not None
    }
    printers = Counter(tid for _, tid in data.cells if tid in here)
    return max((n / max(printers[tid], 1) for tid, n in here.items()), default=0.0)


def _held(data: JobData) -> list[tuple[float, float]]:
    """The spans checkpoints' saves held the iterations up: from the first to the last stamped
    line stating a save's step (``clock.stated_times``: "Scheduled … step=89", "save for step
    90 (…step=89…) finalized")."""
    return [(a, b) for a, b in stated_times(_save_points(data)).values() if b > a]


def _began(data: JobData, clock: BarClock | None) -> BarClock | None:
    """``clock`` started no earlier than its node's last line that begins training before the
    bar's last frame ("***** Running training *****", Megatron's "training ...": the bar is
    drawn after it, and another file of the node may hold it)."""
    if clock is None:
        return None
    _, shown = clock.last
    rules = default_stage_rules()
    begun = clock.start
    for (node, tid), cell in data.cells.items():
        info = data.templates.get(tid) if node == clock.node else None
        role = rules.role(info.text) if info is not None else None
        if role is None or role.stage != "training" or role.iteration:
            continue
        for t in (cell.first_ts, cell.last_ts):
            if begun < t <= shown:
                begun = t
    return replace(clock, start=begun)


def _pinned(data: JobData, clock: BarClock | None) -> BarClock | None:
    """``clock`` started no later than a stamped line that states a step the bar showed, less
    the time the bar had run at that frame (a checkpoint's save begins right after the step's
    frame: "Scheduled async checkpoint save … step=279" at 14:43:43, the frame of global step
    279 at 38:21), of the lines that first stated each step; the earliest such moment, where
    it falls after the start the stamps before the frames allow (a bar's lines borrow the last
    stamp before them, which may be a minute older than the bar)."""
    if clock is None:
        return None
    stated = stated_times(
        (t, step) for t, m in data.step_lines if (step := stated_step(m)) is not None
    )
    bounds = [
        first - elapsed
        for step, (first, _) in stated.items()
        if (elapsed := _elapsed_at(clock, step, stated)) is not None
        and first - elapsed >= clock.start
    ]
    return replace(clock, start=min(bounds)) if bounds else clock


def _elapsed_at(clock: BarClock, step: int, stated: dict[int, tuple[float, float]]) -> float | None:
    """The bar's elapsed time at ``step``: its frame's; between two frames (a bar drawn every
    50 iterations, a save every 340), at the pace of the interval less the saves the stamped
    steps in it held it up for (``stated``: first and last time each step is stated); None
    outside the frames."""
    frames = clock.frames
    for (i1, e1), (i2, e2) in itertools.pairwise(frames):
        if step == i1:
            return e1
        if i1 < step < i2:
            held = sum(b - a for s, (a, b) in stated.items() if i1 <= s < i2)
            return e1 + (step - i1) * max(e2 - e1 - held, 0.0) / (i2 - i1)
    return frames[-1][1] if frames and frames[-1][0] == step else None


def _clock_reach(clock: BarClock) -> int:
    """How many iterations past its last frame a bar's clock may place a failure: within the
    interval its lines came at (Ray forwards a bar ten frames to a line; a bar drawn every
    iteration showed where the job stood, and its clock adds only the error of its start)."""
    (before, _), (last, _) = clock.frames[-2:]
    return last - before


def _stated_pace(data: JobData) -> float | None:
    """Seconds per iteration the job's last progress lines state (Megatron's "elapsed time per
    iteration", NeMo's "train_step_timing", tqdm's "s/it"): the median over its last
    buckets; None: they state none."""
    seconds = data.node_iteration_seconds
    if not seconds:
        return None
    buckets = sorted({b for _, b in seconds})[-_PACE_BUCKETS:]
    stated = [s for (_, b), s in seconds.items() if b in buckets and s > 0]
    return float(np.median(stated)) if stated else None


_PACE_BUCKETS = 5


#: Seconds after a stamped step within which a save's line is that step's own (the anchor).
_AFTER = 1e-3


def _saved_between(data: JobData, after: float, before: float | None, saving: bool) -> float | None:
    """The seconds a checkpoint's save held the iterations up from ``after`` to ``before``:
    0 when no save's line came then; from its first line to its last when the job failed in
    training (not ``saving``: the save had ended) and a line of another template than the
    first ended it (NeMo's "Scheduled async checkpoint save …" to "… finalized", torchtitan's
    "Saving the checkpoint" to "Finished saving …": the iterations waited, no progress line
    shows how long); None: a save under way (the job failed while saving: its lines are of the
    save it failed in, a save's first line came last), or one whose end no line shows."""
    if before is None:
        return None
    lines = sorted((x, t) for x, t in _save_lines(data) if after <= x < before)
    if not lines:
        return 0.0
    if saving or lines[0][1] == lines[-1][1]:
        return None
    return lines[-1][0] - lines[0][0]


def _saving(data: JobData, after: float, before: float) -> bool:
    """Whether a line of a checkpoint's save (``_saves``) was printed from ``after`` to before
    ``before`` (a node's first or last of the template)."""
    return any(after <= t < before for t in _save_times(data))


def _save_times(data: JobData) -> list[float]:
    """The first and last times, per node, of the job's checkpoint save templates."""
    return [x for x, _ in _save_lines(data)]


def _save_lines(data: JobData) -> list[tuple[float, str]]:
    """``(time, template)`` of each node's first and last line of the job's checkpoint save
    templates."""
    saves = _save_templates(data)
    return [
        (x, t) for (_, t), c in data.cells.items() if t in saves for x in (c.first_ts, c.last_ts)
    ]


def _save_templates(data: JobData) -> frozenset[str]:
    """The job's templates that are a checkpoint's save (``_saves``)."""
    return frozenset(t for t, info in data.templates.items() if _saves(info))


def _failure_moment(data: JobData, tid: str, after: float) -> float | None:
    """When the failure began, no earlier than ``after``: the earliest of the best-ranked
    event's first time (template ``tid``) and the moments the job's timeouts say their waits
    began (``temporal.waited``); None when neither falls after ``after`` (the event came before
    the bar's last frame: it is not what stopped the job)."""
    firsts = [c.first_ts for (_, t), c in data.cells.items() if t == tid]
    stall = _stall_moment(data, after)
    moments = [m for m in (*firsts, stall) if m is not None and math.isfinite(m) and m >= after]
    return min(moments) if moments else None


def _stall_moment(data: JobData, after: float) -> float | None:
    """The earliest moment, no earlier than ``after``, a timed-out wait began (the line's time
    less what it says it waited, ``temporal.waited``): where the job stopped going forward."""
    waits = {t: w for t, info in data.templates.items() if (w := waited(info.message)) is not None}
    stalls = [c.first_ts - waits[t] for (_, t), c in data.cells.items() if t in waits]
    moments = [m for m in stalls if math.isfinite(m) and m >= after]
    return min(moments) if moments else None


def _noticed(data: JobData, after: float) -> float | None:
    """When the job noticed a failure whose own line has no time after ``after`` (a worker's
    traceback on stderr, unstamped, copied into a driver's log): the first line of a warning
    or an error the job printed nowhere before ``after`` (Ray Tune's "Trial task failed", the
    launcher agent's "Sending process 2932826 closing signal SIGTERM"); the failure came no
    later. None: no such line."""
    firsts: dict[str, float] = {}
    for (_, t), c in data.cells.items():
        firsts[t] = min(c.first_ts, firsts.get(t, math.inf))
    noticed = [
        ts
        for t, ts in firsts.items()
        if after < ts < math.inf
        and (level := Level.parse(data.templates[t].level)) is not None
        and level.is_flagged
    ]
    return min(noticed) if noticed else None
