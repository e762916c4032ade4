"""The verdict (ARCHITECTURE.md, *The report*): what an SRE or a recovery controller acts on.

Four answers: which machines to take out (``evict``, the smallest set the evidence supports: the
culprit, not its neighbours), what kind of fault it was (``category``) and so whose (``blame``),
and whether restarting helps (``restart``). The category, from the strongest evidence down:

1. the leading events, when their own words name the failure beyond doubt (an error before a
   warning scored alike);
2. a confirmed *cause* rule that matched the culprit (or, with no culprit, the job); a rule
   matched on the job's own files (``records.JOB_NODE``: the scheduler's or the cluster's account
   of an OOM kill, a preemption) describes the job and explains a culprit that merely went silent;
   then what the ranks' Flight Recorder traces and stacks say of a hang (``analysis.hang``);
3. the failure lexicon (``rules/lexicon.yaml``) on the culprit's own events, then what the
   culprit did (a node that went silent is a node fault; a node its peers name while it stays
   up had a rank hang on its accelerator), then a job whose report leads with the line where
   it slowed down (its other events only consequences: a slow machine held every rank back),
   then the lexicon on all ranked events;
4. else the consequences themselves, when the lexicon says what they mean alone (collective
   timeouts and nothing else: the ranks disagreed on a collective; the same before training,
   while the job loaded its data or its model: one rank preparing them for longer than the
   others would wait, the job's configuration).

Consequences (the launcher's teardown, a scheduler's cancel after an abort, watchdog timeouts on
every rank) never give the category while anything else does. The lexicon's words are refined by
where they were printed and by whom: a generic error type by whose code raised it
(:mod:`l4_plugin.analysis.origin`), an entry's ``local`` category when only a few nodes of a
multi-node job printed it. A verdict category is one of DESIGN §6's; a rule's
``user/misoperation`` (somebody cancelled the job, reused a port) is the user's configuration;
versions that do not fit, on the culprit whose software differs from the other nodes', are its
image's (platform). A job that failed in init waiting on its peers (a rendezvous or store that
timed out, the platform's or the network's words) while its launcher's configuration asks for
more nodes than ran (``asked_nodes``: torchrun's ``--nnodes``) was launched for nodes it never
had: the configuration.

Eviction follows the evidence: a hardware fault evicts the nodes whose own lines carry it when
they are few, else the culprit the ranking singles out; storage and platform faults evict only a
node that alone carries the evidence (its disk, its file-system client, its container); user and
framework faults evict nobody; the job's own files are never a node to evict; words that only
nodes other than a singled-out culprit printed (step 3's last) evict the culprit. ``restart``
follows: after eviction when something is evicted, after a fix for user, framework and storage
faults, as-is otherwise.

Pure: report facts in, :class:`Verdict` out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from l4_plugin.analysis.fusion import HANG_REASONS
from l4_plugin.analysis.lexicon import Lexicon, Term, last_line
from l4_plugin.analysis.memory import ANY_NODE
from l4_plugin.analysis.origin import own_module, refine
from l4_plugin.records import Verdict, is_job_node

_CULPRIT_MIN = 0.5  # the top node's score below which nothing singles it out
_CULPRIT_GAP = 0.1  # ... or how far above the next node it must stand without strong evidence
_SECOND_CLOSE = 0.97  # a second node is evicted with the first only when this close and named
_STRONG = ("named-by-peers", "silent", "straggler-from", "slowdown-onset", *HANG_REASONS)
_EVICTING = ("hardware/accelerator", "hardware/network", "hardware/node")
_LOCAL_EVICTING = ("hardware/storage", "platform")
_NEVER_EVICT = ("user/", "framework", "unknown")
_MAX_EVENTS = 10  # ranked events read for a category
_LEAD_WEIGHT = 0.9  # lexicon weight from which the lead event's words decide the category
_LEADS = 3  # the leading events: the first few that are not consequences...
_LEAD_CLOSE = 0.9  # ... scored within this fraction of the first
_PREPARING = ("data_loading", "model_loading")  # stages where a lexicon term's `preparing` holds
# Categories of a job's words while its nodes wait on peers that never came (a rendezvous
# timeout, a store unreachable): what fewer nodes than the launcher asks for print in init.
_WAITING = ("platform", "hardware/network")
_FEW = 4  # evidence on at most 1 node in this many (and at least one) is a node's own
_ALONE_CONFIDENCE = 0.35
_LOCAL_CONFIDENCE = 0.5  # a consequence that only the culprit printed, with a meaning there
# Rule categories of the fault library that are not verdict categories (DESIGN §6).
_AS_VERDICT = {"user/misoperation": "user/config"}
# An event that says memory ran out (the kernel's OOM killer, a cgroup's, Ray's monitor).
_OUT_OF_MEMORY = re.compile(
    r"out of memory|oom[-_ ]kill|Killed process|OOMKilled|memory pressure|low on memory",
    re.IGNORECASE,
)


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


@dataclass(frozen=True, slots=True)
class _Basis:
    """What decided the category: it, how sure, the nodes whose lines carry the evidence, and a
    rule's own say on eviction."""

    category: str
    confidence: float
    nodes: tuple[str, ...] = ()
    evict: bool | None = None
    why: str = ""


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
    outsiders: Mapping[str, str] | None = None,
    stage: str | None = None,
    finished: Mapping[str, str] | None = None,
    asked_nodes: int | None = None,
) -> Verdict:
    """The verdict of one diagnosis (see the module docstring); ``hang`` is what the ranks'
    dumps or tracebacks say of a hang's category (category, confidence, why), read after the
    rules; ``outsiders`` the nodes whose memory another's process held (``analysis.memory``:
    node → why); ``stage`` the stage the job failed in; ``finished`` the nodes whose ranks
    printed the end of their training (node → that line); ``asked_nodes`` the nodes the
    launcher's configuration waits for (None: it does not say)."""
    suspects = culprits(nodes)
    why: list[str] = []
    if suspects:
        top = nodes[0]
        why.append(f"culprit {', '.join(suspects)} ({', '.join(top.reasons) or 'top-ranked'})")
    words = _Words(lexicon, n_nodes, outsiders)
    silent = bool(suspects) and "silent" in nodes[0].reasons
    basis = words.lead(events, nodes)
    if basis is None:
        basis = _from_rules(rules, suspects, silent, n_nodes)
        if basis is None and hang is not None:
            basis = _Basis(hang[0], hang[1], suspects, None, f"{hang[2]} ({hang[0]})")
        if suspects:
            basis = (
                _culprits_own(words, events, suspects, basis)
                or _finished_first(suspects[0], finished or {}, n_nodes, stage)
                or _from_behaviour(nodes[0])
            )
    if basis is None:
        basis = _slowed(events)
    if basis is None:
        basis = words.first(events) or words.alone(events, stage)
        if basis is not None and suspects and not set(basis.nodes) & set(suspects):
            # Words only other nodes printed (a peer losing the culprit's store, its agent
            # tearing down) say what kind of failure it was, not that they are the ones to
            # take out: the culprit the ranking singled out is.
            basis = replace(basis, nodes=suspects)
    if basis is None:
        why.append("no rule, no known failure words and no culprit")
        return Verdict("unknown", "unknown", (), "as-is", 0.2, tuple(why))
    if (
        basis.category == "user/software-incompatibility"
        and suspects
        and "odd-version" in nodes[0].reasons
    ):
        # Versions that do not fit, on the one node whose software differs from the others':
        # that node's image, not the job's build.
        basis = replace(
            basis,
            category="platform",
            nodes=suspects,
            why=f"{basis.why}; {suspects[0]} runs other versions than the rest (platform)",
        )
    basis = _short_of_nodes(basis, asked_nodes, n_nodes, stage)
    why.append(basis.why)
    category = _AS_VERDICT.get(basis.category, basis.category)
    evict = _evict(basis, category, suspects, n_nodes)
    confidence = basis.confidence if suspects else basis.confidence * 0.8
    if evict:
        restart = "after-eviction"
    elif blame_of(category) == "user" or category == "hardware/storage":
        restart = "after-fix"
    else:
        restart = "as-is"
    return Verdict(category, blame_of(category), evict, restart, confidence, tuple(why))


