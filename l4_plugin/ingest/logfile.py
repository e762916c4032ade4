"""One log file of a job, as discovery found it (``jobdir.scan``) and the readers open it
(``sources``, the scan's worker processes): below both, so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True, slots=True)
class Route:
    """How one host's lines are picked out of a file several hosts share
    (:func:`l4_plugin.ingest.hosts.for_host`).

    ``by="label"``: the file's own labels say whose each line is (``hosts.plan``);
    ``by="subject"``: the file is the job's own (a batch script's output, ``kubectl get
    events``) and a line belongs to the host it reports about (``identity.subject``), else to
    the job (``records.JOB_NODE``). ``names`` maps a label, name or address to the host it is
    (an address a rank announced, the ``ip=`` of a Ray label)."""

    by: Literal["label", "subject"] = "label"
    names: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Split:
    """How a file holding several attempts of a restarted job is told apart
    (:func:`l4_plugin.ingest.attempts.attempt_blocks`): when each attempt began on its node
    (``starts``: time, attempt), read with the year a line without one takes (``year``)."""

    starts: tuple[tuple[float, int], ...]
    year: int


@dataclass(frozen=True, slots=True)
class LogFile:
    """One log file of a job: its node, rank (None for system logs) and kind: a rank's output,
    a system log (kernel, syslog), a launcher agent's own log (torchrun's, Ray's raylet) or a
    file of the job's own (a batch script's output, a cluster's events: ``identity``).

    ``host`` is set when the file holds the lines of several nodes (one launcher's stdout,
    :mod:`l4_plugin.ingest.hosts`, or the job's own file, :mod:`l4_plugin.ingest.identity`):
    this stream is that host's lines only (picked out by ``route``; None: by the file's labels),
    and ``node`` is the host it is (a label's address mapped to its host name).
    """

    path: Path
    relative: str
    node: str
    rank: int | None
    kind: Literal["rank", "system", "agent", "job"]
    host: str | None = None
    #: Its lines, estimated at discovery from its first bytes (``jobdir.estimate_lines``): what
    #: the scan's scheduling weighs a file by. None: not known.
    lines: int | None = None
    route: Route | None = None
    #: The attempt of a restarted job this stream's lines belong to (None: the job never
    #: restarted); ``split``, for a file that holds several attempts: this stream is then the
    #: lines of ``attempt`` only (``attempts.attempt_blocks``).
    attempt: int | None = None
    split: Split | None = None
