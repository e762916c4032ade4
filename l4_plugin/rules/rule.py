"""The parsed form of a fault rule: what the loader builds and the compiler and engine read.

Everything here is a frozen dataclass built once at load time; nothing executes code from YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from l4_plugin.rules.condition import Expr

Scope = Literal["job", "node"]
Role = Literal["cause", "symptom"]
Status = Literal["draft", "confirmed"]
Expectation = Literal["match", "no_match"]


@dataclass(frozen=True, slots=True)
class FieldMatcher:
    """One ``field|modifiers: values`` entry of a selection.

    ``values`` are OR-ed unless ``all_`` is set (``|all``). ``kind`` is how a value is compared:
    ``equals`` (with Sigma-style ``*``/``?`` wildcards), ``contains``, ``startswith``,
    ``endswith``, ``re``, or a numeric comparison ``gt``/``gte``/``lt``/``lte``.
    """

    field: str
    kind: str
    values: tuple[str | int | float, ...]
    cased: bool = False
    all_: bool = False


@dataclass(frozen=True, slots=True)
class Silence:
    """A node that stopped logging ``min_gap`` seconds or more before the job's last line."""

    min_gap: float


@dataclass(frozen=True, slots=True)
class Selection:
    """A named selection: OR of alternatives, each an AND of field matchers; or a silence test."""

    name: str
    alternatives: tuple[tuple[FieldMatcher, ...], ...] = ()
    silence: Silence | None = None


@dataclass(frozen=True, slots=True)
class RuleTest:
    """One embedded example: log lines per node and the expected outcome."""

    name: str
    expect: Expectation
    nodes: dict[str, tuple[str, ...]]
    expect_nodes: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    """A validated fault rule (one YAML file)."""

    id: str
    title: str
    status: Status
    category: str
    severity: str
    role: Role
    description: str
    references: tuple[str, ...]
    selections: dict[str, Selection]
    condition: Expr
    condition_text: str
    scope: Scope
    diagnosis: str
    remediation: str
    window: float | None = None
    max_node_fraction: float | None = None
    confidence: float | None = None
    tags: tuple[str, ...] = ()
    tests: tuple[RuleTest, ...] = ()
    #: Whether the nodes a match names should be taken out of the job (None: by category —
    #: hardware faults evict, user, framework and platform faults do not).
    evict: bool | None = None
    path: Path | None = field(default=None, compare=False)
