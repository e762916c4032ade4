"""The ranks' Flight Recorder traces and stacks compared: where they part, and who is apart."""

from __future__ import annotations

from dataclasses import replace

from l4_plugin.analysis import hang
from l4_plugin.traces import Collective, GroupTrace, JobDumps, RankStack, RankTrace

SHAPE = '[[8]]->[[8]] ["Float"]->["Float"]'


def rank(
    r: int,
    node: str,
    ops: list[str],
    *,
    start: int = 1,
    shape: str = SHAPE,
    world: int = 4,
    completed: int | None = None,
    attempt: int | None = 0,
) -> RankTrace:
    """A gloo-like trace: every entry ``scheduled``, the status counting what completed."""
    entries = tuple(
        Collective(start + i, op, "scheduled", shape if "scatter" not in op else f"{r}")
        for i, op in enumerate(ops)
    )
    last = start + len(ops) - 1
    group = GroupTrace(
        "0",
        "default_pg",
        tuple(range(world)),
        last,
        None,
        last if completed is None else completed,
        entries,
    )
    return RankTrace(r, node, attempt, f"{node}/fr_trace_rank_{r}", "2.10", (group,))


NODES = {0: "a", 1: "a", 2: "b", 3: "b"}
AR = "gloo:all_reduce"


def find(traces: list[RankTrace], nodes: tuple[str, ...] = ("a", "b")) -> hang.HangResult:
    result = hang.analyse(JobDumps(tuple(traces)), nodes)
    assert result is not None
    return result


def test_a_rank_in_another_collective_is_the_culprit() -> None:
    traces = [rank(r, NODES[r], [AR, AR, "gloo:barrier" if r == 3 else AR]) for r in range(4)]
    result = find(traces)
    (f,) = result.collectives
    assert (f.kind, f.seq, f.op) == ("mismatch", 3, AR)
    assert f.other_op == ((3, "gloo:barrier"),) and f.culprits == (3,)
    assert f.culprit_nodes == ("b",)
    assert result.evidence == {"b": (hang.MISMATCH_WEIGHT, ("collective-mismatch:3",))}
    assert result.category == "user/code"
    assert "collective #3 (gloo:all_reduce); in another op: 3 gloo:barrier" in f.describe()


def test_other_sizes_in_a_symmetric_collective_part_the_ranks_but_a_scatter_does_not() -> None:
    traces = [rank(r, NODES[r], [AR, AR], shape=SHAPE if r else "[[9]]") for r in range(4)]
    (f,) = find(traces).collectives
    assert f.kind == "mismatch" and f.other_shape == ((0, "[[9]]"),) and f.seq == 1
    # A scatter's root holds the data, the others none: no mismatch there.
    scatter = [rank(r, NODES[r], ["gloo:scatter", AR]) for r in range(4)]
    (g,) = find(scatter).collectives
    assert g.kind == "agree"


def test_a_rank_that_never_enqueued_the_collective_is_behind() -> None:
    traces = [rank(r, NODES[r], [AR] * (4 if r != 2 else 3)) for r in range(4)]
    (f,) = find(traces).collectives
    assert (f.kind, f.seq, f.behind, f.culprits) == ("behind", 4, (2,), (2,))
    assert {p.rank: p.seq for p in f.positions} == {0: 4, 1: 4, 2: 3, 3: 4}


def test_half_behind_names_no_one() -> None:
    # A network cut: half the ranks a collective further than the other half.
    traces = [rank(r, NODES[r], [AR] * (4 if r % 2 else 3)) for r in range(4)]
    result = find(traces)
    assert result.collectives[0].kind == "split" and result.evidence == {}


def test_a_rank_without_a_dump_is_named_before_ranks_that_lag() -> None:
    # rank 2 died (SIGKILL: no dump); rank 1 had not reached the last collective.
    traces = [rank(0, "a", [AR] * 4), rank(1, "a", [AR] * 3), rank(3, "b", [AR] * 4)]
    (f,) = find(traces).collectives
    assert f.kind == "missing" and f.missing == (2,) and f.behind == (1,)
    assert f.culprits == (2,) and f.culprit_nodes == ("b",)  # b holds one rank, 2 is beside 3


