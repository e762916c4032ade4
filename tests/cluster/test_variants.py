"""The copies of a record that say something else than its exemplar (``JobData.variants``).

A torchrun agent reports each worker it saw exit with one template, "failed (exitcode: N)": the
worker it stopped (-15, a consequence) and, on the same node a few seconds later, the one that
was killed (-9, a cause). The analysis reads the template's words from the exemplar and from the
variants; a variant read only as each node's first copy misses the second report.
"""

from __future__ import annotations

from pathlib import Path

from l4_plugin.diagnosis import diagnose_job
from l4_plugin.diagnosis.queries import read_job, read_job_tables
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.store import Store

_AGENT = "torch/distributed/elastic/multiprocessing/api.py:1002]"


def _report(at: str, pid: int, code: int, local_rank: int) -> str:
    return (
        f"E1127 {at} {pid} {_AGENT} failed (exitcode: {code}) local_rank: {local_rank} "
        f"(pid: {pid + 29}) of binary: /usr/bin/python3\n"
    )


def _job(root: Path) -> Path:
    job = root / "job"
    a = job / "node-a" / "torchrun.log"
    b = job / "node-b" / "torchrun.log"
    a.parent.mkdir(parents=True)
    b.parent.mkdir(parents=True)
    a.write_text(
        "I1127 15:56:04.416000 3645 torch/distributed/run.py:874] starting\n"
        + _report("15:56:18.890000", 3645, -15, 0)
        + _report("15:56:20.100000", 3645, -15, 0)  # the same words again: no variant
        + _report("15:56:24.294000", 3645, -9, 1)
    )
    b.write_text(
        "I1127 15:56:04.420000 3646 torch/distributed/run.py:874] starting\n"
        + _report("15:56:19.001000", 3646, -15, 0)
    )
    return job


def test_a_nodes_later_copy_with_other_words_is_a_variant(store: Store, tmp_path: Path) -> None:
    job_id = ingest_job(store, _job(tmp_path), job_id="v").job.id
    data = read_job_tables(store, read_job(store, job_id))
    reports = [t for t, info in data.templates.items() if "failed (exitcode:" in info.text]
    assert len(reports) == 1, [data.templates[t].text for t in reports]
    tid = reports[0]
    assert "exitcode: -15" in data.templates[tid].message
    variants = data.variants.get(tid, ())
    assert [v for v in variants if "exitcode: -9" in v], variants
    # copies that differ only in times and process ids are not told apart
    assert not [v for v in variants if "exitcode: -15" in v], variants


def test_the_rank_in_another_collective_is_the_line_shown(store: Store, tmp_path: Path) -> None:
    # pytorch/pytorch#77562, pasted: ranks 1 and 5 time out in FSDP's all-gather, rank 0 in a
    # REDUCE at the same sequence number. The report shows rank 0's line.
    job = tmp_path / "job" / "node-0"
    job.mkdir(parents=True)
    lines = [
        (1, "_ALLGATHER_BASE", 1801750),
        (0, "REDUCE", 1801377),
        (5, "_ALLGATHER_BASE", 1801790),
    ]
    (job / "rank0.log").write_text(
        "".join(
            f"[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum=3742816, OpType={op}, Timeout(ms)=1800000) ran for {ms} "
            "milliseconds before timing out.\n"
            for r, op, ms in lines
        )
    )
    job_id = ingest_job(store, job.parent, job_id="d").job.id
    report = diagnose_job(store, job_id, rules=[]).report.to_json()
    watchdog = [e for e in report["events"] if "Watchdog caught" in e["sample"]]
    assert watchdog and "[Rank 0]" in watchdog[0]["sample"], report["events"]
