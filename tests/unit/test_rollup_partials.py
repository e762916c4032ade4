"""A partial rollup travels from a worker to the reducer as columns and comes back the same."""

from __future__ import annotations

import gc
import pickle
from pathlib import Path

from l4_plugin.ingest.jobdir import discover
from l4_plugin.ingest.rollup import FilePartial
from l4_plugin.ingest.scanner import Scanner, gc_paused
from l4_plugin.ingest.sources import file_streams
from tests.rollup_views import group_view, kept_view

_ZEROS = str.maketrans("123456789", "000000000")

_LINES = (
    "2026-01-01 00:00:00 INFO starting\n"
    "2026-01-01 00:00:01 ERROR disk 1 failed\n"
    "2026-01-01 00:00:02 ERROR disk 2 failed\n"
    "2026-01-01 00:00:02 WARNING slow step\n"
    "timeless error: Error: disk full\n"
    "2026-01-01 00:00:03 INFO step 4\n"
    "Traceback (most recent call last):\n"
    '  File "train.py", line 3, in <module>\n'
)


def _partial(tmp_path: Path) -> FilePartial:
    node = tmp_path / "job" / "node-a"
    node.mkdir(parents=True)
    (node / "rank0.log").write_text(_LINES)
    # The second file ends inside a traceback: its block is a forced kept line.
    (node / "rank1.log").write_text(_LINES.replace("disk 1", "disk 7"))
    streams = file_streams(discover(tmp_path / "job"))
    part = Scanner().scan(streams, [1, 1])
    assert part.forced and part.runs and any(len(g.kept) > 1 for g in part.groups.values())
    return part


def test_a_partial_survives_pickling_field_for_field(tmp_path: Path) -> None:
    part = _partial(tmp_path)
    back = pickle.loads(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))
    assert list(back.groups) == list(part.groups)
    assert [group_view(g) for g in back.groups.values()] == [
        group_view(g) for g in part.groups.values()
    ]
    for name in ("node", "kinds", "marks", "lines", "last_iteration", "problems", "specs"):
        assert getattr(back, name) == getattr(part, name), name
    for name in ("worker", "size", "cpu", "rss_kb", "files", "vanished"):
        assert getattr(back, name) == getattr(part, name), name
    assert [(r.before, r.before_pos, r.after, r.after_pos) for r in back.runs] == [
        (r.before, r.before_pos, r.after, r.after_pos) for r in part.runs
    ]
    assert [(key, kept_view(k)) for key, k in back.forced] == [
        (key, kept_view(k)) for key, k in part.forced
    ]
    # ``absorb`` tells a forced line already in its group by identity: it must be that object.
    for key, kept in back.forced:
        assert any(k is kept for k in back.groups[key].kept)


def test_a_forced_line_missing_from_its_group_travels_whole(tmp_path: Path) -> None:
    part = _partial(tmp_path)
    key, kept = part.forced[0]
    part.groups[key].kept.remove(kept)
    back = pickle.loads(pickle.dumps(part))
    assert kept_view(back.forced[0][1]) == kept_view(kept)
    assert not any(k is back.forced[0][1] for k in back.groups[key].kept)


def test_gc_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def test_gc_paused_leaves_the_block_objects_to_the_oldest_generation() -> None:
    with gc_paused():
        made = [[i] for i in range(1000)]
    assert gc.get_count()[0] < 100  # nothing left for a young collection to walk
    assert gc.is_tracked(made[0]) and not gc.get_freeze_count()  # moved, not frozen


