"""Where ingest reads lines from: one ``LogStream`` per log file, whatever holds the file.

A stream is one file of one node (and rank) in file order. Files on disk (``file_streams``) and
lines a platform already shipped into an index (``l4_plugin.ingest.index_source``) are both turned
into streams, so they go through the same parsing, tagging and rollups (``pipeline.ingest_streams``)
and produce the same documents.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from l4_plugin.errors import FileCutError, IngestError
from l4_plugin.ingest.attempts import attempt_blocks, unit
from l4_plugin.ingest.hosts import for_host
from l4_plugin.ingest.logfile import LogFile, Route, Split
from l4_plugin.ingest.reader import Block, read_blocks
from l4_plugin.limits import ReadLimits, human_size


@dataclass(frozen=True, slots=True)
class LogStream:
    """One log file: its node, rank (None for system logs), display path and a reader.

    ``open()`` yields the file's lines in order, block by block; it may be called more than once
    (``--full`` reads twice) and raises ``IngestError`` after the readable lines of a damaged
    source, ``OSError`` when it cannot be read at all. ``file`` is the file on disk when the
    stream reads one (a worker process can then open it itself), None for an index source.
    """

    node: str
    rank: int | None
    path: str
    open: Callable[[], Iterator[Block]]
    file: Path | None = None
    host: str | None = None  # the host whose lines of ``file`` this stream is (logfile.LogFile)
    limits: ReadLimits | None = None  # within which ``open`` reads ``file`` (None: defaults)
    lines: int | None = None  # its lines, estimated (``LogFile.lines``); None: unknown
    route: Route | None = None  # how ``host``'s lines are picked out (``logfile.LogFile.route``)
    kind: str = "rank"  # a rank's output, a system log or an agent's (``logfile.LogFile.kind``)
    #: The attempt of a restarted job (``node`` is then the unit ``attempts.unit(host, attempt)``)
    #: and how its lines are picked out of a file of several attempts (``LogFile.split``).
    attempt: int | None = None
    split: Split | None = None


def file_streams(files: list[LogFile], limits: ReadLimits | None = None) -> list[LogStream]:
    """Streams over files found by ``jobdir.discover`` (paths relative to the job directory);
    each reads its file within ``limits`` (``bounded_blocks``; None: the defaults)."""
    return [
        LogStream(
            unit(f.node, f.attempt),
            f.rank,
            f.relative,
            lambda f=f: bounded_blocks(f, limits),  # type: ignore[misc]
            f.path,
            f.host,
            limits,
            f.lines,
            f.route,
            f.kind,
            f.attempt,
            f.split,
        )
        for f in files
    ]


def bounded_blocks(file: LogFile, limits: ReadLimits | None = None) -> Iterator[Block]:
    """``read_blocks`` of a file that is still a regular file when it is opened (not swapped for
    a FIFO or device since ``discover``), within ``limits``: cut (``FileCutError``) after
    ``max_file_size`` bytes (decompressed) and by the decompression guard."""
    try:
        mode = os.stat(file.path).st_mode
    except OSError as exc:
        raise IngestError(f"cannot open log file — {file.relative} — {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise IngestError(f"log file is no longer a regular file — {file.relative} — skipped")
    limits = limits or ReadLimits()
    limit = limits.max_file_size
    blocks = read_blocks(file.path, limits=limits, name=file.relative)
    if file.host is not None:
        blocks = for_host(blocks, file.host, file.route)
    if file.split is not None and file.attempt is not None:
        blocks = attempt_blocks(blocks, file.attempt, file.split)
    for block in blocks:
        if block.end is not None and block.end > limit:
            raise FileCutError(
                file.relative,
                f"more than {human_size(limit)} decompressed, over the per-file limit",
                "raise --max-file-size",
            )
        yield block


def files_generation(files: list[LogFile]) -> str:
    """A hash of the files' names, sizes and modification times (changes when a job grows)."""
    h = hashlib.sha1()
    for f in files:
        try:
            st = f.path.stat()
            h.update(f"{f.relative}\x1f{st.st_size}\x1f{st.st_mtime_ns}\n".encode())
        except OSError:
            h.update(f"{f.relative}\x1f?\n".encode())
    return h.hexdigest()[:16]
