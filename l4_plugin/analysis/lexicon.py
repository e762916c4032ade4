"""The failure lexicon (``rules/lexicon.yaml``): what a single line's words say went wrong.

Rules match whole fault patterns against the cluster; the lexicon reads one line at a time, for
the verdict's category when no cause rule names the culprit and as a prior when there is nothing
to compare a job with. Entries are tried in order and the first match wins; ``cascade`` entries
name consequences (watchdog timeouts, the launcher tearing a job down) and ``benign`` entries
conditions that were handled (a corrected PCIe error, a GPU at its software power cap): neither
gives a category, both rank a line after what explains the failure.

Three refinements the verdict applies (:mod:`l4_plugin.analysis.verdict`): an entry's ``local``
category when its words come from a few nodes of a multi-node job (the node's own environment
differs: its image, a leftover process on it); a cascade entry's ``alone`` category when a
job's evidence is nothing but that consequence (``preparing``: and the job was still loading
its data or its model); and an ``origin`` entry (a generic error type)
whose category depends on whose code raised it (:mod:`l4_plugin.analysis.origin`, with the
lexicon's ``libraries`` and ``config_functions``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from l4_plugin.errors import ConfigError
from l4_plugin.records import FAULT_CATEGORIES
from l4_plugin.resources import data_path
from l4_plugin.stacks import FRAME_HEAD, under_frame, without_dump
from l4_plugin.yamldoc import read_mapping

_DEFAULT_WEIGHT = 0.8
_KEYS = {
    "pattern",
    "category",
    "weight",
    "cascade",
    "benign",
    "local",
    "alone",
    "preparing",
    "origin",
    "evict",
    "decisive",
}
# A consequence's line may go on to name its cause ("watchdog thread terminated with exception:
# CUDA error: uncorrectable ECC error", NCCL's "Original reason for failure was: …"): words of at
# least this weight after such an introduction count.
_PAST_CASCADE_WEIGHT = 0.9
# What CUDA and c10 append to every error: hints, never what went wrong.
_CUDA_HINTS = re.compile(
    r"CUDA kernel errors might be asynchronously reported|"
    r"For debugging consider passing CUDA_LAUNCH_BLOCKING|Compile with `?TORCH_USE_CUDA_DSA"
    # the kernel's hung-task report appends how to silence it and the taint flags
    r"|hung_task_timeout_secs\W+disables this message|\bTainted: (?:[A-Z]\s*)+\d"
)
# A line of nothing but a rule or a box's edge ("-----", "=====", "*****"), labels before it or
# not: a layout says nothing (Open MPI's help boxes, torchrun's failure summary, Ascend's error
# report all end or begin so).
# (a rule or a blank under labels, or under a collector's stamp of each line: kubectl's
# ``--timestamps``, RFC 3339 with nanoseconds)
_ORNAMENT = re.compile(
    r"^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\s)?"
    r"(?:\s*\[[^\]\n]*\]:?)*[^\w\n]*$"
)
# A list of causes an emitter offers for every failure of a kind, none of them known to be this
# one's (Ray's raylet on any worker that dropped its connection: "There are some potential root
# causes. (1) … OOM killer … (2) ray stop --force … (3) … SIGSEGV …"): never the record's words.
_MAYBE_CAUSES = re.compile(
    r"\bThere are (?:some|several) (?:potential|possible) (?:root )?causes\b[^\n]*"
)
# The C++ stack c10 appends to an error (``Exception raised from F at FILE:N (most recent call
# first):`` and ``frame #N: …``): where the error was detected (a watchdog thread polling a CUDA
# event), never what went wrong; its function names are not the record's words.
_CPP_STACK = re.compile(
    r"\bframe #\d+: |\bException raised from \S+ at \S+ \(most recent call first\)"
)
_NAMES_CAUSE = re.compile(
    r"\b(?:with exception|reason for failure was|caused by|failed with)\s*:", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class Term:
    """One lexicon entry: words (a regex), the category they indicate, how strongly."""

    pattern: re.Pattern[str]
    category: str
    weight: float
    cascade: bool = False
    benign: bool = False
    #: The category when only a few nodes of a multi-node job print the words.
    local: str | None = None
    #: For a consequence: the category when the job shows nothing but it.
    alone: str | None = None
    #: ... and when, besides, the job was still preparing (loading its data or its model).
    preparing: str | None = None
    #: The category depends on whose code raised the error (user, library, argument parsing).
    origin: bool = False
    #: False when taking the nodes that printed the words out never helps (the scheduler
    #: preempted the job, a time limit); None: the category decides.
    evict: bool | None = None
    #: The words decide what ended the job whatever the baselines printed (the scheduler's own
    #: reason: a preemption, a node failure): evidence for the line where baselines are compared.
    decisive: bool = False

    @property
    def says_cause(self) -> bool:
        """True when the words name a failure (not a consequence, not a handled condition)."""
        return not (self.cascade or self.benign)


class Lexicon:
    """The compiled lexicon; :meth:`classify` a line."""

    def __init__(
        self,
        terms: list[Term],
        libraries: frozenset[str] = frozenset(),
        config_functions: re.Pattern[str] | None = None,
    ) -> None:
        self.terms = terms
        #: Top-level Python packages whose frames in a traceback are not the user's code.
        self.libraries = libraries
        #: Function names that parse or check a run's arguments and configuration.
        self.config_functions = config_functions

    @classmethod
    def load(cls, path: Path | None = None) -> Lexicon:
        """Load and validate; errors name the file, the entry and the bad value."""
        path = path or data_path("rules", "lexicon.yaml")
        data = read_mapping(path, ConfigError, "failure lexicon")
        entries = data.get("entries")
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: entries: expected a list of entries")
        libraries = data.get("libraries") or []
        if not isinstance(libraries, list) or not all(
            isinstance(x, str) and re.fullmatch(r"[A-Za-z_]\w*", x) for x in libraries
        ):
            raise ConfigError(f"{path}: libraries: expected a list of package names")
        config = data.get("config_functions")
        compiled = None if config is None else _compile(path, "config_functions", config, 0)
        terms = [_term(path, i, e) for i, e in enumerate(entries)]
        return cls(terms, frozenset(libraries), compiled)

    def classify(self, text: str) -> Term | None:
        """The first entry whose words the text holds (None: the lexicon knows none)."""
        text = without_guesses(text)
        for term in self.terms:
            if term.pattern.search(text):
                return term
        return None

    def classify_record(self, text: str) -> Term | None:
        """A record's words: its last line first (a traceback says what went wrong there; a
        consequence the line goes on to explain is that cause), then the whole record."""
        said = last_line(text)
        first = self.classify(said)
        scope = said
        if first is None:
            scope = without_stack(text)
            first = self.classify(scope)
        if first is not None and first.cascade:
            return self._named_after(scope) or first
        return first

    def cause_of_record(self, text: str) -> Term | None:
        """The words of a record that name a cause, looking past a consequence.

        The last line first; when it is a consequence, the cause the same line goes on to name
        after "with exception:" or "reason for failure was:" (strong words only), then the rest
        of the record (a timeout at a barrier whose stack says what the other rank was doing).
        A handled condition names nothing. Else the consequence itself (``says_cause`` false),
        or None.
        """
        text = without_guesses(text)
        said = last_line(text)
        first = self.classify(said)
        if first is not None and (first.says_cause or first.benign):
            return first
        if first is not None:
            named = self._named_after(said)
            if named is not None:
                return named
        # The rest of the record: all of it, or what came before a consequence's line (less the
        # lines of that consequence itself: a template repeats its record's last line).
        rest = text = without_stack(text)
        if first is not None:
            before = text.strip()[: text.strip().rfind(said)]
            rest = "\n".join(x for x in before.splitlines() if not first.pattern.search(x))
        for term in self.terms:
            if term.says_cause and term.pattern.search(rest):
                return term
        return first or self.classify(text)

    def _named_after(self, said: str) -> Term | None:
        """The cause a consequence's line names after "with exception:" and the like (strong
        words only)."""
        named = _NAMES_CAUSE.search(said)
        if named is None:
            return None
        for term in self.terms:
            strong = term.says_cause and term.weight >= _PAST_CASCADE_WEIGHT
            if strong and term.pattern.search(said[named.end() :]):
                return term
        return None


def without_guesses(text: str) -> str:
    """``text`` less the causes its emitter lists as possible for every failure of its kind
    (``_MAYBE_CAUSES``)."""
    return _MAYBE_CAUSES.sub("", text) if "causes" in text else text


def without_stack(text: str) -> str:
    """``text`` less the C++ stack c10 appends to an error (``_CPP_STACK``); a record that is
    nothing but such a stack (a frame printed as a line of its own) as it is."""
    if not _CPP_STACK.search(text):
        return text
    said = [line for line in text.splitlines() if not _CPP_STACK.search(line)]
    return "\n".join(said) if any(line.strip() for line in said) else text


def last_line(text: str) -> str:
    """The last line of a record that says something ('' for an empty one): the hints CUDA
    appends to every error and the C++ stack c10 appends are skipped; a record cut off inside a
    traceback (a chained one whose end was never printed or pasted: its last line a frame or the
    frame's source) says it with the last exception it printed; a record that a faulthandler
    dump ends ("Fatal Python error: Segmentation fault", then each thread's stack) with the
    line before the dump."""
    lines = [line for line in without_stack(text).strip().splitlines() if line.strip()]
    # (a faulthandler dump says nothing of its own: the line it follows says what happened)
    lines = without_dump(lines) or lines
    if lines and _cut_in_traceback(lines):
        raised = _last_raised(lines[:-1])
        if raised is not None:
            return lines[raised]
    for line in reversed(lines):
        if not _CUDA_HINTS.search(line) and not _ORNAMENT.match(line):
            return line
    return lines[-1] if lines else ""


def told_part(text: str) -> str:
    """A record less the unfinished part of a traceback it was cut off in: a chained traceback
    whose later part's frames were printed (or pasted) but not its exception ends with the last
    exception it printed — where that exception was raised, not how far its handler's frames
    got (a save's OSError, then "During handling…" and the trainer's loop again)."""
    lines = text.rstrip().splitlines()
    said = [line for line in lines if line.strip()]
    if not said or not _cut_in_traceback(said):
        return text
    raised = _last_raised(lines)
    return "\n".join(lines[: raised + 1]) if raised is not None else text


def _last_raised(lines: Sequence[str]) -> int | None:
    """Where the last line of ``lines`` that states an exception is (not a frame's line)."""
    for i in range(len(lines) - 1, -1, -1):
        if _RAISED.search(lines[i]) and not FRAME_HEAD.search(lines[i]):
            return i
    return None


def _cut_in_traceback(lines: list[str]) -> bool:
    """Whether a record's lines end with a traceback's frame, or with the frame's source line
    (indented past where the frame's "File" begins; an exception's line is not)."""
    if FRAME_HEAD.search(lines[-1]):
        return True
    frame = FRAME_HEAD.search(lines[-2]) if len(lines) > 1 else None
    return frame is not None and under_frame(frame, lines[-1])


# The line that states an exception ("AssertionError: …",
# "torch.distributed.DistBackendError: …"), past any label before it.
_RAISED = re.compile(
    r"(?:^|[\s:\]])(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b:"
)


@lru_cache(maxsize=1)
def default_lexicon() -> Lexicon:
    """The shipped lexicon, loaded once."""
    return Lexicon.load()


def _compile(path: Path, where: str, pattern: Any, flags: int) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"{path}: {where}: expected a regex string, got {pattern!r}")
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise ConfigError(f"{path}: {where}: invalid regex {pattern!r}: {exc}") from None


def _category(where: str, value: Any) -> str:
    if value not in FAULT_CATEGORIES:
        raise ConfigError(f"{where}: expected one of {', '.join(FAULT_CATEGORIES)}, got {value!r}")
    return str(value)


def _flag(where: str, entry: dict[str, Any], key: str) -> bool:
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key}: expected true or false, got {value!r}")
    return value


def _term(path: Path, i: int, entry: Any) -> Term:
    where = f"{path}: entries[{i}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a mapping with pattern and category, got {entry!r}")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    benign, cascade = _flag(where, entry, "benign"), _flag(where, entry, "cascade")
    category = entry.get("category")
    if benign and category is None:
        category = "hardware/node"  # never reported: benign words give no category
    category = _category(f"{where}.category", category)
    weight = entry.get("weight", _DEFAULT_WEIGHT)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= 1:
        raise ConfigError(f"{where}.weight: expected a number in (0, 1], got {weight!r}")
    compiled = _compile(path, f"entries[{i}].pattern", entry.get("pattern"), re.IGNORECASE)
    if benign and cascade:
        raise ConfigError(f"{where}: an entry is either benign or cascade, not both")
    local = entry.get("local")
    alone = entry.get("alone")
    preparing = entry.get("preparing")
    for key, value in (("alone", alone), ("preparing", preparing)):
        if value is not None and not cascade:
            raise ConfigError(f"{where}.{key}: only a consequence (cascade) has such a category")
    decisive = _flag(where, entry, "decisive")
    if decisive and (benign or cascade):
        raise ConfigError(f"{where}.decisive: only the words of a cause decide")
    return Term(
        compiled,
        category,
        float(weight),
        cascade,
        benign,
        local=None if local is None else _category(f"{where}.local", local),
        alone=None if alone is None else _category(f"{where}.alone", alone),
        preparing=None if preparing is None else _category(f"{where}.preparing", preparing),
        origin=_flag(where, entry, "origin"),
        evict=_flag(where, entry, "evict") if "evict" in entry else None,
        decisive=decisive,
    )
