"""Stage and iteration tagging: which training stage a line belongs to, and which iteration.

Rules are data (``ingest/stages.yaml``). They are matched against a line kind's masked body once
per distinct kind (``StageRules.role``), so tagging costs nothing per line except for iteration
markers, whose number is read from the raw line.
"""

from __future__ import annotations

import re
import re._constants as _sre  # the parsed form of a pattern (``digit_blind``)
import re._parser as _sre_parse
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from l4_plugin.errors import ConfigError
from l4_plugin.records import STAGE_ORDER
from l4_plugin.resources import data_path
from l4_plugin.stacks import call_order
from l4_plugin.yamldoc import read_mapping

#: A traceback's source line that imports (after any launcher prefix): ``import x``,
#: ``from .m import f``.
_IMPORT_SOURCE = re.compile(r"(?:^|\]:)\s*(?:from\s+\.*[\w.]*\s+)?import\s+[\w.(*]")

#: Units of an iteration marker's duration (``seconds`` in stages.yaml).
SECONDS_UNITS: tuple[str, ...] = ("ms", "s", "per_s")


@dataclass(frozen=True, slots=True)
class IterationRule:
    """Recognises an iteration marker (masked body) and reads its number (raw line)."""

    name: str
    marker: re.Pattern[str]
    number: re.Pattern[str]
    #: (pattern, unit) pairs reading the iteration's duration; unit ms, s or per_s (a rate).
    seconds: tuple[tuple[re.Pattern[str], str], ...] = ()
    #: Where ``number`` and ``seconds`` matched, by the line's digit shape (``digit_shape``);
    #: only used when every pattern treats all digits alike (``digit_blind``). The scan loop
    #: reads a known shape's spans as ``read`` does (``rollup.NodeRollup.scan``).
    shape_spans: dict[bytes | str, _Spans] = field(default_factory=dict, compare=False, repr=False)
    #: An engine's count printed beside a trainer's own (DeepSpeed's ``step=`` under HF's
    #: Trainer or Lightning): it numbers iterations only in a file where no other rule's
    #: marker was seen; it always means training.
    fallback: bool = False

    def number_of(self, raw: str) -> int | None:
        """The iteration number: the first of ``number``'s groups that took part (a rule may
        read its number from one place, else from another)."""
        m = self.number.search(raw)
        if m is None:
            return None
        return int(next((g for g in m.groups() if g is not None), m.group(1)))

    def seconds_of(self, raw: str) -> float | None:
        """The iteration's duration in seconds as the line states it, if it does."""
        for pattern, unit in self.seconds:
            m = pattern.search(raw)
            if m is None:
                continue
            try:
                value = float(m.group(1))
            except ValueError:
                continue
            return _in_seconds(value, unit)
        return None

    def read(self, raw: str, shape: bytes | str) -> tuple[int | None, float | None]:
        """``(number_of(raw), seconds_of(raw))``, the regexes run once per digit shape.

        Two lines of the same shape (``digit_shape``) differ only in which
        digits they have; patterns that treat every digit alike (no digit literal, no digit
        range, no back-reference: ``digit_blind``) then match both at the same spans, so the
        spans are cached and only the values are read from each line. Marker lines repeat a
        handful of shapes ("step 1234 | loss 2.3456 | …"): this skips three regex searches per
        iteration line, the most common line of a training log. Whether a duration's text is a
        number ``float`` reads depends on its characters other than the digits' values (the
        same in every line of the shape), so the span it is read from is chosen once too.
        """
        spans = self.shape_spans.get(shape)
        if spans is None:
            if not self._blind():
                return self.number_of(raw), self.seconds_of(raw)
            spans = self._spans_of(raw)
            if len(self.shape_spans) >= MAX_SHAPES:
                self.shape_spans.clear()
            self.shape_spans[shape] = spans
        a, b, c, d, unit = spans
        number = int(raw[a:b]) if a >= 0 else None
        if c < 0:
            return number, None
        value = float(raw[c:d])
        if unit == "s":
            return number, value
        return number, _in_seconds(value, unit)

    def _blind(self) -> bool:
        patterns = (self.number, *(p for p, _ in self.seconds))
        blind = _BLIND.get(patterns)
        if blind is None:
            blind = _BLIND[patterns] = all(digit_blind(p) for p in patterns)
        return blind

    def _spans_of(self, raw: str) -> _Spans:
        m = self.number.search(raw)
        a, b = (-1, -1)
        if m is not None:
            taking = [i for i in range(1, self.number.groups + 1) if m.start(i) >= 0]
            a, b = m.span(taking[0] if taking else 1)
        if m is not None and a < 0:  # no group took part: as number_of would
            raise TypeError("int() argument must be a string, not 'NoneType'")
        for pattern, unit in self.seconds:
            s = pattern.search(raw)
            if s is None:
                continue
            if s.start(1) < 0:
                raise TypeError("float() argument must be a string, not 'NoneType'")
            try:
                float(s.group(1))
            except ValueError:
                continue  # as seconds_of: the next pattern's text, if one reads
            return a, b, s.start(1), s.end(1), unit
        return a, b, -1, -1, ""


