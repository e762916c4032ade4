"""One file, several nodes: the host of every line of an interleaved stream."""

from __future__ import annotations

from pathlib import Path

from l4_plugin.diagnosis import diagnose_job
from l4_plugin.ingest.jobdir import discover
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.store import Store


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
