"""Frozen records that the analysis estimators take and return.

The analyses are a pure core: the lead turns aggregations over ``l4-events`` into the input records
below, calls the estimators, and turns their result records into report entries and
``l4-annotations`` documents. Nothing here knows about the cluster. Scores are floats in [0, 1]
where 1 is the most abnormal; sequences are tuples so that a result can be compared and logged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

# --- cross-job filtering -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BaselineStat:
    """How one template behaved in the successful baseline jobs of the same configuration.

    ``jobs`` is the number of baseline jobs in which the template appeared, ``total_jobs`` the size
    of the baseline pool, ``node_fraction`` the mean fraction of a baseline job's nodes that printed
    it, and ``rate`` its typical (median over baseline jobs) occurrences per node per unit of work,
    in the same unit as :attr:`JobTemplateStat.rate`.
    """

    jobs: int
    total_jobs: int
    node_fraction: float
    rate: float

    @property
    def job_fraction(self) -> float:
        """Fraction of baseline jobs that printed the template (0 when the pool is empty)."""
        return self.jobs / self.total_jobs if self.total_jobs > 0 else 0.0


@dataclass(frozen=True, slots=True)
class JobTemplateStat:
    """One template of the failed job: total count, nodes printing it and per-node rate."""

    template_id: str
    count: int
    nodes: int
    rate: float


@dataclass(frozen=True, slots=True)
class KeptTemplate:
    """A template the cross-job filter keeps, with why and the job/baseline rate ratio.

    ``reason`` is ``absent-in-baseline``, ``burst-vs-baseline``, ``rare-in-baseline`` or
    ``no-baseline``; ``rate_ratio`` is inf when the baseline never printed the template.
    """

    template_id: str
    reason: str
    rate_ratio: float


@dataclass(frozen=True, slots=True)
class DroppedTemplate:
    """A template the cross-job filter drops as normal noise, with the evidence for dropping it.

    ``text`` is the template's text when the caller knows it (the report fills it in; the filter
    sees ids only). A record read back from a stored report has its :attr:`note` as ``reason``
    and NaN figures.
    """

    template_id: str
    reason: str
    job_fraction: float
    rate_ratio: float
    text: str = ""

    @property
    def note(self) -> str:
        """The reason with the share of baseline jobs that printed it, as reports show it."""
        if math.isnan(self.job_fraction):
            return self.reason
        return f"{self.reason} (in {self.job_fraction:.0%} of baseline jobs)"


@dataclass(frozen=True, slots=True)
class FilterResult:
    """Output of :class:`~l4_plugin.analysis.crossjob.CrossJobFilter`: kept and dropped templates,
    both sorted by template id; ``no_baseline`` is true when there was nothing to compare with."""

    kept: tuple[KeptTemplate, ...]
    dropped: tuple[DroppedTemplate, ...]
    no_baseline: bool

    @property
    def kept_ids(self) -> frozenset[str]:
        """The ids of the kept templates."""
        return frozenset(k.template_id for k in self.kept)

    def reason_of(self, template_id: str) -> str | None:
        """The keep reason of ``template_id``, or None when it was dropped or never seen."""
        for k in self.kept:
            if k.template_id == template_id:
                return k.reason
        return None


# --- spatial -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attribution:
    """Why a node differs on one template: its normalised value against the column median.

    ``direction`` is ``excess`` (the node prints it more, or alone) or ``deficit`` (it is missing a
    template its peers print); ``weight`` is the signed-free contribution used for ranking.
    """

    template_id: str
    weight: float
    value: float
    median: float
    direction: str
    nodes_with_template: int


@dataclass(frozen=True, slots=True)
class NodeScore:
    """One node's spatial anomaly score in [0, 1] (1 = most abnormal) and its components."""

    node: str
    score: float
    iforest: float
    rarity: float
    attributions: tuple[Attribution, ...]


@dataclass(frozen=True, slots=True)
class SpatialResult:
    """All nodes, most abnormal first; ``suspects`` is the short list worth an SRE's look.

    ``defined`` is false when spatial comparison is meaningless (a single node) and ``note`` says
    why; ``method`` is ``combined`` or ``iforest`` (the paper's plain method, for the ablation).
    """

    nodes: tuple[NodeScore, ...]
    suspects: tuple[str, ...]
    method: str
    defined: bool
    note: str = ""