def _evict(
    basis: _Basis, category: str, suspects: tuple[str, ...], n_nodes: int
) -> tuple[str, ...]:
    """The nodes to take out (see the module docstring)."""
    if basis.evict is False or category.startswith(_NEVER_EVICT):
        return ()
    evidence = _hosts(basis.nodes)
    few = 0 < len(evidence) <= max(1, n_nodes // _FEW)
    if category in _EVICTING or basis.evict:
        if few:
            return evidence
        return suspects
    if category in _LOCAL_EVICTING and len(evidence) == 1:
        return evidence
    return ()


def _from_rules(
    rules: Sequence[VerdictRule],
    suspects: tuple[str, ...],
    silent: bool,
    n_nodes: int,
) -> _Basis | None:
    """A cause rule that matched the culprit; with no culprit, one that matched the job. A rule
    matched on the job's own files (the scheduler's or the cluster's account: an OOM kill, a
    preemption) describes the job, and explains a culprit that merely went silent."""
    causes = [r for r in rules if r.role == "cause"]
    stated = [r for r in causes if r.nodes and all(is_job_node(n) for n in r.nodes)]
    if suspects:
        # A rule that matched on most nodes (every rank's timeout) says nothing of the culprit.
        on_culprit = [
            r for r in causes if set(r.nodes) & set(suspects) and len(r.nodes) <= n_nodes / 2
        ]
        if silent:
            on_culprit += stated
    else:
        # No node stands out: a rule counts when it describes the job (matched widely), not a
        # single node's trouble the ranking did not confirm.
        on_culprit = [r for r in causes if not r.nodes or len(r.nodes) >= max(2, n_nodes // 2)]
        on_culprit += [r for r in stated if r not in on_culprit]
    if not on_culprit:
        return None
    best = max(on_culprit, key=lambda r: (r.confidence, r.rule))
    nodes = tuple(n for n in best.nodes if n in suspects) if suspects else best.nodes
    return _Basis(
        best.category, best.confidence, nodes, best.evict, f"rule {best.rule} ({best.category})"
    )


class _Words:
    """The failure lexicon on ranked events."""

    def __init__(
        self, lexicon: Lexicon, n_nodes: int, outsiders: Mapping[str, str] | None = None
    ) -> None:
        self.lexicon = lexicon
        self.n_nodes = n_nodes
        self.outsiders = outsiders or {}

    def lead(self, events: Sequence[VerdictEvent], nodes: Sequence[VerdictNode]) -> _Basis | None:
        """The leading events, when their own words name the failure beyond doubt (lexicon
        weight at least ``_LEAD_WEIGHT``): "No space left on device" at the top of the report is
        the storage fault, whatever benign anomaly a rule also found on a node. A lead printed
        only by witnesses (nodes reporting a peer) is their view of the culprit, not a
        verdict."""
        witnesses = {n.node for n in nodes if any(r.startswith("witness-of:") for r in n.reasons)}
        leads = [e for e in events if "cascade" not in e.reasons][:_LEADS]
        top = leads[0].score if leads else 0.0
        found: list[tuple[Term, VerdictEvent]] = []
        for lead in leads:
            if lead.score < _LEAD_CLOSE * top:
                break
            if lead.nodes and set(lead.nodes) <= witnesses:
                continue
            term = self.lexicon.cause_of_record(lead.text)
            if term is None or not term.says_cause or term.weight < _LEAD_WEIGHT:
                continue
            found.append((term, lead))
        # An error that ended the job before a warning of the same rank (a link that flapped on
        # another node and recovered is a warning).
        found.sort(key=lambda tl: "error-level" not in tl[1].reasons)
        if found:
            return self._basis(*found[0], "lead event", 0.95)
        return None

    def first(self, events: Sequence[VerdictEvent]) -> _Basis | None:
        """The first ranked events that say what went wrong (consequences skipped)."""
        for e in events[:_MAX_EVENTS]:
            if "cascade" in e.reasons:
                continue
            term = self.lexicon.cause_of_record(e.text)
            if term is None or not term.says_cause:
                continue
            return self._basis(term, e, "words of", 0.9)
        return None

    def alone(self, events: Sequence[VerdictEvent], stage: str | None) -> _Basis | None:
        """Nothing but consequences: what the first one that has a meaning alone says (its
        ``preparing`` meaning when the job failed before training, loading its data or its
        model: one rank preparing them for longer than the others would wait)."""
        for e in events[:_MAX_EVENTS]:
            term = self.lexicon.cause_of_record(e.text)
            if term is None or term.alone is None:
                continue
            category, when = term.alone, ""
            if term.preparing is not None and stage in _PREPARING:
                category, when = term.preparing, f" while the job was in {stage}"
            said = (
                f"only consequences, such as {last_line(e.text)[:120]!r}: with nothing else "
                f"failing{when} they point to {category}"
            )
            return _Basis(category, _ALONE_CONFIDENCE, why=said)
        return None

    def local(self, events: Sequence[VerdictEvent]) -> _Basis | None:
        """A consequence with a meaning of its own on one node (``local``) that only a few
        nodes of a multi-node job printed: c10d's store connection timing out on the node
        whose collectives timed out too, while the other nodes reached the store."""
        if self.n_nodes < 2:
            return None
        for e in events[:_MAX_EVENTS]:
            term = self.lexicon.cause_of_record(e.text)
            if term is None or term.local is None or not term.cascade:
                continue
            hosts = _hosts(e.nodes)
            if 0 < len(hosts) <= max(1, self.n_nodes // _FEW):
                said = f"only {', '.join(hosts)} printed {last_line(e.text)[:120]!r} ({term.local})"
                return _Basis(term.local, _LOCAL_CONFIDENCE, e.nodes, term.evict, said)
        return None

    def _basis(self, term: Term, event: VerdictEvent, said: str, weight: float) -> _Basis:
        category = term.category
        if term.origin:
            category = refine(category, event.text, self.lexicon)
        if category == "user/software-incompatibility" and own_module(event.text, self.lexicon):
            category = "framework"
        local = 0 < len(_hosts(event.nodes)) <= max(1, self.n_nodes // _FEW)
        if term.local is not None and self.n_nodes >= 2 and local:
            category = term.local
        line = last_line(event.text)
        why = f"{said} {line[:120]!r} ({category})"
        hog = self._outsider(category, event)
        if hog is not None:
            # The memory ran out, but another's process held it: the node was not clean.
            return _Basis("platform", weight * term.weight, event.nodes, True, f"{why}; {hog}")
        return _Basis(category, weight * term.weight, event.nodes, term.evict, why)

    def _outsider(self, category: str, event: VerdictEvent) -> str | None:
        """Why an out-of-memory event's node ran out by another's process (None: it did not,
        or the event is no such)."""
        if category != "user/config" or not _OUT_OF_MEMORY.search(event.text):
            return None
        return next(
            (w for n, w in self.outsiders.items() if n in event.nodes or n == ANY_NODE), None
        )


def _hosts(nodes: Sequence[str]) -> tuple[str, ...]:
    """The hosts among nodes (not the job's own files)."""
    return tuple(n for n in nodes if not is_job_node(n))


def _culprits_own(
    words: _Words, events: Sequence[VerdictEvent], suspects: tuple[str, ...], basis: _Basis | None
) -> _Basis | None:
    """The culprit's own words when they outweigh a rule that only infers (its silence)."""
    mine = [e for e in events if set(e.nodes) & set(suspects)]
    # (a consequence only the culprit printed may say more than its generic words)
    own = max(
        (b for b in (words.first(mine), words.local(mine)) if b is not None),
        key=lambda b: b.confidence,
        default=None,
    )
    if own is not None and (basis is None or own.confidence > basis.confidence):
        # (the culprit's copy of its words: a template other nodes share with other values,
        # "exitcode: -9" here and "exitcode: -15" there, is its evidence)
        return replace(own, nodes=tuple(n for n in own.nodes if n in suspects))
    return basis


def _finished_first(
    culprit: str, finished: Mapping[str, str], n_nodes: int, stage: str | None
) -> _Basis | None:
    """The culprit's ranks ended their training while the job failed in it, its peers' next
    collectives finding it gone: the ranks ran unequal numbers of steps (a shard with fewer
    batches, a loop that stops on one rank's own condition), the user's code — when nothing the
    culprit printed says more."""
    if stage != "training" or culprit not in finished or len(finished) >= n_nodes:
        return None
    said = (
        f"{culprit} printed the end of its training ({finished[culprit][:80]!r}) while its "
        "peers' collectives failed: the ranks ran unequal numbers of steps"
    )
    return _Basis("user/code", 0.55, (culprit,), evict=False, why=said)


def _short_of_nodes(
    basis: _Basis, asked_nodes: int | None, n_nodes: int, stage: str | None
) -> _Basis:
    """``basis``, or the configuration's when the job failed in init waiting on peers
    (``_WAITING`` words) while its launcher waits for more nodes than ran."""
    if (
        asked_nodes is None
        or asked_nodes <= n_nodes
        or stage != "init"
        or basis.category not in _WAITING
    ):
        return basis
    return _Basis(
        "user/config",
        basis.confidence,
        (),
        False,
        f"{basis.why}; the launcher's configuration waits for {asked_nodes} nodes, "
        f"{n_nodes} ran (user/config)",
    )


def _slowed(events: Sequence[VerdictEvent]) -> _Basis | None:
    """A job whose report leads with the line where it slowed down (the report puts it first
    when the fused lead's words are only consequences: a job that then ran into its time limit,
    torn down): every rank held back by a slow machine, which no line names (hardware/node)."""
    if not events:
        return None
    onset = next((r for r in events[0].reasons if r.startswith("slowdown-line:")), None)
    if onset is None:
        return None
    said = (
        f"the job slowed down from iteration {onset.partition(':')[2]} and nothing it printed "
        "says why: a slow machine holds every rank back (hardware/node)"
    )
    return _Basis("hardware/node", 0.45, why=said)


def _from_behaviour(top: VerdictNode) -> _Basis | None:
    """What the culprit did when none of its lines says what happened."""
    if "silent" in top.reasons:
        said = f"{top.node} stopped logging while the job went on"
        return _Basis("hardware/node", 0.6, (top.node,), why=said)
    if any(
        r.startswith(("named-by-peers", "straggler-from", "slowdown-onset")) for r in top.reasons
    ):
        said = f"{top.node} stayed up but its peers waited on it (a rank hung or slowed)"
        return _Basis("hardware/accelerator", 0.5, (top.node,), why=said)
    return None
