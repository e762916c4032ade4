"""The scan an ingest runs, for the benchmarks that time or count it (``bench_ingest.py``,
``bench_instructions.py``): one place, so neither benchmark imports the other."""

from __future__ import annotations

from typing import Any


def scan(streams: list[Any], parser: Any, workers: int, nodes: int) -> Any:
    """The scan an ingest runs (its rollups left where it leaves them), in the code counted:
    on lanes that keep them since issue 32, with the reducer gathering them before."""
    try:
        from l4_plugin.ingest.documents import rare_limit
        from l4_plugin.ingest.workers import ingest_lanes, scan_lanes
    except ImportError:  # a version before the lanes
        from l4_plugin.ingest.pipeline import rare_limit  # type: ignore[attr-defined,no-redef]
        from l4_plugin.ingest.workers import scan_streams

        return scan_streams(streams, parser, workers=workers, rare_limit=rare_limit(nodes))
    with ingest_lanes(streams, workers) as (lanes, token):
        return scan_lanes(lanes, token, streams, parser, rare_limit=rare_limit(nodes))
