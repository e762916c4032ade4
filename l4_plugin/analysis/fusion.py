"""Fusion: every analysis's evidence into one ranked diagnosis (events, nodes, iterations, stage).

Each event of the failed job collects reasons, and each reason has a weight in [0, 1]; an event's
score is the noisy-OR of its weights, ``1 - prod(1 - w)``, so independent evidence accumulates but
never exceeds 1 and no single weak signal dominates. Reasons:

* cross-job: ``absent-in-baseline`` / ``burst-vs-baseline`` (strong), ``rare-in-baseline``
  (weaker); dropped templates are out of the running, ``no-baseline`` carries no weight;
* ``spatial-outlier:<node>``: the template explains why a suspect node differs (scaled by that
  node's score and by the template's level: INFO a quarter, WARN a half, ERROR in full);
* ``new-in-iteration:<k>``: the template first appears in a suspect iteration;
* ``error-level`` and ``error-in-failing-stage``;
* ``starts-with-slowdown:<k>``: printed by a few nodes from about the iteration where the whole
  job slowed down (a throttled device makes every rank wait: the lines recur, yet they are the
  cause, not background);
* ``only-on-silent-node-peers``: the peers printed it after a silent node stopped (the cascade a
  dead rank leaves behind — it is how that failure shows, so it belongs in the set);
* ``earliest-evidence``: among the WARN-or-worse candidates of the failing stage, the one that came
  first. Root
  cause before cascade: a node's IB error precedes the completion errors of its ring neighbours and
  the watchdog timeouts of everyone else, so the earliest distinct evidence is favoured, and later
  templates printed by most nodes are marked ``cascade`` and their score is scaled by
  ``_CASCADE_FACTOR``, so they stay in the set but rank after the evidence that explains them.

The recommended set is not "everything with a reason": it keeps candidates scoring at least
``min_score`` and at least ``relative_threshold`` times the best, at most ``max_events`` — high
precision and high recall together, rather than the paper's recall-first list.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from l4_plugin.analysis.peers import NamedNode, PeerResult
from l4_plugin.analysis.results import (
    EventStat,
    FilterResult,
    FusionResult,
    IterationResult,
    NodeScore,
    RankedEvent,
    RankedNode,
    SilenceResult,
    Slowdown,
    SpatialResult,
    StageResult,
    StragglerResult,
)
from l4_plugin.analysis.spatial import level_weight
from l4_plugin.errors import AnalysisError
from l4_plugin.records import Level, is_error, is_flagged, is_job_node

# Reason weights. Cross-job absence and spatial attribution are the paper's two main signals; the
# rest corroborate. They were set so that one corroborated signal clears the default cut-off and a
# lone "absent-in-baseline" INFO line on a healthy node does not.
_FILTER_WEIGHT = {
    "absent-in-baseline": 0.4,
    # a line whose version most nodes print otherwise (analysis.versions): absent from the job
    "odd-version": 0.4,
    "burst-vs-baseline": 0.4,
    "rare-in-baseline": 0.25,
    "no-baseline": 0.0,
}
_SPATIAL_WEIGHT = 0.45
# A node whose stack states other versions than the rest of the job's (analysis.versions).
_ODD_STACK_WEIGHT = 0.6
# ... and the others' loudness then weighs less (as when peers name a node).
_STACK_OTHERS_FACTOR = 0.8
_ITERATION_WEIGHT = 0.35
_ERROR_WEIGHT = 0.3
_WARN_WEIGHT = 0.1
_STAGE_WEIGHT = 0.15
_SILENT_PEER_WEIGHT = 0.35
# Printed (locally) just as the whole job started to slow down and kept up: the usual shape of a
# throttled or degraded device that makes every rank wait.
_SLOWDOWN_WEIGHT = 0.5
_EARLIEST_WEIGHT = 0.3
# The node (one of a few) that printed the event ranked first: the diagnosis's lead is its own
# line, and two nodes' oddities (the logging rank's, the culprit's) should not outvote it.
_LEAD_WEIGHT = 0.3
# Named by its peers' failure evidence (an address of its own in their errors): the other end of
# the broken connections. Scaled by its witnesses relative to the most-named node's.
_NAMED_WEIGHT = 0.85
# A node whose own evidence names another node is a witness: its loudness is the culprit's.
_WITNESS_FACTOR = 0.5
# When peers name a node, a node neither named, silent nor a witness is discounted this much.
_UNNAMED_FACTOR = 0.85
# A cascade event stays in the recommended set (the timeouts are how the failure shows) but
# ranks after the earliest distinct evidence that explains it.
_CASCADE_FACTOR = 0.75
# What the named culprit printed first is the failure in its own words (it leads what its
# witnesses report about it); a witness's statement ranks after it.
_CULPRIT_WEIGHT = 0.85
_WITNESS_STATEMENT_FACTOR = 0.5
# When the ranks' dumps (Flight Recorder, stacks: ``analysis.hang``) name a node, a node they do
# not name and that is not silent weighs this much: a trace that says which rank the others wait
# for outweighs how loudly the waiting ranks report it.
_HANG_OTHERS_FACTOR = 0.6
#: Node reasons of the dumps' evidence (``analysis.hang``): a culprit as strong as one its
#: peers name.
HANG_REASONS = ("collective-mismatch", "collective-behind", "no-trace", "stack-apart")


_FALLBACK_EVENTS = 3


def _noisy_or(weights: Iterable[float]) -> float:
    p = 1.0
    for w in weights:
        p *= 1.0 - min(max(w, 0.0), 1.0)
    return 1.0 - p


class Fusion:
    """Combines the analyses' results into the final :class:`FusionResult`.

    ``relative_threshold``, ``min_score`` and ``max_events`` shape the recommended event set (see
    the module docstring); ``root_window`` is how close (same unit as ``EventStat.first_seen``)
    to the earliest candidate an event must start to share ``earliest-evidence``;
    ``cascade_fraction`` is the fraction of nodes from which a later template counts as cascade;
    ``max_node_events`` bounds the events listed per node. After :meth:`fit`, ``result_`` holds it.
    """

    def __init__(
        self,
        relative_threshold: float = 0.55,
        min_score: float = 0.3,
        max_events: int = 20,
        root_window: float = 1.0,
        cascade_fraction: float = 0.5,
        max_node_events: int = 5,
    ) -> None:
        self.relative_threshold = relative_threshold
        self.min_score = min_score
        self.max_events = max_events
        self.root_window = root_window
        self.cascade_fraction = cascade_fraction
        self.max_node_events = max_node_events

    def fit(
        self,
        events: Sequence[EventStat],
        nodes: Sequence[str] | None = None,
        crossjob: FilterResult | None = None,
        spatial: SpatialResult | None = None,
        silence: SilenceResult | None = None,
        iterations: IterationResult | None = None,
        stage: StageResult | None = None,
        stragglers: StragglerResult | None = None,
        discounts: Mapping[str, tuple[float, str]] | None = None,
        slowdown: Slowdown | None = None,
        peers: PeerResult | None = None,
        priors: Mapping[str, tuple[float, str]] | None = None,
        ordering: Mapping[str, tuple[float, str]] | None = None,
        hang: Mapping[str, tuple[float, tuple[str, ...]]] | None = None,
        teardown: frozenset[str] = frozenset(),
        stack: Mapping[str, str] | None = None,
        named: Mapping[str, float] | None = None,
        telling: Mapping[str, float] | None = None,
    ) -> Fusion:
        """Rank events and nodes from whatever analyses ran (None = that analysis did not run).

        ``discounts`` maps a template to ``(factor, reason)``: its score times the factor, the
        reason listed (evidence *against* it: background, no information). ``priors`` maps a
        template to ``(weight, reason)``: evidence *for* it no comparison gave (the lexicon's
        words). ``ordering`` maps a template to ``(factor, reason)`` that only orders the set (a
        consequence after what explains it). ``hang`` maps a node the ranks' dumps name to
        ``(weight, reasons)``; ``stack`` a node running other versions than the job to why;
        ``teardown`` templates (a launcher tearing the job down) are never a culprit's own;
        ``named`` maps a template whose words the lexicon names a cause by to their weight: the
        weightier first among equals; ``telling`` a consequence's words to theirs: of the
        consequences that score alike, the weightier first (the watchdog's timeout of a named
        collective before its boilerplate, whichever line a paste kept first)."""
        self._check(events)
        all_nodes = _all_nodes(events, nodes, spatial, silence)
        n_nodes, job_stage = max(len(all_nodes), 1), stage.stage if stage is not None else None
        by_id = {e.template_id: e for e in events}
        reasons = _level_reasons(events, crossjob, job_stage)
        _add_result_reasons(reasons, by_id, spatial, iterations, slowdown, silence, priors)
        factor = {t: f for t, (f, _) in (discounts or {}).items()}
        pre = {t: _noisy_or(w for _, w in r) * factor.get(t, 1.0) for t, r in reasons.items() if r}
        said = consequences_of(ordering)
        # (consequences and faults that went away before the failure: no node's own evidence)
        gone = _gone(discounts) | said
        earliest = self._earliest(_causes(pre, gone), by_id, job_stage, n_nodes)
        self._mark_cascade(reasons, by_id, earliest, n_nodes)
        order = _ordering(reasons, discounts, ordering)
        candidates = self._sorted(reasons, by_id, factor, order, named=named, telling=telling)
        selected = self._select(candidates, order)

        seen = (spatial, silence, stage, stragglers, earliest, by_id, slowdown, peers, hang)

        def rank_nodes(chosen: Sequence[RankedEvent]) -> tuple[RankedNode, ...]:
            return self._nodes(all_nodes, chosen, *seen, stack, gone)

        ranked_nodes = rank_nodes(selected)
        culprit = _culprit(ranked_nodes)
        if culprit is not None and (peers is not None or hang):
            own = self._culprit_evidence(culprit, pre, by_id, job_stage, teardown, said)
            heard = _witness_statements(culprit, peers, reasons, by_id) if peers else set()
            _credit_culprit(culprit, own, heard, reasons, order)
            _credit_hang(culprit, own, hang, reasons)
            if own or heard:
                candidates = self._sorted(reasons, by_id, factor, order, culprit, named, telling)
                selected = self._select(candidates, order)
                ranked_nodes = rank_nodes(selected)
        self.result_ = FusionResult(
            events=selected,
            nodes=ranked_nodes,
            iterations=iterations.suspects if iterations is not None else (),
            stage=job_stage,
            silent_nodes=silence.nodes if silence is not None else (),
            no_baseline=crossjob.no_baseline if crossjob is not None else True,
            method="l4",
            candidates=tuple(candidates),
        )
        return self

    def _check(self, events: Sequence[EventStat]) -> None:
        """``AnalysisError`` for hyper-parameters out of range or a template id given twice."""
        if not 0.0 < self.relative_threshold <= 1.0:
            raise AnalysisError(
                f"fusion: relative_threshold must be in (0, 1], got {self.relative_threshold!r}"
            )
        if self.max_events < 1:
            raise AnalysisError(f"fusion: max_events must be >= 1, got {self.max_events!r}")
        ids = [e.template_id for e in events]
        if len(set(ids)) != len(ids):
            raise AnalysisError("fusion: an event template id is given twice")

    def _mark_cascade(
        self,
        reasons: dict[str, list[tuple[str, float]]],
        by_id: Mapping[str, EventStat],
        earliest: set[str],
        n_nodes: int,
    ) -> None:
        """Give ``earliest-evidence`` to the earliest candidates, and mark ``cascade`` the later
        templates most nodes printed that are not the root nodes' own."""
        if not earliest:
            return
        first = min(by_id[t].first or 0.0 for t in earliest)
        for t in earliest:
            reasons[t].append(("earliest-evidence", _EARLIEST_WEIGHT))
        root_nodes = {n for t in earliest for n in by_id[t].first_seen}
        for t, r in reasons.items():
            e = by_id[t]
            if (
                t not in earliest
                and r
                and e.first is not None
                and e.first > first + self.root_window
                # (hosts: a driver's log repeating one worker's error is no second node)
                and len(_hosts(e.first_seen)) >= self.cascade_fraction * n_nodes
                and not set(e.first_seen) <= root_nodes
            ):
                r.append(("cascade", 0.0))

    def _sorted(
        self,
        reasons: Mapping[str, list[tuple[str, float]]],
        by_id: Mapping[str, EventStat],
        factor: Mapping[str, float],
        order: Mapping[str, float],
        culprit: str | None = None,
        named: Mapping[str, float] | None = None,
        telling: Mapping[str, float] | None = None,
    ) -> list[RankedEvent]:
        """Candidates best first; ties by the weight of the cause the lexicon names in their
        words (``named``) or of the consequence's (``telling``), by first time, then by the
        order the culprit printed them (one moment's
        lines: the first printed is the one that says what happened), and lines without a
        wall-clock time (dmesg's) by the order their node printed them. With no culprit, lines of
        one moment by the order the node that printed them first did (a kernel's three lines
        of a machine check, stamped to the second: its first says what happened)."""

        def at(t: str) -> tuple[str, float]:
            positions = by_id[t].positions
            if culprit:
                return "", positions.get(culprit, math.inf)
            first = by_id[t].first
            if first is None or not math.isfinite(first):
                return "", min(positions.values(), default=math.inf)
            node = min(n for n, ts in by_id[t].first_seen.items() if ts == first)
            return node, positions.get(node, math.inf)

        weight, said = named or {}, telling or {}
        ranked = [
            (self._ranked(by_id[t], r, factor.get(t, 1.0) * order.get(t, 1.0)), at(t))
            for t, r in reasons.items()
            if r
        ]
        ranked.sort(
            key=lambda x: (
                -x[0].score,
                -weight.get(x[0].template_id, 0.0),
                -said.get(x[0].template_id, 0.0),
                _time_key(x[0].first_seen),
                x[1],
                x[0].template_id,
            )
        )
        return [ev for ev, _ in ranked]

    def _culprit_evidence(
        self,
        culprit: str,
        pre: Mapping[str, float],
        by_id: Mapping[str, EventStat],
        job_stage: str | None,
        teardown: frozenset[str] = frozenset(),
        said: frozenset[str] = frozenset(),
    ) -> set[str]:
        """What the culprit itself printed first: the warning-or-worse candidate of the failing
        stage that came first on it (by time, then by its position in the node's logs: a
        timeless NCCL warning printed just before the stamped error it led to comes first),
        never the launcher's teardown. Within a second a line stamped in whole seconds shares
        with others, those whose words (``said``) are a consequence's come after."""
        pool = [
            t
            for t, s in pre.items()
            if s >= self.min_score
            and t not in teardown
            and culprit in by_id[t].first_seen
            and is_flagged(by_id[t].level)
            and (job_stage is None or by_id[t].stage in (None, job_stage))
        ]
        if not pool:
            return set()

        # (a time in whole seconds, an error file's "timestamp", is that second's truncation:
        # the line came at some moment within it, no earlier nor later than that second's
        # other lines; between them, the line whose words are not a consequence's)
        whole = {
            math.floor(at)
            for t in pool
            if math.isfinite(at := by_id[t].first_seen[culprit]) and at % 1 == 0
        }

        def when(t: str) -> tuple[float, bool, float, float]:
            e = by_id[t]
            at = e.first_seen[culprit]
            second = float(math.floor(at)) if math.isfinite(at) and math.floor(at) in whole else at
            return (second, t in said, at, e.positions.get(culprit, math.inf))

        first = min(when(t) for t in pool)
        return {t for t in pool if when(t) == first}

    def _earliest(
        self,
        pre: dict[str, float],
        by_id: dict[str, EventStat],
        job_stage: str | None,
        n_nodes: int,
    ) -> set[str]:
        pool = [
            t
            for t, s in pre.items()
            if s >= self.min_score
            and by_id[t].first is not None
            # Root causes announce themselves at WARN level or above (or an unknown level);
            # an early INFO oddity is not "the error that preceded everyone's timeouts".
            and level_weight(by_id[t].level, 2.0) >= 1.0
            and (job_stage is None or by_id[t].stage in (None, job_stage))
        ]
        if not pool:
            return set()
        first = min(by_id[t].first or 0.0 for t in pool)
        window = {t for t in pool if (by_id[t].first or 0.0) <= first + self.root_window}
        # Within that moment, evidence printed by a few nodes is the distinct evidence; the
        # torchrun agent's "child failed" on every node a second later is its echo. Job-wide
        # evidence only leads when there is nothing local (a configuration error, NaN loss).
        local = {t for t in window if len(by_id[t].first_seen) < self.cascade_fraction * n_nodes}
        return local or window

    @staticmethod
    def _ranked(e: EventStat, r: list[tuple[str, float]], factor: float = 1.0) -> RankedEvent:
        names = tuple(dict.fromkeys(name for name, _ in r))
        return RankedEvent(
            template_id=e.template_id,
            score=round(_noisy_or(w for _, w in r) * factor, 6),
            reasons=names,
            nodes=tuple(sorted(e.first_seen, key=lambda n: (e.first_seen[n], n))),
            count=e.count,
            first_seen=e.first,
            level=e.level,
        )

    def _select(
        self, candidates: Sequence[RankedEvent], order: Mapping[str, float]
    ) -> tuple[RankedEvent, ...]:
        if not candidates:
            return ()

        # Membership is judged before the ordering factors (cascade, consequence words): they
        # order the set, they do not shrink it.
        def weight(c: RankedEvent) -> float:
            f = order.get(c.template_id, 1.0)
            return c.score / f if f > 0 else c.score

        cut = max(self.min_score, self.relative_threshold * max(weight(c) for c in candidates))
        chosen = tuple(c for c in candidates if weight(c) >= cut)[: self.max_events]
        if chosen:
            return chosen
        # Nothing clears the cut-off, but the log holds warnings or errors, or lines whose words
        # name a failure though no level says so (a loss printed as "76980 nan"): report the
        # best of them rather than nothing — their low scores say how sure this is.
        flagged = [
            c
            for c in candidates
            if c.score > 0
            and (is_flagged(c.level) or any(r.startswith("failure-words:") for r in c.reasons))
        ]
        return tuple(flagged[:_FALLBACK_EVENTS])

    def _nodes(
        self,
        all_nodes: Sequence[str],
        selected: Sequence[RankedEvent],
        spatial: SpatialResult | None,
        silence: SilenceResult | None,
        stage: StageResult | None,
        stragglers: StragglerResult | None,
        earliest: set[str],
        by_id: dict[str, EventStat],
        slowdown: Slowdown | None = None,
        peers: PeerResult | None = None,
        hang: Mapping[str, tuple[float, tuple[str, ...]]] | None = None,
        stack: Mapping[str, str] | None = None,
        back: frozenset[str] = frozenset(),
    ) -> tuple[RankedNode, ...]:
        spatial_score = {}
        attributions: dict[str, list[str]] = {}
        suspects: set[str] = set()
        if spatial is not None and spatial.defined:
            suspects = set(spatial.suspects)
            for ns in spatial.nodes:
                spatial_score[ns.node] = ns.score * _still_apart(ns, back)
                attributions[ns.node] = [a.template_id for a in ns.attributions]
                if spatial_score[ns.node] < _APART * ns.score:
                    suspects.discard(ns.node)
        silent = {s.node: s.score for s in silence.silent} if silence is not None else {}
        lagging = set(stage.lagging) if stage is not None else set()
        slow = {s.node: s.first_iteration for s in stragglers.stragglers} if stragglers else {}
        root_nodes: set[str] = set()
        for t in earliest:
            e = by_id[t]
            if e.first_seen:
                first = min(e.first_seen.values())
                root_nodes |= {
                    n for n, ts in e.first_seen.items() if ts <= first + self.root_window
                }
        sel_ids = [ev.template_id for ev in selected]
        lead = _leading_hosts(by_id[sel_ids[0]], self.root_window) if sel_ids else set()
        if len(lead) >= self.cascade_fraction * max(len(all_nodes), 1):
            lead = set()  # a job-wide line leads: it singles out no node
        named = {n.node: n for n in peers.named} if peers is not None else {}
        witnesses = peers.witnesses if peers is not None else {}
        out: list[RankedNode] = []
        for node in all_nodes:
            weights = [spatial_score.get(node, 0.0)]
            why: list[str] = []
            if node in suspects:
                why.append("spatial-outlier")
            if node in silent:
                weights.append(0.9 * silent[node])
                why.append("silent")
            if node in root_nodes:
                weights.append(_EARLIEST_WEIGHT)
                why.append("earliest-evidence")
            if node in lead:
                weights.append(_LEAD_WEIGHT)
                why.append("lead-event")
            if node in lagging:
                weights.append(0.3)
                why.append("lagging-stage")
            if node in slow:
                weights.append(0.5)
                why.append(f"straggler-from:{slow[node]}")
            if slowdown is not None and node in slowdown.nodes:
                weights.append(_SLOWDOWN_WEIGHT)
                why.append(f"slowdown-onset:{slowdown.first_iteration}")
            factor = _factor(node, named, witnesses, silent, hang, weights, why, stack)
            own = [t for t in sel_ids if node in by_id[t].first_seen]
            own += [t for t in attributions.get(node, []) if t not in own]
            out.append(
                RankedNode(
                    node=node,
                    score=round(_noisy_or(weights) * factor, 6),
                    reasons=tuple(why),
                    events=tuple(own[: self.max_node_events]),
                )
            )
        out.sort(key=lambda n: (-n.score, n.node))
        return tuple(out)


