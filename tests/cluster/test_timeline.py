"""The job timeline (issue 13): ranks that print no progress line get the job's stage and
iteration by time; peers name the culprit by address; silent means stopped, not loud."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from l4_plugin.diagnosis import diagnose_job
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.store import Store


def _write(root: Path, files: dict[str, list[str]]) -> Path:
    root.mkdir(parents=True)
    (root / "job.yaml").write_text(f"id: {root.name}\nstatus: failed\n", "utf-8")
    for rel, lines in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", "utf-8")
    return root


def _ts(second: int) -> str:
    return f"2024-05-01 10:{second // 60:02d}:{second % 60:02d}"


def _megatron_last_stage(iterations: int) -> list[str]:
    """What the last pipeline stage prints: a start-up line, then one line per iteration
    (10 s apart, starting at 10:01:00)."""
    lines = [f"[{_ts(0)},000] [INFO] > initializing torch distributed ..."]
    lines += [
        f" [{_ts(60 + 10 * i)}] iteration {i + 1:8d}/ 1000 | consumed samples: {i * 64} | "
        f"elapsed time per iteration (ms): 10000.0 | lm loss: 2.{i:03d}E+00 |"
        for i in range(iterations)
    ]
    return lines


def _quiet_rank(fail_at: int) -> list[str]:
    """A rank of an earlier pipeline stage: start-up lines, then nothing until the failure; its
    NCCL lines carry no timestamp of their own."""
    return [
        "I0501 10:00:01.000000 123 torch/distributed/run.py:793] starting workers",
        "n1:123:456 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "n1:123:456 [0] NCCL INFO comm 0x1 rank 0 nranks 16 - Init COMPLETE",
        "n1:123:456 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<4711> with status=12",
        f"[rank0]:E0501 {_ts(fail_at).split(' ')[1]}.000000 123 ProcessGroupNCCL.cpp:1316] "
        "NCCL watchdog thread terminated with exception: NCCL error: remote process exited",
    ]


def test_ranks_without_progress_lines_get_the_jobs_stage_and_iteration(
    tmp_path: Path, store: Store
) -> None:
    # Failure at 10:02:05 = 65 s after iteration 1's line at 10:01:00: iterations 7 and 8 were
    # printed at 10:02:00 and 10:02:10... the job was in iteration 7 (the last printed before).
    job = _write(
        tmp_path / "megatron",
        {
            "n1/rank0.log": _quiet_rank(125),
            "n2/rank8.log": _megatron_last_stage(8),
        },
    )
    job_id = ingest_job(store, job).job.id
    store.refresh(store.names.events)
    hits = store.search(
        store.names.events,
        {"size": 100, "query": {"bool": {"filter": [{"term": {"host.name": "n1"}}]}}},
    )["hits"]["hits"]
    by_text: dict[str, dict[str, Any]] = {}
    for h in hits:
        by_text[h["_source"]["l4.template.text"]] = h["_source"]
    watchdog = next(v for k, v in by_text.items() if "watchdog" in k)
    # Placed on the timeline, not left in "init" because n1 printed no iteration line itself.
    assert watchdog["l4.stage"] == "training"
    assert watchdog["l4.iteration"] == 7
    # The timeless NCCL WARN right before it takes the nearer stamped line (the watchdog's),
    # not the start-up line three lines earlier.
    warn = next(v for k, v in by_text.items() if "Got completion" in k)
    assert warn["l4.stage"] == "training" and warn["l4.iteration"] == 7
    # Start-up lines stay in init.
    boot = next(v for k, v in by_text.items() if "Bootstrap" in k)
    assert boot["l4.stage"] == "init"
    report = diagnose_job(store, job_id, rules=[], write=False).report.to_json()
    assert report["stage"] == "training"


def _steady(node: str, until: int, extra: tuple[str, ...] = ()) -> list[str]:
    lines = [
        f"[{_ts(s)},000] [INFO] [{node}] heartbeat step ok, queue depth {s % 7}"
        for s in range(0, until, 5)
    ]
    return lines + list(extra)


def test_a_stopped_node_is_silent_and_one_that_died_loudly_is_not(
    tmp_path: Path, store: Store
) -> None:
    crash = f"[{_ts(300)},000] [ERROR] [n2] RuntimeError: CUDA error: an illegal memory access"
    job = _write(
        tmp_path / "silence",
        {
            "n1/rank0.log": _steady("n1", 300),  # stops at 5 min, no error: hung or dead
            "n2/rank0.log": _steady("n2", 300, (crash,)),  # stops at 5 min with its own error
            "n3/rank0.log": _steady("n3", 1200),
            "n4/rank0.log": _steady("n4", 1200),
            "n5/rank0.log": _steady("n5", 1200),
        },
    )
    job_id = ingest_job(store, job).job.id
    report = diagnose_job(store, job_id, rules=[], write=False).report.to_json()
    assert report["silent_nodes"] == ["n1"]


def test_a_save_only_rank_0_announces_puts_the_last_stages_failure_in_checkpointing(
    tmp_path: Path, store: Store
) -> None:
    # Megatron-LM: "saving checkpoint" comes from rank 0, the iteration lines from the last
    # pipeline stage; the save fails and the last stage's ranks time out in it.
    rank0 = [
        f"[rank0] [{_ts(60 + 10 * i)}] iteration {i + 1} | fwd-bwd 900.0 ms" for i in range(6)
    ] + ["saving checkpoint at iteration       6 to /ckpt in torch_dist format"]
    last = [
        *_megatron_last_stage(6),
        f"[rank8]:E0501 {_ts(400).split(' ')[1]}.000000 1 ProcessGroupNCCL.cpp:607] [Rank 8] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE)",
    ]
    job = _write(tmp_path / "save", {"n1/rank0.log": rank0, "n2/rank8.log": last})
    job_id = ingest_job(store, job).job.id
    report = diagnose_job(store, job_id, rules=[], write=False).report.to_json()
    assert report["stage"] == "checkpointing"


def test_a_node_its_peers_name_that_printed_nothing_since_is_silent(
    tmp_path: Path, store: Store
) -> None:
    # n3 is lost 20 s before its peers give up: too short a lag for the timestamps alone, but its
    # peers name it and it printed nothing from before their errors on.
    def node(name: str, ip: str, until: int, tail: tuple[str, ...] = ()) -> list[str]:
        return [
            f"[{_ts(0)},000] [INFO] starting",
            f"{name}:1:2 [0] NCCL INFO Bootstrap : Using eth0:{ip}<0>",
            *_steady(name, until),
            *tail,
        ]

    warn = (
        "{n}:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<4711> with status=12",
        f"[{_ts(320)},000] [ERROR] RuntimeError: NCCL error: remote process exited",
    )
    job = _write(
        tmp_path / "lost",
        {
            "n1/rank0.log": node("n1", "10.0.0.1", 300, (warn[0].format(n="n1"), warn[1])),
            "n2/rank0.log": node("n2", "10.0.0.2", 300, (warn[0].format(n="n2"), warn[1])),
            "n3/rank0.log": node("n3", "10.0.0.3", 300),
            "n4/rank0.log": node("n4", "10.0.0.4", 300, (warn[0].format(n="n4"), warn[1])),
        },
    )
    job_id = ingest_job(store, job).job.id
    report = diagnose_job(store, job_id, rules=[], write=False).report.to_json()
    assert report["silent_nodes"] == ["n3"]
    assert report["nodes"][0]["node"] == "n3"
    assert report["verdict"]["evict"] == ["n3"]
    assert report["verdict"]["category"] == "hardware/node"


def test_without_a_baseline_the_failure_words_outrank_the_cascade(
    tmp_path: Path, store: Store
) -> None:
    # One pasted log, no baseline: the OOM explains the watchdog timeouts printed after it.
    lines = [
        f"[{_ts(0)},000] [INFO] starting",
        f"[{_ts(10)},000] [ERROR] [rank0]: Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
        f"[{_ts(10)},000] [ERROR] [rank1]: Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
        f"[{_ts(10)},000] [ERROR] torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB",
    ]
    job = _write(tmp_path / "pasted", {"n1/rank0.log": lines})
    report = diagnose_job(
        store, ingest_job(store, job).job.id, rules=[], write=False
    ).report.to_json()
    assert "out of memory" in report["events"][0]["sample"]
    assert "failure-words:user/config" in report["events"][0]["reasons"]
    assert report["verdict"]["category"] == "user/config" and report["verdict"]["evict"] == []


def test_a_lone_warning_is_reported_rather_than_nothing(tmp_path: Path, store: Store) -> None:
    line = "[WARNING] [runner.py:196:fetch_hostfile] Unable to find hostfile, will proceed"
    job = _write(tmp_path / "one-line", {"n1/rank0.log": [line]})
    report = diagnose_job(
        store, ingest_job(store, job).job.id, rules=[], write=False
    ).report.to_json()
    assert [e["sample"] for e in report["events"]] == [line]


def test_a_chained_traceback_is_one_record_named_by_its_last_exception(
    tmp_path: Path, store: Store
) -> None:
    lines = [
        f"[{_ts(0)},000] [INFO] saving checkpoint",
        "Traceback (most recent call last):",
        '  File "/w/checkpointing.py", line 402, in save_checkpoint',
        "    torch.save(state_dict, checkpoint_name)",
        "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1536 vs 1424",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/w/checkpointing.py", line 402, in save_checkpoint',
        "OSError: [Errno 28] No space left on device: '/ckpt/iter_56/model.pt'",
    ]
    job = _write(tmp_path / "chained", {"n1/rank0.log": lines})
    job_id = ingest_job(store, job).job.id
    store.refresh(store.names.events)
    texts = [
        h["_source"]["l4.template.text"]
        for h in store.search(store.names.events, {"size": 50})["hits"]["hits"]
        if h["_source"]["l4.job.id"] == job_id
    ]
    assert any(t.startswith("OSError") for t in texts)
    assert not any(t.startswith("RuntimeError") for t in texts)
    report = diagnose_job(store, job_id, rules=[], write=False).report.to_json()
    top = report["events"][0]
    assert top["sample"].splitlines()[-1].startswith("OSError: [Errno 28]")
    assert "RuntimeError: [enforce fail" in top["sample"]  # the whole chain is its message


def test_a_pasted_traceback_without_markers_takes_its_stage_from_its_stack(
    tmp_path: Path, store: Store
) -> None:
    lines = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/x/gan.py", line 196, in training_step',
        "[rank0]:     self.manual_backward(d_loss)",
        "[rank0]: RuntimeError: It looks like your LightningModule has parameters that were not "
        "used in producing the loss returned by training_step.",
    ]
    job = _write(tmp_path / "pasted-stack", {"n1/rank0.log": lines})
    report = diagnose_job(
        store, ingest_job(store, job).job.id, rules=[], write=False
    ).report.to_json()
    assert report["stage"] == "training"
    assert "RuntimeError" in report["events"][0]["sample"]


def test_ranks_that_never_print_progress_are_not_silent(tmp_path: Path, store: Store) -> None:
    # Megatron: only the last pipeline stage (n3, n4) prints iteration lines; n1 and n2 print
    # their start-up and nothing more until the job ends. They are quiet, not stopped.
    def quiet(node: str) -> list[str]:
        return [f"[{_ts(s)},000] [INFO] [{node}] building model part {s}" for s in range(0, 6)]

    crash = f"[{_ts(200)},000] [ERROR] RuntimeError: CUDA error: an illegal memory access"
    job = _write(
        tmp_path / "quiet",
        {
            "n1/rank0.log": quiet("n1"),
            "n2/rank8.log": quiet("n2"),
            "n3/rank16.log": _megatron_last_stage(14),
            "n4/rank24.log": [*_megatron_last_stage(14), crash],
        },
    )
    report = diagnose_job(
        store, ingest_job(store, job).job.id, rules=[], write=False
    ).report.to_json()
    assert report["silent_nodes"] == []


def test_launcher_prefixes_give_each_line_its_rank(tmp_path: Path, store: Store) -> None:
    lines = [
        f"[1,{r}]<stdout>:[{_ts(r)},000] [INFO] [engine.py:1:step] loading shard {r}"
        for r in range(4)
    ] + [f"{r}: [{_ts(10)},000] [WARNING] slow dataloader on worker {r}" for r in (5, 6)]
    job = _write(tmp_path / "mpirun", {"host-a/stdout.log": lines})
    ingest_job(store, job)
    store.refresh(store.names.events)
    ranks: set[int] = set()
    for h in store.search(store.names.events, {"size": 50})["hits"]["hits"]:
        ranks.update(h["_source"].get("l4.ranks") or [])
    assert ranks == {0, 1, 2, 3, 5, 6}
