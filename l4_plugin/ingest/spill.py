"""Rollups a lane keeps on disk once its memory share is full (``owners``).

A lane holds every node it scanned until the job's context lets it build their documents. For
a job of thousands of nodes that is more than a process should hold (a node of 2,000 iterations
is ~1.6 MB of groups), so past ``owners.HELD_BYTES`` a lane writes each further node's rollup to
a temporary file of its own (its kinds by masked line, as ``FilePartial`` carries them between
processes) and reads it back when it builds that node. What is read back is the rollup that was
written: ``NodeRollup.absorb`` of a whole node's partial into an empty rollup gives its groups,
runs and counts unchanged (the gathering tests compare them).
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable
from typing import IO

from l4_plugin.errors import IngestError
from l4_plugin.ingest.parser import LineKind
from l4_plugin.ingest.rollup import FilePartial, KindCache, NodeRollup
from l4_plugin.ingest.stages import StageRules
from l4_plugin.ingest.timeline import Timeline


class Spill:
    """A temporary file of rollups, by node (removed when closed or when the process ends)."""

    def __init__(self) -> None:
        try:
            self.file: IO[bytes] = tempfile.TemporaryFile(prefix="l4-lane-")  # noqa: SIM115
        except OSError as exc:
            raise IngestError(
                f"cannot create a file for an ingest's rollups in {tempfile.gettempdir()}: "
                f"{exc.strerror} (set TMPDIR)"
            ) from exc
        #: Where each node's rollup is: (offset, length, the index of its kinds' parser).
        self.where: dict[str, tuple[int, int, int]] = {}
        self.bytes = 0

    def put(self, rollup: NodeRollup, parser: int) -> None:
        """Write a node's rollup (a node written again replaces the earlier one)."""
        data = pickle.dumps(rollup.partial(()), pickle.HIGHEST_PROTOCOL)
        self.file.seek(0, 2)
        at = self.file.tell()
        try:
            self.file.write(data)
        except OSError as exc:
            raise IngestError(f"cannot write an ingest's rollups to disk: {exc.strerror}") from exc
        self.where[rollup.node] = (at, len(data), parser)
        self.bytes += len(data)

    def partial(self, node: str) -> tuple[FilePartial, int]:
        """A node's rollup as written, and its parser's index."""
        at, length, parser = self.where[node]
        self.file.seek(at)
        part: FilePartial = pickle.loads(self.file.read(length))
        return part, parser

    def take(
        self,
        node: str,
        rules: StageRules,
        cache: KindCache,
        kind_of: Callable[[int], Callable[[str], LineKind]],
    ) -> NodeRollup:
        """A node's rollup read back (and forgotten here); ``kind_of(parser)`` maps the masked
        lines of that parser's kinds back to them."""
        part, parser = self.partial(node)
        del self.where[node]
        rollup = NodeRollup(node, rules, Timeline(), cache)
        rollup.absorb(part, kind_of(parser), Timeline())
        return rollup

    def close(self) -> None:
        self.file.close()
