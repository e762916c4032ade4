"""How the scan cuts a job's files into batches of whole nodes for its lanes."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from l4_plugin.ingest import workers
from l4_plugin.ingest.sources import LogStream


def _streams(nodes: int, files: int) -> list[LogStream]:
    return [
        LogStream(f"n{n:03d}", r, f"n{n:03d}/rank{r}.log", lambda: iter(()), Path(f"/j/{n}/{r}"))
        for n in range(nodes)
        for r in range(files)
    ]


def test_batches_keep_order_and_nodes_and_shrink_towards_the_end() -> None:
    streams = _streams(64, 2)
    sizes = [1 << 20] * len(streams)  # 128 MB in 1 MB files, 21,000 lines a node
    batches = workers._batches(streams, sizes, 2)
    assert [i for b in batches for i in b] == list(range(len(streams)))
    # every batch ends at a node's last file: its lane keeps the node's rollup
    assert all(
        streams[b[-1]].node != streams[later[0]].node for b, later in itertools.pairwise(batches)
    )
    mb = [sum(sizes[i] for i in b) >> 20 for b in batches]
    assert mb[0] == 6  # three nodes: a fourth would pass BATCH_LINES
    assert mb[-1] == mb[-2] == 2  # the last ones a node each
    assert mb == sorted(mb, reverse=True)
    assert len(batches) < 64  # not one batch per node


def test_a_small_job_is_cut_into_small_batches() -> None:
    streams = _streams(8, 2)
    sizes = [300 << 10] * len(streams)  # 4.7 MB: a share per worker, not one 8 MB batch
    batches = workers._batches(streams, sizes, 2)
    assert len(batches) >= 4
    assert [i for b in batches for i in b] == list(range(len(streams)))


def test_a_node_larger_than_a_batch_is_one_batch() -> None:
    streams = _streams(3, 40)  # 40 files of 1 MB a node: 10,000 lines each
    batches = workers._batches(streams, [1 << 20] * len(streams), 2)
    assert [len(b) for b in batches] == [40, 40, 40]


def test_batches_are_weighed_by_lines_not_bytes() -> None:
    # A line costs the scan about the same whatever its length: a job of 30-byte lines is cut
    # into batches of a quarter of the bytes of a job of 120-byte lines (bytes alone would cut
    # them alike, and a batch of short lines took six times as long as the others).
    def job(line_bytes: int) -> list[list[int]]:
        streams = [
            LogStream(f"n{n:03d}", 0, f"n{n:03d}/r.log", lambda: iter(()), Path(f"/j/{n}"))
            for n in range(256)
        ]
        streams = [dataclasses.replace(s, lines=(1 << 20) // line_bytes) for s in streams]
        batches = workers._batches(streams, [1 << 20] * len(streams), 2)
        assert [i for b in batches for i in b] == list(range(len(streams)))
        return batches

    short, long = job(30), job(120)
    assert len(short[0]) == 2 and len(long[0]) == 8  # 8 MB
    assert len(short) > 3 * len(long)
    # unknown lines: the size at LINE_BYTES a line
    streams = _streams(64, 4)
    assert all(s.lines is None for s in streams)
    assert (
        workers._cost(streams[0], 1 << 20) == (1 << 20) // workers.LINE_BYTES + workers.FILE_LINES
    )
