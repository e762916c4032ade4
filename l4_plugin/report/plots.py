"""Inline SVG plots for the HTML report: no JavaScript, no fonts or images from the network.

Every label that comes from a log or a node name goes through :func:`esc`. Plots stay readable
at any scale by aggregating: the top bars plus a histogram of everything, a heat map of the top
nodes × top events, a timeline downsampled to what a screen can show.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from l4_plugin.report.extras import IterationPoint

SUSPECT = "#c62828"
NORMAL = "#1f6fb2"
BAND = "#e3f1e6"
GRID = "#e4e7eb"
TEXT = "#27313b"
MAX_TIMELINE_POINTS = 1500


def esc(value: object) -> str:
    """HTML/SVG-escape any value (quotes included, so it is safe in attributes too)."""
    return escape(str(value), quote=True)


def short(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (escape the result separately)."""
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"


def fmt(value: float) -> str:
    """A number for a label: integers as such, others with three significant digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.3g}"


def _svg(width: int, height: int, body: list[str], label: str, plot_id: str) -> str:
    return (
        f'<svg id="{esc(plot_id)}" class="plot" role="img" aria-label="{esc(label)}" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg">'
        f"<title>{esc(label)}</title>{''.join(body)}</svg>"
    )


def _text(
    x: float, y: float, text: str, *, anchor: str = "start", size: int = 11, extra: str = ""
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'fill="{TEXT}" {extra}>{esc(text)}</text>'
    )


def bar_chart(
    plot_id: str,
    label: str,
    items: Sequence[tuple[str, float, bool]],
    *,
    value_label: str,
    label_width: int = 190,
    width: int = 620,
    max_value: float | None = None,
) -> str:
    """Horizontal bars: (name, value, highlighted) per row, in the given order."""
    row, top = 18, 24
    height = top + row * max(1, len(items)) + 30
    plot_w = width - label_width - 60
    peak = max_value or max((v for _, v, _ in items), default=1.0) or 1.0
    body: list[str] = []
    for i in range(5):
        x = label_width + plot_w * i / 4
        body.append(
            f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 26}" stroke="{GRID}"/>'
        )
        body.append(_text(x, height - 12, fmt(peak * i / 4), anchor="middle", size=10))
    body.append(_text(label_width + plot_w / 2, 14, value_label, anchor="middle"))
    for i, (name, value, hot) in enumerate(items):
        y = top + i * row
        w = max(1.0, plot_w * max(value, 0.0) / peak)
        colour = SUSPECT if hot else NORMAL
        body.append(
            f'<g class="bar"><title>{esc(name)}: {esc(fmt(value))}</title>'
            f'<rect x="{label_width}" y="{y + 2}" width="{w:.1f}" height="{row - 5}" '
            f'fill="{colour}"/></g>'
        )
        body.append(_text(label_width - 6, y + row - 5, short(name, 30), anchor="end"))
        body.append(_text(label_width + w + 4, y + row - 5, fmt(value), size=10))
    return _svg(width, height, body, label, plot_id)


STATE_COLOURS = {"completed": "#7aa874", "started": "#e0a030", "scheduled": NORMAL}


def rank_positions(
    plot_id: str,
    label: str,
    ranks: Sequence[tuple[int, int | None, str, str, bool]],
    *,
    width: int = 620,
) -> str:
    """Each rank's last collective sequence number as a column (rank, seq, op, state,
    culprit): the height is how far it got; colour its state, red a culprit."""
    top, bottom, left = 24, 34, 46
    height = 170
    plot_w, plot_h = width - left - 10, height - top - bottom
    seqs = [q for _, q, _, _, _ in ranks if q is not None]
    lo, hi = (min(seqs) - 1, max(seqs)) if seqs else (0, 1)
    span = max(1, hi - lo)
    col = plot_w / max(1, len(ranks))
    body = [_text(left + plot_w / 2, 14, label, anchor="middle")]
    for q in sorted({lo + 1, hi}):
        y = top + plot_h * (1 - (q - lo) / span)
        body.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="{GRID}"/>'
        )
        body.append(_text(left - 4, y + 4, f"#{q}", anchor="end", size=10))
    for i, (rank, seq, op, state, hot) in enumerate(ranks):
        h = plot_h * ((seq - lo) / span if seq is not None else 0.0)
        x = left + i * col
        colour = SUSPECT if hot else STATE_COLOURS.get(state, NORMAL)
        tip = f"rank {rank}: #{seq if seq is not None else '?'} {op} {state}"
        body.append(
            f'<g class="rank"><title>{esc(tip)}</title>'
            f'<rect x="{x + 0.5:.1f}" y="{top + plot_h - h:.1f}" '
            f'width="{max(1.0, col - 1):.1f}" height="{max(1.0, h):.1f}" fill="{colour}"/></g>'
        )
        if len(ranks) <= 32:
            body.append(_text(x + col / 2, height - bottom + 14, str(rank), anchor="middle"))
    body.append(
        _text(left + plot_w / 2, height - 4, "rank (red: the ranks apart)", anchor="middle")
    )
    return _svg(width, height, body, label, plot_id)


def histogram(
    plot_id: str,
    label: str,
    values: Sequence[float],
    *,
    bins: int = 20,
    cutoff: float | None = None,
    x_label: str,
    width: int = 460,
    height: int = 240,
) -> str:
    """Counts of ``values`` in equal bins; bins at or above ``cutoff`` are highlighted."""
    left, right, top, bottom = 48, 12, 24, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    body: list[str] = [_text(left + plot_w / 2, 14, label, anchor="middle")]
    if not values:
        body.append(_text(width / 2, height / 2, "no values", anchor="middle"))
        return _svg(width, height, body, label, plot_id)
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / span * bins))] += 1
    peak = max(counts)
    bw = plot_w / bins
    for i, c in enumerate(counts):
        edge = lo + span * i / bins
        h = plot_h * (math.log1p(c) / math.log1p(peak)) if c else 0.0
        hot = cutoff is not None and edge + span / bins > cutoff
        body.append(
            f'<g class="bin"><title>{esc(fmt(edge))}–{esc(fmt(edge + span / bins))}: '
            f'{c} nodes</title><rect x="{left + i * bw + 1:.1f}" y="{top + plot_h - h:.1f}" '
            f'width="{bw - 2:.1f}" height="{h:.1f}" fill="{SUSPECT if hot else NORMAL}"/></g>'
        )
    body.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" '
        f'y2="{top + plot_h}" stroke="{TEXT}"/>'
    )
    for frac in (0.0, 0.5, 1.0):
        body.append(
            _text(
                left + plot_w * frac,
                top + plot_h + 14,
                fmt(lo + span * frac),
                anchor="middle",
                size=10,
            )
        )
    body.append(_text(left + plot_w / 2, height - 6, x_label, anchor="middle", size=10))
    body.append(_text(4, top + 8, f"{peak:,}", size=10))
    body.append(_text(4, top + plot_h, "0", size=10))
    body.append(_text(4, top + plot_h / 2, "log n", size=10))
    return _svg(width, height, body, label, plot_id)


def heat_map(
    plot_id: str,
    label: str,
    rows: Sequence[str],
    columns: Sequence[str],
    column_titles: Sequence[str],
    counts: Sequence[Sequence[float]],
) -> str:
    """Cells coloured by log(count); row and column names are shortened, full names in tooltips."""
    cell, left, top = 22, 190, 96
    width = left + cell * max(1, len(columns)) + 20
    height = top + cell * max(1, len(rows)) + 30
    peak = max((max(r) for r in counts if r), default=0.0) or 1.0
    body: list[str] = []
    for j, (col, title) in enumerate(zip(columns, column_titles, strict=True)):
        x = left + j * cell + cell / 2
        body.append(
            f"<g><title>{esc(title)}</title>"
            + _text(
                x,
                top - 6,
                short(col, 14),
                size=10,
                extra=f'transform="rotate(-50 {x:.1f} {top - 6})"',
            )
            + "</g>"
        )
    for i, name in enumerate(rows):
        y = top + i * cell
        body.append(
            f"<g><title>{esc(name)}</title>"
            + _text(left - 6, y + cell - 7, short(name, 30), anchor="end")
            + "</g>"
        )
        for j, value in enumerate(counts[i]):
            level = math.log1p(value) / math.log1p(peak) if value > 0 else 0.0
            # White to deep red; zero cells stay light grey so the grid stays visible.
            red, green, blue = 255 - int(57 * level), 235 - int(195 * level), 225 - int(185 * level)
            fill = "#f3f4f6" if value <= 0 else f"rgb({red},{green},{blue})"
            body.append(
                f'<rect class="cell" x="{left + j * cell}" y="{y}" width="{cell - 1}" '
                f'height="{cell - 1}" fill="{fill}"><title>{esc(name)} × {esc(columns[j])}: '
                f"{esc(fmt(value))}</title></rect>"
            )
    return _svg(width, height, body, label, plot_id)


def downsample(
    points: Sequence[IterationPoint], limit: int = MAX_TIMELINE_POINTS
) -> list[IterationPoint]:
    """At most ``limit`` points: per bucket the largest distance, and every suspect iteration."""
    if len(points) <= limit:
        return list(points)
    size = math.ceil(len(points) / limit)
    kept: list[IterationPoint] = []
    for start in range(0, len(points), size):
        bucket = points[start : start + size]
        kept.append(max(bucket, key=lambda p: p.distance))
        kept.extend(p for p in bucket if p.suspect and p is not kept[-1])
    return sorted(kept, key=lambda p: p.iteration)


@dataclass(frozen=True, slots=True)
class _Frame:
    """Where the timeline's plot area sits and the data range it shows."""

    left: float
    top: float
    plot_w: float
    plot_h: float
    x0: float
    x1: float
    y1: float

    def sx(self, it: float) -> float:
        return self.left + (it - self.x0) / ((self.x1 - self.x0) or 1) * self.plot_w

    def sy(self, v: float) -> float:
        return self.top + self.plot_h - v / self.y1 * self.plot_h


