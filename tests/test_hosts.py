"""One file, several nodes: the host of every line of an interleaved stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from l4_plugin.diagnosis import diagnose_job
from l4_plugin.ingest.hosts import line_label, plan
from l4_plugin.ingest.jobdir import discover
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.store import Store


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


def _pdsh_job(root: Path) -> Path:
    job = root / "pdsh"
    job.mkdir()
    lines = []
    for step in range(1, 30):
        for host in ("worker-1", "worker-2", "worker-3"):
            stamp = f"2024-05-03 10:{step // 60:02d}:{step % 60:02d},000"
            lines.append(f"{host}: [{stamp}] [INFO] [engine.py:1:step] step={step}, skipped=0")
    lines += [
        "worker-2: [2024-05-03 10:00:31,000] [ERROR] [engine.py:9:step] Traceback follows",
        "worker-2: Traceback (most recent call last):",
        'worker-2:   File "/x/train.py", line 3, in <module>',
        "worker-2: RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ]
    (job / "deepspeed-stdout.log").write_text("\n".join(lines) + "\n")
    return job


def test_one_stdout_of_three_nodes_becomes_three_nodes(store: Store, tmp_path: Path) -> None:
    job = _pdsh_job(tmp_path)
    files = discover(job)
    assert [(f.node, f.host) for f in files] == [
        ("worker-1", "worker-1"),
        ("worker-2", "worker-2"),
        ("worker-3", "worker-3"),
    ]
    ingest_job(store, job, job_id="pdsh", status="failed")
    report = diagnose_job(store, "pdsh", rules=[], write=False).report.to_json()
    assert sorted(n["node"] for n in report["nodes"]) == ["worker-1", "worker-2", "worker-3"]
    assert report["nodes"][0]["node"] == "worker-2"
    top = report["events"][0]
    assert "uncorrectable ECC" in top["sample"] and top["nodes"] == ["worker-2"]
    # the label is gone from what was parsed: the rank-0 step lines are progress, not events
    assert not top["sample"].startswith("worker-2:")


def test_mpirun_stdout_is_split_by_the_hosts_its_ranks_announce(
    store: Store, tmp_path: Path
) -> None:
    job = tmp_path / "mpi"
    job.mkdir()
    lines = []
    for rank, host in enumerate(["gpu-a", "gpu-a", "gpu-b", "gpu-b"]):
        lines.append(
            f"[1,{rank}]<stdout>:{host}:{100 + rank}:{200 + rank} [{rank % 2}] NCCL INFO "
            f"Bootstrap : Using eth0:10.0.0.{1 + rank // 2}<0>"
        )
    lines += [f"[1,{r}]<stdout>:[2024-05-03 10:00:0{r},000] [INFO] ready" for r in range(4)]
    lines.append("[1,3]<stderr>:RuntimeError: CUDA error: an illegal memory access was encountered")
    (job / "mpirun.out").write_text("\n".join(lines) + "\n")
    assert [f.node for f in discover(job)] == ["gpu-a", "gpu-b"]
    summary = ingest_job(store, job, job_id="mpi", status="failed")
    assert summary is not None
    report = diagnose_job(store, "mpi", rules=[], write=False).report.to_json()
    bad = next(e for e in report["events"] if "illegal memory access" in e["sample"])
    assert bad["nodes"] == ["gpu-b"]
