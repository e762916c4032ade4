"""Exact pre-resolution of expensive ``message`` matchers to the job's distinct matching lines.

Why: a ``regexp`` or leading-wildcard query on ``message.keyword`` walks the whole term dictionary
of the index (every distinct line of every job); on the embedded server that is ~80 µs per term
for a regexp, so a library of rules cost seconds per value. Instead, per job and per value:

1. a cheap **necessary condition** on the analysed ``message`` text field selects candidate lines:
   every maximal ASCII alphanumeric run that any matching line must contain lies inside one of the
   line's tokens (the standard tokenizer never splits a run of ``[A-Za-z0-9]``; it lowercases), so
   ``wildcard message: *run*`` over the small token dictionary can only drop lines that cannot
   match;
2. a ``terms`` aggregation over ``message.keyword`` of those candidates with an ``include``
   regular expression — the value's exact semantics, evaluated by the cluster on the candidates'
   distinct lines — returns the exact set of matching lines of the job.

The selection then uses ``terms: {message.keyword: [...]}``, a plain term look-up. The result is
identical to the direct query, and the cluster still does every match (no line is scanned in
Python). A value falls back to the direct query when the resolution cannot be exact: its
``include`` pattern would need an escaped backslash (osmem mis-reads ``\\\\`` in ``include``, unlike
Elasticsearch), or the candidates have more distinct lines than ``MAX_VALUES``. Known limit of
step 1: the Elasticsearch standard tokenizer splits tokens longer than 255 characters, so a run
inside such a token (a base64 blob) is not found by the prefilter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from l4_plugin.errors import StoreError
from l4_plugin.rules.compiler import Query, has_wildcard, python_re_to_lucene
from l4_plugin.rules.port import RuleStorePort

TEXT_FIELD = "message"
KEYWORD_FIELD = "message.keyword"
#: Distinct matching lines per value above which the direct query is used instead.
MAX_VALUES = 10_000
_MAX_RUNS = 3
_MAX_WILDCARDS = 2
_SELECTIVE_WEIGHT = 12
_BATCH_VALUES = 100
_RUN = re.compile(r"[A-Za-z0-9]+")
_EXPENSIVE_KINDS = {"contains", "endswith", "re"}


@dataclass(frozen=True, slots=True)
class TextValue:
    """One string value of one ``message`` matcher: how it is compared and the value."""

    kind: str
    value: str
    cased: bool

    @classmethod
    def of(cls, kind: str, value: str, cased: bool) -> TextValue:
        """The canonical form: case-insensitive Sigma values that differ in case are one value.

        Case-insensitivity in Elasticsearch queries is ASCII-only, so only ASCII is lowered.
        """
        if not cased and kind != "re":
            value = "".join(c.lower() if c.isascii() else c for c in value)
        return cls(kind, value, cased)


def needs_resolution(field: str, kind: str, value: object) -> bool:
    """True for the ``message`` comparisons that cost a term-dictionary walk."""
    if field != "message" or not isinstance(value, str):
        return False
    return kind in _EXPENSIVE_KINDS or (kind in ("equals", "startswith") and has_wildcard(value))


# -- step 1: the necessary condition ---------------------------------------------------------


def _sigma_pieces(value: str) -> list[str]:
    """Literal pieces of a Sigma wildcard value, split at unescaped ``*`` / ``?``."""
    return _sigma_split_keep(value)[0::2]


def _split_branches(pattern: str) -> list[str]:
    """Top-level alternatives of a regex (``|`` outside groups and classes)."""
    branches: list[str] = []
    depth = 0
    in_class = False
    start = 0
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            if ch == "]" and i > start and pattern[i - 1] not in "[^":
                in_class = False
        elif ch == "[":
            in_class = True
            # A ']' right after '[' or '[^' is a literal member.
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            if pattern[j : j + 1] == "]":
                i = j
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            branches.append(pattern[start:i])
            start = i + 1
        i += 1
    branches.append(pattern[start:])
    return branches


def _regex_pieces(branch: str) -> list[str]:
    """Literal text a match of ``branch`` must contain, conservatively.

    Only characters at the top level of the branch count; groups, classes, ``.``, escapes of
    character classes and anchors break a piece, and a character followed by a quantifier is
    dropped (it may repeat or be absent).
    """
    pieces: list[str] = []
    cur: list[str] = []

    def cut() -> None:
        nonlocal cur
        pieces.append("".join(cur))
        cur = []

    i = 0
    n = len(branch)
    while i < n:
        ch = branch[i]
        if ch == "\\":
            nxt = branch[i + 1 : i + 2]
            lit = None if nxt.isalnum() or nxt == "" else nxt
            width = 2
        elif ch == "[":
            j = i + 1 + (branch[i + 1 : i + 2] == "^")
            j += branch[j : j + 1] == "]"
            while j < n and branch[j] != "]":
                j += 2 if branch[j] == "\\" else 1
            cut()
            i = j + 1
            continue
        elif ch == "(":
            depth = 0
            j = i
            while j < n:
                if branch[j] == "\\":
                    j += 2
                    continue
                if branch[j] == "(":
                    depth += 1
                elif branch[j] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            cut()
            i = j + 1
            continue
        elif ch in ".^$":
            lit, width = None, 1
        elif ch in "*+?{":
            # The previous character is quantified: it is not a required literal.
            if cur:
                cur.pop()
            cut()
            if ch == "{":
                close = branch.find("}", i)
                i = n if close < 0 else close + 1
            else:
                i += 1
                if branch[i : i + 1] == "?":
                    i += 1
            continue
        else:
            lit, width = ch, 1
        if lit is None:
            cut()
        else:
            cur.append(lit)
        i += width
    cut()
    return pieces


@dataclass(frozen=True, slots=True)
class TokenRun:
    """An alphanumeric run a matching line must contain, lowercased.

    ``left``/``right``: the literal has whitespace right before/after the run, so the line's token
    starts/ends exactly there (whitespace always separates tokens).
    """

    text: str
    left: bool = False
    right: bool = False

    def clause(self) -> Query:
        """The token-level query: exact token, token prefix, suffix or infix."""
        # The standard analyzer lowercases tokens and ``text`` is lowercase already.
        if self.left and self.right:
            return {"term": {TEXT_FIELD: self.text}}
        pattern = ("" if self.left else "*") + self.text + ("" if self.right else "*")
        return {"wildcard": {TEXT_FIELD: {"value": pattern}}}

    @property
    def weight(self) -> int:
        """How selective the clause is likely to be: longer and token-anchored is better."""
        return len(self.text) + 3 * self.left + 3 * self.right


def _runs(pieces: Iterable[str]) -> list[TokenRun]:
    runs: set[TokenRun] = set()
    for piece in pieces:
        for m in _RUN.finditer(piece):
            left = m.start() > 0 and piece[m.start() - 1].isspace()
            right = m.end() < len(piece) and piece[m.end()].isspace()
            runs.add(TokenRun(m.group().lower(), left, right))
    useful = [r for r in runs if len(r.text) >= 2 or (r.left and r.right)] or list(runs)
    ranked = sorted(useful, key=lambda r: (-r.weight, r.text))
    # A whole token is one dictionary look-up; a wildcard walks the token dictionary. Whole
    # tokens also select far fewer lines than token prefixes/suffixes or infixes.
    tokens = [r for r in ranked if r.left and r.right]
    return tokens[:_MAX_RUNS] if tokens else ranked[:_MAX_WILDCARDS]


def selective(runs: Sequence[Sequence[TokenRun]]) -> bool:
    """Whether the prefilter is likely to leave few lines (long or token-anchored runs).

    Selective values share one request whose per-value filters are tested line by line over
    the union of their candidates; a vague one ("loss: inf" -> ``*loss*``, ``inf*``) would make
    that union the whole job, so it gets a request of its own.
    """
    for alt in runs:
        weights = sorted((r.weight for r in alt), reverse=True)
        if sum(weights[:2]) < _SELECTIVE_WEIGHT:
            return False
    return True


def required_runs(kind: str, value: str) -> list[list[TokenRun]] | None:
    """Alphanumeric runs a matching line must contain: OR of AND lists; None if unknown.

    ``[[nccl, warn]]`` means every matching line contains both runs; several lists are
    alternatives (a regex with top-level ``|``). None when some alternative has no such run.
    """
    if kind == "re":
        body = value[1:] if value.startswith("^") else value
        alternatives = [_runs(_regex_pieces(b)) for b in _split_branches(body)]
    else:
        alternatives = [_runs(_sigma_pieces(value))]
    if not alternatives or any(not alt for alt in alternatives):
        return None
    return alternatives


def prefilter_query(runs: Sequence[Sequence[TokenRun]]) -> Query:
    """The analysed-field query for ``required_runs`` (cheap: token dictionary only)."""
    alternatives: list[Query] = []
    for alt in runs:
        clauses = [r.clause() for r in alt]
        alternatives.append(clauses[0] if len(clauses) == 1 else {"bool": {"filter": clauses}})
    if len(alternatives) == 1:
        return alternatives[0]
    return {"bool": {"should": alternatives, "minimum_should_match": 1}}


# -- step 2: the exact ``include`` pattern ----------------------------------------------------


def _fold_char(ch: str) -> str:
    return f"[{ch.lower()}{ch.upper()}]" if ch.isascii() and ch.isalpha() else ch


def _fold_class(body: str) -> str:
    """Add the other ASCII case of every letter and letter range inside a class body."""
    extra: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            i += 2
            continue
        if i + 2 < len(body) and body[i + 1] == "-" and body[i + 2] != "]":
            lo, hi = ch, body[i + 2]
            letters = lo.isascii() and hi.isascii() and lo.isalpha() and hi.isalpha()
            if letters and lo.islower() == hi.islower():
                extra.append(f"{lo.swapcase()}-{hi.swapcase()}")
            i += 3
            continue
        if ch.isascii() and ch.isalpha():
            extra.append(ch.swapcase())
        i += 1
    return body + "".join(extra)


def fold_case(lucene: str) -> str:
    """A Lucene regexp that matches what ``lucene`` matches under ASCII case-insensitivity.

    ``include`` has no ``case_insensitive`` flag: letters become ``[aA]`` and classes get the
    other case of their letters and letter ranges (Python's ``re.IGNORECASE`` on ASCII).
    """
    out: list[str] = []
    i = 0
    while i < len(lucene):
        ch = lucene[i]
        if ch == "\\":
            out.append(lucene[i : i + 2])
            i += 2
            continue
        if ch == "[":
            j = i + 1
            neg = lucene[j : j + 1] == "^"
            j += neg
            start = j
            j += lucene[j : j + 1] == "]"
            while j < len(lucene) and lucene[j] != "]":
                j += 2 if lucene[j] == "\\" else 1
            out.append("[" + ("^" if neg else "") + _fold_class(lucene[start:j]) + "]")
            i = j + 1
            continue
        out.append(_fold_char(ch))
        i += 1
    return "".join(out)


def _escape_literal(text: str) -> str:
    return "".join(
        ch if ch.isalnum() or ch == " " or not ch.isascii() else "\\" + ch for ch in text
    )


def include_pattern(kind: str, value: str, cased: bool) -> str | None:
    """The Lucene regexp (whole-term match) equivalent to the value; None if not expressible."""
    if "\\" in value.replace("\\*", "").replace("\\?", "") and kind != "re":
        return None
    if kind == "re":
        lucene = python_re_to_lucene(value)
        if "\\\\" in lucene:
            return None
    else:
        parts: list[str] = []
        for i, piece in enumerate(_sigma_split_keep(value)):
            parts.append(piece if i % 2 else _escape_literal(piece))
        body = "".join(parts)
        lucene = {
            "contains": f".*{body}.*",
            "startswith": f"{body}.*",
            "endswith": f".*{body}",
            "equals": body,
        }[kind]
    return lucene if cased else fold_case(lucene)


def _sigma_split_keep(value: str) -> list[str]:
    """Alternating [literal, wildcard-regex, literal, ...] pieces of a Sigma value."""
    out: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and value[i + 1 : i + 2] in ("*", "?", "\\"):
            cur.append(value[i + 1])
            i += 2
            continue
        if ch in "*?":
            out.append("".join(cur))
            out.append(".*" if ch == "*" else ".")
            cur = []
        else:
            cur.append(ch)
        i += 1
    out.append("".join(cur))
    return out


# -- the look-up ------------------------------------------------------------------------------


def _read(agg: Mapping[str, Any]) -> tuple[str, ...] | None:
    if agg.get("sum_other_doc_count", 0):
        return None
    return tuple(str(b["key"]) for b in agg.get("buckets", []))


class MessageResolver:
    """Resolves ``TextValue``s of one job to the exact distinct ``message`` values they match.

    Selective values share one request: the union of their prefilters is the top-level query
    (answered from the inverted index), and per value a ``filter`` (its prefilter) holds a
    ``terms`` aggregation with its ``include`` pattern, so each pattern only sees its own few
    candidate lines. Vague values get one request each, the prefilter as the query and the job
    as a filter aggregation (tested only on the candidates); values without any required run
    get one request over the job.
    """

    def __init__(self, store: RuleStorePort, index: str, job_filter: Query) -> None:
        self.store = store
        self.index = index
        self.job_filter = job_filter
        self.resolved: dict[TextValue, tuple[str, ...] | None] = {}
        self.requests = 0

    def _search(self, body: dict[str, Any]) -> Mapping[str, Any]:
        self.requests += 1
        response = self.store.search(self.index, body)
        aggs: Mapping[str, Any] = response.get("aggregations", {})
        return aggs

    def resolve(self, values: Iterable[TextValue]) -> None:
        """Look up every value not resolved yet."""
        batch: list[tuple[TextValue, str, Query]] = []
        for tv in dict.fromkeys(values):
            if tv in self.resolved:
                continue
            pattern = include_pattern(tv.kind, tv.value, tv.cased)
            if pattern is None:
                self.resolved[tv] = None
                continue
            runs = required_runs(tv.kind, tv.value)
            if runs is None:
                self.resolved[tv] = self._whole_job(pattern)
            elif selective(runs):
                batch.append((tv, pattern, prefilter_query(runs)))
            else:
                self.resolved[tv] = self._alone(pattern, prefilter_query(runs))
        for start in range(0, len(batch), _BATCH_VALUES):
            self._batch(batch[start : start + _BATCH_VALUES])

    def _batch(self, items: Sequence[tuple[TextValue, str, Query]]) -> None:
        body = {
            "size": 0,
            "track_total_hits": False,
            "query": {
                "bool": {
                    "filter": [self.job_filter],
                    "should": [query for _, _, query in items],
                    "minimum_should_match": 1,
                }
            },
            "aggs": {
                f"v{i}": {"filter": query, "aggs": {"m": _terms(pattern)}}
                for i, (_, pattern, query) in enumerate(items)
            },
        }
        try:
            aggs = self._search(body)
        except StoreError:
            # e.g. Elasticsearch's search.max_buckets (65,536) when many values match thousands
            # of distinct lines: resolve them one by one instead.
            for tv, pattern, query in items:
                self.resolved[tv] = self._alone(pattern, query)
            return
        for i, (tv, _, _) in enumerate(items):
            self.resolved[tv] = _read(aggs.get(f"v{i}", {}).get("m", {}))

    def _alone(self, pattern: str, query: Query) -> tuple[str, ...] | None:
        body = {
            "size": 0,
            "track_total_hits": False,
            "query": query,
            "aggs": {"job": {"filter": self.job_filter, "aggs": {"m": _terms(pattern)}}},
        }
        try:
            return _read(self._search(body).get("job", {}).get("m", {}))
        except StoreError:
            return None  # the direct query still gives the right answer

    def _whole_job(self, pattern: str) -> tuple[str, ...] | None:
        body = {
            "size": 0,
            "track_total_hits": False,
            "query": self.job_filter,
            "aggs": {"m": _terms(pattern)},
        }
        return _read(self._search(body).get("m", {}))

    def lookup(self, tv: TextValue) -> tuple[str, ...] | None:
        """The exact matching values, or None when the direct query must be used."""
        return self.resolved.get(tv)


def _terms(pattern: str) -> dict[str, Any]:
    return {"terms": {"field": KEYWORD_FIELD, "size": MAX_VALUES, "include": pattern}}
