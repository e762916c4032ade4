"""The ``condition`` language of a rule: parser and evaluator over aggregated facts.

Grammar (lowest precedence first, keywords case-insensitive)::

    expr     := or
    or       := and ("or" and)*
    and      := then ("and" then)*
    then     := unary ("then" unary)*          # ordering: each part first occurs no earlier
    unary    := "not" unary | atom
    atom     := "(" expr ")" | NAME | quant | count
    quant    := ("1" | "any" | "all") "of" (PATTERN | "them")   # PATTERN may end in "*"
    count    := ("count" | "nodes") "(" NAME ")" OP INT         # OP: >= > <= < == !=

The evaluator never sees log lines: it reads per-selection facts (``count``, ``nodes``, first and
last timestamp) that the engine obtained from cluster aggregations.
"""

from __future__ import annotations

import difflib
import fnmatch
import itertools
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

_OPS: dict[str, Callable[[int, int], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}
_KEYWORDS = {"and", "or", "not", "then", "of", "them", "all", "any", "count", "nodes"}
_TOKEN = re.compile(
    r"\s*(?:(?P<op>>=|<=|==|!=|>|<)|(?P<paren>[()])|(?P<num>\d+)(?![\w*])"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_\-.]*\*?|\*))"
)


class ConditionSyntaxError(ValueError):
    """The condition text cannot be parsed; ``column`` is 1-based."""

    def __init__(self, message: str, column: int) -> None:
        self.column = column
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class Name:
    name: str


@dataclass(frozen=True, slots=True)
class Count:
    func: str  # "count" (matching lines) or "nodes" (distinct nodes)
    name: str
    op: str
    value: int


@dataclass(frozen=True, slots=True)
class Quant:
    kind: str  # "any" or "all"
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Not:
    inner: Expr


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Then:
    items: tuple[Expr, ...]


Expr = Name | Count | Quant | Not | And | Or | Then


@dataclass(frozen=True, slots=True)
class SelectionFacts:
    """What the cluster told us about one selection in one scope (a node or the whole job)."""

    count: int = 0
    nodes: int = 0
    first_ts: float | None = None
    last_ts: float | None = None


