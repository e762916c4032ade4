"""The stage a job failed in: its markers first, then the failing record's stack and words.

The job's own stage and iteration markers say where it was (:class:`~l4_plugin.analysis.temporal.
StageAnalyzer`; lines no marker placed sit in ``init`` and do not outvote them). Three things
refine that, read from the failing records (the root cause's records first, then the job's
errors in the order they were printed):

* a job whose failure began while it was training did not fail in start-up, whatever the ranks
  printed after it (torchrun restarts the workers, which go through start-up again);
* a job loading its data or its model failed in whichever of the two the root record's
  frames or words name (the order of the two differs per framework; the last marker may be
  the other's);
* a job in training whose root record's *innermost* stack frame belongs to another stage failed
  there: a DataLoader worker's death, a checkpoint save, a resume's load all happen while the
  iteration markers say "training" (and a DataLoader's after a save's marker);
* a job whose ranks printed no marker beyond start-up (a pasted excerpt) failed where the root
  records' stack says, or the stack frames printed just above the first (rich prints a
  traceback's frames above the error); else in start-up when a start-up marker came right before
  the failure (NCCL's transport banner, then the first transfer failing); else where the failing
  records' words put it (a GPU's ECC error or an IB completion error strikes a running job; a
  port in use, a rendezvous timeout strike at start-up); else in start-up.

Only the root's records count for a stack (ranks that failed in reaction were wherever they
happened to be), and a kernel or BMC line is a stream of its own: the lines near it in another
file say nothing about it.

The stage rules themselves are the ingest's (``ingest/stages.yaml``: ``stages``, ``iterations``,
``frames``); they reach the analysis through :class:`StageReader`, so that it stays pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from l4_plugin.analysis.clock import stated_step
from l4_plugin.analysis.lexicon import told_part
from l4_plugin.analysis.origin import frames_of
from l4_plugin.analysis.results import StageResult
from l4_plugin.analysis.tables import JobData
from l4_plugin.records import PRE_TRAINING_STAGES

#: How many lines before the failing record its stack may have been printed (rich tracebacks).
BEFORE_LINES = 40
BEFORE_SECONDS = 2.0
#: A failure at most this many lines (and, with times, seconds) after the job's last start-up
#: marker on its node happened during start-up.
NEAR_LINES = 100
NEAR_SECONDS = 300.0
#: Stages a failing record's frames may name while the markers say training, or checkpointing
#: (the last marker a save's, finished or not, and the stack in a DataLoader: Megatron evaluating
#: right after it saved, its validation iterator run dry).
_WITHIN = {
    "training": ("data_loading", "model_loading", "checkpointing"),
    "checkpointing": ("data_loading",),
}
#: Start-up stages whose order differs per framework: a failing record's frames or words
#: choose between them over the last marker.
_LOADING = ("data_loading", "model_loading")
#: Stages of a running job: a root cause printed in one was not a start-up failure.
_RUNNING = ("training", "checkpointing")
#: The failing records (most telling first) whose stage or stack is the root's.
_ROOTS = 3
#: ... and those whose stack may move a job in training to another stage (the root's record and
#: the one after it: a traceback's header and its frames may be two records).
_INNER = 2


class StageReader(Protocol):
    """What the analysis needs of the ingest's stage rules."""

    def stage_of_stack(self, text: str) -> str | None:
        """The stage the innermost stack frame of a record names."""

    def stage_of_words(self, text: str) -> str | None:
        """The stage a failing record's words imply."""

    def marker_stage(self, body: str) -> str | None:
        """The stage a template marks, when it is a stage or iteration marker."""


def failing_stage(
    data: JobData,
    marked: StageResult | None,
    failing: Sequence[str],
    reader: StageReader | None,
    printed_in: Mapping[str, str | None] | None = None,
    consequences: frozenset[str] = frozenset(),
) -> str | None:
    """The job's failing stage (see the module docstring); ``failing`` are template ids of the
    failing records, most telling first, ``printed_in`` the stage each template was printed
    in, ``consequences`` the templates whose words are a consequence's: while the job ran, a
    teardown's stack (a DataLoader's iterator stopping its workers) names no stage it failed
    in."""
    stage = marked.stage if marked is not None else None
    if reader is None:
        return stage
    texts = [_text(data, t) for t in failing]
    if any(s != "init" for _, s in data.stage_spans):
        printed = [(printed_in or {}).get(t) for t in failing[:_ROOTS]]
        running = [st for st in printed if st in _RUNNING]
        if stage in PRE_TRAINING_STAGES and running:
            # The ranks went through start-up again after the failure began in training: a
            # restart (a kernel line whose clock says nothing of the stage is skipped).
            stage = running[0]
        if stage in _RUNNING:
            # (the ranks' records: a kernel's line has no stack of the job's)
            ranks = [
                t for t in failing if t not in data.job.system_templates and t not in consequences
            ]
            inner = _first_stage(
                reader.stage_of_stack, _told([_text(data, t) for t in ranks[:_INNER]])
            )
            if inner in _WITHIN.get(stage, ()):
                return inner
        if stage in _LOADING:
            # Loading the data and the model interleave (a dataset indexed after the weights
            # load, the first batch fetched after both): the root record's own frames, or
            # words only one of them prints (a DataLoader worker's death, a state dict that
            # does not fit), say which of the two it was in, past the last marker.
            other = _first_stage(reader.stage_of_stack, _told(texts[:_INNER]))
            other = other or _first_stage(reader.stage_of_words, texts[:1])
            if other in _LOADING:
                return other
        return stage
    # Only the root's records: the stacks of ranks that failed in reaction were wherever they
    # happened to be.
    above = [_text(data, t) for t in _before(data, failing[:1])]
    roots = [*_told(texts[:_ROOTS]), *(t for t in above if frames_of(t, frozenset()))]
    found = _first_stage(reader.stage_of_stack, roots)
    if found is not None:
        return found
    # (a job that saved a checkpoint of a step before the failure was past start-up, however
    # near its last start-up line the failure came: NeMo's bar may not have drawn a line yet)
    saved = bool(failing) and _saved_a_step(data, failing[0])
    if failing and not saved and _soon_after_start(data, failing[0], reader):
        return "init"
    for text in texts:
        found = reader.stage_of_words(text)
        if found is not None:
            return found
    return "training" if saved and (stage is None or stage in PRE_TRAINING_STAGES) else stage


