"""Reading a log file: its bytes, inflated when it is a gzip stream, as blocks of lines.

What reading a file may cost is bounded by its size and ``limits.ReadLimits``, never by what it
holds (SECURITY.md, *Bounded work*):

- a line longer than ``MAX_LINE_BYTES`` is cut: its first bytes are kept, the rest is read past
  at read speed without being held (``_LongLine``), and its block says so (``Block.cut``) for
  the one warning the scan gives;
- a gzip stream (every member of a multi-member file) is inflated through ``GuardedGzip``,
  which cuts the file when it inflates beyond what logs do (``FileCutError``); the lines
  before the cut are read.
"""

from __future__ import annotations

import gzip
import io
import itertools
import time
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Protocol

from l4_plugin.errors import FileCutError, IngestError
from l4_plugin.ingest import jsonlines
from l4_plugin.ingest.masking import digit_key
from l4_plugin.ingest.terminal import labelled, last_frame, without_ansi
from l4_plugin.limits import MAX_LINE_BYTES, RATIO_WINDOW, ReadLimits, human_size

#: Bytes asked of the file (or of the inflater) per read.
READ_BYTES = 4 << 20
#: The guard's ratio window slides by this much of inflated output.
_RATIO_STEP = RATIO_WINDOW // 4


class Block:
    """The lines of one read block and, on demand, the byte offset of each line.

    A file block knows its raw bytes and where they start in the file (in the decompressed
    stream for ``.gz``): the offset table is computed only when a line of the block is kept, so
    the parse hot path never pays for it. A block from an index carries the shipper's offsets
    (``log.offset``), ``None`` where there is none.
    """

    __slots__ = ("_data", "_end", "_start", "_table", "_text", "cut", "lines", "ref")

    def __init__(
        self,
        lines: list[str],
        data: bytes | None = None,
        start: int = 0,
        offsets: list[int | None] | None = None,
        text: str | None = None,
        ref: str | None = None,
    ) -> None:
        self.lines = lines
        #: A block of one host's lines out of a file of several (``hosts.host_blocks``): the
        #: latest line of another host with a time of its own before this block's first line,
        #: the time the file had reached there (None: none came since the block before).
        self.ref = ref
        self._data = data
        self._text = text  # the lines joined by newlines, when the reader has that at hand
        self._start = start
        self._table: Sequence[int | None] | None = offsets
        #: The length in bytes of the line a block of one line cut by the reader had (what a
        #: terminal would show of it: its last ``\r`` frame); 0: not cut.
        self.cut = 0
        self._end: int | None = None

    @classmethod
    def cut_line(cls, line: str, kept: bytes, start: int, cut: int, end: int) -> Block:
        """The block of one line the reader read past (``reader._LongLine``): ``kept`` of its
        bytes, which start at byte ``start`` of the file; ``cut`` its length as shown when that
        was cut (else 0); ``end`` the offset just past it (its newline excluded)."""
        block = cls([line], kept, start)
        block.cut, block._end = cut, end
        return block

    @property
    def end(self) -> int | None:
        """Byte offset just past this block's bytes in its file (None for an index block)."""
        if self._end is not None:
            return self._end
        return None if self._data is None else self._start + len(self._data)

    def digit_keys(self) -> list[str] | None:
        """``digit_key`` of each line (None: not known), from the block's text in one pass
        instead of joining the lines again (asked once: the text is let go)."""
        text, self._text = self._text, None
        return digit_key(text).split("\n") if text is not None else None

    def relined(self, lines: list[str], sources: list[int] | None = None) -> Block:
        """The block with its lines replaced by ``lines`` (a rendering of them, as JSON lines
        are rendered; ``sources[j]``: the line ``lines[j]`` renders, when one gave several):
        byte offsets and the block's end stay those of the file."""
        if sources is None:
            sources = list(range(len(self.lines)))
        table = [self.offset(i) for i in sources]
        block = Block(lines, self._data, self._start, offsets=table)
        block.cut, block._end = self.cut, self._end
        return block

    def offset(self, i: int) -> int | None:
        """Byte offset of ``lines[i]`` in its file (None when unknown)."""
        table = self._table
        if table is None:
            if self._data is None:
                return None
            # The decoded lines are the raw block split on b"\n" (decoding and the removal of
            # CR, NUL and ANSI escapes never add or remove a "\n"), so the i-th line starts
            # after the i-th newline.
            # (``(1).__add__`` over ``map(len, …)``: the whole table at C speed, no generator.)
            # An ASCII block without CR, NUL or ESC decoded to lines of its bytes' lengths:
            # those are measured without splitting the bytes again.
            data = self._data
            plain = (
                data.isascii() and b"\r" not in data and b"\0" not in data and b"\x1b" not in data
            )
            lengths = map(len, self.lines if plain else data.split(b"\n"))
            table = self._table = list(accumulate(map((1).__add__, lengths), initial=self._start))
        return table[i]


