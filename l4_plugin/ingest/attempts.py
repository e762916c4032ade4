"""Which attempt of a job a file or a line belongs to.

A job that restarts leaves its attempts side by side, and they must not be read as one run (a
resumed attempt prints iterations its predecessor printed already, and the last attempt may fail
only because of the first). What says which attempt something is:

- a folder ``attempt_<k>`` in a file's path (torchrun ``--log-dir``: ``<dir>/<run id>/attempt_<k>/
  <local rank>/stdout.log``);
- a container's previous run kept beside the current one (``kubectl logs --previous`` saved as
  ``<pod>.previous.log``, ``<pod>-previous.log``…): the previous run is attempt 0, the current 1;
- inside one stream (the launcher agent's own log, a Slurm job's output appended across
  requeues): torchrun's rendezvous result (``restart_count=K``: what follows is attempt K), its
  restart banner (``Worker group FAILED. 2/3 attempts left; will restart worker group``: what
  follows is the next attempt), a printed ``SLURM_RESTART_COUNT=K``;
- else the time of a line against when each attempt started on its node (the first stamped line
  of its ``attempt_<k>`` files).

Paths, lines and times in, attempt numbers out (``None``: nothing says; a job that never
restarted); ``assign`` reads the first lines of the attempts' files for when each began. Ingest
keeps a node's lines of one attempt apart from its others: the *unit* it rolls up, times and
writes is (node, attempt) (``unit``), and a file that holds several attempts is read as one
stream per attempt (``attempt_blocks``). Only the paths of a job can start the attempts (a
restart announced only inside one stream, with no attempt folder, is not split: a follow-up).
"""

from __future__ import annotations

import bisect
import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from l4_plugin.errors import IngestError
from l4_plugin.ingest.header import parse_time
from l4_plugin.ingest.logfile import LogFile, Split
from l4_plugin.ingest.reader import Block, read_blocks
from l4_plugin.limits import ReadLimits

_FOLDER = re.compile(r"^attempt[-_]?(\d+)$", re.IGNORECASE)
_PREVIOUS = re.compile(r"(?:^|[-_.])previous(?=[-_.]|$)", re.IGNORECASE)
#: torchrun's rendezvous result block (``_rendezvous``: ``Rendezvous complete for workers.
#: Result:`` then ``  restart_count=K``): the attempt that starts now.
_RESTART_COUNT = re.compile(r"(?:^|\s)restart_count=(\d+)\b")
#: torchrun's restart (``SimpleElasticAgent._invoke_run``) and forks of it (dlrover's
#: ``Worker group FAILED, is failure node: False,2/3 attempts left; will restart worker group.``).
_RESTART = re.compile(r"Worker group \w+\b.*?\d+/\d+ attempts left; will restart worker group")
#: A job script printing its Slurm environment after a requeue.
_SLURM_RESTART = re.compile(r"\bSLURM_RESTART_COUNT=(\d+)\b")


def folder_attempt(relative: str) -> int | None:
    """The attempt an ``attempt_<k>`` folder of ``relative`` names (the one nearest the file)."""
    found = None
    for part in relative.split("/")[:-1]:
        m = _FOLDER.match(part)
        if m:
            found = int(m.group(1))
    return found


def previous_attempts(relatives: Iterable[str]) -> dict[str, int]:
    """Files that are a container's previous run (0) and the current run beside it (1)."""
    names = set(relatives)
    out: dict[str, int] = {}
    for rel in sorted(names):
        folder, _, name = rel.rpartition("/")
        if not _PREVIOUS.search(name):
            continue
        current = _PREVIOUS.sub("", name, count=1)
        current_rel = f"{folder}/{current}" if folder else current
        out[rel] = 0
        if current_rel in names:
            out[current_rel] = 1
    return out


def path_attempts(relatives: Iterable[str]) -> dict[str, int]:
    """Every file whose path says its attempt (an attempt folder wins over a previous run)."""
    rels = list(relatives)
    out = previous_attempts(rels)
    for rel in rels:
        k = folder_attempt(rel)
        if k is not None:
            out[rel] = k
    return out


def marked_attempt(line: str, current: int) -> int | None:
    """The attempt the lines after ``line`` belong to, when ``line`` says so (None: it does
    not); ``current`` is the attempt of the lines before it."""
    if "restart" not in line.lower():
        return None
    m = _RESTART_COUNT.search(line) or _SLURM_RESTART.search(line)
    if m:
        return int(m.group(1))
    if _RESTART.search(line):
        return current + 1
    return None


@dataclass
class AttemptClock:
    """When each attempt started on each node: a line's time says its attempt.

    ``starts[node]`` is a sorted list of (start time, attempt); a time before the first start
    is the first attempt's (start-up lines printed before the workers' first line)."""

    starts: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    @classmethod
    def from_firsts(cls, firsts: Mapping[tuple[str, int], float]) -> AttemptClock:
        """From the first stamped line of each (node, attempt)'s files."""
        starts: dict[str, list[tuple[float, int]]] = {}
        for (node, attempt), ts in firsts.items():
            starts.setdefault(node, []).append((ts, attempt))
        for node, spans in starts.items():
            # An attempt starts after the one before it: an early first line (a clock step)
            # does not put it before its predecessor.
            kept: list[tuple[float, int]] = []
            for ts, attempt in sorted(spans, key=lambda s: s[1]):
                kept.append((max(ts, kept[-1][0]) if kept else ts, attempt))
            starts[node] = kept
        return cls(starts)

    def attempt(self, node: str, ts: float | None) -> int | None:
        """The attempt a line of ``node`` at ``ts`` belongs to (None: the node has none)."""
        spans = self.starts.get(node)
        if not spans:
            return None
        if ts is None:
            return spans[0][1]
        i = bisect.bisect_right(spans, (ts, float("inf"))) - 1
        return spans[max(i, 0)][1]

    @property
    def attempts(self) -> list[int]:
        """Every attempt any node started."""
        return sorted({a for spans in self.starts.values() for _, a in spans})


