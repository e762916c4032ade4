"""Index names: the only place that knows what L4's indices are called.

ARCHITECTURE.md, *Documents*, says what each holds.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The index kinds; each has a template file ``ingest/index_templates/<kind>.json``.
INDEX_KINDS: tuple[str, ...] = ("events", "lines", "jobs", "templates", "annotations")


@dataclass(frozen=True, slots=True)
class IndexNames:
    """Full index names for one prefix (default ``l4-``)."""

    prefix: str

    @property
    def events(self) -> str:
        return f"{self.prefix}events"

    @property
    def lines(self) -> str:
        return f"{self.prefix}lines"

    @property
    def jobs(self) -> str:
        return f"{self.prefix}jobs"

    @property
    def templates(self) -> str:
        return f"{self.prefix}templates"

    @property
    def annotations(self) -> str:
        return f"{self.prefix}annotations"

    def of(self, kind: str) -> str:
        """The full name of an index kind (one of ``INDEX_KINDS``)."""
        if kind not in INDEX_KINDS:
            raise ValueError(f"unknown index kind {kind!r}; expected one of {INDEX_KINDS}")
        return f"{self.prefix}{kind}"

    def all(self) -> dict[str, str]:
        """Every kind mapped to its full index name."""
        return {kind: self.of(kind) for kind in INDEX_KINDS}