def _still_apart(ns: NodeScore, back: frozenset[str]) -> float:
    """The share of what sets a node apart (its attributions' weight) that is not a fault that
    went away before the failure (``back``: a link that flapped and came back, printed more
    there): a node that stands out by a flap the job trained on past for hours stands out by
    nothing that ended it. 1 without attributions."""
    total = sum(a.weight for a in ns.attributions)
    if total <= 0:
        return 1.0
    gone = sum(
        a.weight for a in ns.attributions if a.direction == "excess" and a.template_id in back
    )
    return (total - gone) / total


# A spatial suspect whose evidence is mostly gone (``_still_apart`` below half) is none.
_APART = 0.5


def _factor(
    node: str,
    named: Mapping[str, NamedNode],
    witnesses: Mapping[str, tuple[str, ...]],
    silent: Mapping[str, float],
    hang: Mapping[str, tuple[float, tuple[str, ...]]] | None,
    weights: list[float],
    why: list[str],
    stack: Mapping[str, str] | None = None,
) -> float:
    """What the peers, the dumps and the versions say of a node: their weights and reasons
    added to ``weights`` and ``why``, and the factor its score takes (a witness's, or a node
    neither names weighs less; a node whose stack is like most when another's is odd)."""
    factor = 1.0
    if stack and node in stack:
        weights.append(_ODD_STACK_WEIGHT)
        why.append("odd-version")
    elif stack:
        factor = _STACK_OTHERS_FACTOR
    if hang and node in hang:
        weights.append(hang[node][0])
        why.extend(hang[node][1])
    elif hang and node not in silent:
        factor = _HANG_OTHERS_FACTOR
    if node in named:
        weights.append(_NAMED_WEIGHT * named[node].share)
        why.append(f"named-by-peers:{len(named[node].witnesses)}")
    elif node in witnesses:
        factor = min(factor, _WITNESS_FACTOR)
        why.append("witness-of:" + ",".join(witnesses[node][:3]))
    elif named and node not in silent:
        # Peers named another node: this one's loudness alone weighs less.
        factor = min(factor, _UNNAMED_FACTOR)
    return factor


