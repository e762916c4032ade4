"""Template mining with drain3, with template ids that are stable across jobs.

drain3's cluster ids are per-process counters and its snapshots are pickles, so neither is used as
an identity. A template's id is ``sha1(final template text)[:16]``, and the state that keeps ids
stable from one job to the next is just the list of known ``Template`` records (JSON, stored in the
``l4-templates`` index): a masked body whose tokens fit a known template gets that template,
unchanged; everything else goes to a fresh Drain tree, and its id is resolved from the cluster's
*final* text once all lines have been added (Drain generalises templates as lines arrive).

Known templates are deliberately not seeded into Drain: a new variant of a known line (``loss is
nan`` next to a known ``loss is <NUM>``) then becomes its own, new template instead of widening the
known one, which is what cross-job filtering wants to see.

The input is masked (``<NUM>``, ``<IP>``, ``<PATH>``… see ``ingest/masking.yaml``), so Drain is told
that a token holding a mask placeholder is a variable, as LogPAI's Drain treats its ``<*>``: it is
routed to the prefix tree's wildcard branch (``<IP>`` and ``<ADDR>`` at the head of one event do
not open two branches) and it is never evidence that two lines are the same event (two short lines
that share only ``[instance: <UUID>]`` are not similar).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from drain3.drain import Drain

from l4_plugin.errors import ConfigError
from l4_plugin.records import Template

PARAM = "<*>"
# A masking placeholder inside a token: "<IP>", "rhost=<IP>", "(uid=<NUM>)", "<SIZE>/s".
_MASK_TOKEN = re.compile(r"<[A-Z]+>")
_DIGIT = re.compile(r"\d")

_Key = tuple[int, str]


@lru_cache(maxsize=1 << 16)
def is_variable(token: str) -> bool:
    """Whether a masked token is a variable for Drain: ``<*>``, a mask placeholder or a digit in it.

    Digits are what drain3's prefix tree already treats as variable (``has_numbers``); the masks
    leave them only inside words (``fp00``, ``core.0000``), whose values vary from line to line.
    """
    if token == PARAM or ("<" in token and _MASK_TOKEN.search(token) is not None):
        return True
    return _DIGIT.search(token) is not None


class _MaskedDrain(Drain):
    """drain3's Drain for masked input: tokens holding a mask placeholder or a digit are variables.

    Routing: such a token goes to the wildcard branch (drain3 does so for digits only).
    Similarity: the share of positions that hold a constant in the template or in the line where
    both hold the same one; a position that is variable in both is neither a match nor a mismatch,
    so two lines of mostly masked values are not "similar" because both hold ``<NUM>`` somewhere,
    and a template of variables only does not swallow a line of words.
    """

    @staticmethod
    def has_numbers(s: str) -> bool:
        return is_variable(s)

    def get_seq_distance(
        self, seq1: Sequence[str], seq2: Sequence[str], include_params: bool
    ) -> tuple[float, int]:
        compared = same = params = 0
        for token1, token2 in zip(seq1, seq2, strict=True):
            if is_variable(token1):
                params += 1
                if is_variable(token2):
                    continue
            compared += 1
            if token1 == token2:
                same += 1
        if include_params:
            return (same + params) / len(seq1) if seq1 else 1.0, params
        return same / compared if compared else 1.0, params


def template_id(text: str) -> str:
    """The stable id of a template: the first 16 hex digits of the SHA-1 of its text."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def make_template(text: str) -> Template:
    """A ``Template`` whose id is derived from ``text``."""
    return Template(template_id(text), text)


def template_to_dict(template: Template) -> dict[str, str]:
    """The JSON form of a template (what the ``l4-templates`` index stores)."""
    return {"id": template.id, "text": template.text}


def template_from_dict(data: Mapping[str, object], where: str = "template") -> Template:
    """Read a template back from its JSON form; a malformed one is a ``ConfigError``."""
    tid, text = data.get("id"), data.get("text")
    if not isinstance(tid, str) or not isinstance(text, str):
        raise ConfigError(f"{where}: a template needs string 'id' and 'text' — got {dict(data)!r}")
    return Template(tid, text)