#: A stamped line about saving a checkpoint (not loading one: a resume states its step too).
_SAVING = re.compile(r"(?i)\bsav(?:e|ed|ing)\b")


def _saved_a_step(data: JobData, tid: str) -> bool:
    """Whether a stamped line before the failing record ``tid`` says a checkpoint of a step
    past the first was being saved ("Scheduled async checkpoint save for …step=19…", "Saving
    model checkpoint to …/checkpoint-500", "saving checkpoint at iteration 500"): the job had
    trained. A record of unknown time says nothing."""
    at = _first_cell(data, tid)
    if at is None or not math.isfinite(at[2]):
        return False
    return any(
        t <= at[2] and _SAVING.search(m) is not None and (stated_step(m) or 0) > 0
        for t, m in data.step_lines
        if math.isfinite(t)
    )


def _first_stage(read: Callable[[str], str | None], texts: Sequence[str]) -> str | None:
    """The stage the first of ``texts`` that names one names."""
    for text in texts:
        found = read(text)
        if found is not None:
            return found
    return None


def _told(texts: Sequence[str]) -> list[str]:
    """Each text as far as its last printed exception (``told_part``), then whole where that
    is less: the stage where a chain's printed exception was raised, else what the rest of it
    names (Ray's header of the task that re-raised it, "ray::Worker.init_model()")."""
    out: list[str] = []
    for text in texts:
        told = told_part(text)
        out.extend((told, text) if told != text else (text,))
    return out


def _text(data: JobData, tid: str) -> str:
    info = data.templates.get(tid)
    return f"{info.text}\n{info.message}" if info is not None else ""


def _first_cell(data: JobData, tid: str) -> tuple[str, float, float] | None:
    """(node, position, time) of a template's earliest occurrence."""
    cells = [(n, c) for (n, t), c in data.cells.items() if t == tid]
    if not cells:
        return None
    node, cell = min(cells, key=lambda nc: (nc[1].first_pos, nc[0]))
    return node, cell.first_pos, cell.first_ts


def _before(data: JobData, failing: Sequence[str]) -> list[str]:
    """Templates printed on the failing record's node in the lines just before it (with times,
    in the same moment; a record of unknown time in a timed job has none), nearest first."""
    if not failing:
        return []
    at = _first_cell(data, failing[0])
    if at is None or failing[0] in data.job.system_templates:
        return []
    node, pos, ts = at
    timed = data.time_unit == "ts"
    if timed and not math.isfinite(ts):
        return []
    near = [
        (cell.first_pos, t)
        for (n, t), cell in data.cells.items()
        if n == node
        and pos - BEFORE_LINES <= cell.first_pos < pos
        # Positions count lines per file: with times, the frames came in the same moment.
        and not (timed and not abs(cell.first_ts - ts) <= BEFORE_SECONDS)
    ]
    return [t for _, t in sorted(near, reverse=True)]


def _soon_after_start(data: JobData, tid: str, reader: StageReader) -> bool:
    """True when a start-up marker came on the failing record's node shortly before it (a
    kernel or BMC line is another stream: its place says nothing of the training log's)."""
    at = _first_cell(data, tid)
    if at is None or tid in data.job.system_templates:
        return False
    node, pos, ts = at
    for (n, t), cell in data.cells.items():
        info = data.templates.get(t)
        if n != node or info is None or not cell.first_pos <= pos:
            continue
        if reader.marker_stage(info.text) != "init" or pos - cell.first_pos > NEAR_LINES:
            continue
        timed = data.time_unit == "ts" and math.isfinite(ts) and math.isfinite(cell.first_ts)
        if timed and ts - cell.first_ts > NEAR_SECONDS:
            continue
        return True
    return False


def last_marker(data: JobData, reader: StageReader | None) -> tuple[str, str] | None:
    """The stage or iteration marker the job printed last (node, template): where it stood
    when it ended, for a job that stopped without saying why. By time where the marker's
    lines have one, else by place in their file; None without markers."""
    if reader is None:
        return None
    # (each template read once: a large job's cells are its nodes times its templates)
    markers = {t for t, info in data.templates.items() if reader.marker_stage(info.text)}
    best: tuple[float, float, str, str] | None = None
    for (node, tid), cell in data.cells.items():
        if tid not in markers:
            continue
        at = cell.last_ts if data.time_unit == "ts" and math.isfinite(cell.last_ts) else -math.inf
        key = (at, cell.first_pos, node, tid)
        if best is None or key > best:
            best = key
    return (best[2], best[3]) if best is not None else None
