"""The verdict (ARCHITECTURE.md, *The report*): what an SRE or a recovery controller acts on.

Four answers: which machines to take out (``evict``, the smallest set the evidence supports: the
culprit, not its neighbours), what kind of fault it was (``category``) and so whose (``blame``),
and whether restarting helps (``restart``). Evidence, strongest first:

1. the culprit: the top-ranked node when the ranking singles it out (its peers name it, it went
   silent, or it stands clearly above the rest);
2. a confirmed *cause* rule that matched the culprit (or, with no culprit, the job): its category,
   and its ``evict`` (else: hardware evicts, user, framework and platform faults do not);
3. else the failure lexicon (``rules/lexicon.yaml``) on the culprit's own events, then on the
   ranked events, consequences (watchdog timeouts, the launcher's teardown) skipped;
4. else what the culprit did: a node that went silent is a node fault; a node its peers name
   while it stays up (its other ranks still print) had a rank hang on its accelerator.

Pure: report facts in, :class:`Verdict` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from l4_plugin.analysis.fusion import HANG_REASONS
from l4_plugin.analysis.lexicon import Lexicon, last_line
from l4_plugin.records import Verdict

_CULPRIT_MIN = 0.5  # the top node's score below which nothing singles it out
_CULPRIT_GAP = 0.1  # ... or how far above the next node it must stand without strong evidence
_SECOND_CLOSE = 0.97  # a second node is evicted with the first only when this close and named
_STRONG = ("named-by-peers", "silent", "straggler-from", "slowdown-onset", *HANG_REASONS)
_EVICTING = ("hardware/accelerator", "hardware/network", "hardware/node")
_MAX_EVENTS = 10  # ranked events read for a category
_LEAD_WEIGHT = 0.9  # lexicon weight from which the lead event's words decide the category
_LEADS = 3  # the leading events: the first few that are not consequences...
_LEAD_CLOSE = 0.9  # ... scored within this fraction of the first


@dataclass(frozen=True, slots=True)
class VerdictEvent:
    """A reported event as the verdict reads it: its text, nodes and reasons."""

    text: str
    nodes: tuple[str, ...]
    reasons: tuple[str, ...]
    score: float = 1.0


@dataclass(frozen=True, slots=True)
class VerdictNode:
    """A ranked node: its score and the reasons it is suspect."""

    node: str
    score: float
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class VerdictRule:
    """A matched rule: id, category, role, nodes, confidence and whether it evicts."""

    rule: str
    category: str
    role: str
    nodes: tuple[str, ...]
    confidence: float
    evict: bool | None = None


def blame_of(category: str) -> str:
    """infrastructure for hardware and platform faults, user for user and framework faults."""
    if category.startswith("hardware/") or category == "platform":
        return "infrastructure"
    if category.startswith("user/") or category == "framework":
        return "user"
    return "unknown"


def culprits(nodes: Sequence[VerdictNode]) -> tuple[str, ...]:
    """The nodes the ranking singles out (at most two; none when nothing stands out)."""
    if not nodes or nodes[0].score < _CULPRIT_MIN:
        return ()
    top = nodes[0]
    strong = any(r.startswith(_STRONG) for r in top.reasons)
    runner = nodes[1].score if len(nodes) > 1 else 0.0
    if not strong and top.score - runner < _CULPRIT_GAP:
        return ()
    out = [top.node]
    if (
        len(nodes) > 1
        and nodes[1].score >= _SECOND_CLOSE * top.score
        and any(r.startswith(_STRONG) for r in nodes[1].reasons)
    ):
        out.append(nodes[1].node)
    return tuple(out)


def decide(
    events: Sequence[VerdictEvent],
    nodes: Sequence[VerdictNode],
    rules: Sequence[VerdictRule],
    lexicon: Lexicon,
    n_nodes: int,
    hang: tuple[str, float, str] | None = None,
) -> Verdict:
    """The verdict of one diagnosis (see the module docstring); ``hang`` is what the ranks'
    dumps say of the category (``analysis.hang``: category, confidence, why), read after the
    rules."""
    suspects = culprits(nodes)
    why: list[str] = []
    if suspects:
        top = nodes[0]
        why.append(f"culprit {', '.join(suspects)} ({', '.join(top.reasons) or 'top-ranked'})")
    category, confidence = _from_lead(events, nodes, lexicon, why)
    evict_flag: bool | None = None
    if category is None:
        category, confidence, evict_flag = _from_rules(rules, suspects, n_nodes, why)
    if category is None and hang is not None:
        category, confidence = hang[0], hang[1]
        why.append(f"the ranks' dumps: {hang[2]} ({hang[0]})")
    if category is None and suspects:
        own = [e for e in events if set(e.nodes) & set(suspects)]
        category, confidence = _from_words(own, lexicon, why)
        if category is None:
            category, confidence = _from_behaviour(nodes[0], why)
    if category is None:
        category, confidence = _from_words(events, lexicon, why)
    if category is None:
        why.append("no rule, no known failure words and no culprit")
        return Verdict("unknown", "unknown", (), "as-is", 0.2, tuple(why))
    evicts = evict_flag if evict_flag is not None else category in _EVICTING
    evict = suspects if evicts else ()
    if not suspects:
        confidence *= 0.8
    if evict:
        restart = "after-eviction"
    elif blame_of(category) == "user" or category == "hardware/storage":
        restart = "after-fix"
    else:
        restart = "as-is"
    return Verdict(category, blame_of(category), evict, restart, confidence, tuple(why))


def _from_rules(
    rules: Sequence[VerdictRule], suspects: tuple[str, ...], n_nodes: int, why: list[str]
) -> tuple[str | None, float, bool | None]:
    """A cause rule that matched the culprit; with no culprit, one that matched the job."""
    causes = [r for r in rules if r.role == "cause"]
    if suspects:
        # A rule that matched on most nodes (every rank's timeout) says nothing of the culprit.
        on_culprit = [
            r for r in causes if set(r.nodes) & set(suspects) and len(r.nodes) <= n_nodes / 2
        ]
    else:
        # No node stands out: a rule counts when it describes the job (matched widely), not a
        # single node's trouble the ranking did not confirm.
        on_culprit = [r for r in causes if not r.nodes or len(r.nodes) >= max(2, n_nodes // 2)]
    if not on_culprit:
        return None, 0.0, None
    best = max(on_culprit, key=lambda r: (r.confidence, r.rule))
    why.append(f"rule {best.rule} ({best.category})")
    return best.category, best.confidence, best.evict


def _from_lead(
    events: Sequence[VerdictEvent],
    nodes: Sequence[VerdictNode],
    lexicon: Lexicon,
    why: list[str],
) -> tuple[str | None, float]:
    """The leading events, when their own words name the failure beyond doubt (lexicon weight at
    least ``_LEAD_WEIGHT``): "No space left on device" at the top of the report is the storage
    fault, whatever benign anomaly a rule also found on a node. A lead printed only by
    witnesses (nodes reporting a peer) is their view of the culprit, not a verdict."""
    witnesses = {n.node for n in nodes if any(r.startswith("witness-of:") for r in n.reasons)}
    leads = [e for e in events if "cascade" not in e.reasons][:_LEADS]
    top = leads[0].score if leads else 0.0
    for lead in leads:
        if lead.score < _LEAD_CLOSE * top:
            break
        if lead.nodes and set(lead.nodes) <= witnesses:
            continue
        said = last_line(lead.text)
        term = lexicon.classify_record(lead.text)
        if term is None or not term.says_cause or term.weight < _LEAD_WEIGHT:
            continue
        why.append(f"lead event {said[:120]!r} ({term.category})")
        return term.category, 0.95 * term.weight
    return None, 0.0


def _from_words(
    events: Sequence[VerdictEvent], lexicon: Lexicon, why: list[str]
) -> tuple[str | None, float]:
    """The lexicon on the first ranked events that say what went wrong (consequences
    skipped)."""
    for e in events[:_MAX_EVENTS]:
        if "cascade" in e.reasons:
            continue
        said = last_line(e.text)
        term = lexicon.classify_record(e.text)
        if term is None or not term.says_cause:
            continue
        why.append(f"words of {said[:120]!r} ({term.category})")
        return term.category, 0.9 * term.weight
    return None, 0.0


def _from_behaviour(top: VerdictNode, why: list[str]) -> tuple[str | None, float]:
    """What the culprit did when none of its lines says what happened."""
    if "silent" in top.reasons:
        why.append(f"{top.node} stopped logging while the job went on")
        return "hardware/node", 0.6
    if any(
        r.startswith(("named-by-peers", "straggler-from", "slowdown-onset")) for r in top.reasons
    ):
        why.append(f"{top.node} stayed up but its peers waited on it (a rank hung or slowed)")
        return "hardware/accelerator", 0.5
    return None, 0.0