def _band(f: _Frame, pts: Sequence[IterationPoint]) -> list[str]:
    """The three-sigma band (0 … threshold) and its upper edge, where thresholds are known."""
    band = [p for p in pts if p.threshold is not None]
    if not band:
        return []
    upper = " ".join(f"{f.sx(p.iteration):.1f},{f.sy(p.threshold or 0.0):.1f}" for p in band)
    return [
        f'<polygon class="band" points="{f.sx(band[0].iteration):.1f},{f.sy(0):.1f} {upper} '
        f'{f.sx(band[-1].iteration):.1f},{f.sy(0):.1f}" fill="{BAND}">'
        f"<title>three-sigma band (normal range)</title></polygon>",
        f'<polyline class="threshold" points="{upper}" fill="none" '
        f'stroke="#4c9a5b" stroke-dasharray="5 3" stroke-width="1.2"/>',
    ]


def _grid(f: _Frame) -> list[str]:
    body: list[str] = []
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = f.sy(f.y1 * frac)
        body.append(
            f'<line x1="{f.left}" y1="{y:.1f}" x2="{f.left + f.plot_w}" y2="{y:.1f}" '
            f'stroke="{GRID}"/>'
        )
        body.append(_text(f.left - 6, y + 4, fmt(f.y1 * frac), anchor="end", size=10))
        it = f.x0 + (f.x1 - f.x0) * frac
        body.append(
            _text(f.sx(it), f.top + f.plot_h + 16, fmt(round(it)), anchor="middle", size=10)
        )
    return body