def test_scan_with_or_without_the_lines_keys_is_the_same(tmp_path: Path) -> None:
    """``workers.chunks`` hands the scan each line's dedup key (``LineParser.feed_keyed``); a
    caller without them (4-item chunks) gets the same rollup: the keys only key caches."""
    from l4_plugin.ingest.parser import LineParser
    from l4_plugin.ingest.rollup import NodeRollup
    from l4_plugin.ingest.stages import StageRules

    lines = [
        "[rank3] [2026-01-01 00:00:00] iteration 10 | elapsed time per iteration (ms): 812.5",
        "[default1]:[rank3]: step 11 | loss 2.5",
        "[rank3] [2026-01-01 00:00:01] iteration 11 | elapsed time per iteration (ms): 799.0",
        "[rank12]:[W socket.cpp:464] [c10d] The server socket has failed to bind.",
        *_LINES.splitlines(),
    ]
    parser = LineParser()
    kinds, keys = parser.feed_keyed(lines)
    assert kinds == parser.feed(lines) and keys == [parser.masker.key(x) for x in lines]
    assert parser.feed_keyed(["a\nb", "c"])[1] is None  # a line holding "\n": no keys
    rules = StageRules.load()
    with_keys, without = NodeRollup("n", rules), NodeRollup("n", rules)
    with_keys.scan("r.log", 3, [(lines, kinds, None, 0, keys)])
    without.scan("r.log", 3, [(lines, kinds, None, 0)])
    assert {k: group_view(g) for k, g in with_keys.groups.items()} == {
        k: group_view(g) for k, g in without.groups.items()
    }
    assert with_keys.last_iteration == without.last_iteration == 11


def test_the_scans_inline_paths_read_what_the_functions_do() -> None:
    """The scan loop reads a ``[rankN]:`` line's rank and a marker's number and duration (in
    seconds or Megatron's milliseconds) from the spans cached by the line's key, without the
    calls: the same ranks and the same summed nanoseconds as ``rank_prefix`` and
    ``IterationRule.read`` give."""
    from l4_plugin.ingest.header import RANK_SHAPES, digit_shape, rank_prefix, rank_prefix_cached
    from l4_plugin.ingest.parser import LineParser
    from l4_plugin.ingest.rollup import NodeRollup
    from l4_plugin.ingest.stages import StageRules

    megatron = (
        "[rank{r}]: [2026-01-01 00:00:0{s}] iteration {i:>8}/   1000 | consumed samples: 512 | "
        "elapsed time per iteration (ms): {ms} | learning rate: 1.0E-04 |"
    )
    engine = "[rank{r}]:steps: {i} loss: 1.7467 iter time (s): {sec} samples/sec: 640.362"
    lines = [
        megatron.format(r=r, s=i % 10, i=i, ms=f"{812 + 7 * i + r}.{(3 * i) % 10}")
        for i in range(1, 9)
        for r in (1, 6)
    ]
    lines += [engine.format(r=r, i=i, sec=f"3.{i}{r}7") for i in (20, 21) for r in (2, 9)]
    for raw in lines:
        key = raw.translate(_ZEROS)
        RANK_SHAPES.pop(key, None)
        assert rank_prefix_cached(raw, key) == rank_prefix(raw)
        assert key in RANK_SHAPES  # stored: later lines of the key take the inline path
        assert rank_prefix_cached(raw, key) == rank_prefix(raw)
    parser = LineParser()
    kinds, keys = parser.feed_keyed(lines)
    assert keys is not None
    rules = StageRules.load()
    with_keys, without = NodeRollup("n", rules), NodeRollup("n", rules)
    for _ in range(2):  # the second time, every key's spans are known
        with_keys.scan("r.log", None, [(lines, kinds, None, 0, keys)])
    for _ in range(2):
        without.scan("r.log", None, [(lines, kinds, None, 0)])
    assert {k: group_view(g) for k, g in with_keys.groups.items()} == {
        k: group_view(g) for k, g in without.groups.items()
    }
    expected = 0
    for raw, kind in zip(lines, kinds, strict=True):
        marker = rules.role(kind.body).iteration
        assert marker is not None
        seconds = marker.read(raw, digit_shape(raw))[1]
        assert seconds is not None
        expected += 2 * round(seconds * 1e9)
    groups = with_keys.groups.values()
    assert sum(g.seconds_ns for g in groups) == expected
    assert sum(g.seconds_n for g in groups) == 2 * len(lines)
    assert set().union(*(g.ranks for g in with_keys.groups.values())) == {1, 2, 6, 9}