def test_ranks_without_dumps_on_the_one_node_without_any() -> None:
    traces = [rank(r, n, [AR] * 5, world=6) for r, n in ((0, "a"), (1, "a"), (4, "c"), (5, "c"))]
    result = find(traces, ("a", "b", "c"))
    (f,) = result.collectives
    assert f.kind == "missing" and f.missing == (2, 3) and f.culprit_nodes == ("b",)
    assert result.evidence == {"b": (hang.MISSING_WEIGHT, ("no-trace",))}


def test_the_logs_place_a_rank_without_a_dump() -> None:
    traces = [rank(r, NODES[r], [AR] * 4, world=8) for r in range(4)]
    traces += [rank(r, "c", [AR] * 4, world=8) for r in (4, 6, 7)]
    dumps = JobDumps(tuple(traces), rank_nodes=((5, "d"),))
    result = hang.analyse(dumps, ("a", "b", "c", "d"))
    assert result is not None and result.collectives[0].culprit_nodes == ("d",)


def test_ring_buffers_are_compared_where_every_rank_still_holds_entries() -> None:
    # rank 0's buffer starts later: the sequence numbers before 5 say nothing.
    traces = [rank(0, "a", [AR] * 6, start=5)] + [rank(r, NODES[r], [AR] * 10) for r in (1, 2, 3)]
    (f,) = find(traces).collectives
    assert f.kind == "agree" and f.seq == 10


def stack(r: int, node: str, *frames: str, attempt: int | None = 0) -> RankStack:
    return RankStack(r, node, attempt, f"{node}/rank{r}.txt", 100 + r, "MainThread", frames)


WAIT = "all_reduce (torch/distributed/distributed_c10d.py:3252)"
DATA = "_PollLikeSelector.select (selectors.py:415)"


def test_the_rank_whose_stack_stands_apart_is_odd() -> None:
    stacks = [stack(r, NODES[r], WAIT, "train (train.py:261)") for r in (0, 1, 2)]
    stacks.append(stack(3, "b", DATA, "_next_data (torch/utils/data/dataloader.py:1505)"))
    result = hang.analyse(JobDumps(stacks=tuple(stacks)), ("a", "b"))
    assert result is not None
    (s,) = result.stacks
    assert s.odd is not None and s.odd.ranks == (3,) and s.odd.nodes == ("b",)
    assert result.evidence["b"][1] == ("stack-apart:_PollLikeSelector.select",)
    assert result.category == "hardware/storage" and result.stage_frames[0] == DATA


def test_a_rank_waiting_in_a_collective_among_computing_ranks_is_no_culprit() -> None:
    busy = "train (train.py:256)"
    stacks = [stack(r, NODES[r], busy) for r in (0, 1, 2)] + [stack(3, "b", WAIT)]
    result = hang.analyse(JobDumps(stacks=tuple(stacks)), ("a", "b"))
    assert result is not None and result.stacks[0].odd is None and result.evidence == {}


def test_same_innermost_frame_other_caller_is_told_apart_by_the_whole_stack() -> None:
    stacks = [stack(r, NODES[r], WAIT, "evaluate (train.py:225)") for r in (0, 1, 2)]
    stacks.append(stack(3, "b", WAIT, "save_checkpoint (train.py:182)"))
    result = hang.analyse(JobDumps(stacks=tuple(stacks)), ("a", "b"))
    assert result is not None
    odd = result.stacks[0].odd
    assert odd is not None and odd.ranks == (3,)


def test_even_groups_name_no_one() -> None:
    stacks = [stack(r, NODES[r], WAIT if r % 2 else DATA) for r in range(4)]
    result = hang.analyse(JobDumps(stacks=tuple(stacks)), ("a", "b"))
    assert result is not None and result.stacks[0].odd is None


