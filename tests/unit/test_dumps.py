"""Flight Recorder dumps and py-spy stacks beside a job's logs: recognised, read within limits,
and a pickle that is not plain data refused before anything in it runs."""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from l4_plugin.ingest import dumps
from l4_plugin.ingest.dumps import DumpError, load_plain_pickle, read_dumps
from l4_plugin.ingest.jobdir import scan
from l4_plugin.limits import ReadLimits
from l4_plugin.traces import JobDumps


def entry(seq: int, op: str = "nccl:all_reduce", **extra: Any) -> dict[str, Any]:
    """One Flight Recorder entry as torch writes it (``FlightRecorder::getCollectiveTrace``)."""
    out: dict[str, Any] = {
        "record_id": seq - 1,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": op,
        "time_created_ns": 1_700_000_000_000_000_000 + seq,
        "input_sizes": [[1024]],
        "input_dtypes": ["Float"],
        "output_sizes": [[1024]],
        "output_dtypes": ["Float"],
        "state": "completed",
        "time_discovered_started_ns": 1_700_000_000_000_000_100 + seq,
        "time_discovered_completed_ns": 1_700_000_000_000_000_200 + seq,
        "retired": True,
        "timeout_ms": 600000,
        "is_p2p": False,
    }
    out.update(extra)
    return out


def trace(last: int, ops: dict[int, str] | None = None, world: int = 4) -> dict[str, Any]:
    """A rank's dump: ``last`` collectives, the last one started and not completed."""
    ops = ops or {}
    entries = [entry(s, ops.get(s, "nccl:all_reduce")) for s in range(1, last + 1)]
    entries[-1].update(state="started", time_discovered_completed_ns=None)
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": last,
                "last_started_collective": last,
                "last_completed_collective": last - 1,
            }
        },
        "entries": entries,
    }


PYSPY_TEXT = """Process 4242: /usr/bin/python3 -u train.py --steps 40
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    _PollLikeSelector.select (selectors.py:415)
    wait (multiprocessing/connection.py:947)
    _MultiProcessingDataLoaderIter._next_data (torch/utils/data/dataloader.py:1505)
    train (train.py:254)
        Arguments:
            args: <Namespace at 0x7f>
    <module> (train.py:312)
Thread 4300 (idle): "QueueFeederThread"
    Condition.wait (threading.py:327)
"""


