"""Compilation of rule selections into plain Elasticsearch / OpenSearch query DSL.

Only documented, portable query types are produced: ``bool``, ``term``/``terms`` (with
``case_insensitive``), ``wildcard`` (with ``case_insensitive``), ``prefix``, ``regexp`` and
``range``; aggregations are ``composite``, ``filter``, ``min``, ``max`` and ``top_hits``.
Text matching runs on the ``message.keyword`` sub-field, so ``contains`` means a substring of the
whole line (lines longer than the mapping's ``ignore_above`` of 8191 characters are not matched).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from l4_plugin.rules.rule import FieldMatcher, Selection
from l4_plugin.store import fields as F

Query = dict[str, Any]
TemplateResolver = Callable[[FieldMatcher], Sequence[str]]
# Exact ``message.keyword`` values one value of a matcher matches in the job, or None (not
# resolved: use the direct query). See ``l4_plugin.rules.resolver``.
ValueResolver = Callable[[FieldMatcher, str | int | float], Sequence[str] | None]

# Where each rule field lives in l4-lines (``template`` is resolved through l4-templates).
LINE_FIELDS = {
    "message": "message.keyword",
    "log.level": "log.level",
    "host.name": "host.name",
    F.STAGE: F.STAGE,
    F.RANK: F.RANK,
    F.ITERATION: F.ITERATION,
    F.TEMPLATE_ID: F.TEMPLATE_ID,
    "log.file.path": "log.file.path",
}
TEMPLATE_TEXT_FIELD = F.TEMPLATE_TEXT
_LUCENE_RESERVED = set('@&<>#~"')
_RANGE_OPS = {"gt": "gt", "gte": "gte", "lt": "lt", "lte": "lte"}
MATCH_NOTHING: Query = {"terms": {F.TEMPLATE_ID: []}}


class RegexTranslationError(ValueError):
    """A ``|re`` value uses a construct Lucene regular expressions cannot express."""


def python_re_to_lucene(pattern: str) -> str:
    """Translate a Python ``re.search`` pattern into an (implicitly anchored) Lucene regexp.

    Supported: literals, ``.``, classes, groups, ``(?:...)``, alternation, greedy quantifiers and
    ``{m,n}``, the escapes ``\\d \\w \\s \\t \\n`` and escaped punctuation, ``^`` at the start and
    ``$`` at the end. Rejected with a reason: lookarounds, inline flags, back-references,
    ``\\b``/``\\B``/``\\A``/``\\Z``, ``\\D``/``\\W``/``\\S`` and lazy quantifiers.
    """
    import re

    try:
        re.compile(pattern)
    except re.error as exc:
        raise RegexTranslationError(str(exc)) from exc
    out: list[str] = []
    anchored_start = pattern.startswith("^")
    i = 1 if anchored_start else 0
    anchored_end = False
    in_class = False
    class_start = False
    classes = {
        "d": ("[0-9]", "0-9"),
        "w": ("[A-Za-z0-9_]", "A-Za-z0-9_"),
        "s": ("[ \t\r\n]", " \t\r\n"),
    }
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1] if i + 1 < len(pattern) else ""
            if nxt in classes:
                out.append(classes[nxt][1] if in_class else classes[nxt][0])
            elif nxt in ("t", "n", "r"):
                out.append({"t": "\t", "n": "\n", "r": "\r"}[nxt])
            elif nxt.isalnum():
                raise RegexTranslationError(f"escape '\\{nxt}' is not supported by Lucene regexp")
            else:
                out.append("\\" + nxt)
            i += 2
            class_start = False
            continue
        if in_class:
            if ch == "]" and not class_start:
                in_class = False
            out.append(ch)
            class_start = ch == "^" and class_start
            i += 1
            continue
        if ch == "[":
            in_class = True
            class_start = True
            out.append(ch)
        elif ch == "(" and pattern.startswith("(?", i):
            if pattern.startswith("(?:", i):
                out.append("(")
                i += 3
                continue
            raise RegexTranslationError(
                "lookarounds, named groups and inline flags are not supported"
            )
        elif ch in "*+?}" and pattern[i + 1 : i + 2] == "?":
            raise RegexTranslationError("lazy quantifiers ('*?', '+?', ...) are not supported")
        elif ch == "^":
            raise RegexTranslationError("'^' is only allowed at the start of the pattern")
        elif ch == "$":
            if i != len(pattern) - 1:
                raise RegexTranslationError("'$' is only allowed at the end of the pattern")
            anchored_end = True
        elif ch in _LUCENE_RESERVED:
            out.append("\\" + ch)
        else:
            out.append(ch)
        i += 1
    body = "".join(out)
    return f"{'' if anchored_start else '.*'}({body}){'' if anchored_end else '.*'}"


def _sigma_to_wildcard(value: str) -> str:
    """Sigma value syntax (``*``/``?`` wildcards, backslash escapes) as a wildcard pattern."""
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            nxt = value[i + 1 : i + 2]
            if nxt in ("*", "?", "\\"):
                out.append("\\" + nxt)
                i += 2
                continue
            out.append("\\\\")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def has_wildcard(value: str) -> bool:
    """True when a Sigma value has an unescaped ``*`` or ``?``."""
    i = 0
    while i < len(value):
        if value[i] == "\\":
            i += 2
            continue
        if value[i] in "*?":
            return True
        i += 1
    return False


def _unescape(value: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        if value[i] == "\\" and value[i + 1 : i + 2] in ("*", "?", "\\"):
            out.append(value[i + 1])
            i += 2
            continue
        out.append(value[i])
        i += 1
    return "".join(out)


def value_query(field: str, kind: str, value: str | int | float, cased: bool) -> Query:
    """One value of one matcher as a query clause on ``field`` (an index field name)."""
    ci = {} if cased else {"case_insensitive": True}
    if kind in _RANGE_OPS:
        return {"range": {field: {_RANGE_OPS[kind]: value}}}
    if not isinstance(value, str):
        return {"term": {field: {"value": value}}}
    if kind == "re":
        return {"regexp": {field: {"value": python_re_to_lucene(value), **ci}}}
    if kind == "startswith" and not has_wildcard(value):
        return {"prefix": {field: {"value": _unescape(value), **ci}}}
    if kind == "equals" and not has_wildcard(value):
        return {"term": {field: {"value": _unescape(value), **ci}}}
    pattern = _sigma_to_wildcard(value)
    if kind == "contains":
        pattern = f"*{pattern}*"
    elif kind == "startswith":
        pattern = f"{pattern}*"
    elif kind == "endswith":
        pattern = f"*{pattern}"
    return {"wildcard": {field: {"value": pattern, **ci}}}


def _combine(clauses: list[Query], all_: bool) -> Query:
    # A clause that matches nothing decides an AND and drops out of an OR: same documents, and
    # the engine skips selections that are MATCH_NOTHING without a request.
    if all_ and MATCH_NOTHING in clauses:
        return MATCH_NOTHING
    if not all_:
        clauses = [c for c in clauses if c != MATCH_NOTHING] or [MATCH_NOTHING]
    if len(clauses) == 1:
        return clauses[0]
    if all_:
        return {"bool": {"filter": clauses}}
    return {"bool": {"should": clauses, "minimum_should_match": 1}}


def template_text_query(matcher: FieldMatcher) -> Query:
    """The ``l4-templates`` query that finds the template ids a ``template`` matcher means."""
    return _combine(
        [value_query(TEMPLATE_TEXT_FIELD, matcher.kind, v, matcher.cased) for v in matcher.values],
        matcher.all_,
    )


def _resolved_or_direct(
    matcher: FieldMatcher, value: str | int | float, resolve_value: ValueResolver | None
) -> Query:
    exact = resolve_value(matcher, value) if resolve_value is not None else None
    if exact is None:
        return value_query(LINE_FIELDS[matcher.field], matcher.kind, value, matcher.cased)
    if not exact:
        return MATCH_NOTHING
    return {"terms": {LINE_FIELDS[matcher.field]: sorted(exact)}}


def matcher_query(
    matcher: FieldMatcher,
    resolve: TemplateResolver,
    resolve_value: ValueResolver | None = None,
) -> Query:
    """An ``l4-lines`` query clause for one matcher; ``template`` goes through ``resolve``.

    With ``resolve_value``, a value it resolved becomes a ``terms`` look-up of the exact
    ``message.keyword`` values it matches in the job (same documents, no regexp at query time).
    """
    if matcher.field == "template":
        ids = sorted(set(resolve(matcher)))
        return {"terms": {F.TEMPLATE_ID: ids}} if ids else MATCH_NOTHING
    return _combine(
        [_resolved_or_direct(matcher, v, resolve_value) for v in matcher.values], matcher.all_
    )


def selection_query(
    selection: Selection,
    resolve: TemplateResolver,
    resolve_value: ValueResolver | None = None,
) -> Query | None:
    """The ``l4-lines`` query of a selection, or None for a ``silence`` selection."""
    if selection.silence is not None:
        return None
    alternatives = [
        _combine([matcher_query(m, resolve, resolve_value) for m in alt], True)
        for alt in selection.alternatives
    ]
    return _combine(alternatives, False)


def job_filter(job_id: str) -> Query:
    """The clause that restricts any l4 index to one job."""
    return {"term": {F.JOB_ID: job_id}}