class _Source(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


class GuardedGzip:
    """A gzip stream read within the decompression guard of ``limits``: a file that inflates
    to more than ``max_inflated_size``, that takes more than ``max_read_seconds`` to read and
    inflate, or whose output over any ``RATIO_WINDOW`` bytes is more than ``max_inflate_ratio``
    times the compressed bytes it came from, is cut there (``FileCutError``, raised before the
    read that crossed the limit is handed on). Concatenated members are one stream: the guard
    counts them as a whole."""

    def __init__(self, fh: io.BufferedReader, name: str, limits: ReadLimits) -> None:
        self._fh = fh
        self._gz = gzip.GzipFile(fileobj=fh, mode="rb")
        self.name = name
        self.limits = limits
        self.inflated = 0
        self.seconds = 0.0
        self.peak_ratio = 0.0  # the highest ratio a window measured
        # (inflated, compressed) at least every _RATIO_STEP of output: the window's start.
        self._marks: deque[tuple[int, int]] = deque([(0, 0)])

    def read1(self, size: int = -1, /) -> bytes:
        """Up to ``size`` inflated bytes (one read of the compressed file at most)."""
        started = time.monotonic()
        data = self._gz.read1(size)
        self.seconds += time.monotonic() - started
        self.inflated += len(data)
        self._check()
        return data

    def _check(self) -> None:
        limits = self.limits
        if self.inflated > limits.max_inflated_size:
            raise FileCutError(
                self.name,
                f"inflates to more than {human_size(limits.max_inflated_size)}",
                "raise --max-inflated-size",
            )
        if self.seconds > limits.max_read_seconds:
            raise FileCutError(
                self.name,
                f"took more than {limits.max_read_seconds:g} s to read and inflate "
                f"({human_size(self.inflated)} inflated)",
                "raise --max-read-seconds",
            )
        # The compressed bytes read so far: the inflater's input is read in buffers of 8 KiB,
        # so a window counts its compressed side to within one buffer (``RATIO_WINDOW``).
        compressed = self._fh.tell()
        marks = self._marks
        if self.inflated - marks[-1][0] >= _RATIO_STEP:
            marks.append((self.inflated, compressed))
        while len(marks) > 1 and self.inflated - marks[1][0] >= RATIO_WINDOW:
            marks.popleft()
        inflated, before = marks[0]
        if self.inflated - inflated < RATIO_WINDOW:
            return
        ratio = (self.inflated - inflated) / max(1, compressed - before)
        self.peak_ratio = max(self.peak_ratio, ratio)
        if ratio > limits.max_inflate_ratio:
            raise FileCutError(
                self.name,
                f"inflates {ratio:,.0f} times its compressed size after "
                f"{human_size(self.inflated)} (logs inflate up to ~20 times; limit "
                f"{limits.max_inflate_ratio:g}): a compression bomb",
                "raise --max-inflate-ratio",
            )

    def close(self) -> None:
        self._gz.close()

    def __enter__(self) -> GuardedGzip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Reads:
    """The reads of one file, with bytes pushed back to be read again first, and damage turned
    into one ``IngestError`` naming the file."""

    def __init__(self, raw: _Source, path: Path, chunk_bytes: int) -> None:
        self.raw, self.path, self.chunk_bytes = raw, path, chunk_bytes
        self.pushed = b""

    def read(self) -> bytes:
        if self.pushed:
            data, self.pushed = self.pushed, b""
            return data
        try:
            # read1: at most one underlying read, so a truncated .gz loses only the block
            # that hit the damage, not a whole chunk of already-decompressed lines.
            return self.raw.read1(self.chunk_bytes)
        except (EOFError, OSError, zlib.error) as exc:
            raise IngestError(
                f"log file is truncated or corrupt — {self.path} — {exc}; "
                "the lines before the damage were parsed"
            ) from exc


class _LongLine:
    """A line longer than ``MAX_LINE_BYTES``, read past: its length, its first bytes and what a
    terminal shows of it (as ``terminal.last_frame`` of the whole line would: its last non-empty
    ``\r`` frame), each kept to ``MAX_LINE_BYTES``, NUL left out (``_block`` drops it too)."""

    def __init__(self) -> None:
        self.length = 0  # bytes of the line read so far, NUL included
        self.head, self.head_len = b"", 0  # its first bytes and its length, NUL left out
        self.crs = False  # a \r was seen: what is shown is a frame
        self.frame, self.frame_len = b"", 0  # the frame being read
        self.last, self.last_len = b"", 0  # the last non-empty frame that ended

    def add(self, chunk: bytes) -> None:
        """The next bytes of the line (no newline among them)."""
        self.length += len(chunk)
        if b"\x00" in chunk:
            chunk = chunk.replace(b"\x00", b"")
        if len(self.head) < MAX_LINE_BYTES:
            self.head += chunk[: MAX_LINE_BYTES - len(self.head)]
        self.head_len += len(chunk)
        r = chunk.rfind(b"\r")
        if r < 0:
            self._extend(chunk)
            return
        self.crs = True
        ended = chunk[:r].rstrip(b"\r")  # the frames that ended here, empty ones at the end out
        s = ended.rfind(b"\r")
        if s >= 0:  # the last non-empty one began in this chunk
            self.last, self.last_len = ended[s + 1 : s + 1 + MAX_LINE_BYTES], len(ended) - s - 1
        elif ended or self.frame_len:  # the frame being read ended here, non-empty
            self._extend(ended)
            self.last, self.last_len = self.frame, self.frame_len
        after = chunk[r + 1 :]
        self.frame, self.frame_len = after[:MAX_LINE_BYTES], len(after)

    def _extend(self, chunk: bytes) -> None:
        if len(self.frame) < MAX_LINE_BYTES:
            self.frame += chunk[: MAX_LINE_BYTES - len(self.frame)]
        self.frame_len += len(chunk)

    def block(self, start: int) -> Block:
        """The line as one block (``Block.cut`` set when what is shown was cut)."""
        if not self.crs:
            shown, length = self.head, self.head_len
        elif self.frame_len:
            shown, length = self.frame, self.frame_len
        else:
            shown, length = self.last, self.last_len
        line = shown.decode("utf-8", errors="replace")
        if self.crs:  # under the labels of its first frame, as ``last_frame`` keeps them
            line = labelled(self.head.split(b"\r", 1)[0].decode("utf-8", errors="replace"), line)
        # What is shown may fit whole: a long tqdm bar's last frame, text after a hole of NULs.
        cut = length if length > MAX_LINE_BYTES else 0
        return Block.cut_line(line, shown, start, cut, start + self.length)


def read_blocks(
    path: Path,
    chunk_bytes: int = READ_BYTES,
    limits: ReadLimits | None = None,
    name: str | None = None,
) -> Iterator[Block]:
    """Yield the lines of a plain or ``.gz`` file in blocks, cleaned for parsing; a file of JSON
    lines as text lines (:mod:`l4_plugin.ingest.jsonlines`).

    Bytes are decoded as UTF-8 with replacement characters, NUL is removed, lines are split on
    ``\\n`` only (so line numbers match ``wc -l``/editors); a line redrawn with ``\\r`` (a tqdm
    bar) is its last frame, what a terminal shows. A line longer than ``MAX_LINE_BYTES`` is cut
    (its own block, ``Block.cut``); a gzip stream is inflated within ``limits``' guard
    (``GuardedGzip``). A truncated or corrupt ``.gz`` yields every line that could be read and
    then raises ``IngestError`` naming the file; a file the guard cuts, ``FileCutError`` naming
    it as ``name`` (default: ``path``).
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed below, with the gzip reader over it)
    except OSError as exc:
        raise IngestError(f"cannot open log file — {path} — {exc}") from exc
    try:
        # One open per file: the gzip magic is read from the buffer the reads then start from.
        gz = fh.peek(2)[:2] == b"\x1f\x8b"
    except OSError as exc:
        fh.close()
        raise IngestError(f"cannot open log file — {path} — {exc}") from exc
    raw: GuardedGzip | io.BufferedReader = (
        GuardedGzip(fh, name or str(path), limits or ReadLimits()) if gz else fh
    )
    with fh, raw:
        yield from _decoded(_split(_Reads(raw, path, chunk_bytes)))


def _decoded(blocks: Iterator[Block]) -> Iterator[Block]:
    """``blocks`` as they are, or for a file of JSON lines (decided on its first lines, in as
    many blocks as they take: the same lines whatever the size of a read) each object rendered
    as the text line of its program (:mod:`l4_plugin.ingest.jsonlines`). A read that fails
    while the start is gathered fails after the lines read before it, decided on them."""
    head: list[Block] = []
    failed = _gather(blocks, head, jsonlines.SAMPLE_LINES * 10)
    if not head and failed is None:
        return
    sample = itertools.islice((line for b in head for line in b.lines), jsonlines.SAMPLE_LINES * 10)
    if not jsonlines.is_json_lines(list(sample)):
        yield from head
        if failed is not None:
            raise failed
        yield from blocks
        return
    # Whether the lines need their host's label is decided on the file's start (its first
    # ``HOST_SAMPLE`` lines, whatever the size of a read).
    failed = failed or _gather(blocks, head, jsonlines.HOST_SAMPLE)
    start = itertools.islice((line for b in head for line in b.lines), jsonlines.HOST_SAMPLE)
    labelled = len(jsonlines.host_of(start)) > 1
    for block in head:
        yield block.relined(*jsonlines.rendered(block.lines, labelled))
    if failed is not None:
        raise failed
    for block in blocks:
        yield block.relined(*jsonlines.rendered(block.lines, labelled))


def _gather(blocks: Iterator[Block], head: list[Block], lines: int) -> IngestError | None:
    """Append blocks of ``blocks`` to ``head`` until it holds ``lines`` lines or they end; the
    error a read raised meanwhile (None: none)."""
    seen = sum(len(b.lines) for b in head)
    try:
        while seen < lines:
            block = next(blocks, None)
            if block is None:
                break
            head.append(block)
            seen += len(block.lines)
    except IngestError as exc:
        return exc
    return None


def _split(reads: _Reads) -> Iterator[Block]:
    """The blocks of lines of ``reads``; the bytes of a line too long are read past."""
    tail = b""
    start = 0  # byte offset of tail[0] in the (decompressed) stream
    while True:
        try:
            data = reads.read()
        except IngestError:
            if tail:
                yield _block(tail, start)
            raise
        if not data:
            break
        data = tail + data if tail else data
        cut = data.rfind(b"\n")
        if cut >= 0:
            yield _block(data[:cut], start)
            start += cut + 1
            data = data[cut + 1 :]
        tail = data
        if len(tail) > MAX_LINE_BYTES:
            line = _LongLine()
            line.add(tail)
            tail = b""
            try:
                ended = _read_past(reads, line)
            except IngestError:
                yield line.block(start)
                raise
            yield line.block(start)
            if not ended:
                return
            start += line.length + 1
    if tail:
        yield _block(tail, start)


def _read_past(reads: _Reads, line: _LongLine) -> bool:
    """Read the rest of ``line`` (up to its newline, pushed back what follows it); False when
    the file ends first."""
    while True:
        data = reads.read()
        if not data:
            return False
        nl = data.find(b"\n")
        if nl < 0:
            line.add(data)
            continue
        line.add(data[:nl])
        reads.pushed = data[nl + 1 :]
        return True


def read_lines(
    path: Path, chunk_bytes: int = READ_BYTES, limits: ReadLimits | None = None
) -> Iterator[list[str]]:
    """The lines of a plain or ``.gz`` file in chunks (``read_blocks`` without the offsets)."""
    for block in read_blocks(path, chunk_bytes, limits):
        yield block.lines


def _block(data: bytes, start: int) -> Block:
    """The decoded lines of a block of ``data`` that starts at byte ``start`` of its file."""
    text = data.decode("utf-8", errors="replace")
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\x1b" in text:
        # Terminal colours (torchtitan's step line, Ray's dashboard URL, rich handlers) are
        # drawing, not text: a line reads as a terminal shows it.
        text = without_ansi(text)
    if "\r" not in text:
        return Block(text.split("\n"), data, start, text=text)
    # CRLF ends a line; a lone CR (tqdm redrawing its bar) returns the cursor: the line is what a
    # terminal shows, its last non-empty frame.
    lines = [last_frame(line) if "\r" in line else line for line in text.split("\n")]
    return Block(lines, data, start)


def is_gzip(path: Path) -> bool:
    """Whether the file starts with the gzip magic (``IngestError`` when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except OSError as exc:
        raise IngestError(f"cannot open log file — {path} — {exc}") from exc
