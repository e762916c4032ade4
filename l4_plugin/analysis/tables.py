"""The aggregated tables of one job that the analyses run on, and the baseline pool's statistics.

:mod:`l4_plugin.diagnosis.queries` reads them from the cluster; everything in
:mod:`l4_plugin.analysis` reads them and nothing here does I/O.

Times are epoch seconds, or line positions when the job had no timestamp at all (``time_unit``
``position``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from l4_plugin.records import is_job_node
from l4_plugin.traces import JobDumps


@dataclass(frozen=True, slots=True)
class JobAttempt:
    """One attempt of a restarted job: the nodes that printed in it and its time span."""

    attempt: int
    nodes: tuple[str, ...]
    start_ts: float | None
    end_ts: float | None
    trained: bool = False  # a rank printed progress of its own in it


@dataclass(frozen=True, slots=True)
class JobDoc:
    """What the analyses need of a job's ``l4-jobs`` document.

    The document itself is ``store.jobs.JobRecord``; ``diagnosis.queries.job_doc`` reduces a
    record to this (``analysis`` never imports the store).
    """

    id: str
    status: str
    fingerprint: str
    nodes: tuple[str, ...]
    lines: int
    start_ts: float | None
    end_ts: float | None
    config: dict[str, Any] = field(default_factory=dict)
    # Per template (occurrences, nodes) and iterations reached, as ingest recorded them (None for
    # a job ingested before ingest recorded them).
    template_stats: dict[str, tuple[int, int]] | None = None
    iterations: int | None = None
    # Whether the job had system logs (kern.log, dmesg…) and the templates only they printed
    system_logs: bool | None = None
    system_templates: frozenset[str] = frozenset()
    # Templates no rank's own output printed (kernel, agent and job files); None: not recorded.
    aux_templates: frozenset[str] | None = None
    # Nodes whose ranks printed iteration lines of their own (None: ingested before it was kept)
    progress_nodes: frozenset[str] | None = None
    # Log files its ingest read only up to a limit, one "PATH: why" each (``l4.job.cut_files``)
    cut_files: tuple[str, ...] = ()
    # The job's last complete ingest generation, and the clause selecting its documents
    generation: str | None = None
    # (empty for a JobDoc built by hand: ``diagnosis.queries.job_scope`` then selects the job)
    scope: dict[str, Any] = field(default_factory=dict)
    # The Flight Recorder traces and stacks found beside its logs (None: none)
    dumps: JobDumps | None = None
    # A restarted job's attempts (empty: it never restarted), and the one this document is
    # narrowed to (``diagnosis.queries.attempt_job``; None: the whole job)
    attempts: tuple[JobAttempt, ...] = ()
    attempt: int | None = None


@dataclass
class Cell:
    """One node × template cell: occurrences, first/last time, first position."""

    count: int = 0
    first_ts: float = math.inf
    last_ts: float = -math.inf
    first_pos: float = math.inf


@dataclass
class TemplateInfo:
    """A template of the job: text, dominant level, dominant stage, one exemplar line."""

    text: str = ""
    levels: dict[str, int] = field(default_factory=dict)
    stages: dict[str, int] = field(default_factory=dict)
    message: str = ""

    @property
    def level(self) -> str | None:
        """The level most of its lines carry (None when no line had one)."""
        return max(self.levels, key=lambda k: (self.levels[k], k)) if self.levels else None

    @property
    def stage(self) -> str | None:
        """The stage most of its lines were seen in."""
        return max(self.stages, key=lambda k: (self.stages[k], k)) if self.stages else None


@dataclass
class JobData:
    """The aggregated tables of one job (see the module docstring)."""

    job: JobDoc
    time_unit: str
    cells: dict[tuple[str, str], Cell]
    templates: dict[str, TemplateInfo]
    # (node, stage) → (first time, last time, first position, last position); NaN = no time
    stage_spans: dict[tuple[str, str], tuple[float, float, float, float]]
    # (iteration bucket start, template) → (first time, count); spans of the buckets
    iteration_cells: dict[tuple[int, str], tuple[float, int]]
    iteration_spans: dict[int, int]
    # (node, iteration bucket start) → first time on that node
    node_iteration_start: dict[tuple[str, int], float]
    node_last_iteration: dict[str, int]
    # (node, template, stage) → first time of the template on the node in that stage
    stage_first: dict[tuple[str, str, str], float] = field(default_factory=dict)
    # (node, iteration bucket start) → seconds per iteration its iteration lines state
    node_iteration_seconds: dict[tuple[str, int], float] = field(default_factory=dict)
    # Lines in which a node announces its own addresses (node, line), and lines that may name a
    # peer by address or host name (node, template, line): the job's address book and what the
    # failure evidence says of other nodes (:mod:`l4_plugin.analysis.peers`).
    announcements: tuple[tuple[str, str], ...] = ()
    peer_lines: tuple[tuple[str, str, str], ...] = ()
    # The lines of templates that say a link's state (node, template, line), earliest first: a
    # link that went down and came back may be one template ("port <*>") of both lines.
    state_lines: tuple[tuple[str, str, str], ...] = ()
    # The records of out-of-memory reports that list who held the memory (node, template,
    # record): the kernel's task table, Ray's top memory users (:mod:`l4_plugin.analysis.memory`).
    memory_lines: tuple[tuple[str, str, str], ...] = ()
    # Each node's first line of the templates that state a version (node, template, line): what
    # its software stack is (:mod:`l4_plugin.analysis.versions`).
    version_lines: tuple[tuple[str, str, str], ...] = ()
    # The progress lines (bars that show their elapsed time, iteration markers), one per node,
    # template and iteration bucket, of the few nodes that print them (node, template, bucket,
    # time of the last stamped line before it, line): a bar's clock
    # (:mod:`l4_plugin.analysis.clock`), the line where a slowdown began.
    progress_lines: tuple[tuple[str, str, int | None, float, str], ...] = ()
    # The latest stamped lines that state a step (a checkpoint's "step=89", "global_step60",
    # "checkpoint-60"), latest first (time, line): where the job stood then
    # (:mod:`l4_plugin.analysis.clock`).
    step_lines: tuple[tuple[float, str], ...] = ()
    # (time, step) of a periodic step line the index kept no copy of, counted from the kept ones
    # at the template's stride (``clock.periodic_steps``: a save every 10 steps, its last line).
    step_counts: tuple[tuple[float, int], ...] = ()
    # Seconds per step the stamped step lines state between them (None: none says).
    step_pace: float | None = None
    # Other nodes' copies of a warning or error record whose template holds a variable word
    # (Drain made one template of "killed by signal: Killed" and "…: Terminated"): template id
    # -> their texts, besides the exemplar (``TemplateInfo.message``).
    variants: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        """Every node that logged anything, sorted; not the job's own files (``JOB_NODE``)."""
        seen = {n for n, _ in self.cells} | set(self.job.nodes)
        return sorted(n for n in seen if not is_job_node(n))

    @property
    def iterations_reached(self) -> int:
        """How many iterations the job got through (0 when no iteration marker was seen)."""
        if not self.iteration_spans:
            return 0
        lo = min(self.iteration_spans)
        hi = max(k + s - 1 for k, s in self.iteration_spans.items())
        return hi - lo + 1


@dataclass(frozen=True, slots=True)
class BaselinePool:
    """Per-template statistics of the baseline jobs, and the jobs themselves.

    ``stats[template] = (jobs printing it, mean node fraction, median count per node, median
    count per node per iteration)``: one-off lines compare per node, periodic ones per iteration.
    """

    jobs: tuple[JobDoc, ...]
    stats: dict[str, tuple[int, float, float, float]]
    #: a baseline template's text with its job's host names read as <HOST> (``host_blinder``) →
    #: that template: where a line naming its node is found in baselines run on other nodes
    blind: dict[str, str] = field(default_factory=dict)
    #: the failed job's template → the baseline template whose host-blind text is its own
    aliases: dict[str, str] = field(default_factory=dict)