#: Between a node and its attempt in the key of ingest's unit (a node's lines in one attempt):
#: no host name, path or label holds it.
_UNIT = "\x1f"


def unit(node: str, attempt: int | None) -> str:
    """The key ingest rolls a node's lines of one attempt up under (the node itself when the
    job never restarted): its rollup, timeline and documents are that unit's."""
    return node if attempt is None else f"{node}{_UNIT}{attempt}"


def split_unit(key: str) -> tuple[str, int | None]:
    """(node, attempt) of a unit key (``unit``'s inverse)."""
    node, sep, attempt = key.rpartition(_UNIT)
    if not sep or not attempt.isdigit():
        return key, None
    return node, int(attempt)


#: A worker's line as a launcher copies it into its own log (torchrun ``--tee``: role and
#: local rank, ``[default3]:``).
_WORKER_COPY = re.compile(r"\[[A-Za-z_]+\d+\]:")


def attempt_blocks(blocks: Iterable[Block], attempt: int, split: Split) -> Iterator[Block]:
    """The lines of one attempt in a stream that holds several (a launcher agent's log, a
    node's kernel log): by the stream's own markers (``marked_attempt``), else by each stamped
    line's time against ``split.starts`` (when each attempt began on the node); an unstamped
    line goes with the line before it. Byte offsets stay the file's.

    A worker's line the launcher copied (``[default0]:…``, torchrun ``--tee``) is left out: the
    node's attempt folders hold each worker's own output, and the copies of its standard output
    come in whole at the end, after the next attempt's lines (Python buffers a pipe), where no
    time says which attempt printed them."""
    starts, year = split.starts, split.year
    clock = AttemptClock({"": sorted(starts)})
    current = starts[0][1] if starts else 0
    marked = False  # a marker decides until the clock passes the next attempt's start
    for block in blocks:
        lines: list[str] = []
        offsets: list[int | None] = []
        for i, line in enumerate(block.lines):
            if _WORKER_COPY.match(line):
                continue
            ts = parse_time(line, year)
            if ts is not None:
                by_time = clock.attempt("", ts)
                if by_time is not None and (not marked or by_time > current):
                    current, marked = by_time, False
            if current == attempt:
                lines.append(line)
                offsets.append(block.offset(i))
            after = marked_attempt(line, current)
            if after is not None:
                current, marked = after, True
        if lines:
            yield Block(lines, offsets=offsets)


#: Lines read from the start of an attempt's file for its first stamped line.
HEAD_LINES = 200


def assign(files: list[LogFile], limits: ReadLimits | None = None) -> list[LogFile]:
    """The job's files with their attempts (``LogFile.attempt``), for a job whose paths name
    two attempts or more; else as they are. A file of a node with attempts whose path names
    none (the launcher agent's log, the node's kernel log) becomes one stream per attempt of
    its node (``split``); a file of a node without any (the job's own files), and a kernel log
    whose first lines state no wall-clock time (dmesg's seconds since boot), stays the whole
    job's."""
    by_path = path_attempts(f.relative for f in files)
    if len(set(by_path.values())) < 2:
        return files
    year = _year(f for f in files if f.relative in by_path)
    firsts: dict[tuple[str, int], float] = {}
    for f in files:
        k = by_path.get(f.relative)
        if k is None:
            continue
        ts = _first_time(f, year, limits)
        key = (f.node, k)
        firsts.setdefault(key, math.inf)
        if ts is not None:
            firsts[key] = min(firsts[key], ts)
    of_node: dict[str, list[int]] = {}
    for node, k in sorted(firsts):
        of_node.setdefault(node, []).append(k)
    clock = AttemptClock.from_firsts({key: ts for key, ts in firsts.items() if ts < math.inf})
    out: list[LogFile] = []
    for f in files:
        k = by_path.get(f.relative)
        mine = of_node.get(f.node, [])
        if k is not None or len(mine) <= 1:
            out.append(replace(f, attempt=k if k is not None else (mine[0] if mine else None)))
            continue
        if f.kind == "system" and _first_time(f, year, limits) is None:
            # A kernel log that states no wall-clock time (dmesg's seconds since boot): no
            # time says which attempt printed a line, so it is every attempt's.
            out.append(f)
            continue
        split = Split(tuple(clock.starts.get(f.node, ())), year)
        lines = None if f.lines is None else f.lines // len(mine)
        out.extend(replace(f, attempt=a, split=split, lines=lines) for a in mine)
    return out


def _first_time(f: LogFile, year: int, limits: ReadLimits | None) -> float | None:
    """The time of the first stamped line among the first ``HEAD_LINES`` of a file."""
    try:
        for n, line in enumerate(_lines(f, limits)):
            ts = parse_time(line, year)
            if ts is not None or n >= HEAD_LINES:
                return ts
    except (OSError, IngestError):
        return None
    return None


def _lines(f: LogFile, limits: ReadLimits | None) -> Iterator[str]:
    for block in read_blocks(f.path, limits=limits):
        yield from block.lines


def _year(files: Iterable[LogFile]) -> int:
    """The year of the first stamped line that states one among the attempts' files (a line
    without a year, a glog ``W1127 15:53:22``, takes it); else this year."""
    for f in files:
        try:
            for n, line in enumerate(_lines(f, None)):
                a, b = parse_time(line, 1999), parse_time(line, 2001)
                if a is not None and a == b:
                    return time.gmtime(a).tm_year
                if a is not None or n >= HEAD_LINES:
                    break
        except (OSError, IngestError):
            continue
    return time.gmtime().tm_year
