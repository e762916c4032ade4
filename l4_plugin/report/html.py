"""The self-contained HTML diagnosis report: one file, inline CSS and SVG, no scripts, no network.

Input is the :class:`Report` (ARCHITECTURE.md, *The report*) plus optional
:class:`ReportExtras`. Every string that comes
from a log (sample lines, templates, node names, rule text) is escaped: a log line containing
``<script>`` shows as text. Large jobs are summarised, never drawn in full: the top
``TOP_NODES`` nodes as bars plus a histogram of all of them, a heat map of the top nodes × top
events, and tables capped with a "… and N more" row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from l4_plugin.report.extras import IterationPoint, NodeEventMatrix, ReportExtras
from l4_plugin.report.model import Report, ReportIteration
from l4_plugin.report.plots import (
    bar_chart,
    esc,
    fmt,
    heat_map,
    histogram,
    rank_positions,
    short,
    timeline,
)

TOP_NODES = 25
HEAT_NODES = 30
HEAT_EVENTS = 20
MAX_EVENTS = 50
MAX_LIST = 12

_CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       margin: 0; color: #27313b; background: #f6f7f9; }
header { background: #1d2a38; color: #fff; padding: 14px 28px; }
header h1 { margin: 0; font-size: 20px; font-weight: 600; }
header .sub { color: #c5d0db; font-size: 13px; }
main { max-width: 1380px; margin: 0 auto; padding: 16px 28px 40px; }
section { background: #fff; border: 1px solid #dfe3e8; border-radius: 6px; padding: 12px 18px;
          margin: 0 0 16px; overflow-x: auto; }
h2 { font-size: 16px; margin: 2px 0 10px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 4px 0 8px; }
.card { border: 1px solid #dfe3e8; border-radius: 6px; padding: 6px 12px; min-width: 120px; }
.card b { display: block; font-size: 18px; }
.card.bad b { color: #c62828; }
.row { display: flex; flex-wrap: wrap; gap: 18px; align-items: flex-start; }
.note { color: #5b6773; font-size: 13px; margin: 4px 0; }
.warn { background: #fff4e5; border: 1px solid #f0c36d; border-radius: 4px; padding: 6px 10px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; vertical-align: top; padding: 4px 8px;
         border-bottom: 1px solid #eceff2; }
th { background: #f1f3f5; font-weight: 600; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code, pre { font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }
pre.sample { margin: 2px 0 0; white-space: pre-wrap; word-break: break-all; background: #f6f8fa;
             padding: 4px 6px; border-radius: 3px; max-height: 7.5em; overflow: auto; }
.tag { display: inline-block; background: #e8eef6; border-radius: 3px; padding: 0 5px;
       margin: 1px 2px 1px 0; font-size: 12px; }
.lvl-ERROR, .lvl-CRITICAL, .lvl-FATAL { color: #c62828; font-weight: 600; }
.rule { border-left: 4px solid #c62828; padding: 4px 12px; margin: 8px 0; }
.rule h3 { margin: 0 0 4px; font-size: 15px; }
svg.plot { max-width: 100%; height: auto; background: #fff; }
footer { color: #7a8793; font-size: 12px; text-align: center; padding: 8px; }
"""


def _list(items: Sequence[Any], limit: int = MAX_LIST, css: str = "tag") -> str:
    shown = "".join(f'<span class="{css}">{esc(i)}</span>' for i in items[:limit])
    more = len(items) - limit
    return shown + (f' <span class="note">+{more:,} more</span>' if more > 0 else "")


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _template_texts(report: Report, extras: ReportExtras) -> dict[str, str]:
    texts = {d.template_id: d.text for d in extras.dropped_templates}
    for event in report.events:
        texts[event.template_id] = event.template
    return texts


def _verdict(report: Report) -> str:
    """The verdict first: the kind of fault and whose, whom to evict, whether to restart."""
    v = report.verdict
    if v is None:
        return ""
    evict = v.evict
    cards = [
        ("Category", v.category, v.category != "unknown"),
        ("Blame", v.blame, False),
        ("Evict", ", ".join(evict) if evict else "none", bool(evict)),
        ("Restart", v.restart, False),
        ("Confidence", fmt(_num(v.confidence)), False),
    ]
    html = ['<section id="verdict"><h2>Verdict</h2><div class="cards">']
    html += [
        f'<div class="card{" bad" if bad else ""}">{esc(k)}<b>{esc(val)}</b></div>'
        for k, val, bad in cards
    ]
    html.append("</div>")
    why = v.why
    if why:
        html.append(
            '<ul class="note">' + "".join(f"<li>{esc(short(w, 300))}</li>" for w in why) + "</ul>"
        )
    html.append("</section>")
    return "".join(html)


