"""The job's timeline: stage and iteration boundaries from the ranks that print markers.

Few ranks print progress: Megatron-LM's iteration lines come from the last pipeline stage only,
DeepSpeed, HF Trainer and Lightning print from global rank 0, while torchrun, NCCL and the kernel
print on every rank. A file that has printed no iteration marker of its own cannot tell which
stage or iteration its lines belong to, so while it reads they are keyed by time (a
:data:`UNPLACED` stage and a one-second slot) and, once every file is read, placed on the
timeline the marker-printing files drew: the (stage, iteration) the job was in when the line was
printed. Lines without a timestamp take the time of the nearest stamped line before them in the
same file; a run of timeless error or warning lines takes the nearer of the stamped lines around
it (``rollup.time_ref``): an error block is printed together, the line before may be hours older.

Reading a file records each transition of its stage machine (a stage switch or a new iteration)
with the raw line whose timestamp it inherits; the first file that reaches a transition defines
its time (ranks of one job are in step to well within an iteration). Timestamps are parsed once
per transition, at the end (``resolve``), with the job's clock.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

from l4_plugin.ingest.stages import STAGE_ORDER

#: Stage prefix of a group key whose lines wait for placement: ``"?" + the file's own stage``.
UNPLACED = "?"

#: One transition: (stage, iteration, how many times the file had entered it before).
MarkKey = tuple[str, int | None, int]


def _order_iteration(key: MarkKey) -> float:
    stage, it, _ = key
    if it is not None:
        return float(it)
    return -math.inf if STAGE_ORDER.index(stage) < STAGE_ORDER.index("training") else math.inf


class Timeline:
    """Stage and iteration transitions of a job, with the line that timestamps each."""

    def __init__(self) -> None:
        self.marks: dict[MarkKey, str] = {}
        self._seq: dict[MarkKey, int] = {}  # order of recording: a file's own order
        self._times: list[float] = []
        self._states: list[tuple[str, int | None]] = []
        #: The iterations whose first entry into training, ("training", n, 0), is marked: a
        #: run of a node's iteration markers asks whether the node's earlier files marked them
        #: all (``rollup._enter_run``) without a lookup per mark.
        self.trained: set[int | None] = set()
        #: The iterations the job saved a checkpoint at ("checkpointing", n states, once
        #: resolved): the only ones ``refine`` can move a line of.
        self.saves: set[int | None] = set()

    def mark(self, key: MarkKey, ts_ref: str | None) -> None:
        """Record a transition; the first file to reach it (with a timestamp) defines its time."""
        if ts_ref is not None and key not in self.marks:
            self.marks[key] = ts_ref
            self._seq[key] = len(self._seq)
            if key[2] == 0 and key[0] == "training":
                self.trained.add(key[1])

    def resolve(self, seconds: Callable[[str], float | None]) -> None:
        """Parse the transitions' times (``seconds`` of a reference line) and order them.

        A transition without an iteration (a rank that printed "saving checkpoint" but no
        iteration line) takes the iteration the job was in at that time.
        """
        timed = []
        for key, ref in self.marks.items():
            t = seconds(ref)
            if t is not None:
                timed.append((t, key, self._seq[key]))
        # Many transitions share a time: timestamps are whole seconds, and lines without one
        # (tqdm bars) take the last stamped line's. At one time: by iteration (a rank that
        # printed no iteration line of its own: before them when it is still starting up,
        # after them when it saves or shuts down), the start of an iteration before what
        # happens within it (a checkpoint save, the return to training after it), then in the
        # order the files printed them.
        timed.sort(
            key=lambda x: (
                x[0],
                _order_iteration(x[1]),
                0 if x[1][0] == "training" and x[1][2] == 0 else 1,
                x[2],
            )
        )
        self._times, self._states = [], []
        current: int | None = None
        for t, (stage, it, _), _ in timed:
            if it is not None:
                current = it if current is None else max(current, it)
            self._times.append(t)
            self._states.append((stage, it if it is not None else current))
        self.saves = {it for stage, it in self._states if stage == "checkpointing"}

    @property
    def empty(self) -> bool:
        """True when no marker-printing file gave a timed transition."""
        return not self._times

    def at(self, t: float) -> tuple[str, int | None]:
        """The (stage, iteration) of the job at time ``t`` (``init`` before its first marker)."""
        i = bisect.bisect_right(self._times, t) - 1
        return self._states[i] if i >= 0 else ("init", None)

    def place(self, own: str, t: float | None) -> tuple[str, int | None]:
        """The stage and iteration of a line whose file printed no iteration marker of its own.

        ``own`` is the stage its file's own markers put it in. The timeline wins when it knows
        the time; it never moves a line before a pre-training stage its own file had reached.
        """
        if t is None or self.empty:
            return own, None
        stage, it = self.at(t)
        if STAGE_ORDER.index(own) > STAGE_ORDER.index(stage) and stage != "training":
            return own, it
        return stage, it

    def refine(self, stage: str, iteration: int | None, t: float | None) -> str:
        """The stage of a line whose file has its own iteration markers.

        Its own stage machine holds, except for a checkpoint save that only another rank
        announced (Megatron-LM prints "saving checkpoint" from rank 0 only, while the iteration
        lines come from the last pipeline stage): a line printed in training at iteration K
        after the job started saving the checkpoint of iteration K belongs to that save.
        """
        if stage != "training" or iteration is None or t is None or self.empty:
            return stage
        job_stage, job_it = self.at(t)
        return "checkpointing" if job_stage == "checkpointing" and job_it == iteration else stage