#: (number start, end, duration start, end, its unit): -1 where the line has none.
_Spans = tuple[int, int, int, int, str]
#: Digit shapes cached per rule before the cache starts over (a job has a few hundred).
MAX_SHAPES = 4096
_BLIND: dict[tuple[re.Pattern[str], ...], bool] = {}
_DIGIT_CATEGORIES = frozenset(
    {
        _sre.CATEGORY_DIGIT,
        _sre.CATEGORY_NOT_DIGIT,
        _sre.CATEGORY_SPACE,
        _sre.CATEGORY_NOT_SPACE,
        _sre.CATEGORY_WORD,
        _sre.CATEGORY_NOT_WORD,
    }
)
_ZERO, _NINE = ord("0"), ord("9")


def digit_blind(pattern: re.Pattern[str]) -> bool:
    """True when ``pattern`` cannot tell one ASCII digit from another: no digit literal, no
    character range that holds some digits but not all, no back-reference; the classes
    ``\\d \\w \\s`` (and their negations), ``.``, anchors and word boundaries are fine."""
    try:
        return _blind_items(_sre_parse.parse(pattern.pattern, pattern.flags))
    except Exception:  # pragma: no cover - a pattern re.compile took is parsed again
        return False


def _blind_items(items: Any) -> bool:
    for op, arg in items:
        if op in (_sre.LITERAL, _sre.NOT_LITERAL):
            if _ZERO <= arg <= _NINE:
                return False
        elif op is _sre.IN:
            if not _blind_set(arg):
                return False
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT):
            if not _blind_items(arg[2]):
                return False
        elif op is _sre.SUBPATTERN:
            if not _blind_items(arg[3]):
                return False
        elif op is _sre.BRANCH:
            if not all(_blind_items(alt) for alt in arg[1]):
                return False
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            if not _blind_items(arg[1]):
                return False
        elif op is _sre.ATOMIC_GROUP:
            if not _blind_items(arg):
                return False
        elif op not in (_sre.ANY, _sre.AT):
            return False  # back-references, conditionals, anything unforeseen
    return True


def _blind_set(items: Any) -> bool:
    for op, arg in items:
        if op is _sre.LITERAL:
            if _ZERO <= arg <= _NINE:
                return False
        elif op is _sre.RANGE:
            lo, hi = arg
            inside = max(lo, _ZERO) <= min(hi, _NINE)
            if inside and not (lo <= _ZERO and hi >= _NINE):
                return False
        elif op is _sre.CATEGORY:
            if arg not in _DIGIT_CATEGORIES:
                return False
        elif op is not _sre.NEGATE:
            return False
    return True


def _in_seconds(value: float, unit: str) -> float | None:
    if unit == "ms":
        return value / 1000.0
    if unit == "per_s":
        return 1.0 / value if value > 0 else None
    return value


