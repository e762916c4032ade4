"""The terminal rendering of one diagnosis (DESIGN §6 report dict) with rich.

Order is what an SRE reads first: the verdict (what kind of fault, whom to evict, whether a
restart helps), matched fault rules (a confirmed pattern leads), then the
failure-indicating events with one sample line each, the suspect nodes with their scores, silent
nodes, stage and suspect iterations, and last what cross-job filtering removed. Log text is
printed as plain text (``markup=False``): a line with ``[bold]`` in it stays as it was logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

MAX_EVENTS = 10
MAX_NODES = 8
SAMPLE_CHARS = 220


def _short(text: str, limit: int = SAMPLE_CHARS) -> str:
    lines = text.splitlines()
    # A joined traceback says what happened on its last line, not on "Traceback (most recent…".
    first = (
        lines[-1].strip()
        if len(lines) > 1 and "Traceback" in lines[0]
        else (lines[0] if lines else "")
    )
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _render_verdict(verdict: Mapping[str, Any], console: Console) -> None:
    """What to do, before the evidence: category and whose fault, whom to evict, restart."""
    evict = list(verdict.get("evict") or [])
    console.print(
        Text.assemble(
            ("Verdict: ", "bold"),
            (str(verdict.get("category", "unknown")), "bold magenta"),
            f" ({verdict.get('blame', 'unknown')}), evict: ",
            (", ".join(evict) if evict else "none", "bold red" if evict else "bold"),
            f", restart: {verdict.get('restart', '?')}, "
            f"confidence {float(verdict.get('confidence') or 0):.2f}",
        )
    )
    for reason in verdict.get("why") or []:
        console.print(Text(f"  because: {_short(str(reason), 300)}", style="dim"))


def render_terminal(report: Mapping[str, Any], console: Console) -> None:
    """Print the readable summary of a diagnosis report."""
    job = report["job_id"]
    console.print(
        Text.assemble(
            ("job ", "bold"),
            (str(job), "bold cyan"),
            f" — {report.get('status', 'unknown')}, stage reached: ",
            (str(report.get("stage") or "unknown"), "bold"),
        )
    )
    verdict = report.get("verdict")
    if verdict:
        _render_verdict(verdict, console)
    baselines = report.get("baseline_jobs") or []
    filt = report.get("filtering") or {}
    if baselines:
        console.print(
            f"cross-job filtering against {len(baselines)} baseline job(s): "
            f"{filt.get('dropped', 0)} of {filt.get('templates', 0)} templates dropped as normal "
            f"({filt.get('lines_dropped', 0):,} lines)",
            markup=False,
        )
    for note in report.get("notes") or []:
        console.print(Text(f"note: {note}", style="yellow"))

    matches = report.get("rule_matches") or []
    if matches:
        console.print(Text("\nMatched fault patterns", style="bold"))
        for m in matches:
            role = "root cause" if m.get("role") == "cause" else "symptom"
            named: list[str] = list(m.get("nodes", []))
            where = ", ".join(named[:6]) + (" …" if len(named) > 6 else "")
            console.print(
                Text.assemble(
                    (f"  {m['rule']}", "bold red" if role == "root cause" else "bold"),
                    f" ({role}, {m.get('severity', '?')}): {m.get('title', '')} — nodes: {where}",
                )
            )
            if m.get("diagnosis"):
                console.print(Text(f"    {_short(m['diagnosis'], 400)}"))
            if m.get("remediation"):
                console.print(Text(f"    fix: {_short(m['remediation'], 400)}", style="green"))

    events = report.get("events") or []
    console.print(Text(f"\nFailure-indicating events ({len(events)})", style="bold"))
    if not events:
        console.print("  none stood out")
    for k, ev in enumerate(events[:MAX_EVENTS], 1):
        nodes: list[str] = list(ev.get("nodes") or [])
        shown = ", ".join(nodes[:3]) + (f" +{len(nodes) - 3}" if len(nodes) > 3 else "")
        console.print(
            Text.assemble(
                (f"  {k:>2}. {ev.get('score', 0):.2f} ", "bold"),
                (f"{ev.get('level') or '-':<5} ", "red" if ev.get("level") == "ERROR" else ""),
                f"{ev.get('count', 0):>6}× on {len(nodes)} node(s) [{shown}]  first "
                f"{str(ev.get('first_seen') or '-')[:23]}",
            )
        )
        console.print(Text(f"      {_short(str(ev.get('sample') or ev.get('template') or ''))}"))
        console.print(Text(f"      why: {', '.join(ev.get('reasons') or [])}", style="dim"))
    if len(events) > MAX_EVENTS:
        console.print(f"  … and {len(events) - MAX_EVENTS} more (see --json / --html)")

    ranked = [n for n in report.get("nodes") or [] if n.get("score", 0) > 0]
    console.print(Text(f"\nSuspect nodes (of {len(report.get('nodes') or [])})", style="bold"))
    if not ranked:
        console.print("  no node stands out")
    for n in ranked[:MAX_NODES]:
        console.print(
            Text.assemble(
                (f"  {n['node']:<24}", "bold"),
                f" {n['score']:.2f}  {', '.join(n.get('reasons') or [])}",
            )
        )
    silent = report.get("silent_nodes") or []
    if silent:
        console.print(
            Text(f"\nSilent nodes (stopped logging before their peers): {', '.join(silent[:10])}")
        )
    stragglers = report.get("stragglers") or []
    for s in stragglers[:5]:
        console.print(
            f"straggler: {s['node']} from iteration {s['from_iteration']} "
            f"({s['slowdown']:.2f}x the median iteration time)",
            markup=False,
        )
    slowdown = report.get("slowdown")
    if slowdown:
        console.print(
            f"\nThe job slows down from iteration {slowdown['from_iteration']}: "
            f"{slowdown['ratio']:.2f}x its earlier {slowdown['reference_seconds']:.2f} s per "
            f"iteration; {len(slowdown.get('events') or [])} event(s) start with it on "
            f"{', '.join((slowdown.get('nodes') or [])[:5]) or 'no node'}",
            markup=False,
        )
    iterations = report.get("iterations") or []
    dtw = [i for i in iterations if i.get("why", "dtw") == "dtw"]
    if iterations:
        its = ", ".join(str(i["iteration"]) for i in iterations[:5])
        detail = ""
        if dtw:
            first = dtw[0]
            detail = (
                f" (DTW {first.get('distance')} over the three-sigma threshold "
                f"{first.get('threshold')}; {len(first.get('events', []))} new events)"
            )
        console.print(f"\nSuspect iterations: {its}{detail}", markup=False)