def _summary(report: Report, extras: ReportExtras) -> str:
    nodes = report.nodes
    suspects = [n for n in nodes if _num(n.score) > 0 and n.events]
    baseline = report.baseline_jobs
    cards = [
        ("Status", report.status, report.status == "failed"),
        ("Stage reached", report.stage or "unknown", False),
        ("Nodes", f"{len(nodes):,}", False),
        ("Suspect nodes", f"{len(suspects):,}", bool(suspects)),
        ("Failure-indicating events", f"{len(report.events):,}", False),
        ("Rule matches", f"{len(report.rule_matches):,}", bool(report.rule_matches)),
        ("Silent nodes", f"{len(report.silent_nodes):,}", bool(report.silent_nodes)),
        ("Baseline jobs", f"{len(baseline):,}", False),
    ]
    html = ['<section id="summary"><h2>Summary</h2><div class="cards">']
    html += [
        f'<div class="card{" bad" if bad else ""}">{esc(k)}<b>{esc(v)}</b></div>'
        for k, v, bad in cards
    ]
    html.append("</div>")
    if extras.no_baseline or not baseline:
        html.append(
            '<p class="warn" id="no-baseline">No baseline: no successful job with the '
            "same configuration fingerprint was found, so cross-job filtering kept every "
            "event. Expect more noise among the events below.</p>"
        )
    else:
        html.append(f'<p class="note">Baseline jobs: {_list(baseline)}</p>')
    top = [n for n in nodes[:5] if _num(n.score) > 0]
    if top:
        html.append(
            '<p class="note">Most suspect: '
            + ", ".join(f"<b>{esc(n.node)}</b> ({esc(fmt(_num(n.score)))})" for n in top)
            + "</p>"
        )
    if report.events:
        first = report.events[0]
        text = esc(short(first.template, 200))
        html.append(f'<p class="note">Top event: <code>{text}</code></p>')
    if extras.timings:
        html.append(
            '<p class="note" id="timings">Analysis time: '
            + ", ".join(f"{esc(k)} {v:.2f} s" for k, v in extras.timings.items())
            + "</p>"
        )
    html.append("</section>")
    return "".join(html)


def _nodes_section(report: Report) -> str:
    nodes = report.nodes
    html = ['<section id="nodes"><h2>Node suspicion scores</h2>']
    if not nodes:
        return html[0] + '<p class="note">No node scores.</p></section>'
    top = nodes[:TOP_NODES]
    suspect = {n.node for n in nodes if n.events}
    items = [(n.node, _num(n.score), n.node in suspect) for n in top]
    cutoff = min((v for _, v, _ in items), default=None) if len(nodes) > TOP_NODES else None
    html.append('<div class="row">')
    html.append(
        bar_chart(
            "plot-node-scores",
            f"Top {len(top)} of {len(nodes):,} nodes",
            items,
            value_label="suspicion score (red: has failure events)",
        )
    )
    html.append(
        histogram(
            "plot-node-histogram",
            f"All {len(nodes):,} nodes",
            [_num(n.score) for n in nodes],
            cutoff=cutoff,
            x_label="suspicion score (red: range of the top nodes)",
        )
    )
    html.append("</div>")
    silent = report.silent_nodes
    if silent:
        html.append(
            f'<p id="silent-nodes">Silent nodes (logging stopped before the others): '
            f"{_list(silent)}</p>"
        )
    html.append("</section>")
    return "".join(html)


def _attempts_section(report: Report) -> str:
    """A restarted job's attempts, each with its own diagnosis in brief."""
    attempts = report.attempts
    if attempts is None:
        return ""
    rows = "".join(
        f"<tr><td>{'→ ' if a.attempt == attempts.lead else ''}{a.attempt}</td>"
        f"<td>{esc(a.category)}</td><td>{esc(a.stage or '?')}</td>"
        f"<td>{_list(a.culprits) or 'none'}</td><td>{len(a.nodes)}</td>"
        f"<td>{esc(a.first_seen or '?')}</td><td>{esc(a.last_seen or '?')}</td></tr>"
        for a in attempts.attempts
    )
    return (
        f'<section id="attempts"><h2>Attempts ({len(attempts.attempts)})</h2>'
        f"<p>This report is attempt {attempts.lead}'s: {esc(attempts.why)}</p>"
        "<table><thead><tr><th>attempt</th><th>category</th><th>stage</th><th>culprit</th>"
        f"<th>nodes</th><th>first</th><th>last</th></tr></thead><tbody>{rows}</tbody></table>"
        + (f"<p>{esc(attempts.note)}</p>" if attempts.note else "")
        + "</section>"
    )


