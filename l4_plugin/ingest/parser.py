"""The parsing hot path: mask a chunk, collapse identical masked lines, mine templates once each.

Training logs repeat the same few thousand messages billions of times with different numbers. So
``LineParser.feed`` masks a whole chunk with a few C-level regex passes, looks every masked line up
in a dict, and only for a masked line never seen before parses its header, masks its body and hands
it to Drain. The per-line Python cost is one dict lookup; every identical masked line shares one
``LineKind`` object, which the ingest uses as the key of its rollups.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from l4_plugin.errors import IngestError
from l4_plugin.ingest.header import parse_header, rank_prefix
from l4_plugin.ingest.masking import Masker, default_masker
from l4_plugin.ingest.reader import is_gzip, read_lines
from l4_plugin.ingest.templates import TemplateMiner
from l4_plugin.ingest.terminal import glued_at
from l4_plugin.limits import MAX_LINE_CHARS, ReadLimits
from l4_plugin.records import ParsedLine, Template, is_flagged

MAX_CACHED_KEYS = 1_000_000
MAX_FOLDED_KEYS = 250_000  # ``LineParser._masked``'s cache, a second one in front of by_masked
_FEED_LINES = 65_536
#: Up to this many new keys in a chunk, ``feed_keyed`` finds each with ``list.index``.
_FEW_NEW = 16


@dataclass(slots=True, eq=False)  # eq=False: hashed and compared by identity (rollup keys)
class LineKind:
    """One distinct masked line, shared by every raw line that masks to it.

    ``template`` is None until ``LineParser.finish()``. ``has_timestamp`` / ``rank_prefix`` tell
    the ingest whether ``parse_header(raw_line)`` would give it a time / a rank for a given line.
    """

    key: str
    level: str | None
    emitter: str
    has_timestamp: bool
    rank_prefix: bool
    body: str
    template: Template | None = None


#: What a worker process tells the reducer about a line kind it saw first:
#: (masked line, level, emitter, has_timestamp, rank_prefix, body).
KindSpec = tuple[str, str | None, str, bool, bool, str]


def kind_spec(kind: LineKind) -> KindSpec:
    """The attributes of a kind that travel between processes (everything but the template)."""
    return (kind.key, kind.level, kind.emitter, kind.has_timestamp, kind.rank_prefix, kind.body)


class LineParser:
    r"""Turns raw lines into shared ``LineKind`` objects and, at ``finish()``, stable templates.

    ``drain_params`` go to ``TemplateMiner`` (``sim_th``, ``depth``, ``max_children``,
    ``extra_delimiters``). ``feed`` may be called again after ``finish``; a later ``finish``
    re-resolves every kind (Drain may have generalised a template in the meantime).
    ``mine=False`` (a worker process's scanner) masks and deduplicates but never runs Drain: the
    reducer ``adopt``\ s the kinds in job order. ``pinned`` kinds (by masked line) give their
    attributes to the kinds this parser creates, instead of this parser's first raw line.
    """

    def __init__(
        self,
        masker: Masker | None = None,
        known: Iterable[Template] = (),
        *,
        mine: bool = True,
        pinned: dict[str, LineKind] | None = None,
        **drain_params: float | int | tuple[str, ...],
    ) -> None:
        self.masker = masker if masker is not None else default_masker()
        self.miner = TemplateMiner(known, **drain_params)  # type: ignore[arg-type]
        self.mine = mine
        self._pinned = pinned
        self._by_key: dict[str, LineKind] = {}
        self._by_masked: dict[str, LineKind] = {}
        self._by_folded: dict[str, str] = {}  # a folded key's masked line (``_masked``)
        self._handles: list[tuple[LineKind, int]] = []
        #: When a list: every (folded key, masked line) this parser's regexes computed is also
        #: appended here, for other processes' parsers to ``learn_masks`` (the scan's workers).
        self.mask_log: list[tuple[str, str]] | None = None

    @property
    def kinds(self) -> list[LineKind]:
        """Every distinct line kind seen so far, in first-seen order."""
        return list(self._by_masked.values())

    def feed(self, lines: list[str]) -> list[LineKind]:
        """Return one ``LineKind`` per input line (lines without their ``\\n``)."""
        return self.feed_keyed(lines)[0]

    def feed_keyed(
        self, lines: list[str], digit_keys: list[str] | None = None
    ) -> tuple[list[LineKind], list[str] | None]:
        """``feed``, and each line's dedup key (``Masker.key``: its digits normalised) when the
        keys are those of the lines as given (None when a line is cut or holds a ``\\n``). Two
        lines with one key differ at most in their digits: a finer key than ``digit_shape``
        whose hash is already computed, so the scan's per-shape caches take it instead.
        ``digit_keys``: the lines' ``digit_key`` s when the caller has them
        (``Block.digit_keys``; lines it has cut to ``MAX_LINE_CHARS`` already), taken as the
        keys when the masker normalises digits."""
        if not lines:
            return [], []
        exact = True
        if digit_keys is not None and self.masker.normalise_digits:
            keys = digit_keys
        else:
            if max(map(len, lines)) > MAX_LINE_CHARS:
                lines = [line[:MAX_LINE_CHARS] for line in lines]
                exact = False
            keys = self.masker.key("\n".join(lines)).split("\n")
        if len(keys) != len(lines):
            # Only a raw line with an embedded "\n" gets here (callers split on "\n").
            keys = [self.masker.key(line).replace("\n", " ") for line in lines]
            exact = False
        by_key = self._by_key
        try:
            # the hot path: all keys seen before
            return list(map(by_key.__getitem__, keys)), keys if exact else None
        except KeyError:
            pass
        fresh = set(keys).difference(by_key)
        if len(fresh) <= _FEW_NEW:
            # The usual case past a job's first lines: a few new keys in a chunk, each found
            # by one C-level scan (the first occurrence: the order Drain sees them in).
            at = sorted(map(keys.index, fresh))
            new = [keys[i] for i in at]
            first = {keys[i]: lines[i] for i in at}
        else:
            new = [key for key in dict.fromkeys(keys) if key in fresh]
            # First raw line of every new key, at C speed: reversed so the earliest one wins.
            first = dict(zip(reversed(keys), reversed(lines), strict=True))
        masked = self._masked(new)
        by_masked = self._by_masked
        for key, masked_line in zip(new, masked, strict=True):
            kind = by_masked.get(masked_line)
            if kind is None:
                kind = self._new_kind(masked_line, first[key], key)
                by_masked[masked_line] = kind
            by_key[key] = kind
        result = list(map(by_key.__getitem__, keys))
        if len(by_key) > MAX_CACHED_KEYS:
            # by_key is only a cache in front of by_masked (lines with hex ids or hashes make many
            # keys per kind); dropping it bounds memory without changing any result.
            by_key.clear()
        return result, keys if exact else None

    def _masked(self, new: list[str]) -> list[str]:
        """The masked line of each new key. Keys the masker folds alike (``Masker.fold``: hex
        literals) mask alike, so the regexes run once per folded key, over all the chunk's new
        ones at once."""
        masker = self.masker
        folded = masker.fold("\n".join(new)).split("\n")
        by_folded = self._by_folded
        if len(by_folded) > MAX_FOLDED_KEYS:
            by_folded.clear()  # a cache too, like by_key: memory stays bounded
        todo = [key for key in dict.fromkeys(folded) if key not in by_folded]
        if todo:
            masked = masker.mask_folded("\n".join(todo)).split("\n")
            by_folded.update(zip(todo, masked, strict=True))
            if self.mask_log is not None:
                self.mask_log.extend(zip(todo, masked, strict=True))
        return list(map(by_folded.__getitem__, folded))

    def known_masks(self) -> Iterable[tuple[str, str]]:
        """Every (folded key, masked line) this parser holds (for another's ``learn_masks``)."""
        return self._by_folded.items()

    def learn_masks(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Take (folded key, masked line) pairs another parser with the same masker computed
        (its ``mask_log``): those keys' regexes need not run here. Masking is a function of
        the folded key alone, so nothing this parser returns changes."""
        by_folded = self._by_folded
        if len(by_folded) > MAX_FOLDED_KEYS:
            by_folded.clear()
        for folded, masked in pairs:
            by_folded.setdefault(folded, masked)

    def finish(self) -> None:
        """Resolve ``template`` of every kind to its final Drain template (stable id)."""
        self.miner.finish()
        template_for = self.miner.template_for
        for kind, handle in self._handles:
            kind.template = template_for(handle)

    def new_templates(self) -> list[Template]:
        """Templates of this parser's lines that were not among the known ones."""
        return self.miner.new_templates()

    def adopt(self, spec: KindSpec) -> LineKind:
        """The kind of a masked line another process saw (``kind_spec``); the first adoption of
        a masked line creates it and hands its body to Drain, so Drain sees kinds in the order
        they are adopted."""
        kind = self._by_masked.get(spec[0])
        if kind is None:
            kind = self._by_masked[spec[0]] = LineKind(*spec)
            if self.mine:
                self._handles.append((kind, self.miner.add(kind.body)))
        return kind

    @property
    def masked_kinds(self) -> dict[str, LineKind]:
        """Every kind by its masked line (live: grows as lines are fed; do not modify)."""
        return self._by_masked

    def kind_of(self, masked_line: str) -> LineKind:
        """The kind of a masked line this parser already has (``KeyError`` otherwise)."""
        return self._by_masked[masked_line]

    def _new_kind(self, masked_line: str, raw: str, key: str) -> LineKind:
        pin = self._pinned.get(masked_line) if self._pinned is not None else None
        if pin is not None:
            kind = LineKind(*kind_spec(pin))
        else:
            header = parse_header(raw)
            start, level = header.body_start, header.level
            if "%|" in raw and not is_flagged(level):
                start, level = _glued_record(raw) or (start, level)
            # key is raw with digits normalised, same length: the body offset applies to it.
            # ``mask`` of a key is ``mask_folded(fold(key))``: the folded keys' cache serves
            # (and, in a worker process, shares) the body's mask too.
            body = self._masked([key[start:]])[0].strip()
            kind = LineKind(
                key=masked_line,
                level=level,
                emitter=header.emitter,
                has_timestamp=header.timestamp is not None,
                rank_prefix=rank_prefix(raw)[1] > 0,
                body=body,
            )
        if self.mine:
            self._handles.append((kind, self.miner.add(kind.body)))
        return kind


def _glued_record(raw: str) -> tuple[int, str] | None:
    """Where the body of a record printed after a bar's frame begins in ``raw``, and its level,
    when that record is a warning or an error (None otherwise).

    A line whose own reading flags nothing but which holds such a record after a frame
    (``terminal.glued_at``) is that writer's record — its level, its words, its role — with the
    frame before it as printed: a watchdog's timeout glued to a dataset's "Running tokenizer"
    bar is an error, not the bar's progress. A line of lower level after a frame (a Trainer's
    metrics) leaves the line the bar's."""
    at = glued_at(raw)
    if not at:
        return None
    header = parse_header(raw[at:])
    level = header.level
    if level is None or not is_flagged(level):
        return None
    return at + header.body_start, level


def parse_file(
    path: Path,
    masker: Masker | None = None,
    known: Iterable[Template] = (),
    limits: ReadLimits | None = None,
) -> Iterator[ParsedLine]:
    """Parse one log file (plain or ``.gz``) into one ``ParsedLine`` per line, 1-based.

    Two passes over the file keep memory flat: the first feeds every line and resolves the final
    templates, the second re-reads and emits. Lines without a year (glog, syslog) take the year of
    the last full timestamp before them, else the file's modification year. A truncated ``.gz``
    yields the readable lines and then raises ``IngestError`` naming the file; so does a file
    read only up to ``limits`` (``FileCutError``; a line without end is cut, not an error).
    """
    is_gzip(path)  # an unreadable file fails here, before anything is yielded
    parser = LineParser(masker, known)
    damage: IngestError | None = None
    try:
        for lines in _batched(read_lines(path, limits=limits)):
            parser.feed(lines)
    except IngestError as exc:
        damage = exc
    parser.finish()
    try:
        year = time.gmtime(path.stat().st_mtime).tm_year
    except OSError:
        year = time.gmtime().tm_year
    number = 0
    try:
        for lines in _batched(read_lines(path, limits=limits)):
            kinds = parser.feed(lines)
            for raw, kind in zip(lines, kinds, strict=True):
                number += 1
                timestamp: float | None = None
                rank: int | None = None
                if kind.has_timestamp or kind.rank_prefix:
                    header = parse_header(raw, year)
                    timestamp, rank = header.timestamp, header.rank
                    if timestamp is not None:
                        year = time.gmtime(timestamp).tm_year
                template = kind.template
                if template is None:  # fed only in this pass: the file changed under us
                    parser.finish()
                    template = kind.template
                assert template is not None
                yield ParsedLine(number, template.id, template.text, kind.level, timestamp, rank)
    except IngestError:
        if damage is None:
            raise
    if damage is not None:
        raise damage


def _batched(chunks: Iterable[list[str]]) -> Iterator[list[str]]:
    """Re-cut reader chunks so that ``feed`` sees batches of a bounded number of lines."""
    for chunk in chunks:
        for start in range(0, len(chunk), _FEED_LINES):
            yield chunk[start : start + _FEED_LINES]