# --- silent nodes --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SilentNode:
    """A node whose logging stopped clearly before its peers', and what its peers went on printing.

    ``missing_periodic`` are templates the node printed regularly before going quiet (e.g. the
    iteration line) that its peers kept printing; ``missing_new`` are templates its peers printed
    after it stopped that it never printed at all (typically the cascade: watchdog timeouts).
    """

    node: str
    score: float
    last_ts: float | None
    last_iteration: int | None
    lag_seconds: float | None
    lag_iterations: float | None
    missing_periodic: tuple[str, ...]
    missing_new: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SilenceResult:
    """Silent nodes (most silent first) and the peers' reference point used to judge them."""

    silent: tuple[SilentNode, ...]
    median_last_ts: float | None
    median_last_iteration: float | None
    #: Nodes that stopped as early but with an error of their own (they died loudly: not
    #: silent); what their peers printed after them is still the cascade of their end.
    stopped: tuple[SilentNode, ...] = ()

    @property
    def nodes(self) -> tuple[str, ...]:
        """Names of the silent nodes, most silent first."""
        return tuple(s.node for s in self.silent)


# --- temporal ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageSpan:
    """Where a stage appears on one node: first and last position (timestamp or line position)."""

    node: str
    stage: str
    first: float
    last: float


@dataclass(frozen=True, slots=True)
class NodeStage:
    """The last stage a node reached and where."""

    node: str
    last_stage: str
    last_position: float


@dataclass(frozen=True, slots=True)
class StageResult:
    """The job's failing stage (most nodes' last stage), the stage order used, every node's last
    stage, and the nodes that never got as far as the job did (``lagging``)."""

    stage: str | None
    order: tuple[str, ...]
    nodes: tuple[NodeStage, ...]
    lagging: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IterationScore:
    """One iteration's mean DTW distance to its window, and whether the three-sigma rule fired."""

    iteration: int
    distance: float
    threshold: float | None
    suspect: bool
    new_events: tuple[str, ...] = ()
    missing_events: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IterationResult:
    """All scored iterations in order, and the suspect ones (score in [0, 1], worst first)."""

    iterations: tuple[IterationScore, ...]
    suspects: tuple[IterationScore, ...]
    backend: str

    def score_of(self, iteration: int) -> float:
        """A [0, 1] score for a suspect iteration: its distance over the largest suspect one."""
        top = max((s.distance for s in self.suspects), default=0.0)
        for s in self.suspects:
            if s.iteration == iteration:
                return s.distance / top if top > 0 else 0.0
        return 0.0


@dataclass(frozen=True, slots=True)
class Straggler:
    """A node whose iteration durations depart from its peers' for ``sustain`` iterations."""

    node: str
    first_iteration: int
    median_z: float
    slowdown: float


@dataclass(frozen=True, slots=True)
class StragglerResult:
    """Stragglers, earliest departure first."""

    stragglers: tuple[Straggler, ...]


@dataclass(frozen=True, slots=True)
class Slowdown:
    """The iteration from which the whole job runs slower than before, and stays slower.

    ``reference`` is the job's usual seconds per iteration before it, ``ratio`` the median
    slowdown from it on; ``events`` the templates that start with it (the likely cause, e.g. a
    node's thermal throttling) and ``nodes`` the nodes that printed them.
    """

    first_iteration: int
    reference: float
    ratio: float
    events: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()


# --- fusion --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EventStat:
    """One template of the failed job, as fusion needs it.

    ``first_seen`` maps each node that printed it to its first timestamp (or global position), and
    ``counts`` maps each node to its count; ``stage`` is the stage the template was mostly seen in.
    """

    template_id: str
    level: str | None
    first_seen: Mapping[str, float]
    counts: Mapping[str, int]
    stage: str | None = None
    # Per node, the position of its first line in that node's logs (orders lines of one moment).
    positions: Mapping[str, float] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """Total occurrences over all nodes."""
        return sum(self.counts.values())

    @property
    def first(self) -> float | None:
        """The earliest first occurrence over all nodes."""
        return min(self.first_seen.values()) if self.first_seen else None


@dataclass(frozen=True, slots=True)
class RankedEvent:
    """A failure-indicating event in the recommended set, with its score and reasons."""

    template_id: str
    score: float
    reasons: tuple[str, ...]
    nodes: tuple[str, ...]
    count: int
    first_seen: float | None
    level: str | None


@dataclass(frozen=True, slots=True)
class RankedNode:
    """One node of the job, with its final score, the reasons and its most telling events."""

    node: str
    score: float
    reasons: tuple[str, ...]
    events: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FusionResult:
    """The final ranking: recommended events (best first), every node (most suspect first),
    suspect iterations, failing stage, silent nodes and whether a baseline was available."""

    events: tuple[RankedEvent, ...]
    nodes: tuple[RankedNode, ...]
    iterations: tuple[IterationScore, ...]
    stage: str | None
    silent_nodes: tuple[str, ...]
    no_baseline: bool
    method: str = "l4"
    candidates: tuple[RankedEvent, ...] = field(default=())
