"""The ground truth of one simulated job: what failed, where, and which lines show it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Truth:
    """What the simulator injected; ``indicators`` is ``root_indicators + cascade_indicators``.

    Every indicator is a Python regular expression meant for ``re.search`` on one raw line (the
    line as written, prefixes included, without its newline).
    """

    job_id: str
    fault: str
    category: str
    faulty_nodes: tuple[str, ...]
    indicators: tuple[str, ...]
    root_indicators: tuple[str, ...]
    cascade_indicators: tuple[str, ...]
    stage: str | None
    iteration: int | None
    baseline_jobs: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        """The JSON-ready form written to ``truth.json`` (tuples become lists)."""
        return {key: list(v) if isinstance(v, tuple) else v for key, v in asdict(self).items()}

    def write(self, path: Path) -> None:
        """Write ``truth.json`` with sorted keys, so the bytes depend on the content only."""
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", "utf-8")
