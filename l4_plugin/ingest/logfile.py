"""One log file of a job, as discovery found it (``jobdir.scan``) and the readers open it
(``sources``, the scan's worker processes): below both, so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True, slots=True)
class LogFile:
    """One log file of a job: its node, rank (None for system logs) and kind.

    ``host`` is set when the file interleaves the lines of several nodes (one launcher's stdout:
    :mod:`l4_plugin.ingest.hosts`): this stream is that host's lines only, and ``node`` is it.
    """

    path: Path
    relative: str
    node: str
    rank: int | None
    kind: Literal["rank", "system"]
    host: str | None = None
    #: Its lines, estimated at discovery from its first bytes (``jobdir.estimate_lines``): what
    #: the scan's scheduling weighs a file by. None: not known.
    lines: int | None = None