@dataclass(frozen=True, slots=True)
class Truth:
    """Result of evaluating an expression: truth, when it became true, and the time span used."""

    ok: bool
    at: float | None = None
    lo: float | None = None
    hi: float | None = None

    @property
    def span(self) -> float | None:
        """Seconds between the earliest and latest occurrence the truth relied on."""
        if self.lo is None or self.hi is None:
            return None
        return self.hi - self.lo


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            col = pos + len(text[pos:]) - len(text[pos:].lstrip()) + 1
            raise ConditionSyntaxError(f"unexpected character {text[col - 1]!r}", col)
        kind = m.lastgroup or ""
        value = m.group(kind)
        tokens.append((kind, value, m.start(kind) + 1))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, text: str, names: Sequence[str]) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.names = list(names)

    def _peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _column(self) -> int:
        tok = self._peek()
        return tok[2] if tok else len(self.text) + 1

    def _next(self, what: str) -> tuple[str, str, int]:
        tok = self._peek()
        if tok is None:
            raise ConditionSyntaxError(f"expected {what}, got end of condition", self._column())
        self.i += 1
        return tok

    def _is_kw(self, kw: str) -> bool:
        tok = self._peek()
        return tok is not None and tok[0] == "word" and tok[1].lower() == kw

    def parse(self) -> Expr:
        if not self.tokens:
            raise ConditionSyntaxError("empty condition", 1)
        expr = self._or()
        tok = self._peek()
        if tok is not None:
            raise ConditionSyntaxError(f"unexpected {tok[1]!r}", tok[2])
        return expr

    def _or(self) -> Expr:
        items = [self._and()]
        while self._is_kw("or"):
            self.i += 1
            items.append(self._and())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def _and(self) -> Expr:
        items = [self._then()]
        while self._is_kw("and"):
            self.i += 1
            items.append(self._then())
        return items[0] if len(items) == 1 else And(tuple(items))

    def _then(self) -> Expr:
        items = [self._unary()]
        while self._is_kw("then"):
            self.i += 1
            items.append(self._unary())
        return items[0] if len(items) == 1 else Then(tuple(items))

    def _unary(self) -> Expr:
        if self._is_kw("not"):
            self.i += 1
            return Not(self._unary())
        return self._atom()

    def _selection(self, value: str, column: int) -> str:
        if value in self.names:
            return value
        close = difflib.get_close_matches(value, self.names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConditionSyntaxError(f"unknown selection {value!r}{hint}", column)

    def _atom(self) -> Expr:
        kind, value, col = self._next("a selection, 'not', '(' or a quantifier")
        low = value.lower()
        if kind == "paren" and value == "(":
            expr = self._or()
            _, close, ccol = self._next("')'")
            if close != ")":
                raise ConditionSyntaxError(f"expected ')', got {close!r}", ccol)
            return expr
        if (kind == "num" and value == "1") or (kind == "word" and low in ("any", "all")):
            if not self._is_kw("of"):
                raise ConditionSyntaxError(f"expected 'of' after {value!r}", self._column())
            self.i += 1
            _, pattern, pcol = self._next("a selection pattern or 'them'")
            return Quant("all" if low == "all" else "any", self._expand(pattern, pcol))
        if kind == "word" and low in ("count", "nodes"):
            return self._count(low)
        if kind == "word" and low not in _KEYWORDS and not value.endswith("*"):
            return Name(self._selection(value, col))
        raise ConditionSyntaxError(f"unexpected {value!r}", col)

    def _count(self, func: str) -> Count:
        _, paren, col = self._next("'('")
        if paren != "(":
            raise ConditionSyntaxError(f"expected '(' after {func!r}", col)
        _, name, ncol = self._next("a selection name")
        name = self._selection(name, ncol)
        _, close, ccol = self._next("')'")
        if close != ")":
            raise ConditionSyntaxError(f"expected ')', got {close!r}", ccol)
        kind, op, ocol = self._next("a comparison (>=, >, <=, <, ==, !=)")
        if kind != "op":
            raise ConditionSyntaxError(f"expected a comparison after {func}(), got {op!r}", ocol)
        kind, num, vcol = self._next("an integer")
        if kind != "num":
            raise ConditionSyntaxError(f"expected an integer, got {num!r}", vcol)
        return Count(func, name, op, int(num))

    def _expand(self, pattern: str, column: int) -> tuple[str, ...]:
        if pattern.lower() == "them":
            return tuple(self.names)
        found = tuple(n for n in self.names if fnmatch.fnmatchcase(n, pattern))
        if not found:
            raise ConditionSyntaxError(f"pattern {pattern!r} matches no selection", column)
        return found


def parse_condition(text: str, names: Sequence[str]) -> Expr:
    """Parse ``text`` against the rule's selection ``names``; raise ``ConditionSyntaxError``."""
    return _Parser(text, names).parse()


def referenced(expr: Expr) -> set[str]:
    """Every selection name the expression reads."""
    if isinstance(expr, Name):
        return {expr.name}
    if isinstance(expr, Count):
        return {expr.name}
    if isinstance(expr, Quant):
        return set(expr.names)
    if isinstance(expr, Not):
        return referenced(expr.inner)
    return set().union(*(referenced(item) for item in expr.items))


def positive(expr: Expr, negated: bool = False) -> set[str]:
    """Selections that count as evidence (referenced outside any ``not``)."""
    if isinstance(expr, Not):
        return positive(expr.inner, not negated)
    if isinstance(expr, Name | Count | Quant):
        return set() if negated else referenced(expr)
    return set().union(*(positive(item, negated) for item in expr.items))


def _combine_all(parts: Iterable[Truth]) -> Truth:
    parts = list(parts)
    ok = all(p.ok for p in parts)
    ats = [p.at for p in parts if p.at is not None]
    los = [p.lo for p in parts if p.lo is not None]
    his = [p.hi for p in parts if p.hi is not None]
    return Truth(
        ok,
        max(ats) if ats and ok else None,
        min(los) if los and ok else None,
        max(his) if his and ok else None,
    )


def _combine_any(parts: Iterable[Truth]) -> Truth:
    true = [p for p in parts if p.ok]
    if not true:
        return Truth(False)
    return min(true, key=lambda p: (p.at is None, p.at or 0.0))


def evaluate(expr: Expr, facts: Mapping[str, SelectionFacts]) -> Truth:
    """Evaluate ``expr`` on per-selection facts (missing selections count as zero)."""
    empty = SelectionFacts()
    if isinstance(expr, Name):
        f = facts.get(expr.name, empty)
        return Truth(True, f.first_ts, f.first_ts, f.first_ts) if f.count > 0 else Truth(False)
    if isinstance(expr, Count):
        f = facts.get(expr.name, empty)
        value = f.count if expr.func == "count" else f.nodes
        if not _OPS[expr.op](value, expr.value):
            return Truth(False)
        return Truth(True, f.first_ts, f.first_ts, f.first_ts) if f.count > 0 else Truth(True)
    if isinstance(expr, Quant):
        parts = [evaluate(Name(n), facts) for n in expr.names]
        return _combine_all(parts) if expr.kind == "all" else _combine_any(parts)
    if isinstance(expr, Not):
        return Truth(not evaluate(expr.inner, facts).ok)
    if isinstance(expr, And):
        return _combine_all(evaluate(item, facts) for item in expr.items)
    if isinstance(expr, Or):
        return _combine_any(evaluate(item, facts) for item in expr.items)
    parts = [evaluate(item, facts) for item in expr.items]
    joined = _combine_all(parts)
    if not joined.ok:
        return Truth(False)
    times = [p.at for p in parts]
    if any(t is None for t in times):
        return Truth(False)
    ordered = all(a <= b for a, b in itertools.pairwise(times))  # type: ignore[operator]
    return Truth(True, times[-1], joined.lo, joined.hi) if ordered else Truth(False)
