"""The terminal rendering of one diagnosis (a :class:`Report`, ARCHITECTURE.md *The report*).

Order is what an SRE reads first: the verdict (what kind of fault, whom to evict, whether a
restart helps), matched fault rules (a confirmed pattern leads), then the
failure-indicating events with one sample line each, the suspect nodes with their scores, silent
nodes, stage and suspect iterations, and last what cross-job filtering removed. Log text is
printed as plain text (``markup=False``): a line with ``[bold]`` in it stays as it was logged.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from l4_plugin.records import Verdict
from l4_plugin.report.attempts import ReportAttempts
from l4_plugin.report.hangs import ReportCollective, ReportHang
from l4_plugin.report.model import Report, ReportEvent, ReportRuleMatch

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


def _render_verdict(verdict: Verdict, console: Console) -> None:
    """What to do, before the evidence: category and whose fault, whom to evict, restart."""
    evict = verdict.evict
    console.print(
        Text.assemble(
            ("Verdict: ", "bold"),
            (verdict.category, "bold magenta"),
            f" ({verdict.blame}), evict: ",
            (", ".join(evict) if evict else "none", "bold red" if evict else "bold"),
            f", restart: {verdict.restart}, confidence {float(verdict.confidence or 0):.2f}",
        )
    )
    for reason in verdict.why:
        console.print(Text(f"  because: {_short(reason, 300)}", style="dim"))


def _render_header(report: Report, console: Console) -> None:
    """The job, its verdict, how much cross-job filtering removed, and the analysis notes."""
    console.print(
        Text.assemble(
            ("job ", "bold"),
            (report.job_id, "bold cyan"),
            f" — {report.status}, stage reached: ",
            (report.stage or "unknown", "bold"),
        )
    )
    if report.verdict is not None:
        _render_verdict(report.verdict, console)
    filt = report.filtering
    if report.baseline_jobs:
        console.print(
            f"cross-job filtering against {len(report.baseline_jobs)} baseline job(s): "
            f"{filt.dropped} of {filt.templates} templates dropped as normal "
            f"({filt.lines_dropped:,} lines)",
            markup=False,
        )
    for note in report.notes:
        console.print(Text(f"note: {note}", style="yellow"))


def _render_rules(matches: Sequence[ReportRuleMatch], console: Console) -> None:
    if not matches:
        return
    console.print(Text("\nMatched fault patterns", style="bold"))
    for m in matches:
        role = "root cause" if m.role == "cause" else "symptom"
        where = ", ".join(m.nodes[:6]) + (" …" if len(m.nodes) > 6 else "")
        console.print(
            Text.assemble(
                (f"  {m.rule}", "bold red" if role == "root cause" else "bold"),
                f" ({role}, {m.severity or '?'}): {m.title} — nodes: {where}",
            )
        )
        if m.diagnosis:
            console.print(Text(f"    {_short(m.diagnosis, 400)}"))
        if m.remediation:
            console.print(Text(f"    fix: {_short(m.remediation, 400)}", style="green"))


def _render_events(events: Sequence[ReportEvent], console: Console) -> None:
    console.print(Text(f"\nFailure-indicating events ({len(events)})", style="bold"))
    if not events:
        console.print("  none stood out")
    for k, ev in enumerate(events[:MAX_EVENTS], 1):
        nodes = ev.nodes
        shown = ", ".join(nodes[:3]) + (f" +{len(nodes) - 3}" if len(nodes) > 3 else "")
        console.print(
            Text.assemble(
                (f"  {k:>2}. {ev.score:.2f} ", "bold"),
                (f"{ev.level or '-':<5} ", "red" if ev.level == "ERROR" else ""),
                f"{ev.count:>6}× on {len(nodes)} node(s) [{shown}]  first "
                f"{(ev.first_seen or '-')[:23]}",
            )
        )
        console.print(Text(f"      {_short(ev.sample or ev.template)}"))
        console.print(Text(f"      why: {', '.join(ev.reasons)}", style="dim"))
    if len(events) > MAX_EVENTS:
        console.print(f"  … and {len(events) - MAX_EVENTS} more (see --json / --html)")


def _render_nodes(report: Report, console: Console) -> None:
    ranked = [n for n in report.nodes if n.score > 0]
    console.print(Text(f"\nSuspect nodes (of {len(report.nodes)})", style="bold"))
    if not ranked:
        console.print("  no node stands out")
    for n in ranked[:MAX_NODES]:
        console.print(
            Text.assemble((f"  {n.node:<24}", "bold"), f" {n.score:.2f}  {', '.join(n.reasons)}")
        )
    if report.silent_nodes:
        console.print(
            Text(
                "\nSilent nodes (stopped logging before their peers): "
                f"{', '.join(report.silent_nodes[:10])}"
            )
        )
    for s in report.stragglers[:5]:
        console.print(
            f"straggler: {s.node} from iteration {s.from_iteration} "
            f"({s.slowdown:.2f}x the median iteration time)",
            markup=False,
        )


def _render_time(report: Report, console: Console) -> None:
    """The job's slowdown and its suspect iterations."""
    slowdown = report.slowdown
    if slowdown:
        console.print(
            f"\nThe job slows down from iteration {slowdown.from_iteration}: "
            f"{slowdown.ratio:.2f}x its earlier {slowdown.reference_seconds:.2f} s per "
            f"iteration; {len(slowdown.events)} event(s) start with it on "
            f"{', '.join(slowdown.nodes[:5]) or 'no node'}",
            markup=False,
        )
    iterations = report.iterations
    dtw = [i for i in iterations if i.why == "dtw"]
    if iterations:
        its = ", ".join(str(i.iteration) for i in iterations[:5])
        detail = ""
        if dtw:
            first = dtw[0]
            detail = (
                f" (DTW {first.distance} over the three-sigma threshold "
                f"{first.threshold}; {len(first.events)} new events)"
            )
        console.print(f"\nSuspect iterations: {its}{detail}", markup=False)


