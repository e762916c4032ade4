"""A restarted job's attempts side by side: which one explains the failure, and whether the
same node failed each time.

Each attempt is diagnosed on its own (its lines only: a resumed attempt re-runs iterations its
predecessor ran, and its start-up is not the first attempt's). Which attempt the report leads
with: the last one that got past start-up (or, when it names no culprit, the last before it
that names one for the same kind of failure: the fault seen clearly). An attempt that failed
while starting (its ranks never reached training, or its culprit's failure is in ``init``)
failed because of what came
before it more often than not — a restart that cannot reconnect (gloo's workers dialling the
first attempt's addresses), a node the scheduler did not replace — so the attempt before it,
which failed while training, is the failure to explain; when every attempt failed while
starting, the last leads. A node every attempt names is its machine: it is evicted with high
confidence; different nodes each time say the fault is not bound to a node (of the attempts that
got past start-up, when two did). One restart failing while starting is no consequence: when the
lead names no culprit (its ranks timed out alike, the node that stopped answering printed
nothing) and the restart singles out a node of a hardware fault (the node cut off answers "No
route to host" while the others wait for it), the node stayed at fault: it is the lead's
culprit too (``still``).

Pure: the outcomes of the attempts' diagnoses in, the lead and the cross-attempt reading out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from l4_plugin.records import PRE_TRAINING_STAGES

#: Confidence of an eviction every attempt agrees on.
BOUND_CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """What one attempt's diagnosis found: where it stopped, whom it blames, what kind."""

    attempt: int
    stage: str | None
    culprits: tuple[str, ...]
    category: str
    first_ts: float | None = None
    last_ts: float | None = None
    nodes: tuple[str, ...] = ()
    #: Whether any rank of the attempt printed a training marker (an iteration, a step).
    trained: bool = False
    #: Whether it printed anything (an attempt whose workers died at once left empty files).
    printed: bool = True
    #: The iteration its own diagnosis places the failure in (None: none).
    iteration: int | None = None

    @property
    def started(self) -> bool:
        """Whether the attempt got past start-up (trained, or failed after start-up)."""
        return self.trained or (self.stage is not None and self.stage not in PRE_TRAINING_STAGES)


@dataclass(frozen=True, slots=True)
class AcrossAttempts:
    """The attempt the report leads with and why; the nodes every attempt names (``bound``)
    or none, and one line saying so."""

    lead: int
    why: str
    bound: tuple[str, ...]
    note: str
    #: A later attempt that failed while starting and names the node of a hardware fault,
    #: when the lead names none: the fault stayed on that node (None: none).
    still: AttemptOutcome | None = None


def across(outcomes: Sequence[AttemptOutcome]) -> AcrossAttempts | None:
    """The lead attempt and the cross-attempt reading (None for fewer than two attempts, or
    none that printed a line). An attempt that printed nothing never leads."""
    if len(outcomes) < 2:
        return None
    ordered = sorted((o for o in outcomes if o.printed), key=lambda o: o.attempt)
    if not ordered:
        return None
    started = [o for o in ordered if o.started]
    lead = started[-1] if started else ordered[-1]
    clearer = [o for o in started if o.culprits and o.category == lead.category]
    if not lead.culprits and clearer:
        # The same fault seen again without a culprit (the bad GPU failed at once on restart,
        # before anything could tell its node apart): the attempt that names it explains it.
        why = (
            f"attempt {clearer[-1].attempt} names the culprit of the {lead.category} failure "
            f"that attempt {lead.attempt} shows again without one"
        )
        return AcrossAttempts(clearer[-1].attempt, why, *_bound(started))
    return AcrossAttempts(
        lead.attempt,
        _why(lead, outcomes, bool(started)),
        *_bound(started or ordered),
        still=_still_at_fault(lead, ordered),
    )


def _still_at_fault(
    lead: AttemptOutcome, ordered: Sequence[AttemptOutcome]
) -> AttemptOutcome | None:
    """The first attempt after ``lead`` that failed while starting and names the node of a
    hardware fault, when ``lead`` names no culprit (None: none). A restart that cannot start
    fails for what came before it; when what came before named no node and the restart
    names one, for a hardware reason, that node is where it stays. A configuration's or a
    platform's failure at start-up (a port still held, an address gone) says nothing of a
    node."""
    if lead.culprits:
        return None
    later = (
        o
        for o in ordered
        if o.attempt > lead.attempt
        and not o.started
        and o.culprits
        and o.category.startswith("hardware/")
    )
    return next(later, None)


def _why(lead: AttemptOutcome, outcomes: Sequence[AttemptOutcome], started: bool) -> str:
    """Why the report leads with ``lead``."""
    if not started:
        return f"attempt {lead.attempt} is the last (every attempt failed while starting)"
    later = sorted((o for o in outcomes if o.attempt > lead.attempt), key=lambda o: o.attempt)
    if not later:
        return f"attempt {lead.attempt} is the last"
    failed = [o.attempt for o in later if o.printed]
    quiet = [o.attempt for o in later if not o.printed]
    parts = []
    if failed:
        parts.append(
            f"{_attempts(failed)} failed while starting again, a consequence of the failure before"
        )
    if quiet:
        parts.append(f"{_attempts(quiet)} left no line (its workers' files are empty)")
    return f"attempt {lead.attempt} is the last that got past start-up: " + "; ".join(parts)


def _attempts(ks: Sequence[int]) -> str:
    return f"attempt{'s' if len(ks) > 1 else ''} {', '.join(map(str, ks))}"


def _bound(ordered: Sequence[AttemptOutcome]) -> tuple[tuple[str, ...], str]:
    """Nodes named by every attempt that named one, when at least two did (of the attempts
    that got past start-up: one that failed while starting again says nothing of the node)."""
    named = [o for o in ordered if o.culprits]
    if len(named) < 2:
        return (), ""
    common = set(named[0].culprits)
    for o in named[1:]:
        common &= set(o.culprits)
    attempts = ", ".join(str(o.attempt) for o in named)
    if common:
        nodes = tuple(sorted(common))
        return nodes, f"{', '.join(nodes)} is the culprit in every attempt ({attempts})"
    per = "; ".join(f"attempt {o.attempt}: {', '.join(o.culprits)}" for o in named)
    return (), f"not bound to a node: each attempt names another ({per})"


def first_struck(
    found: AcrossAttempts, outcomes: Sequence[AttemptOutcome], category: str
) -> AttemptOutcome | None:
    """The earlier attempt where the failure the report leads with first struck: a fault
    bound to a node (``found.bound``) that failed the same way (``category``, the lead's
    verdict) in an attempt that got past start-up before the lead; the earliest such, with an
    iteration (None: none did). A restart resumes from the last checkpoint and meets the same
    fault again, often at once: where the job first failed is the earlier attempt's
    iteration, not the replay's."""
    earlier = [
        o
        for o in outcomes
        if o.attempt < found.lead
        and o.started
        and o.iteration is not None
        and o.category == category
        and set(found.bound) & set(o.culprits)
    ]
    return min(earlier, key=lambda o: o.attempt) if found.bound and earlier else None