def _culprit(nodes: Sequence[RankedNode]) -> str | None:
    """The most suspect node when its peers' evidence names it (else None: a loud node alone
    is not enough to re-order the events around it)."""
    if not nodes:
        return None
    top = nodes[0]
    if len(nodes) > 1 and nodes[1].score >= top.score:
        return None
    strong = ("named-by-peers:", *HANG_REASONS)
    return top.node if any(r.startswith(strong) for r in top.reasons) else None


def _credit_hang(
    culprit: str,
    own: Iterable[str],
    hang: Mapping[str, tuple[float, tuple[str, ...]]] | None,
    reasons: dict[str, list[tuple[str, float]]],
) -> None:
    """Name the dumps' evidence on what the culprit they name printed first: its own account
    of the hang (its timeout, its error) is the event their finding explains."""
    if not hang or culprit not in hang:
        return
    for t in own:
        reasons[t].extend((why, 0.0) for why in hang[culprit][1])


def _witness_statements(
    culprit: str,
    peers: PeerResult,
    reasons: Mapping[str, list[tuple[str, float]]],
    by_id: Mapping[str, EventStat],
) -> set[str]:
    """Candidates printed only by nodes whose evidence names the culprit: what the witnesses
    saw of its failure, ranked after what the culprit printed itself."""
    heard = {w for w, named in peers.witnesses.items() if culprit in named}
    if not heard:
        return set()
    return {
        t
        for t, r in reasons.items()
        if r and by_id[t].first_seen and set(by_id[t].first_seen) <= heard
    }