def positions_line(c: ReportCollective, limit: int = 12) -> str:
    """Each rank's last collective in one line: ranks that stand alike grouped, the ranks
    apart first (``#48 gloo:barrier completed: rank 3 | #48 gloo:all_reduce completed: ranks
    0-2``)."""
    groups: dict[tuple[int | None, str, str], list[int]] = {}
    for r in c.ranks:
        groups.setdefault((r.seq, r.op, r.state), []).append(r.rank)
    order = sorted(groups.items(), key=lambda kv: (len(kv[1]), kv[0][0] or 0))
    parts = [
        f"#{seq if seq is not None else '?'} {op or '?'} {state}: "
        + ("rank " if len(ranks) == 1 else "ranks ")
        + _span(ranks)
        for (seq, op, state), ranks in order[:limit]
    ]
    if c.ranks_without_dump:
        parts.append("no trace: ranks " + _span(list(c.ranks_without_dump)))
    return " | ".join(parts)


def _span(ranks: Sequence[int]) -> str:
    """``0-3,5,7-9`` (at most 12 runs shown)."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:12])
    return text + (",…" if len(runs) > 12 else "")


def _render_hang(hang: ReportHang | None, console: Console) -> None:
    """Where the ranks stood, from their Flight Recorder traces and stacks."""
    if hang is None:
        return
    console.print(Text("\nWhere the ranks stood (Flight Recorder, py-spy)", style="bold"))
    for c in hang.collectives[:4]:
        attempt = f"attempt {c.attempt}, " if c.attempt is not None else ""
        names = f" → {', '.join(c.culprit_nodes)}" if c.culprit_nodes else ""
        console.print(Text.assemble(f"  {attempt}{c.summary}", (names, "bold red")))
        console.print(Text(f"    last collective per rank: {positions_line(c)}", style="dim"))
    for s in hang.stacks[:4]:
        attempt = f"attempt {s.attempt}: " if s.attempt is not None else ""
        groups = "; ".join(f"{_span(g.ranks)} in {g.frame}" for g in s.groups[:3])
        console.print(Text(f"  stacks, {attempt}ranks {groups}"))
        if s.odd is not None:
            where = ", ".join(s.odd.nodes) or "?"
            console.print(
                Text.assemble("    apart: ranks ", (f"{_span(s.odd.ranks)} on {where}", "bold red"))
            )
    if hang.category:
        console.print(Text(f"  suggests {hang.category}: {hang.why}", style="dim"))
    for problem in hang.problems[:3]:
        console.print(Text(f"  note: {problem}", style="yellow"))


def _render_attempts(attempts: ReportAttempts | None, console: Console) -> None:
    """Each attempt's own diagnosis in a line, the one the report leads with marked."""
    if attempts is None:
        return
    console.print(
        Text.assemble(
            (f"\nAttempts ({len(attempts.attempts)}): ", "bold"),
            f"this report is attempt {attempts.lead}'s — {attempts.why}",
        )
    )
    for a in attempts.attempts:
        mark = "→" if a.attempt == attempts.lead else " "
        culprits = ", ".join(a.culprits) or "no node stands out"
        console.print(
            Text(
                f"  {mark} attempt {a.attempt}: {a.category}, stage {a.stage or '?'}, "
                f"culprit {culprits} ({len(a.nodes)} nodes, {(a.first_seen or '?')[:19]} → "
                f"{(a.last_seen or '?')[:19]})"
            )
        )
    if attempts.note:
        console.print(Text(f"  {attempts.note}", style="bold" if attempts.bound else "dim"))


def render_terminal(report: Report, console: Console) -> None:
    """Print the readable summary of a diagnosis report."""
    _render_header(report, console)
    _render_attempts(report.attempts, console)
    _render_rules(report.rule_matches, console)
    _render_events(report.events, console)
    _render_nodes(report, console)
    _render_hang(report.hang, console)
    _render_time(report, console)