class TemplateMiner:
    """Assigns templates to already-masked message bodies; ids are resolved by ``finish()``.

    ``add`` returns a handle (an int); the same body always returns the same handle. After
    ``finish()``, ``template_for(handle)`` is the final template; calling ``template_for`` with
    pending changes finishes implicitly. Hyper-parameters are drain3's (``sim_th``, ``depth``,
    ``max_children``, ``extra_delimiters``); drain3's own masking is not used, the input is masked.
    The defaults (``sim_th=0.7``, ``depth=6``: routing on the first three tokens,
    ``max_children=50``) are the one setting chosen by cross-validation on eight LogHub-2k systems
    (``benchmarks/loghub_accuracy.py --cv``, benchmarks/RESULTS.md); they apply to every log.
    """

    def __init__(
        self,
        known: Iterable[Template] = (),
        sim_th: float = 0.7,
        depth: int = 6,
        max_children: int = 50,
        extra_delimiters: Sequence[str] = (),
    ) -> None:
        self._drain = _MaskedDrain(
            depth=depth,
            sim_th=sim_th,
            max_children=max_children,
            extra_delimiters=tuple(extra_delimiters),
            param_str=PARAM,
        )
        self._known: dict[str, Template] = {}
        self._known_index: dict[_Key, list[tuple[tuple[str, ...], Template]]] = {}
        for template in known:
            self._known.setdefault(template.text, template)
        for template in self._known.values():
            tokens = tuple(self._drain.get_content_as_tokens(template.text))
            self._known_index.setdefault(_key(tokens[0] if tokens else "", len(tokens)), []).append(
                (tokens, template)
            )
        # Most specific first (fewest wildcards), then by text: a body that fits several known
        # templates always gets the same one, whatever order the store returned them in.
        for candidates in self._known_index.values():
            candidates.sort(key=lambda c: (c[0].count(PARAM), c[1].text))
        self._handles: dict[str, int] = {}
        self._entries: list[Template | int] = []
        self._resolved: list[Template] = []
        self._dirty = False

    def add(self, masked_body: str) -> int:
        """Add one masked message body and return its handle."""
        handle = self._handles.get(masked_body)
        if handle is not None:
            return handle
        tokens = self._drain.get_content_as_tokens(masked_body)
        entry: Template | int | None = self._match_known(tokens)
        if entry is None:
            cluster, _ = self._drain.add_log_message(masked_body)
            entry = cluster.cluster_id
            self._dirty = True
        handle = len(self._entries)
        self._entries.append(entry)
        self._handles[masked_body] = handle
        self._resolved.append(entry if isinstance(entry, Template) else _UNRESOLVED)
        if not isinstance(entry, Template):
            self._dirty = True
        return handle

    def finish(self) -> None:
        """Resolve every handle to its cluster's final template text and stable id."""
        if not self._dirty:
            return
        cache: dict[str, Template] = {}
        clusters = self._drain.id_to_cluster
        for handle, entry in enumerate(self._entries):
            if isinstance(entry, Template):
                continue
            text = clusters[entry].get_template()
            template = cache.get(text)
            if template is None:
                template = self._known.get(text) or make_template(text)
                cache[text] = template
            self._resolved[handle] = template
        self._dirty = False

    def template_for(self, handle: int) -> Template:
        """The final template of a handle returned by ``add``."""
        if self._dirty:
            self.finish()
        return self._resolved[handle]

    def new_templates(self) -> list[Template]:
        """Templates assigned so far that were not among the known ones, in first-seen order."""
        if self._dirty:
            self.finish()
        seen: dict[str, Template] = {}
        for template in self._resolved:
            if template.text not in self._known and template.text not in seen:
                seen[template.text] = template
        return list(seen.values())

    def _match_known(self, tokens: list[str]) -> Template | None:
        if not self._known_index:
            return None
        count = len(tokens)
        first = tokens[0] if tokens else ""
        best: tuple[int, str, Template] | None = None
        for key in (_key(first, count), _key(PARAM, count)):
            for known_tokens, template in self._known_index.get(key, ()):
                if _fits(known_tokens, tokens):
                    rank = (known_tokens.count(PARAM), template.text, template)
                    if best is None or rank[:2] < best[:2]:
                        best = rank
                    break  # candidates are sorted: the first fit of a list is its best
        return best[2] if best is not None else None


_UNRESOLVED = Template("", "")


def _key(first: str, count: int) -> _Key:
    return (count, first)


def _fits(template: tuple[str, ...], tokens: list[str]) -> bool:
    return all(t in (w, PARAM) for t, w in zip(template, tokens, strict=True))