def _all_nodes(
    events: Sequence[EventStat],
    nodes: Sequence[str] | None,
    spatial: SpatialResult | None,
    silence: SilenceResult | None,
) -> list[str]:
    """Every node any input knows of, in a stable order."""
    seen: dict[str, None] = {}
    for n in nodes or ():
        seen[n] = None
    if spatial is not None:
        for ns in spatial.nodes:
            seen[ns.node] = None
    if silence is not None:
        for sn in silence.silent:
            seen[sn.node] = None
    for e in events:
        for n in e.first_seen:
            seen[n] = None
    return sorted(_hosts(seen))


def _level_reasons(
    events: Sequence[EventStat], crossjob: FilterResult | None, job_stage: str | None
) -> dict[str, list[tuple[str, float]]]:
    """The reasons every kept event has on its own: cross-job verdict, level, failing stage."""
    reasons: dict[str, list[tuple[str, float]]] = {}
    kept = crossjob.kept_ids if crossjob is not None else None
    for e in events:
        if kept is not None and e.template_id not in kept:
            continue
        r: list[tuple[str, float]] = []
        if crossjob is not None:
            why = crossjob.reason_of(e.template_id) or "no-baseline"
            if _FILTER_WEIGHT[why] > 0:
                r.append((why, _FILTER_WEIGHT[why]))
        if is_error(e.level):
            r.append(("error-level", _ERROR_WEIGHT))
            if job_stage is not None and e.stage == job_stage:
                r.append(("error-in-failing-stage", _STAGE_WEIGHT))
        elif Level.parse(e.level) is Level.WARNING:
            r.append(("warning-level", _WARN_WEIGHT))
        reasons[e.template_id] = r
    return reasons


