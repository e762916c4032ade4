"""Frozen records that the stages of L4 hand to each other.

Ingest produces ``ParsedLine`` (for ``l4 parse``) and ``Template``; the diagnosis produces
``Finding`` objects (what goes to ``l4-annotations``) and the ``Verdict`` (what the report
tells an SRE to do), which the store turns into documents
(``l4_plugin.store.annotations``). The rollups and kept lines have no record of their own: the
ingest's builders (``ingest/pipeline.py``) write them straight from the scan, with the field
names of ``store/fields.py``. The vocabularies every stage shares live here too: the log levels
(:class:`Level`, with every spelling logs use) and the order of a run's stages (``STAGE_ORDER``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal

#: What a finding (an ``l4-annotations`` document) is about, and where its review stands.
AnnotationKind = Literal["event", "node", "iteration", "stage", "rule_match", "summary", "verdict"]
ReviewState = Literal["open", "confirmed", "rejected"]

#: The paper's fault taxonomy (§3), shared by the rules, the simulator and the reports.
FAULT_CATEGORIES = (
    "hardware/network",
    "hardware/accelerator",
    "hardware/node",
    "hardware/storage",
    "user/config",
    "user/code",
    "user/software-incompatibility",
    "user/misoperation",
    "framework",
    "platform",
)


#: Stages in the order a healthy run goes through them (the one stage order of the package).
STAGE_ORDER: tuple[str, ...] = (
    "init",
    "data_loading",
    "model_loading",
    "training",
    "checkpointing",
    "shutdown",
)
#: The node of a job's own files (a batch script's output, a scheduler's or cluster's events,
#: Ray's driver): what they say about no single host. Never a suspect, never silent.
JOB_NODE = "(job)"


def is_job_node(node: str) -> bool:
    """Whether ``node`` is the job's own pseudo-node (``JOB_NODE``), not a host."""
    return node == JOB_NODE


#: Stages before training: lines of these stages describe start-up.
PRE_TRAINING_STAGES = frozenset(STAGE_ORDER[: STAGE_ORDER.index("training")])


class Level(IntEnum):
    """The one log-level vocabulary of L4, ordered by severity.

    A member's ``name`` is what ingest stores in ``log.level`` (ECS); :attr:`label` is the shorter
    spelling the diagnosis reports (``WARN``). Every other spelling a log uses (``warn``, ``E``,
    ``FATAL``, ``CRIT``, ``panic``…) is read with :meth:`parse`, so no module keeps its own list.
    """

    DEBUG = 10
    INFO = 20
    WARNING = 30
    ERROR = 40
    CRITICAL = 50

    @classmethod
    def parse(cls, word: str | None) -> Level | None:
        """The level a spelling names (any case, glog letters included), None when it is none."""
        return LEVEL_SPELLINGS.get(word.upper()) if word else None

    @property
    def label(self) -> str:
        """The spelling of this level in diagnoses and reports."""
        return "WARN" if self is Level.WARNING else self.name

    @property
    def is_error(self) -> bool:
        """True for ERROR and worse: the log says something failed."""
        return self >= Level.ERROR

    @property
    def is_flagged(self) -> bool:
        """True for WARNING and worse: the log flags a problem."""
        return self >= Level.WARNING


def is_flagged(level: str | None) -> bool:
    """True for a spelling of a warning or error level (what a log flags as a problem)."""
    parsed = Level.parse(level)
    return parsed is not None and parsed.is_flagged


def is_error(level: str | None) -> bool:
    """True for a spelling of an ERROR-like level (ERROR, FATAL, CRITICAL…)."""
    parsed = Level.parse(level)
    return parsed is not None and parsed.is_error


#: Every level spelling logs use (upper case) → its :class:`Level`.
LEVEL_SPELLINGS: dict[str, Level] = {
    "TRACE": Level.DEBUG,
    "DEBUG": Level.DEBUG,
    "DBG": Level.DEBUG,
    "INFO": Level.INFO,
    "NOTICE": Level.INFO,
    "EVENT": Level.INFO,
    "I": Level.INFO,
    "WARN": Level.WARNING,
    "WARNING": Level.WARNING,
    "W": Level.WARNING,
    "ERR": Level.ERROR,
    "ERROR": Level.ERROR,
    "E": Level.ERROR,
    "CRITICAL": Level.CRITICAL,
    "CRIT": Level.CRITICAL,
    "FATAL": Level.CRITICAL,
    "ALERT": Level.CRITICAL,
    "EMERG": Level.CRITICAL,
    "PANIC": Level.CRITICAL,
    "F": Level.CRITICAL,
}