@dataclass(frozen=True, slots=True)
class Role:
    """What one line kind does to the per-file state: switch stage and/or mark an iteration.

    ``then`` is the stage of the lines *after* this one once training has started: the line that
    completes a checkpoint save belongs to ``checkpointing``, what follows it to ``training``.
    """

    stage: str | None = None
    iteration: IterationRule | None = None
    then: str | None = None


NO_ROLE = Role()


@dataclass(frozen=True, slots=True)
class _StageRule:
    name: str
    pre_training: bool
    patterns: tuple[re.Pattern[str], ...]
    done: tuple[re.Pattern[str], ...] = ()
    then: str | None = None


class StageRules:
    """The compiled contents of ``stages.yaml``."""

    def __init__(
        self,
        stages: list[_StageRule],
        iterations: list[IterationRule],
        continuations: tuple[re.Pattern[str], ...] = (),
        openers: tuple[re.Pattern[str], ...] = (),
        frames: tuple[tuple[str, re.Pattern[str]], ...] = (),
        words: tuple[tuple[str, re.Pattern[str]], ...] = (),
    ) -> None:
        self.stages = stages
        self.iterations = iterations
        self.continuations = continuations
        self.openers = openers
        self.frames = frames
        self.words = words
        self.pre_training = frozenset(s.name for s in stages if s.pre_training)

    @classmethod
    def load(cls, path: Path | None = None) -> StageRules:
        """Load and compile the rules; errors name the file, the entry and the bad value."""
        path = path or data_path("ingest", "stages.yaml")
        data = read_mapping(path, ConfigError, "stage rules")
        stages = [_stage(path, i, entry) for i, entry in enumerate(data.get("stages") or [])]
        iterations = [_iteration(path, i, e) for i, e in enumerate(data.get("iterations") or [])]
        continuations = tuple(
            _compile(path, f"continuations[{i}]", p)
            for i, p in enumerate(data.get("continuations") or [])
        )
        openers = tuple(
            _compile(path, f"openers[{i}]", p) for i, p in enumerate(data.get("openers") or [])
        )
        entries = [_frame(path, i, e) for i, e in enumerate(data.get("frames") or [])]
        frames = tuple((st, p) for st, p, words in entries if not words)
        words = tuple((st, p) for st, p, words in entries if words)
        return cls(stages, iterations, continuations, openers, frames, words)

    def stage_of_stack(self, text: str) -> str | None:
        """The stage a failing record's own stack names (``frames``), if any: that of its
        innermost frame that names one (a DataLoader's frames below a training loop's are
        where it failed). Frames are read outermost first, as a traceback prints them (a
        faulthandler dump's stacks are turned so: ``stacks.call_order``)."""
        for line in reversed(call_order(text)):
            if _IMPORT_SOURCE.search(line):
                # (a frame's source line importing a name calls nothing: "from .parallelize
                # import parallelize_qwen3" is no model being wrapped)
                continue
            for stage, pattern in self.frames:
                if pattern.search(line):
                    return stage
        return None

    def stage_of_words(self, text: str) -> str | None:
        """The stage a failing record's words imply when no marker and no frame says one
        (``frames`` entries with ``words: true``), if any."""
        for stage, pattern in self.words:
            if pattern.search(text):
                return stage
        return None

    def marker_stage(self, body: str) -> str | None:
        """The stage a line kind (masked body, or a template of one) marks, if it is a stage or
        iteration marker."""
        return self.role(body).stage

    def continues(self, body: str) -> bool:
        """True when a line kind continues the error record before it (``continuations``)."""
        return any(p.search(body) for p in self.continuations)

    def opens(self, body: str) -> bool:
        """True when continuation lines may follow this line kind though it has no error level
        (``openers``: "terminate called after throwing…", its ``what():`` line)."""
        return any(p.search(body) for p in self.openers)

    def role(self, body: str) -> Role:
        """The role of a line kind, from its masked body (iteration markers win)."""
        for rule in self.iterations:
            if rule.marker.search(body):
                return Role("training", rule)
        for stage in self.stages:
            if any(p.search(body) for p in stage.done):
                return Role(stage.name, None, stage.then)
            if any(p.search(body) for p in stage.patterns):
                return Role(stage.name, None)
        return NO_ROLE

    def next_stage(self, current: str, switch: str, training_started: bool) -> str:
        """The stage after a switching line: pre-training stages cannot interrupt training."""
        if training_started and switch in self.pre_training:
            return current
        return switch


