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

Pure: paths, lines and times in, attempt numbers out (``None``: nothing says; a job that never
restarted).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

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