def _add_result_reasons(
    reasons: dict[str, list[tuple[str, float]]],
    by_id: Mapping[str, EventStat],
    spatial: SpatialResult | None,
    iterations: IterationResult | None,
    slowdown: Slowdown | None,
    silence: SilenceResult | None,
    priors: Mapping[str, tuple[float, str]] | None,
) -> None:
    """Add the reasons the analyses' results give: spatial outlier, new in a suspect iteration,
    starts with the slowdown, only on a silent node's peers, and the priors."""
    if spatial is not None and spatial.defined:
        suspects = set(spatial.suspects)
        for ns in spatial.nodes:
            if ns.node not in suspects:
                continue
            for a in ns.attributions:
                if a.direction == "excess" and a.template_id in reasons:
                    # An INFO line that explains an outlier node is weaker evidence than an
                    # ERROR line doing so: healthy nodes carry benign informational oddities.
                    lw = level_weight(by_id[a.template_id].level, 2.0) / 2.0
                    reasons[a.template_id].append(
                        (f"spatial-outlier:{ns.node}", _SPATIAL_WEIGHT * ns.score * lw)
                    )
    if iterations is not None:
        for it in iterations.suspects:
            for t in it.new_events:
                if t in reasons:
                    reasons[t].append((f"new-in-iteration:{it.iteration}", _ITERATION_WEIGHT))
    if slowdown is not None:
        for t in slowdown.events:
            if t in reasons:
                why = f"starts-with-slowdown:{slowdown.first_iteration}"
                reasons[t].append((why, _SLOWDOWN_WEIGHT))
    if silence is not None:
        for sn in (*silence.silent, *silence.stopped):
            for t in sn.missing_new:
                if t in reasons:
                    reasons[t].append(("only-on-silent-node-peers", _SILENT_PEER_WEIGHT))
    for t, (w, why) in (priors or {}).items():
        if t in reasons:
            reasons[t].append((why, w))