def _hang_section(report: Report) -> str:
    """Where the ranks stood: per Flight Recorder finding, each rank's last collective, and
    the stack groups."""
    hang = report.hang
    if hang is None:
        return ""
    html = ['<section id="hang"><h2>Where the ranks stood (Flight Recorder, py-spy)</h2>']
    for i, c in enumerate(hang.collectives[:4]):
        attempt = f"attempt {c.attempt}: " if c.attempt is not None else ""
        apart = set(c.culprits) | set(c.ranks_behind) | {r for r, _ in c.ranks_in_other_op}
        html.append(f"<p>{esc(attempt + c.summary)}")
        if c.culprit_nodes:
            html.append(f" — culprit {_list(c.culprit_nodes)}")
        html.append("</p>")
        ranks = [(r.rank, r.seq, r.op, r.state, r.rank in apart) for r in c.ranks]
        if ranks:
            html.append(rank_positions(f"plot-hang-{i}", "last collective per rank", ranks))
    for s in hang.stacks[:4]:
        attempt = f"attempt {s.attempt}: " if s.attempt is not None else ""
        rows = "".join(
            f"<tr><td>{esc(g.frame)}</td><td>{esc(', '.join(map(str, g.ranks[:64])))}</td>"
            f"<td>{_list(g.nodes)}</td></tr>"
            for g in s.groups[:10]
        )
        html.append(
            f"<p>{esc(attempt)}stacks by innermost frame"
            + (f" — apart: {_list(s.odd.nodes)}" if s.odd is not None else "")
            + "</p><table><thead><tr><th>frame</th><th>ranks</th><th>nodes</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    if hang.category:
        html.append(f'<p class="note">suggests {esc(hang.category)}: {esc(hang.why)}</p>')
    for problem in hang.problems[:5]:
        html.append(f'<p class="note">{esc(problem)}</p>')
    html.append("</section>")
    return "".join(html)


def _matrix(report: Report, extras: ReportExtras) -> NodeEventMatrix | None:
    if extras.matrix is not None:
        return extras.matrix
    # Without counts, show which top node has which event (1 = present).
    events = [e.template_id for e in report.events[:HEAT_EVENTS]]
    nodes = [n for n in report.nodes if n.events][:HEAT_NODES]
    if not events or not nodes:
        return None
    rows = tuple(tuple(1 if t in set(n.events) else 0 for t in events) for n in nodes)
    return NodeEventMatrix(tuple(n.node for n in nodes), tuple(events), rows)


def _heat_section(report: Report, extras: ReportExtras) -> str:
    html = ['<section id="heatmap"><h2>Nodes × failure-indicating events</h2>']
    matrix = _matrix(report, extras)
    if matrix is None:
        return html[0] + '<p class="note">No events to show.</p></section>'
    rank = {n.node: i for i, n in enumerate(report.nodes)}
    event_rank = {e.template_id: i for i, e in enumerate(report.events)}
    totals = [sum(row[j] for row in matrix.counts) for j in range(len(matrix.template_ids))]
    cols = sorted(
        range(len(matrix.template_ids)),
        key=lambda j: (event_rank.get(matrix.template_ids[j], 10**9), -totals[j]),
    )
    cols = cols[:HEAT_EVENTS]
    row_totals = [sum(row[j] for j in cols) for row in matrix.counts]
    rows = sorted(
        range(len(matrix.nodes)), key=lambda i: (rank.get(matrix.nodes[i], 10**9), -row_totals[i])
    )
    rows = [i for i in rows if row_totals[i] > 0][:HEAT_NODES] or rows[:HEAT_NODES]
    texts = _template_texts(report, extras)
    ids = [matrix.template_ids[j] for j in cols]
    html.append(
        heat_map(
            "plot-heatmap",
            f"Top {len(rows)} of {len(matrix.nodes):,} nodes × top {len(cols)} of "
            f"{len(matrix.template_ids):,} events",
            [matrix.nodes[i] for i in rows],
            ids,
            [f"{t}: {texts.get(t, '')}" for t in ids],
            [[matrix.counts[i][j] for j in cols] for i in rows],
        )
    )
    html.append(
        '<p class="note">Colour: line count (log scale); hover a cell or label for '
        "details. Columns are event template ids, listed in the events table below.</p>"
    )
    html.append("</section>")
    return "".join(html)


def _iteration_table(reported: Sequence[ReportIteration]) -> str:
    html = [
        '<table id="suspect-iterations"><thead><tr><th>Iteration</th>'
        "<th>Score</th><th>Why</th><th>Events</th></tr></thead><tbody>"
    ]
    for it in reported[: MAX_LIST * 2]:
        if it.why == "slowdown":
            why = f"job {fmt(_num(it.slowdown))}× slower from here"
        elif it.why == "failure" and it.distance is None:
            why = "the failure began here"
        elif it.why == "last":
            why = "after the last iteration printed"
        elif it.why == "clock":
            why = "by the progress bar's clock"
        elif it.why == "attempt":
            why = "the same failure, first, in an earlier attempt"
        else:
            why = f"DTW {fmt(_num(it.distance))} > {fmt(_num(it.threshold))}"
        html.append(
            f'<tr><td class="num">{esc(it.iteration)}</td>'
            f'<td class="num">{esc(fmt(_num(it.score)))}</td>'
            f"<td>{esc(why)}</td>"
            f"<td>{_list(it.events, 8)}</td></tr>"
        )
    if len(reported) > MAX_LIST * 2:
        html.append(
            f'<tr><td colspan="4" class="note">… and {len(reported) - MAX_LIST * 2:,}'
            " more</td></tr>"
        )
    html.append("</tbody></table>")
    return "".join(html)


def _timeline_section(report: Report, extras: ReportExtras) -> str:
    html = ['<section id="timeline"><h2>Iterations</h2>']
    points: Sequence[IterationPoint] = extras.iterations
    y_label = "DTW distance"
    if not points:
        points = [
            IterationPoint(int(_num(i.iteration)), _num(i.score), None, True)
            for i in report.iterations
        ]
        y_label = "iteration score"
    if not points:
        return html[0] + '<p class="note">No iteration analysis for this job.</p></section>'
    suspects = sorted({p.iteration for p in points if p.suspect})
    html.append(
        timeline(
            "plot-timeline",
            f"{len(points):,} iterations, {len(suspects):,} suspect",
            points,
            y_label=y_label,
        )
    )
    if report.iterations:
        html.append(_iteration_table(report.iterations))
    html.append("</section>")
    return "".join(html)


def _stage_section(report: Report, extras: ReportExtras) -> str:
    html = ['<section id="stages"><h2>Stage reached per node</h2>']
    per_node = extras.stage_per_node
    if not per_node:
        stage = report.stage
        note = f"The job reached stage <b>{esc(stage)}</b>." if stage else "No stage information."
        return html[0] + f'<p class="note">{note}</p></section>'
    counts = Counter(per_node.values())
    order = list(extras.stage_order) + [s for s in counts if s not in extras.stage_order]
    order = [s for s in order if s in counts]
    majority = counts.most_common(1)[0][0]
    items = [(s, float(counts[s]), s != majority) for s in order]
    html.append(
        bar_chart(
            "plot-stages",
            "Nodes by last stage reached",
            items,
            value_label="nodes (red: not the majority's stage)",
            label_width=150,
        )
    )
    behind = sorted(n for n, s in per_node.items() if s != majority)
    if behind:
        html.append(
            f'<p id="stage-outliers">Nodes not at the majority stage '
            f"(<b>{esc(majority)}</b>): {_list(behind, 20)}</p>"
        )
    html.append("</section>")
    return "".join(html)


def _events_section(report: Report) -> str:
    events = report.events
    html = ['<section id="events"><h2>Failure-indicating events</h2>']
    if not events:
        return html[0] + '<p class="note">No failure-indicating events.</p></section>'
    html.append(
        '<table id="events-table"><thead><tr><th>#</th><th>Score</th><th>Event and '
        "sample line</th><th>Level</th><th>Count</th><th>Nodes</th><th>First seen</th>"
        "<th>Why</th></tr></thead><tbody>"
    )
    for i, e in enumerate(events[:MAX_EVENTS], start=1):
        level = e.level or ""
        nodes = e.nodes
        html.append(
            f'<tr class="event"><td class="num">{i}</td>'
            f'<td class="num">{esc(fmt(_num(e.score)))}</td>'
            f'<td><code class="template-id">{esc(e.template_id)}</code> '
            f"<code>{esc(short(e.template, 400))}</code>"
            f'<pre class="sample">{esc(short(e.sample, 2000))}</pre></td>'
            f'<td class="lvl-{esc(level.upper())}">{esc(level)}</td>'
            f'<td class="num">{esc(fmt(_num(e.count)))}</td>'
            f"<td>{len(nodes):,}: {_list(nodes, 6)}</td>"
            f"<td>{esc(e.first_seen or '')}</td>"
            f"<td>{_list(e.reasons)}</td></tr>"
        )
    if len(events) > MAX_EVENTS:
        html.append(
            f'<tr><td colspan="8" class="note">… and {len(events) - MAX_EVENTS:,} more '
            "(see the JSON report)</td></tr>"
        )
    html.append("</tbody></table></section>")
    return "".join(html)


def _rules_section(report: Report) -> str:
    matches = report.rule_matches
    html = ['<section id="rules"><h2>Rule matches</h2>']
    if not matches:
        return html[0] + '<p class="note">No rule of the fault library matched.</p></section>'
    for m in matches:
        nodes = m.nodes
        html.append(
            f'<div class="rule"><h3>{esc(m.title or m.rule)} '
            f'<span class="tag">{esc(m.rule)}</span></h3>'
            f"<p><b>Diagnosis:</b> {esc(m.diagnosis)}</p>"
            f"<p><b>Remediation:</b> {esc(m.remediation)}</p>"
            + (f'<p class="note">Nodes ({len(nodes):,}): {_list(nodes)}</p>' if nodes else "")
            + "</div>"
        )
    html.append("</section>")
    return "".join(html)


def _filtered_section(report: Report, extras: ReportExtras) -> str:
    html = ['<section id="filtered"><h2>Removed by cross-job filtering</h2>']
    dropped = extras.dropped_templates
    if extras.no_baseline or not report.baseline_jobs:
        return html[0] + (
            '<p class="note">Nothing removed: there was no baseline to compare with.</p></section>'
        )
    if not dropped:
        return html[0] + '<p class="note">No event was removed.</p></section>'
    html.append(
        f'<p class="note">{len(dropped):,} event templates were dropped because the '
        "baseline jobs show them too.</p>"
    )
    html.append(
        '<table id="filtered-table"><thead><tr><th>Template id</th><th>Template</th>'
        "<th>Reason</th></tr></thead><tbody>"
    )
    for d in dropped[:MAX_EVENTS]:
        html.append(
            f"<tr><td><code>{esc(d.template_id)}</code></td>"
            f"<td><code>{esc(short(d.text, 300))}</code></td><td>{esc(d.note)}</td></tr>"
        )
    if len(dropped) > MAX_EVENTS:
        html.append(
            f'<tr><td colspan="3" class="note">… and {len(dropped) - MAX_EVENTS:,} more</td></tr>'
        )
    html.append("</tbody></table></section>")
    return "".join(html)


def render_html(report: Report, extras: ReportExtras | None = None) -> str:
    """The whole report as one HTML document (UTF-8, no external resources, no scripts)."""
    extras = extras or ReportExtras()
    job = report.job_id
    when = f" · generated {esc(extras.generated_at)}" if extras.generated_at else ""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # No network: block every fetch, inline styles only, no scripts at all.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">",
        f"<title>L4 diagnosis — {esc(job)}</title><style>{_CSS}</style></head><body>",
        f'<header><h1 id="title">L4 diagnosis — {esc(job)}</h1>'
        f'<div class="sub">status {esc(report.status)} · stage '
        f"{esc(report.stage or 'unknown')}{when}</div></header><main>",
        _verdict(report),
        _attempts_section(report),
        _summary(report, extras),
        _rules_section(report),
        _nodes_section(report),
        _hang_section(report),
        _heat_section(report, extras),
        _timeline_section(report, extras),
        _stage_section(report, extras),
        _events_section(report),
        _filtered_section(report, extras),
        "</main><footer>L4 — diagnosis of a training job from its logs</footer></body></html>",
    ]
    return "\n".join(parts)


def write_html(path: Path, report: Report, extras: ReportExtras | None = None) -> Path:
    """Render the report and write it to ``path`` (parent folders created); returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report, extras), encoding="utf-8")
    return path
