"""One file, several nodes: the host of every line of an interleaved stream."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import pytest

from l4_plugin.ingest.header import rank_prefix
from l4_plugin.ingest.hosts import _NCCL_HOST, HostRouter, line_label, plan


@pytest.mark.parametrize(
    ("line", "host", "rank", "rest"),
    [
        ("worker-3: [rank5]: RuntimeError: x", "worker-3", None, "[rank5]: RuntimeError: x"),
        ("gpu017.cluster: step 4 | loss 2.1", "gpu017.cluster", None, "step 4 | loss 2.1"),
        ("10.0.0.7: NCCL WARN x", "10.0.0.7", None, "NCCL WARN x"),
        ("node-a: 3 out: iteration 5", "node-a", 3, "iteration 5"),
        ("[pod/trainer-worker-1/pytorch] Epoch 1", "trainer-worker-1", None, "Epoch 1"),
        ("(RayTrainWorker pid=7, ip=10.1.2.3) loss 2.0", "10.1.2.3", None, "loss 2.0"),
        # verl-project/verl#4799, pasted indented: Ray's prefix all the same
        ('  (WorkerDict pid=7, ip=10.1.2.3)   File "/x.py"', "10.1.2.3", None, '  File "/x.py"'),
        # not host labels: a level word, a sentence, a time, a traceback line
        ("INFO: task python:1 blocked", None, None, ""),
        ("Epoch 1: 100%|####| 10/10", None, None, ""),
        ("14:05:45 starting", None, None, ""),
        ("RuntimeError: CUDA error", None, None, ""),
        ("rank3: loss 2.1", None, None, ""),  # a training loop's counters, not hosts
        ("step12: loss 2.1", None, None, ""),
        ("Epoch-2: 45%|####| 45/100", None, None, ""),
        ("local_rank_1: ready", None, None, ""),
    ],
)
def test_line_labels(line: str, host: str | None, rank: int | None, rest: str) -> None:
    got, got_rank, end = line_label(line)
    assert (got, got_rank) == (host, rank)
    if host is not None:
        assert line[end:] == rest


def test_a_pdsh_stream_is_routed_per_host_and_continuations_follow_their_host() -> None:
    lines = [
        "worker-1: [2024-05-03 10:00:00,000] [INFO] step 1",
        "worker-2: [2024-05-03 10:00:00,000] [INFO] step 1",
        "worker-2: Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',  # pdsh labels every line; a paste may not
        "worker-2: RuntimeError: CUDA error: an illegal memory access was encountered",
        "worker-1: [2024-05-03 10:00:09,000] [INFO] step 2",
    ]
    router = plan(lines)
    assert router is not None and router.hosts == ("worker-1", "worker-2")
    routed = [router.route(line) for line in lines]
    assert [h for h, _ in routed] == [
        "worker-1",
        "worker-2",
        "worker-2",
        "worker-2",
        "worker-2",
        "worker-1",
    ]
    assert routed[2][1] == "Traceback (most recent call last):"
    assert routed[3][1] == lines[3]


def test_an_mpirun_stream_takes_each_ranks_host_from_its_nccl_prefix() -> None:
    lines = [
        "[1,0]<stdout>:gpu-a:101:201 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "[1,1]<stdout>:gpu-a:102:202 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "[1,2]<stdout>:gpu-b:103:203 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
        "[1,3]<stdout>:gpu-b:104:204 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
        "[1,3]<stderr>:RuntimeError: CUDA error: an illegal memory access",
        "[1,0]<stdout>:iteration 10 | loss 2.0",
    ]
    router = plan(lines)
    assert router is not None and router.by_rank and router.hosts == ("gpu-a", "gpu-b")
    assert [router.route(line)[0] for line in lines] == [
        "gpu-a", "gpu-a", "gpu-b", "gpu-b", "gpu-b", "gpu-a"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "lines",
    [
        ["worker-1: a", "worker-1: b", "worker-1: c"],  # one host: the node's own file
        ["node-1: a", "plain line", "another", "more", "node-2: b"],  # few lines labelled
        ["[1,0]<stdout>:x", "[1,1]<stdout>:y"],  # ranks, but no host announced
        [],
    ],
)
def test_not_an_interleaved_stream(lines: list[str]) -> None:
    assert plan(lines) is None


def _plan_line_by_line(lines: list[str], sample: int = 5000) -> HostRouter | None:
    """``plan`` as it was written before runs of one launcher prefix were counted at once: every
    line through ``line_label`` and ``rank_prefix``, the NCCL prefix read on every ranked line."""
    labelled = seen = ranked = by_ray = 0
    hosts: Counter[str] = Counter()
    rank_host: dict[int, str] = {}
    for i, line in enumerate(lines):
        if i >= sample or (seen == 64 and not labelled and not ranked):
            break
        if not line.strip():
            continue
        seen += 1
        host = line_label(line)[0]
        if host is not None:
            labelled += 1
            hosts[host] += 1
            by_ray += line.startswith("(")
            continue
        rank, after = rank_prefix(line)
        if rank is not None:
            ranked += 1
            m = _NCCL_HOST.match(line, after)
            if m is not None:
                rank_host.setdefault(rank, m.group(1))
    if seen == 0:
        return None
    real = tuple(sorted(h for h, n in hosts.items() if n >= 2))
    if len(real) >= 2 and labelled >= 0.8 * seen:
        return HostRouter(real, carry=by_ray < 0.8 * labelled)
    if len(real) >= 2 and by_ray >= 0.8 * labelled and labelled >= 0.3 * seen:
        return HostRouter(real, carry=False)
    by_rank = tuple(sorted(set(rank_host.values())))
    if len(by_rank) >= 2 and ranked >= 0.8 * seen:
        return HostRouter(by_rank, rank_host, by_rank=True)
    return None


_PREFIXES = [
    "[rank3]:",
    "[rank3]:[E1105 x] ",
    "[rank5]:",
    "[default3]:",
    "[default3]:[rank11]:",
    "[rank3]:[rank9]:",
    "[rank3] ",
    "[1,4]<stdout>:",
    "3: ",
    "worker-3: ",
    "worker-4: ",
    "10.0.0.5: 3 out: ",
    "[pod/w-1/c] ",
    "(RayTrainWorker pid=42, ip=10.0.0.5) ",
    "",
    "  ",
    "[rank: 2] ",
    "[rank3]:[",
]
_BODIES = [
    "node-a{h}:1{d}:2{d} [3] NCCL INFO x",
    "hello {d}",
    "node-b{h}:3:4 [0] NCCL WARN y",
    "",
    " ",
    "[2024-07-13 04:49:26] iteration {d}/ 2000",
    "host{h}:1:2 [{d}] NCCL ",
]


def _stream(rng: random.Random) -> list[str]:
    """Runs of one launcher prefix, now and then another line: what per-rank files, merged
    stdouts and interleaved streams look like, with NCCL prefixes naming a few hosts."""
    n = rng.choice([10, 70, 513, 1100, 1600, 5200])
    out: list[str] = []
    while len(out) < n:
        prefix = rng.choice(_PREFIXES)
        for _ in range(int(rng.expovariate(1 / rng.choice([3, 50, 400]))) + 1):
            body = rng.choice(_BODIES).format(h=rng.randint(1, 3), d=rng.randint(0, 99))
            out.append((prefix if rng.random() < 0.97 else rng.choice(_PREFIXES)) + body)
    return out[:n]


def test_plan_decides_as_line_by_line_on_random_streams() -> None:
    rng = random.Random(16)
    decided = 0
    for _ in range(300):
        lines = _stream(rng)
        sample = rng.choice([5000, 700, 64])
        want = _plan_line_by_line(lines, sample)
        got = plan(iter(lines), sample)
        assert (got, got and list(got.rank_host.items())) == (
            want,
            want and list(want.rank_host.items()),
        )
        decided += want is not None
    assert decided > 20  # the streams do hold interleaved ones


def test_a_ray_workers_timeless_lines_take_the_time_the_driver_log_had_reached() -> None:
    # Ray's driver forwards a worker's "SIGTERM received" as the job ends: the worker's own last
    # stamp is minutes old; rank 0's stamped step line just before it says when it came.
    from l4_plugin.ingest.hosts import host_blocks
    from l4_plugin.ingest.parser import LineParser
    from l4_plugin.ingest.reader import Block
    from l4_plugin.ingest.rollup import NodeRollup, time_ref
    from l4_plugin.ingest.stages import default_stage_rules

    a, b = "(RayTrainWorker pid=1, ip=10.0.0.1) ", "(RayTrainWorker pid=2, ip=10.0.0.2) "
    step = "[2025-02-12 13:20:59,110] [INFO] [logging.py:128:log_dist] [Rank 0] step=1920"
    lines = [
        a + "[2025-02-12 13:13:48,000] [INFO] ready",
        b + "[2025-02-12 13:14:00,000] [INFO] ready",
        a + "loading shards",
        b + step,
        a + "*** SIGTERM received at time=1739380881 on cpu 73 ***",
        "2025-02-12 13:21:25,245\tERROR tune_controller.py:1331 -- Trial task failed",
    ]
    router = plan(lines)
    assert router is not None and not router.carry
    blocks = list(host_blocks([Block(lines)], router, "10.0.0.1"))
    assert [(b.lines, b.ref) for b in blocks] == [
        (["[2025-02-12 13:13:48,000] [INFO] ready"], None),
        (["loading shards"], "[2025-02-12 13:14:00,000] [INFO] ready"),
        (["*** SIGTERM received at time=1739380881 on cpu 73 ***"], step),
    ]
    rollup = NodeRollup("n1", default_stage_rules())
    parser = LineParser()
    rollup.scan("driver.log", 0, [(b.lines, parser.feed(b.lines), b, 0) for b in blocks])
    [(key, group)] = [(k, g) for k, g in rollup.groups.items() if "SIGTERM" in g.message]
    assert time_ref(rollup, key[2], group) == step
    # a pdsh stream's lines are a host's own output, as printed: no such block
    pdsh = plan(["worker-1: x 1", "worker-2: y 2", "worker-1: z 3"] * 3)
    assert pdsh is not None and pdsh.carry


def _counted(lines: list[str], read: list[int]) -> Iterator[str]:
    for line in lines:
        read[0] += 1
        yield line


def _rank_file(rank: int, n: int) -> list[str]:
    nccl = f"[rank{rank}]:gpu-a:1:2 [3] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"
    return [nccl] + [f"[rank{rank}]:iteration {i} | loss 2.0" for i in range(n - 1)]


def test_a_file_named_for_its_one_ranks_prefix_is_decided_on_its_first_lines() -> None:
    # torchrun's per-rank files with "[rankN]:": the plan stops within a few chunks
    read = [0]
    assert plan(_counted(_rank_file(7, 1300), read), own_rank=7) is None
    assert read[0] <= 4 * 32
    read = [0]
    assert plan(_counted(_rank_file(7, 1300), read)) is None  # without the name: read through
    assert read[0] == 1300


def test_a_stream_named_for_one_rank_is_still_routed() -> None:
    # a file named for rank 0 whose lines are of several ranks and hosts: a stream, as before
    lines = (
        _rank_file(0, 40)
        + [
            "[rank1]:gpu-b:1:2 [3] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
            "[rank1]:RuntimeError: boom",
        ]
        * 20
    )
    router = plan(lines, own_rank=0)
    assert router is not None and router.by_rank and router.hosts == ("gpu-a", "gpu-b")
    # another rank's file name: not its own
    assert plan(_rank_file(7, 64) + lines, own_rank=3) is not None
