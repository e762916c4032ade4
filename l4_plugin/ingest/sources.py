"""Where ingest reads lines from: one ``LogStream`` per log file, whatever holds the file.

A stream is one file of one node (and rank) in file order. Files on disk (``file_streams``) and
lines a platform already shipped into an index (``l4_plugin.ingest.index_source``) are both turned
into streams, so they go through the same parsing, tagging and rollups (``pipeline.ingest_streams``)
and produce the same documents.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from l4_plugin.ingest.jobdir import LogFile
from l4_plugin.ingest.parser import Block, read_blocks


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


def file_streams(files: list[LogFile]) -> list[LogStream]:
    """Streams over files found by ``jobdir.discover`` (paths relative to the job directory)."""
    return [
        LogStream(f.node, f.rank, f.relative, lambda p=f.path: read_blocks(p), f.path)  # type: ignore[misc]
        for f in files
    ]


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
