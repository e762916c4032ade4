"""One file, several nodes: the host of every line of an interleaved stream."""

from __future__ import annotations

import pytest

from l4_plugin.ingest.hosts import line_label, plan


@pytest.mark.parametrize(
    ("line", "host", "rank", "rest"),
    [
        ("worker-3: [rank5]: RuntimeError: x", "worker-3", None, "[rank5]: RuntimeError: x"),
        ("gpu017.cluster: step 4 | loss 2.1", "gpu017.cluster", None, "step 4 | loss 2.1"),
        ("10.0.0.7: NCCL WARN x", "10.0.0.7", None, "NCCL WARN x"),
        ("node-a: 3 out: iteration 5", "node-a", 3, "iteration 5"),
        ("[pod/trainer-worker-1/pytorch] Epoch 1", "trainer-worker-1", None, "Epoch 1"),
        ("(RayTrainWorker pid=7, ip=10.1.2.3) loss 2.0", "10.1.2.3", None, "loss 2.0"),
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