def test_a_stuck_computing_rank_on_gloo_is_its_machine() -> None:
    traces = [rank(r, NODES[r], [AR] * (4 if r != 1 else 3)) for r in range(4)]
    busy = "train (train.py:256)"
    stacks = [
        stack(r, NODES[r], "_engine_run_backward (torch/autograd/graph.py:979)") for r in (0, 2, 3)
    ]
    stacks.append(stack(1, "a", busy))
    result = hang.analyse(JobDumps(tuple(traces), tuple(stacks)), ("a", "b"))
    assert result is not None and result.category == "hardware/node"
    assert result.evidence["a"][1] == ("collective-behind:4", "stack-apart:train")


def test_attempts_are_compared_apart() -> None:
    first = [rank(r, NODES[r], [AR] * (4 if r != 2 else 3), attempt=0) for r in range(4)]
    second = [rank(r, NODES[r], [AR] * 2, attempt=1) for r in range(4)]
    result = find(first + second)
    assert [(f.attempt, f.kind) for f in result.collectives] == [(0, "behind"), (1, "agree")]


def test_no_dumps_no_result() -> None:
    assert hang.analyse(None) is None and hang.analyse(JobDumps()) is None


def test_a_status_beyond_the_entries_is_not_walked_to() -> None:
    traces = [rank(r, NODES[r], [AR] * 4) for r in range(4)]
    group = traces[0].groups[0]
    huge = replace(group, last_enqueued=10**12, last_completed=10**12)
    traces[0] = replace(traces[0], groups=(huge,))
    (f,) = find(traces).collectives
    assert f.kind == "agree" and f.seq == 10**12


def test_the_stuck_ranks_stage_is_its_innermost_frames() -> None:
    # py-spy prints innermost first: a rank stuck computing inside a save that a training step
    # called is checkpointing, not training (the stage rules read a stack outermost first).
    from l4_plugin.analysis.recipe import _stage_of_hang
    from l4_plugin.ingest.stages import default_stage_rules

    busy = ("pack (train.py:195)", "save_checkpoint (train.py:178)", "train_step (train.py:40)")
    stacks = [stack(r, NODES[r], WAIT, "train_step (train.py:40)") for r in (0, 1, 2)]
    stacks.append(stack(3, "b", *busy))
    result = hang.analyse(JobDumps(stacks=tuple(stacks)), ("a", "b"))
    assert result is not None and result.stage_frames == busy
    assert _stage_of_hang(result, default_stage_rules()) == "checkpointing"


def _timed_out(call: str, line: int = 3252) -> str:
    # a rank's traceback as torch prints it under torchrun (a real run of ours: one rank skipped
    # the all_reduce its peers waited in, and waited in the barrier after it)
    return "\n".join(
        [
            "[default1]:[rank3]: Traceback (most recent call last):",
            '[default1]:[rank3]:   File "/work/train.py", line 261, in train',
            "[default1]:[rank3]:     dist.all_reduce(t)",
            '[default1]:[rank3]:   File "/venv/lib/python3.11/site-packages/torch/distributed/'
            'c10d_logger.py", line 81, in wrapper',
            "[default1]:[rank3]:     return func(*args, **kwargs)",
            '[default1]:[rank3]:   File "/venv/lib/python3.11/site-packages/torch/distributed/'
            f'distributed_c10d.py", line {line}, in {call}',
            "[default1]:[rank3]:     work.wait()",
            "[default1]:[rank3]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/"
            "transport/tcp/unbound_buffer.cc:78] Timed out waiting 30000ms for recv operation to "
            "complete",
        ]
    )


def test_ranks_whose_collectives_timed_out_in_different_calls() -> None:
    from l4_plugin.analysis.hang import collectives_apart

    assert collectives_apart([_timed_out("all_reduce"), _timed_out("barrier", 5356)]) == (
        "all_reduce",
        "barrier",
    )
    # agreeing ranks, one record, a pipeline's point-to-point calls, records of no timeout
    assert collectives_apart([_timed_out("all_reduce"), _timed_out("all_reduce", 3260)]) == ()
    assert collectives_apart([_timed_out("barrier")]) == ()
    assert collectives_apart([_timed_out("all_reduce"), _timed_out("recv")]) == ()
    crashed = _timed_out("barrier").replace("Timed out waiting 30000ms", "Connection closed by")
    assert collectives_apart([_timed_out("all_reduce"), crashed]) == ()
