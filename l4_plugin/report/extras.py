"""What the HTML report's plots need beyond the report (ARCHITECTURE.md, *The report*).

Every field is optional.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready copy (stored with the summary annotation for ``l4 report``)."""
        m = self.matrix
        return {
            "matrix": None
            if m is None
            else {
                "nodes": list(m.nodes),
                "template_ids": list(m.template_ids),
                "counts": [list(r) for r in m.counts],
            },
            "iterations": [
                [p.iteration, p.distance, p.threshold, p.suspect] for p in self.iterations
            ],
            "stage_per_node": dict(self.stage_per_node),
            "stage_order": list(self.stage_order),
            "dropped_templates": [[d.template_id, d.text, d.note] for d in self.dropped_templates],
            "no_baseline": self.no_baseline,
            "timings": dict(self.timings),
            "generated_at": self.generated_at,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReportExtras:
        """The inverse of :meth:`to_json`."""
        m = raw.get("matrix")
        return cls(
            matrix=None
            if not m
            else NodeEventMatrix(
                tuple(m["nodes"]),
                tuple(m["template_ids"]),
                tuple(tuple(int(v) for v in r) for r in m["counts"]),
            ),
            iterations=tuple(
                IterationPoint(int(i), float(d), None if t is None else float(t), bool(s))
                for i, d, t, s in raw.get("iterations", [])
            ),
            stage_per_node=dict(raw.get("stage_per_node", {})),
            stage_order=tuple(raw.get("stage_order", [])),
            dropped_templates=tuple(
                DroppedTemplate(str(t), str(r), math.nan, math.nan, text=str(x))
                for t, x, r in raw.get("dropped_templates", [])
            ),
            no_baseline=bool(raw.get("no_baseline", False)),
            timings=dict(raw.get("timings", {})),
            generated_at=raw.get("generated_at"),
        )
