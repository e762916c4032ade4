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
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

from drain3.drain import Drain

from l4_plugin.errors import ConfigError
from l4_plugin.records import Template

PARAM = "<*>"

_Key = tuple[int, str]


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
    ``depth=5`` (drain3's default is 4) routes on the first *two* tokens, so lines that differ in
    their second token (``"GET`` / ``"POST``, ``[after megatron …`` / ``[after dataloaders …``)
    never merge: LogHub GA 0.850 → 0.913 (benchmarks/RESULTS.md), same speed.
    """

    def __init__(
        self,
        known: Iterable[Template] = (),
        sim_th: float = 0.4,
        depth: int = 5,
        max_children: int = 100,
        extra_delimiters: Sequence[str] = (),
    ) -> None:
        self._drain = Drain(
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

    def known_match(self, masked_body: str) -> Template | None:
        """The known template that ``masked_body`` fits, if any (no state is changed)."""
        return self._match_known(self._drain.get_content_as_tokens(masked_body))

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