class Boom:
    """What an attacker pickles: unpickling it would run ``os.system``."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("touch /tmp/l4-pwned-by-a-dump",))


def test_a_plain_pickle_is_read() -> None:
    value = load_plain_pickle(pickle.dumps(trace(3), protocol=2))
    assert value["pg_status"]["0"]["last_enqueued_collective"] == 3
    assert value["entries"][0]["process_group"] == ("0", "default_pg")


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps(Boom()),  # REDUCE of os.system
        pickle.dumps({"entries": [Boom()]}, protocol=2),
        pickle.dumps(JobDumps()),  # any class, even one of ours
        pickle.dumps(os.system),  # a bare global
        b"\x80\x02cposix\nsystem\nq\x00.",  # GLOBAL by hand
    ],
)
def test_an_arbitrary_pickle_is_refused_before_it_runs(payload: bytes, tmp_path: Path) -> None:
    marker = Path("/tmp/l4-pwned-by-a-dump")
    marker.unlink(missing_ok=True)
    with pytest.raises(DumpError, match="not a plain pickle"):
        load_plain_pickle(payload)
    assert not marker.exists()


def test_a_pickle_too_deep_or_too_big_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    deep: list[Any] = []
    for _ in range(dumps.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(DumpError, match="nests deeper"):
        load_plain_pickle(pickle.dumps(deep))
    # Shared references count each time they are met: a "billion laughs" of lists is cut.
    layer: list[Any] = [0] * 10
    for _ in range(8):
        layer = [layer] * 10
    with pytest.raises(DumpError, match="more than"):
        load_plain_pickle(pickle.dumps(layer))
    with pytest.raises(DumpError, match="not a plain pickle"):
        load_plain_pickle(b"\x80\x04\x95\xff\xff\xff\xff")  # truncated


def test_a_trace_keeps_each_group_its_status_and_last_collectives() -> None:
    t = dumps.trace_from_dump(trace(40), 3, "n2", 1, "n2/fr/nccl_trace_rank_3")
    (group,) = t.groups
    assert (t.rank, t.node, t.attempt) == (3, "n2", 1)
    assert group.name == "default_pg" and group.ranks == (0, 1, 2, 3)
    assert (group.last_enqueued, group.last_started, group.last_completed) == (40, 40, 39)
    assert [e.seq for e in group.entries] == list(range(29, 41))
    assert group.entries[-1].state == "started" and group.entries[-2].state == "completed"
    assert group.entries[-1].shape == '[[1024]]->[[1024]] ["Float"]->["Float"]'


def test_gloo_json_dump_numbers_as_text_and_one_unnamed_group() -> None:
    raw = trace(5)
    raw["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[0, 1, 2, 3]"}}
    raw["pg_status"] = {"0": {k: str(v) for k, v in raw["pg_status"]["0"].items()}}
    raw["pg_status"]["0"]["last_started_collective"] = "-1"
    for e in raw["entries"]:
        e.update(state="scheduled", time_discovered_started_ns=0, time_discovered_completed_ns=0)
    value = dumps.load_json(json.dumps(raw).encode())
    (group,) = dumps.trace_from_dump(value, 0, None, None, "fr_trace_rank_0.json").groups
    assert group.ranks == (0, 1, 2, 3)  # gloo's one group registered under an empty name
    assert (group.last_enqueued, group.last_started, group.last_completed) == (5, None, 4)
    assert group.entries[-1].state == "scheduled"


def test_pyspy_text_and_json_read_the_main_thread() -> None:
    (stack,) = dumps.stacks_from_text(PYSPY_TEXT, "n1/stacks/rank5.txt", "n1", 0)
    assert (stack.rank, stack.pid, stack.thread) == (5, 4242, "MainThread")
    assert stack.frames[0] == "_PollLikeSelector.select (selectors.py:415)"
    assert stack.frames[-1] == "<module> (train.py:312)"  # locals are not frames
    threads = [
        {"pid": 7, "thread_name": "QueueFeederThread", "frames": [{"name": "wait"}]},
        {
            "pid": 7,
            "thread_name": "MainThread",
            "frames": [
                {"name": "barrier", "short_filename": "torch/distributed/c10d.py", "line": 9},
                {"name": "save_checkpoint", "filename": "/w/train.py", "line": 182},
            ],
        },
    ]
    (js,) = dumps.stacks_from_json(threads, "rank3.json", None, None)
    assert js.frames == (
        "barrier (torch/distributed/c10d.py:9)",
        "save_checkpoint (/w/train.py:182)",
    )
    assert dumps.is_stack_text(PYSPY_TEXT.splitlines())
    assert not dumps.is_stack_text(["Process 3 started", "Python is great"])


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    for host, ranks in (("n1", (0, 1)), ("n2", (2, 3))):
        logs = job / host / "logs" / "attempt_0" / "0"
        logs.mkdir(parents=True)
        (logs / "stdout.log").write_text(f"[rank{ranks[0]}]: step 1 loss 0.5\n")
        fr = job / host / "fr" / "attempt_0"
        fr.mkdir(parents=True)
        for r in ranks:
            (fr / f"nccl_trace_rank_{r}").write_bytes(pickle.dumps(trace(9 if r != 3 else 8)))
            (fr / f"nccl_trace_rank_{r}.json").write_text(json.dumps(trace(9 if r != 3 else 8)))
    (job / "n2" / "stacks").mkdir()
    (job / "n2" / "stacks" / "rank3.txt").write_text(PYSPY_TEXT)
    (job / "n1" / "logs" / "error.json").write_text('{"message": "not a dump"}')
    return job


def test_discovery_hands_dumps_over_and_reads_no_stack_as_a_log(tmp_path: Path) -> None:
    job = _job(tmp_path)
    found = scan(job)
    assert all("stacks" not in f.relative for f in found.files)  # a py-spy dump is no log
    assert {p.name for p in found.dumps} >= {"rank3.txt", "nccl_trace_rank_3"}
    # torchelastic's error.json is a rank's last words, read as a log (``jsonlines.error_file``)
    assert "n1/logs/error.json" in {f.relative for f in found.files}
    read = read_dumps(job, found.dumps, {"n1", "n2"})
    assert read.problems == ()
    assert [(t.rank, t.node, t.attempt) for t in read.traces] == [
        (0, "n1", 0),
        (1, "n1", 0),
        (2, "n2", 0),
        (3, "n2", 0),
    ]  # one per rank: the pickle and its JSON twin
    assert [(s.rank, s.node) for s in read.stacks] == [(3, "n2")]
    assert JobDumps.from_json(json.loads(json.dumps(read.to_json()))) == read


def test_dumps_are_bounded_and_confined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job(tmp_path)
    outside = tmp_path / "secret_trace_rank_9"
    outside.write_bytes(pickle.dumps(trace(3)))
    (job / "n1" / "fr" / "nccl_trace_rank_9").symlink_to(outside)
    evil = job / "n2" / "fr" / "attempt_0" / "nccl_trace_rank_7"
    evil.write_bytes(pickle.dumps(Boom()))
    monkeypatch.setattr(dumps, "MAX_DUMP_BYTES", 4096)
    big = job / "n2" / "fr" / "attempt_0" / "nccl_trace_rank_6"
    big.write_bytes(pickle.dumps(trace(200)))
    read = read_dumps(job, scan(job).dumps, {"n1", "n2"}, ReadLimits())
    problems = "\n".join(read.problems)
    assert "outside the job directory" in problems
    assert "nccl_trace_rank_7 not read: not a plain pickle" in problems
    assert "nccl_trace_rank_6 skipped" in problems and "over the dump limit" in problems
    assert {t.rank for t in read.traces} == {0, 1, 2, 3}
    small = read_dumps(job, scan(job).dumps, {"n1", "n2"}, ReadLimits(max_job_size=2000))
    assert "over the per-job limit" in "\n".join(small.problems)


def test_rank_nodes_keep_the_ranks_one_node_alone_names() -> None:
    # [default0]/[default1] (local ranks) are printed on every node; [rank5] on one.
    assert dumps.rank_nodes({"a": {0, 1, 2}, "b": {0, 1, 5}, "c": set()}) == ((2, "a"), (5, "b"))


def test_healthy_ranks_are_stored_once() -> None:
    # 4,096 ranks that agree on their last collectives cost one tail and a row each.
    one = dumps.trace_from_dump(trace(40, world=4096), 0, "n0", 0, "n0/t0")
    (stack,) = dumps.stacks_from_text(PYSPY_TEXT, "n0/rank0.txt", "n0", 0)
    where = [(r, f"n{r // 8}", f"n{r // 8}/rank{r}") for r in range(4096)]
    traces = tuple(replace(one, rank=r, node=n, file=f) for r, n, f in where)
    stacks = tuple(replace(stack, rank=r, node=n, file=f) for r, n, f in where)
    found = JobDumps(traces, stacks)
    stored = found.to_json()
    assert len(stored["tails"]) == 1 and len(stored["frames"]) == 1
    assert len(json.dumps(stored)) < 4096 * 120  # a row of some 50 bytes per rank and kind
    assert JobDumps.from_json(json.loads(json.dumps(stored))) == found
