"""Which attempt of a restarted job a file or a line belongs to."""

from __future__ import annotations

import time
from pathlib import Path

from l4_plugin.ingest.attempts import (
    AttemptClock,
    assign,
    attempt_blocks,
    folder_attempt,
    marked_attempt,
    path_attempts,
    previous_attempts,
    split_unit,
    unit,
)
from l4_plugin.ingest.header import parse_time
from l4_plugin.ingest.logfile import LogFile, Split
from l4_plugin.ingest.reader import Block

T0 = parse_time("W1127 10:00:00.000000 7 x.py:1] x", 2026) or 0.0


def test_torchrun_log_dir_attempt_folders() -> None:
    assert folder_attempt("gpu-1/logs/job1_abc/attempt_1/0/stdout.log") == 1
    assert folder_attempt("gpu-1/attempt_0/3/stderr.log") == 0
    assert folder_attempt("gpu-1/torchrun.log") is None
    assert folder_attempt("attempt_2.log") is None  # a file's own name is no folder


def test_kubectl_previous_runs_beside_the_current_one() -> None:
    rels = ["job-worker-0.previous.log", "job-worker-0.log", "job-worker-1.log", "w2-previous.log"]
    assert previous_attempts(rels) == {
        "job-worker-0.previous.log": 0,
        "job-worker-0.log": 1,
        "w2-previous.log": 0,
    }
    assert path_attempts(["n/attempt_1/0/stdout.log", "p.previous.log", "p.log"]) == {
        "n/attempt_1/0/stdout.log": 1,
        "p.previous.log": 0,
        "p.log": 1,
    }


def test_markers_in_a_stream() -> None:
    # torchrun's rendezvous result names the attempt; its restart banner starts the next.
    assert marked_attempt("  restart_count=2", 0) == 2
    banner = (
        "I0323 02:56:53.591000 384323 torch/distributed/elastic/agent/server/api.py:894] "
        "[default] Worker group FAILED. 1/1 attempts left; will restart worker group"
    )
    assert marked_attempt(banner, 0) == 1
    dlrover = (
        "[default] Worker group FAILED, is failure node: False,"
        "2/3 attempts left; will restart worker group."
    )
    assert marked_attempt(dlrover, 1) == 2
    assert marked_attempt("SLURM_RESTART_COUNT=3", 0) == 3
    assert marked_attempt("Cannot restart workers with fatal error.", 0) is None
    assert marked_attempt("step 10 loss 0.25", 0) is None


def test_a_lines_time_says_its_attempt_on_its_node() -> None:
    clock = AttemptClock.from_firsts({("a", 0): 100.0, ("a", 1): 200.0, ("b", 0): 101.0})
    assert clock.attempts == [0, 1]
    assert clock.attempt("a", 50.0) == 0  # the agent's start-up before the workers' first line
    assert clock.attempt("a", 150.0) == 0
    assert clock.attempt("a", 200.0) == 1 and clock.attempt("a", 999.0) == 1
    assert clock.attempt("a", None) == 0
    assert clock.attempt("b", 300.0) == 0 and clock.attempt("c", 1.0) is None
    # A later attempt whose files start earlier (a clock step) does not reorder the attempts.
    odd = AttemptClock.from_firsts({("a", 0): 100.0, ("a", 1): 90.0})
    assert odd.attempt("a", 95.0) == 0


def _blocks(lines: list[str]) -> list[Block]:
    return [Block(lines[:3]), Block(lines[3:])]


def test_a_file_of_several_attempts_is_split_by_time_markers_and_copies() -> None:
    lines = [
        "W1127 10:00:00.000000 7 torch/distributed/run.py:874] starting",  # before any start
        "[default0]:step 1 loss 0.5",  # a worker's copy: in its own file already
        "I1127 10:00:05.000000 7 api.py:894] [default] Worker group FAILED. "
        "1/1 attempts left; will restart worker group",
        "I1127 10:00:06.000000 7 api.py:680] stopping workers",  # after the banner: attempt 1
        "  restart_count=1",
        "traceback line without a time",
        "E1127 10:00:30.000000 7 api.py:1002] failed (exitcode: 1) local_rank: 0",
    ]
    split = Split(((T0 + 1, 0), (T0 + 10, 1)), 2026)
    first = [line for b in attempt_blocks(_blocks(lines), 0, split) for line in b.lines]
    second = [line for b in attempt_blocks(_blocks(lines), 1, split) for line in b.lines]
    assert first == lines[0:1] + lines[2:3]
    assert second == lines[3:]
    offsets = [b.offset(0) for b in attempt_blocks(_blocks(lines), 1, split)]
    assert offsets == [None]  # blocks built from lines carry no file offsets to keep