def _ordering(
    reasons: dict[str, list[tuple[str, float]]],
    discounts: Mapping[str, tuple[float, str]] | None,
    ordering: Mapping[str, tuple[float, str]] | None,
) -> dict[str, float]:
    """List the discounts' reasons, and return the factors that order the set without changing
    who is in it (cascade, the ``ordering`` words)."""
    for t, (_, why) in (discounts or {}).items():
        if reasons.get(t):
            reasons[t].append((why, 0.0))
    order: dict[str, float] = {}
    for t, r in reasons.items():
        if any(name == "cascade" for name, _ in r):
            order[t] = order.get(t, 1.0) * _CASCADE_FACTOR
    for t, (f, why) in (ordering or {}).items():
        if reasons.get(t):
            reasons[t].append((why, 0.0))
            order[t] = order.get(t, 1.0) * f
    return order


def _credit_culprit(
    culprit: str,
    own: Iterable[str],
    heard: Iterable[str],
    reasons: dict[str, list[tuple[str, float]]],
    order: dict[str, float],
) -> None:
    """Credit what the named culprit printed first, and rank its witnesses' statements after."""
    for t in own:
        reasons[t].append((f"culprit-evidence:{culprit}", _CULPRIT_WEIGHT))
        # On the node its peers name, a timeout is what that node did, not the echo of
        # another node's failure: nothing earlier explains it.
        order.pop(t, None)
    for t in heard:
        reasons[t].append(("witness-statement", 0.0))
        order[t] = order.get(t, 1.0) * _WITNESS_STATEMENT_FACTOR