def level_label(word: str | None) -> str | None:
    """The report spelling of a level word (``WARNING`` → ``WARN``), None when it names none."""
    level = Level.parse(word)
    return level.label if level is not None else None


@dataclass(frozen=True, slots=True)
class ParsedLine:
    """One input line after header parsing, masking and template assignment (``l4 parse``)."""

    line: int
    template_id: str
    template: str
    level: str | None = None
    timestamp: float | None = None
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class Template:
    """A log template: stable id (hash of the final masked text) and its text."""

    id: str
    text: str


def host_shapes(nodes: Iterable[str]) -> frozenset[str]:
    """The job's host names as template text spells them (lower case, digits masked to 0), both
    the full name and its first label."""
    return frozenset(
        re.sub(r"\d", "0", name) for n in nodes for name in (n.lower(), n.lower().split(".")[0])
    )


def host_blinder(spellings: Iterable[str]) -> Callable[[str], str]:
    """What reads a template's text with the job's own host names, as its templates spell them
    (``spellings``: each name masked as its lines are), as ``<HOST>``: a line that names its node
    ("initialized … on trn-r2-n04") reads alike in a run and in its baseline on other nodes. A
    text that names none is returned as it is. Built once per job, used on each template."""
    names = sorted((s for s in spellings if len(s) > 2), key=len, reverse=True)
    if not names:
        return lambda template_text: template_text
    pattern = re.compile(r"(?<![\w.-])(?:" + "|".join(map(re.escape, names)) + r")(?![\w-])")

    def blind(template_text: str) -> str:
        if not any(s in template_text for s in names):
            return template_text
        return pattern.sub("<HOST>", template_text)

    return blind


_DIGIT_RUN = re.compile(r"\d+")


def numbers_blanked(message: str) -> str:
    """``message`` with every run of digits read as one ``0``: two lines that say the same but
    for their numbers (a rank, a time, a count of any width) read alike. What folds the lines
    of a node's ranks into one (``ingest.pipeline``) and packs the lines of many nodes
    (``store.line_packs``)."""
    return _DIGIT_RUN.sub("0", message)


def may_name_a_node(template_text: str, shapes: frozenset[str]) -> bool:
    """Whether a template's lines may name another node: an address (``<IP>``) or one of the
    job's host names (``host_shapes``) in its text. The peers' analysis reads such lines, so
    ingest keeps them all."""
    if "<IP>" in template_text:
        return True
    text = template_text.lower()
    return any(h in text for h in shapes)


@dataclass(frozen=True, slots=True)
class Finding:
    """One conclusion of an analysis or a rule, stored as an ``l4-annotations`` document."""

    job_id: str
    kind: AnnotationKind
    key: str
    score: float
    rank: int
    explanation: str
    template_id: str | None = None
    nodes: tuple[str, ...] = ()
    iteration: int | None = None
    stage: str | None = None
    rule_id: str | None = None
    reasons: tuple[str, ...] = ()
    review: ReviewState = "open"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do (ARCHITECTURE.md, *The report* ``verdict``): the fault's category and whose it
    is, whom to evict, whether to restart.

    ``analysis.verdict.decide`` makes it; the report holds it with its confidence rounded, and
    its JSON keeps the values as they are held (a stored report renders to the same JSON).
    """

    category: str
    blame: str
    evict: tuple[str, ...]
    restart: str
    confidence: float
    why: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The report's ``verdict`` object."""
        return {
            "category": self.category,
            "blame": self.blame,
            "evict": list(self.evict),
            "restart": self.restart,
            "confidence": self.confidence,
            "why": list(self.why),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Verdict:
        """The inverse of :meth:`to_json` (a stored report's; a missing key reads as unknown)."""
        return cls(
            category=str(raw.get("category", "unknown")),
            blame=str(raw.get("blame", "unknown")),
            evict=tuple(raw.get("evict") or ()),
            restart=str(raw.get("restart", "?")),
            confidence=raw.get("confidence", 0.0),
            why=tuple(raw.get("why") or ()),
        )