def _suspects(f: _Frame, pts: Sequence[IterationPoint]) -> list[str]:
    body: list[str] = []
    for p in pts:
        if p.suspect:
            x = f.sx(p.iteration)
            body.append(
                f'<g class="suspect"><title>iteration {p.iteration}: distance '
                f"{esc(fmt(p.distance))}</title>"
                f'<line x1="{x:.1f}" y1="{f.top}" x2="{x:.1f}" y2="{f.top + f.plot_h}" '
                f'stroke="{SUSPECT}" stroke-opacity="0.35"/>'
                f'<circle cx="{x:.1f}" cy="{f.sy(p.distance):.1f}" r="4" fill="{SUSPECT}"/></g>'
            )
    return body


def _legend(f: _Frame, y_label: str, height: int) -> list[str]:
    """Axis titles and the legend (band, suspect iteration, distance line)."""
    legend_x = f.left + f.plot_w - 330
    mid = f.top + f.plot_h / 2
    turn = f'transform="rotate(-90 14 {mid:.1f})"'
    return [
        _text(f.left + f.plot_w / 2, height - 8, "iteration", anchor="middle", size=11),
        _text(14, mid, y_label, anchor="middle", size=11, extra=turn),
        f'<rect x="{legend_x}" y="6" width="12" height="10" fill="{BAND}" stroke="#4c9a5b"/>',
        _text(legend_x + 16, 15, "three-sigma band", size=10),
        f'<circle cx="{legend_x + 130}" cy="11" r="4" fill="{SUSPECT}"/>',
        _text(legend_x + 138, 15, "suspect iteration", size=10),
        f'<line x1="{legend_x + 240}" y1="11" x2="{legend_x + 256}" y2="11" '
        f'stroke="{NORMAL}" stroke-width="2"/>',
        _text(legend_x + 260, 15, y_label, size=10),
    ]


def timeline(
    plot_id: str,
    label: str,
    points: Sequence[IterationPoint],
    *,
    y_label: str,
    width: int = 1100,
    height: int = 280,
) -> str:
    """Distance per iteration, the three-sigma band (0 … threshold) and suspect iterations."""
    left, right, top, bottom = 60, 20, 28, 42
    pts = downsample(sorted(points, key=lambda p: p.iteration))
    if not pts:
        body = [_text(width / 2, height / 2, "no iterations", anchor="middle")]
        return _svg(width, height, body, label, plot_id)
    y1 = max(max(p.distance for p in pts), max((p.threshold or 0.0) for p in pts)) * 1.08 or 1.0
    x0, x1 = pts[0].iteration, pts[-1].iteration
    f = _Frame(left, top, width - left - right, height - top - bottom, x0, x1, y1)
    line = " ".join(f"{f.sx(p.iteration):.1f},{f.sy(p.distance):.1f}" for p in pts)
    body = [
        *_band(f, pts),
        *_grid(f),
        f'<polyline class="distance" points="{line}" fill="none" stroke="{NORMAL}" '
        f'stroke-width="1.4"/>',
        *_suspects(f, pts),
        *_legend(f, y_label, height),
    ]
    return _svg(width, height, body, label, plot_id)