def test_units_key_a_nodes_lines_of_one_attempt() -> None:
    assert unit("gpu-1", None) == "gpu-1" and split_unit("gpu-1") == ("gpu-1", None)
    assert split_unit(unit("gpu-1", 3)) == ("gpu-1", 3)


def test_assign_splits_the_files_of_nodes_with_attempts(tmp_path: Path) -> None:
    job = tmp_path / "job"
    stamp = "[W1127 10:00:{:02d}.000000 socket.cpp:207] hello"
    for k, sec in ((0, 1), (1, 40)):
        d = job / "n1" / "logs" / "run" / f"attempt_{k}" / "0"
        d.mkdir(parents=True)
        (d / "stderr.log").write_text(stamp.format(sec) + "\n")
    (job / "n1" / "torchrun.log").write_text(stamp.format(0) + "\n")
    (job / "n2").mkdir()
    (job / "n2" / "rank0.log").write_text(stamp.format(5) + "\n")
    files = [
        LogFile(p, p.relative_to(job).as_posix(), p.relative_to(job).parts[0], None, "rank")
        for p in sorted(job.rglob("*.log"))
    ]
    out = {(f.relative, f.attempt): f for f in assign(files)}
    assert set(out) == {
        ("n1/logs/run/attempt_0/0/stderr.log", 0),
        ("n1/logs/run/attempt_1/0/stderr.log", 1),
        ("n1/torchrun.log", 0),
        ("n1/torchrun.log", 1),
        ("n2/rank0.log", None),  # a node without attempts: the whole job's
    }
    split = out[("n1/torchrun.log", 1)].split
    assert split is not None and split.year == time.gmtime().tm_year  # glog states no year
    assert [a for _, a in split.starts] == [0, 1]
    # One attempt only: nothing changes.
    one = [f for f in files if "attempt_1" not in f.relative]
    assert assign(one) == one


def test_a_kernel_log_without_a_wall_clock_time_is_every_attempts(tmp_path: Path) -> None:
    # dmesg's seconds since boot say nothing of which attempt printed a line: the file stays
    # whole (no attempt), read into every attempt's diagnosis; a kernel log with syslog's
    # stamps is split by time like the agent's log.
    job = tmp_path / "job"
    stamp = "[W1127 10:00:{:02d}.000000 socket.cpp:207] hello"
    for k, sec in ((0, 1), (1, 40)):
        d = job / "n1" / "run" / f"attempt_{k}" / "0"
        d.mkdir(parents=True)
        (d / "stderr.log").write_text(stamp.format(sec) + "\n")
    (job / "n1" / "dmesg.txt").write_text(
        "[    0.197311] Linux version 6.8.0\n[396997.295990] NVRM: Xid (PCI:0000:bd:00): 48, x\n"
    )
    (job / "n1" / "kern.log").write_text(
        "Nov 27 10:00:30 n1 kernel: [28059.1] NVRM: Xid (PCI:0000:bd:00): 79, x\n"
    )
    files = [
        LogFile(
            p,
            p.relative_to(job).as_posix(),
            "n1",
            None,
            "system" if p.parent.name == "n1" else "rank",
        )
        for p in sorted(job.rglob("*"))
        if p.is_file()
    ]
    out = sorted((f.relative, f.attempt, f.split is not None) for f in assign(files))
    assert ("n1/dmesg.txt", None, False) in out
    assert [a for r, a, _ in out if r == "n1/dmesg.txt"] == [None]
    assert [(a, s) for r, a, s in out if r == "n1/kern.log"] == [(0, True), (1, True)]
