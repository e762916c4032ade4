"""What the HTML report's plots need beyond the report (ARCHITECTURE.md, *The report*).

Every field is optional.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from l4_plugin.analysis.results import DroppedTemplate

__all__ = ["DroppedTemplate", "IterationPoint", "NodeEventMatrix", "ReportExtras"]


@dataclass(frozen=True, slots=True)
class NodeEventMatrix:
    """Node × event counts after cross-job filtering: ``counts[i][j]`` is node i, event j."""

    nodes: tuple[str, ...]
    template_ids: tuple[str, ...]
    counts: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.nodes) or any(
            len(row) != len(self.template_ids) for row in self.counts
        ):
            raise ValueError(
                f"node × event matrix shape: {len(self.counts)} rows for {len(self.nodes)} nodes, "
                f"rows must have {len(self.template_ids)} columns"
            )


@dataclass(frozen=True, slots=True)
class IterationPoint:
    """One iteration of the temporal analysis: DTW distance, three-sigma threshold, verdict."""

    iteration: int
    distance: float
    threshold: float | None = None
    suspect: bool = False


@dataclass(frozen=True, slots=True)
class ReportExtras:
    """Optional inputs of :func:`l4_plugin.report.html.render_html` beyond the §6 report.

    ``stage_per_node`` maps a node to the last stage it reached; ``stage_order`` lists stages from
    first to last (otherwise the order of first appearance is used). ``timings`` maps a step name
    to seconds. ``no_baseline`` says cross-job filtering had no successful job to compare with.
    """

    matrix: NodeEventMatrix | None = None
    iterations: tuple[IterationPoint, ...] = ()
    stage_per_node: Mapping[str, str] = field(default_factory=dict)
    stage_order: tuple[str, ...] = ()
    dropped_templates: tuple[DroppedTemplate, ...] = ()
    no_baseline: bool = False
    timings: Mapping[str, float] = field(default_factory=dict)
    generated_at: str | None = None