def _compile(path: Path, where: str, pattern: Any) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise ConfigError(f"{path}: {where}: expected a regex string, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{path}: {where}: invalid regex {pattern!r}: {exc}") from None


def _frame(path: Path, i: int, entry: Any) -> tuple[str, re.Pattern[str], bool]:
    if not isinstance(entry, dict) or entry.get("stage") not in STAGE_ORDER:
        raise ConfigError(
            f"{path}: frames[{i}]: needs a stage from {', '.join(STAGE_ORDER)} and a pattern, "
            f"got {entry!r}"
        )
    words = entry.get("words", False)
    if not isinstance(words, bool) or set(entry) - {"stage", "pattern", "words"}:
        raise ConfigError(
            f"{path}: frames[{i}]: keys are stage, pattern and words (true or false), got {entry!r}"
        )
    pattern = _compile(path, f"frames[{i}].pattern", entry.get("pattern"))
    return str(entry["stage"]), pattern, words


def _stage(path: Path, i: int, entry: Any) -> _StageRule:
    if not isinstance(entry, dict) or entry.get("name") not in STAGE_ORDER:
        raise ConfigError(
            f"{path}: stages[{i}]: needs a name from {', '.join(STAGE_ORDER)}, got {entry!r}"
        )
    patterns = tuple(
        _compile(path, f"stages[{i}].patterns[{j}]", p)
        for j, p in enumerate(entry.get("patterns") or [])
    )
    done = tuple(
        _compile(path, f"stages[{i}].done[{j}]", p) for j, p in enumerate(entry.get("done") or [])
    )
    then = entry.get("then")
    if done and then not in STAGE_ORDER:
        raise ConfigError(
            f"{path}: stages[{i}].then: lines after a 'done' line need a stage from "
            f"{', '.join(STAGE_ORDER)}, got {then!r}"
        )
    pre = bool(entry.get("pre_training", False))
    return _StageRule(entry["name"], pre, patterns, done, then if done else None)


def _iteration(path: Path, i: int, entry: Any) -> IterationRule:
    if not isinstance(entry, dict) or not entry.get("name"):
        raise ConfigError(f"{path}: iterations[{i}]: needs name, marker and number")
    number = _compile(path, f"iterations[{i}].number", entry.get("number"))
    if number.groups < 1:
        raise ConfigError(f"{path}: iterations[{i}].number: needs a group for the number")
    seconds: list[tuple[re.Pattern[str], str]] = []
    for j, item in enumerate(entry.get("seconds") or []):
        where = f"iterations[{i}].seconds[{j}]"
        if not isinstance(item, dict) or item.get("unit") not in SECONDS_UNITS:
            raise ConfigError(
                f"{path}: {where}: needs pattern and unit ({', '.join(SECONDS_UNITS)}), "
                f"got {item!r}"
            )
        pattern = _compile(path, f"{where}.pattern", item.get("pattern"))
        if pattern.groups < 1:
            raise ConfigError(f"{path}: {where}.pattern: needs a group for the number")
        seconds.append((pattern, str(item["unit"])))
    return IterationRule(
        str(entry["name"]),
        _compile(path, f"iterations[{i}].marker", entry.get("marker")),
        number,
        tuple(seconds),
        fallback=bool(entry.get("fallback", False)),
    )


@lru_cache(maxsize=1)
def default_stage_rules() -> StageRules:
    """The shipped ``stages.yaml``, loaded once (the analyses read its ``frames``)."""
    return StageRules.load()