def _time_key(first_seen: float | None) -> float:
    """An event's first time as a sort key: a line of no known time (none, NaN) sorts as
    none does, so that the keys after it still order such lines (NaN compares as neither
    before nor after anything, and a sort would stop there)."""
    return first_seen if first_seen is not None and not math.isnan(first_seen) else 0.0


def _leading_hosts(e: EventStat, window: float) -> set[str]:
    """The hosts that printed an event first (within ``window`` of the first of them): a line
    one node printed well before the others echoed it (its DataLoader workers killed, theirs
    stopped at teardown, one template) leads on that node."""
    seen = {n: t for n, t in e.first_seen.items() if not is_job_node(n)}
    if not seen:
        return set()
    first = min(seen.values())
    return {n for n, t in seen.items() if t <= first + window}


def _hosts(nodes: Iterable[str]) -> list[str]:
    """The hosts among an event's nodes, not the job's own files."""
    return [n for n in nodes if not is_job_node(n)]


def _causes(pre: Mapping[str, float], gone: frozenset[str]) -> dict[str, float]:
    """The candidates that may be the evidence everything else followed: not ``gone`` — a
    consequence's words (a teardown's SIGTERM, the launcher's report), however early it was
    printed, nor a fault that went away before the failure (a link that flapped and came
    back)."""
    return {t: s for t, s in pre.items() if t not in gone}


def _gone(discounts: Mapping[str, tuple[float, str]] | None) -> frozenset[str]:
    """The templates of faults that went away before the failure (a link that flapped and
    came back: ``evidence.flapped``)."""
    return frozenset(
        t for t, (_, why) in (discounts or {}).items() if why == "recovered-before-failure"
    )


def consequences_of(ordering: Mapping[str, tuple[float, str]] | None) -> frozenset[str]:
    """The templates whose words are a consequence's (``ordering``'s "consequence-words")."""
    return frozenset(t for t, (_, why) in (ordering or {}).items() if why == "consequence-words")
