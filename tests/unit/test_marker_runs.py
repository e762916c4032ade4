"""Runs of iteration markers of one shape are added in bulk (``rollup._add_markers``): the same
rollup, line for line, as the scan loop's own path gives them one at a time."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest

from l4_plugin.ingest import rollup
from l4_plugin.ingest.header import PREFIX_RANKS, RANK_SHAPES
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.reader import Block
from l4_plugin.ingest.rollup import KindCache, NodeRollup
from l4_plugin.ingest.stages import StageRules
from tests.rollup_views import group_view, kept_view

_MEGATRON = (
    "{p}[2026-01-01 00:{m:02d}:{s:02d}] iteration {i:>8}/   9000 | consumed samples: {c:>9} | "
    "elapsed time per iteration (ms): {d}.{e} | learning rate: 1.0E-04 |"
)
# Line makers: (rank of the stream, iteration, random) -> a raw line.
_MAKERS: list[Callable[[int, int, random.Random], str]] = [
    # Megatron, stamped, with a "[rankN]:" prefix: the rank read from the line's digits
    lambda r, i, g: _MEGATRON.format(
        p=f"[rank{r}]: ", m=i // 60 % 60, s=i % 60, i=i, c=i * 512, d=800 + g.randrange(99), e=3
    ),
    # the same behind torchrun's launcher prefix: a cached prefix's rank
    lambda r, i, g: _MEGATRON.format(
        p=f"[default{r}]:[rank{r}]: ", m=1, s=i % 60, i=i, c=i, d=g.randrange(10, 99), e=5
    ),
    # no prefix (the file's rank), no time stamp, seconds
    lambda r, i, g: f"step {i} | loss 2.{g.randrange(10)}5 | step_time 1.{g.randrange(10)}9s",
    # an engine's count: numbers iterations only where no other rule's marker was seen
    lambda r, i, g: f"steps: {i} loss: 1.7467 iter time (s): 3.{g.randrange(10)}7 samples/sec: 6",
    # a rate (per_s): read by the rule, never in bulk
    lambda r, i, g: f" 45%|████      | {i}/9000 [00:10<00:20,  3.{g.randrange(10)}1it/s]",
    # a timeless marker behind a rank prefix, no duration
    lambda r, i, g: f"[rank{r}]:step {i} | loss 2.5",
]
_OTHERS = [
    "2026-01-01 00:00:0{d} INFO saving checkpoint at iteration {i}",
    "2026-01-01 00:00:0{d} INFO successfully saved checkpoint at iteration {i}",
    "2026-01-01 00:00:0{d} ERROR disk {d} failed",
    "[rank{r}]: [2026-01-01 00:00:0{d}] some plain line {d}",
    "[rank{r}]:timeless plain line",
    "Traceback (most recent call last):",
    '  File "train.py", line {d}, in <module>',
    "RuntimeError: boom {d}",
]


def _lines(seed: int, rank: int) -> list[str]:
    """A file's lines: runs of markers of several shapes (iterations that go on, stall, repeat
    for two interleaved streams, fall back), among plain lines, saves and tracebacks."""
    g = random.Random(seed)
    out: list[str] = []
    it = g.randrange(1, 50)
    for _ in range(40):
        if g.random() < 0.7:
            make = g.choice(_MAKERS)
            step = g.choice((1, 1, 1, 0))  # 0: the same iteration again (stalled, or a repeat)
            ranks = g.choice(((rank,), (rank,), (rank, rank + 1), (rank + 2, rank)))
            for _ in range(g.randrange(1, 14)):
                out.extend(make(r, it, g) for r in ranks)
                it += step
        else:
            line = g.choice(_OTHERS).format(d=g.randrange(10), i=it, r=g.choice((rank, rank + 2)))
            out.append(line)
        if g.random() < 0.1:  # back to earlier iterations (a resumed run): entered again
            it = max(1, it - g.randrange(1, 30))
    return out


def _scan(files: list[list[str]], chunking: random.Random) -> tuple[NodeRollup, Any]:
    # Every scan starts from cold caches: a launcher prefix whose rank is not known yet (a
    # run of two ranks' lines) is read by the loop, not in bulk.
    PREFIX_RANKS.clear()
    RANK_SHAPES.clear()
    rules = StageRules.load()
    parser = LineParser()
    cache = KindCache()
    node = NodeRollup("n", rules, cache=cache)
    for f, lines in enumerate(files):
        kinds, keys = parser.feed_keyed(lines)
        assert keys is not None
        data = "\n".join(lines).encode()
        block = Block(lines, data, 100)
        cuts = sorted({0, len(lines), *(chunking.randrange(len(lines)) for _ in range(3))})
        chunks = [
            (lines[a:b], kinds[a:b], block, a, keys[a:b]) for a, b in itertools.pairwise(cuts)
        ]
        node.scan(f"rank{f}.log", f if f % 3 else None, chunks, {3, 17, 40})
        if f == 1:  # later files of a kind that is known to be frequent keep no samples
            cache.frequent.update(k for k in kinds if k.body.startswith("step "))
    view = (
        [((k.key, s, it), group_view(g)) for (k, s, it), g in node.groups.items()],
        list(node.timeline.marks.items()),
        node.lines,
        node.last_iteration,
        node.counted,
        [(r.before, r.before_pos, r.after, r.after_pos, r.last_words) for r in node.runs],
        node.ends,
        [((k.key, s, it), kept_view(kept)) for (k, s, it), kept in node.forced],
    )
    return node, view


@pytest.mark.parametrize("seed", range(40))
def test_runs_of_markers_in_bulk_give_the_rollup_of_one_line_at_a_time(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [_lines(seed * 10 + f, f) for f in range(3)]
    calls = []
    add = rollup._add_markers

    def counted(*args: Any) -> Any:
        calls.append(len(args[2]))
        return add(*args)

    monkeypatch.setattr(rollup, "_add_markers", counted)
    _, bulk = _scan(files, random.Random(seed))
    assert calls  # some runs were added in bulk
    monkeypatch.setattr(rollup, "BULK_RUN", 1 << 30)
    calls.clear()
    _, one_by_one = _scan(files, random.Random(seed))
    assert not calls
    assert bulk == one_by_one


def test_runs_are_found_where_keys_repeat() -> None:
    keys = list("aaaabbcccccda")
    assert rollup._runs(keys, 4) == {0: 4, 6: 11}
    assert rollup._runs(keys, 2) == {0: 4, 4: 6, 6: 11}
    assert rollup._runs([], 2) == {}
    assert rollup._runs(["x"], 1) == {0: 1}
