"""Stage and iteration tagging: which training stage a line belongs to, and which iteration.

Rules are data (``ingest/stages.yaml``). They are matched against a line kind's masked body once
per distinct kind (``StageRules.role``), so tagging costs nothing per line except for iteration
markers, whose number is read from the raw line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from l4_plugin.errors import ConfigError
from l4_plugin.records import STAGE_ORDER
from l4_plugin.resources import data_path
from l4_plugin.yamldoc import read_mapping

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

    def number_of(self, raw: str) -> int | None:
        m = self.number.search(raw)
        return int(m.group(1)) if m else None

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
            if unit == "ms":
                return value / 1000.0
            if unit == "per_s":
                return 1.0 / value if value > 0 else None
            return value
        return None


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
    ) -> None:
        self.stages = stages
        self.iterations = iterations
        self.continuations = continuations
        self.openers = openers
        self.frames = frames
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
        frames = tuple(_frame(path, i, e) for i, e in enumerate(data.get("frames") or []))
        return cls(stages, iterations, continuations, openers, frames)

    def stage_of_stack(self, text: str) -> str | None:
        """The stage a failing record's own stack names (``frames``), if any."""
        for stage, pattern in self.frames:
            if pattern.search(text):
                return stage
        return None

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


def _frame(path: Path, i: int, entry: Any) -> tuple[str, re.Pattern[str]]:
    if not isinstance(entry, dict) or entry.get("stage") not in STAGE_ORDER:
        raise ConfigError(
            f"{path}: frames[{i}]: needs a stage from {', '.join(STAGE_ORDER)} and a pattern, "
            f"got {entry!r}"
        )
    return str(entry["stage"]), _compile(path, f"frames[{i}].pattern", entry.get("pattern"))


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
    )


@lru_cache(maxsize=1)
def default_stage_rules() -> StageRules:
    """The shipped ``stages.yaml``, loaded once (the analyses read its ``frames``)."""
    return StageRules.load()
