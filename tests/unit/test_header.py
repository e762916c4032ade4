from __future__ import annotations

import calendar

import pytest

from l4_plugin.ingest.header import infer_level, parse_header, parse_local, prefix_end, stated_zone

T0 = calendar.timegm((2024, 5, 3, 10, 11, 12, 0, 0, 0))


@pytest.mark.parametrize(
    ("line", "ts", "level", "rank", "emitter", "body"),
    [
        ("2024-05-03T10:11:12.123Z hello", T0 + 0.123, None, None, "plain", "hello"),
        ("2024-05-03T12:11:12+02:00 hello", T0, None, None, "plain", "hello"),
        (
            "2024-05-03 10:11:12,345 - torch.distributed - INFO - hi",
            T0 + 0.345,
            "INFO",
            None,
            "python-logging",
            "hi",
        ),
        (
            "[2024-05-03 10:11:12,345] [WARNING] [logging.py:96:log_dist] [Rank 0] step=1",
            T0 + 0.345,
            "WARNING",
            0,
            "deepspeed",
            "[Rank 0] step=1",
        ),
        (
            " [2024-05-03 10:11:12] iteration      120/ 1000 |",
            T0,
            None,
            None,
            "megatron",
            "iteration      120/ 1000 |",
        ),
        (
            "[rank3]:[E0503 10:11:12.123456789 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught",
            T0 + 0.123456789,
            "ERROR",
            3,
            "torch",
            "[Rank 3] Watchdog caught",
        ),
        (
            "E0503 10:11:12.123456 1234 ProcessGroupNCCL.cpp:616] boom",
            T0 + 0.123456,
            "ERROR",
            None,
            "torch",
            "boom",
        ),
        (
            "[default3]:W0503 10:11:12.123000 140 torch/distributed/elastic/api.py:858] Sending",
            T0 + 0.123,
            "WARNING",
            3,
            "torch",
            "Sending",
        ),
        (
            "node-a07:1234:5678 [3] NCCL INFO Channel 00/24",
            None,
            "INFO",
            None,
            "nccl",
            "Channel 00/24",
        ),
        (
            "node-a07:1234:5678 [3] NCCL WARN Connect failed",
            None,
            "WARNING",
            None,
            "nccl",
            "Connect failed",
        ),
        (
            "[ERROR] HCCL(12345,python):2024-05-03-10:11:12.123.456 [op_base.cc:974][36818]Init x",
            T0 + 0.123456,
            "ERROR",
            None,
            "hccl",
            "Init x",
        ),
        (
            "[ERROR] ASCENDCL(12345,python):2024-05-03-10:11:12.123.456 [acl.cpp:1] y",
            T0 + 0.123456,
            "ERROR",
            None,
            "hccl",
            "y",
        ),
        (
            "srun: error: node-a07: task 3: Exited with exit code 1",
            None,
            "ERROR",
            None,
            "slurm",
            "node-a07: task 3: Exited with exit code 1",
        ),
        (
            "slurmstepd: error: *** STEP 1.0 ON n1 CANCELLED AT 2024-05-03T10:11:12 ***",
            T0,
            "ERROR",
            None,
            "slurm",
            "*** STEP 1.0 ON n1 CANCELLED AT 2024-05-03T10:11:12 ***",
        ),
        (
            "May  3 10:11:12 node-a07 kernel: [12345.678901] NVRM: Xid (PCI:0000:3b:00): 79",
            T0,
            None,
            None,
            "kernel",
            "NVRM: Xid (PCI:0000:3b:00): 79",
        ),
        ("[12345.678901] NVRM: Xid 79", None, None, None, "kernel", "NVRM: Xid 79"),
        (  # dmesg -T
            "[Fri May  3 10:11:12 2024] NVRM: Xid (PCI:0000:3b:00): 79",
            T0,
            None,
            None,
            "kernel",
            "NVRM: Xid (PCI:0000:3b:00): 79",
        ),
        ("1714731072.5 hello", 1714731072.5, None, None, "plain", "hello"),
        ("1714731072500 hello", 1714731072.5, None, None, "plain", "hello"),
        ("05/03/2024 10:11:12 - INFO - accelerate.utils - hi", T0, "INFO", None, "hf", "hi"),
        (
            "[INFO|trainer.py:2048] 2024-05-03 10:11:12,345 >> go",
            T0 + 0.345,
            "INFO",
            None,
            "hf",
            "go",
        ),
        ("no header at all", None, None, None, "plain", "no header at all"),
        ("", None, None, None, "plain", ""),
    ],
)
def test_formats(
    line: str, ts: float | None, level: str | None, rank: int | None, emitter: str, body: str
) -> None:
    h = parse_header(line, default_year=2024)
    assert h.timestamp == pytest.approx(ts) if ts is not None else h.timestamp is None
    assert (h.level, h.rank, h.emitter) == (level, rank, emitter)
    assert line[h.body_start :] == body


def test_nccl_host() -> None:
    assert parse_header("node-a07:1:2 [0] NCCL INFO x").host == "node-a07"
    assert parse_header("May  3 10:11:12 node-b01 sshd[12]: hi", 2024).host == "node-b01"


def test_missing_year_uses_default() -> None:
    assert parse_header("E0503 10:11:12.0 1 a.cpp:1] x", 2024).timestamp == T0
    later = parse_header("E0503 10:11:12.0 1 a.cpp:1] x", 2025).timestamp
    assert later == calendar.timegm((2025, 5, 3, 10, 11, 12, 0, 0, 0))


def test_crlf_remnant() -> None:
    h = parse_header("node-a07:1:2 [0] NCCL WARN timeout\r")
    assert (h.level, h.emitter) == ("WARNING", "nccl")
    assert parse_header("2024-05-03T10:11:12Z x\r").timestamp == T0


def test_impossible_date_is_no_timestamp() -> None:
    assert parse_header("2024-13-45T10:11:12Z x").timestamp is None


@pytest.mark.parametrize(
    ("body", "level"),
    [
        ("Traceback (most recent call last):", "ERROR"),
        ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1", "ERROR"),
        ("torch.OutOfMemoryError: CUDA out of memory.", "ERROR"),
        ("/x.py:3: UserWarning: deprecated", "WARNING"),
        ("pyarrow.lib.ArrowInvalid: Parquet magic bytes not found in footer.", "ERROR"),
        ("transformers.trainer_utils: Setting seed 42", None),
        ("[230117.602393] watchdog: BUG: soft lockup - CPU#85 stuck for 22s! [python3:1]", "ERROR"),
        ("INFO: task pt_autograd_0:223324 blocked for more than 120 seconds.", "ERROR"),
        # pytorch/pytorch#15592: gloo's exception ending the process (libstdc++'s terminate)
        ("terminate called after throwing an instance of 'gloo::IoException'", "ERROR"),
        (
            "  what():  [gloo/transport/tcp/pair.cc:724] connect [127.0.1.1]:3210: Connection "
            "refused",
            "ERROR",
        ),
        # Python's exceptions whose names end otherwise, as a traceback's last line
        ("StopIteration", "ERROR"),
        ("SystemExit: 2", "ERROR"),
        # skypilot-org/skypilot#5181: the job script's shell without the command (bash; dash and
        # zsh word it so too)
        ("bash: torchrun: command not found", "ERROR"),
        ("/bin/sh: 1: deepspeed: not found", "ERROR"),
        ("zsh: command not found: accelerate", "ERROR"),
        # QwenLM/Qwen-VL#121: NCCL's INFO line pasted without its "host:pid:tid [dev]" header
        # (its own level word says INFO, whatever words follow); its WARN stays a warning
        ("NCCL INFO comm 0x8312280 rank 7 nranks 8 cudaDev 7 busId c9000 - Abort COMPLETE", "INFO"),
        ("NCCL WARN Call to connect returned Connection refused", "WARNING"),
        # alan-turing-institute/autocast#381: the watchdog's timeout pasted without its header
        ("[Rank 0] Watchdog caught collective operation timeout:", "ERROR"),
        ("the step was not found in the cache: retrying", None),
        ("a what(): in prose", None),
        ("the loop ends at StopIteration of its iterator", None),
        ("all good", None),
    ],
)
def test_level_inference(body: str, level: str | None) -> None:
    assert infer_level(body) == level
    assert parse_header(body).level == level


@pytest.mark.parametrize(
    ("line", "level", "rank", "body"),
    [
        # torchrun --tee ("[default<local>]:") around PyTorch's per-rank prefix ("[rank<global>]:")
        (
            "[default0]:[rank0]:[E1105 12:00:00.123456789 ProcessGroupNCCL.cpp:616] [Rank 0] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE)",
            "ERROR",
            0,
            "[Rank 0] Watchdog caught collective operation timeout",
        ),
        (
            "[default3]:[rank11]:[W1105 12:00:00.123 ProcessGroupNCCL.cpp:1168] Warning: "
            "TORCH_NCCL_ASYNC_ERROR_HANDLING is deprecated",
            "WARNING",
            11,
            "Warning: TORCH_NCCL_ASYNC_ERROR_HANDLING",
        ),
        (
            "[default5]:[rank13]:Traceback (most recent call last):",
            "ERROR",
            13,
            "Traceback (most recent call last):",
        ),
        (
            "[default2]:[rank10]:[2024-05-03 10:11:12,345] [INFO] [logging.py:96:log_dist] "
            "[Rank 10] step=1",
            "INFO",
            10,
            "[Rank 10] step=1",
        ),
    ],
)
def test_nested_rank_prefixes_are_all_stripped(line: str, level: str, rank: int, body: str) -> None:
    h = parse_header(line, 2024)
    assert h.level == level and h.rank == rank
    assert line[h.body_start :].startswith(body)
    assert h.timestamp is not None or "Traceback" in line


def test_nested_prefix_glog_time_matches_the_single_prefix() -> None:
    single = parse_header("[rank0]:[E1105 12:00:00.123 ProcessGroupNCCL.cpp:616] x", 2024)
    nested = parse_header(
        "[default0]:[rank0]:[E1105 12:00:00.123 ProcessGroupNCCL.cpp:616] x", 2024
    )
    assert (
        nested.timestamp
        == single.timestamp
        == calendar.timegm((2024, 11, 5, 12, 0, 0, 0, 0, 0)) + 0.123
    )


@pytest.mark.parametrize(
    ("line", "level", "body"),
    [
        (
            "[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught collective operation timeout",
            "ERROR",
            "[Rank 0] Watchdog caught collective operation timeout",
        ),
        (
            "[rank3]:[W socket.cpp:464] [c10d] The server socket has failed to bind",
            "WARNING",
            "[c10d] The server socket has failed to bind",
        ),
    ],
)
def test_c10_bracket_without_time(line: str, level: str, body: str) -> None:
    # PyTorch 2.0/2.1 c10 logging: "[E file.cpp:N] " with no glog time.
    h = parse_header(line, 2024)
    assert h.level == level and h.timestamp is None and h.emitter == "torch"
    assert line[h.body_start :] == body


def test_a_rank_prefix_followed_by_a_space_and_a_bracketed_time() -> None:
    # A custom loop's "[rank0] [2026-09-19 20:40:00] iteration 56 | ..." (no colon after the
    # prefix) carries the rank and the time; a bare "[rank3] text" is left as it is.
    h = parse_header("[rank0] [2026-09-19 20:40:00] iteration 56 | fwd-bwd 5975.4 ms", 2026)
    assert h.rank == 0 and h.timestamp == 1789850400.0
    nested = parse_header("[default3]:[rank147] [2026-03-19 11:39:26] iteration 102 | x", 2026)
    assert nested.rank == 147 and nested.timestamp is not None
    assert parse_header("[rank3] hello world", 2026).body_start == 0


@pytest.mark.parametrize(
    ("line", "rank", "level", "ts"),
    [
        # Open MPI --tag-output: [jobid,rank]<stdout>:
        (
            "[1,12]<stdout>:[2024-05-01 10:00:00,000] [INFO] [engine.py:1:step] iteration 5",
            12,
            "INFO",
            1714557600.0,
        ),
        ("[1,3]<stderr>:RuntimeError: CUDA error: an illegal memory access", 3, "ERROR", None),
        # srun -l: the task id
        ("7: [2024-05-01 10:00:00,000] [WARNING] NCCL timeout soon", 7, "WARNING", 1714557600.0),
        ("0: Traceback (most recent call last):", 0, "ERROR", None),
        # srun -l, then the process's own prefixes: torch's C++ log line names the global rank
        # (and its glog header is read past both); under torchrun, "[defaultN]:" alone is a
        # local rank: the task id stays
        (
            "67: [rank67]:E0916 00:41:06.249152 23794 torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:607] [Rank 67] Watchdog caught collective operation timeout",
            67,
            "ERROR",
            1726447266.249152,
        ),
        ("1: [default3]:[rank11]: Traceback (most recent call last):", 11, "ERROR", None),
        ("1: [default3]:[E0916 00:41:06.249152 socket.cpp:1] x", 1, "ERROR", 1726447266.249152),
        # a TorchX role's torchelastic prefix (NVIDIA/nccl#1837): the role's local rank, as
        # torchrun's "[default3]:", with or without the replica
        ("[trainer3]:RuntimeError: NCCL error", 3, "ERROR", None),
        ("[trainer0|1]:ncclInternalError: Internal check failed.", 0, "ERROR", None),
    ],
)
def test_launcher_rank_prefixes(line: str, rank: int, level: str | None, ts: float | None) -> None:
    h = parse_header(line, 2024)
    assert h.rank == rank
    assert (h.level or None) in (level, "WARN" if level == "WARNING" else level)
    assert h.timestamp == ts


def test_a_time_of_day_is_not_an_srun_prefix() -> None:
    h = parse_header("14:05:45 INFO starting", 2024)
    assert h.rank is None


@pytest.mark.parametrize(
    ("line", "ts", "level", "rank", "host", "body"),
    [
        # Lightning's rank_prefixed_message
        ("[rank: 1] Seed set to 42", None, None, 1, None, "Seed set to 42"),
        # a collector's RFC 3339 stamp before PyTorch's rank prefix and glog header
        (
            "2024-05-03T10:11:12.5Z [rank3]:[E503 10:11:12.500000 12 ProcessGroupNCCL.cpp:607] x",
            T0 + 0.5,
            "ERROR",
            3,
            None,
            "x",
        ),
        # the CRI log format of a Kubernetes node, then torchrun's prefix
        (
            "2024-05-03T10:11:12.123456789Z stderr F [default2]:RuntimeError: CUDA error",
            T0 + 0.123456789,
            "ERROR",
            2,
            None,
            "RuntimeError: CUDA error",
        ),
        # kubectl logs --prefix --timestamps: the pod is the host
        (
            "[pod/trainer-worker-3/pytorch] 2024-05-03T10:11:12Z stdout F WARNING: slow step",
            T0,
            "WARNING",
            None,
            "trainer-worker-3",
            "WARNING: slow step",
        ),
        # Ray: the worker's ip is its host
        (
            "(RayTrainWorker pid=2345, ip=10.0.0.5) [rank1]: ValueError: bad shape",
            None,
            "ERROR",
            1,
            "10.0.0.5",
            " ValueError: bad shape",  # the body keeps its indent (tracebacks need it)
        ),
        ("(pid=2345) Epoch 1 done", None, None, None, None, "Epoch 1 done"),
        # journalctl -o short-iso
        (
            "2024-05-03T10:11:12+0000 gpu-node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79",
            T0,
            None,
            None,
            "gpu-node-7",
            "NVRM: Xid (PCI:0000:3b:00): 79",
        ),
        (
            "2024-05-03T10:11:12+0000 gpu-node-7 python[4242]: Killed",
            T0,
            None,
            None,
            "gpu-node-7",
            "Killed",
        ),
        # slurmstepd: the time is in the message
        (
            "slurmstepd: error: *** STEP 12.0 ON gpu7 CANCELLED AT 2024-05-03T10:11:12 ***",
            T0,
            "ERROR",
            None,
            None,
            "*** STEP 12.0 ON gpu7 CANCELLED AT 2024-05-03T10:11:12 ***",
        ),
    ],
)
def test_pasted_collector_and_launcher_prefixes(
    line: str, ts: float | None, level: str | None, rank: int | None, host: str | None, body: str
) -> None:
    h = parse_header(line, 2024)
    assert h.timestamp == pytest.approx(ts) if ts is not None else h.timestamp is None
    assert h.level == level
    assert h.rank == rank
    assert h.host == host
    assert line[h.body_start :] == body


def test_a_status_code_after_a_time_is_not_a_rank() -> None:
    h = parse_header("2024-05-03 10:11:12 404: not found", 2024)
    assert h.rank is None and h.timestamp == T0


_ZEROS = str.maketrans("123456789", "000000000")


@pytest.mark.parametrize(
    "raw",
    [
        "[default3]:x",
        "[default12]: y",
        "[default3]:[rank27]: w",
        "[default3] [rank27]: w",
        "[default]:x",
        "[default3] x",
        "[default\u0663]:arabic-indic digit",
        "[default1234567]:x",
        "[default3]:",
        "[rank5]:x",
        "[rank5]:[default2]:x",
        "[defaults]: not a prefix",
        "[rank48] [2026-02-21 03:21:51] iteration 8001",
        "[default0]:[rank3] [2026-02-21 03:21:51] x",
        "[default4]:[INFO] HCCL(9,python):x",
        "[default0]:[rank12]:E0127 x",
        "[rank1]:[12,3]<stdout>: x",
        "[rank1] [12,3]<stdout>: x",
        "[rank1] [12x",
        "[rank1] [\u0663,1]",
        "[rank1]\t[rank2]:x",
        "[rank: 4] [rank2]:x",
        "[default1]:[default2]:x",
        " [rank3]:   File x",
        "\t[default1]:[rank9]: y",
        "  3: not srun when indented",
    ],
)
def test_rank_prefix_shortcuts_agree_with_the_regexes(raw: str) -> None:
    from l4_plugin.ingest.header import digit_shape, prefix_end, rank_prefix, rank_prefix_cached

    assert rank_prefix_cached(raw) == rank_prefix(raw)
    assert prefix_end(raw) == rank_prefix(raw)[1]
    for _ in range(2):  # the shape's spans found, then read (a prefix's rank from its cache)
        assert rank_prefix_cached(raw, digit_shape(raw)) == rank_prefix(raw)
        assert rank_prefix_cached(raw, raw.translate(_ZEROS)) == rank_prefix(raw)


@pytest.mark.parametrize(
    "raw",
    [
        "[rank48] [2026-02-21 03:21:51] iteration 8001 | fwd-bwd 6865.1 ms",
        "[default4]:[INFO] HCCL(99162,python):2025-10-13-14:06:14.044.095 [hccl_comm.cc:213]",
        "2025-01-27 22:50:31,718 INFO [rank0] init: world_size=176",
        "W0127 22:49:45.000000 28672 torch/distributed/run.py:793] ",
        "[default0]:[rank3]:E0127 22:49:45.000000 28672 x.py:1] boom",
        "[pod/trainer-0/pytorch] 2024-05-03T10:11:12.123456789Z stdout F [rank1]: x",
    ],
)
def test_parse_time_with_the_lines_key_is_the_same(raw: str) -> None:
    from l4_plugin.ingest.header import digit_shape, parse_time
    from l4_plugin.ingest.masking import Masker

    key = Masker.load().key(raw)
    for _ in range(2):  # the shape cache cold, then warm
        assert parse_time(raw, 2000, key) == parse_time(raw, 2000)
        assert parse_time(raw, 2000, digit_shape(raw)) == parse_time(raw, 2000)


def test_time_plans_read_what_the_formats_read() -> None:
    # parse_time reads a line's time with the one regex match the first line of its digit shape
    # took its time from. That holds because every regex on the way to a planned format treats
    # all digits alike; the epoch stamp's (which tells 1 from 4) is never planned.
    import re

    from l4_plugin.ingest import header
    from l4_plugin.ingest.stages import digit_blind

    patterns = {k: v for k, v in vars(header).items() if isinstance(v, re.Pattern)}
    assert len(patterns) > 20 and "_BRACKET_ISO" in patterns and "_GLOG" in patterns
    assert {k for k, v in patterns.items() if not digit_blind(v)} == {"_EPOCH"}
    header._TIME_PLANS.clear()
    same_shape = [
        "[2024-05-03 10:11:12,345] [INFO] [engine.py:1:step] hi",  # plans the shape
        "[2024-05-03 19:59:42,999] [INFO] [engine.py:7:step] hi",
        "[2024-13-03 10:11:12,345] [INFO] [engine.py:7:step] hi",  # no such month: no time
        "E1023 09:13:42.123456 1234 ProcessGroupNCCL.cpp:616] x",
        "E1323 09:13:42.123456 1234 ProcessGroupNCCL.cpp:616] x",  # month 13: none
        "[rank3]:[W1105 01:02:03.000000000 Utils.hpp:1] y",
        "[rank7]:[W1205 21:32:43.500000000 Utils.hpp:9] y",
        "1714731072.123 epoch stamped",
        "4714731072.123 epoch stamped",  # the epoch regex takes 1…, 2… and 3… only
    ]
    for year in (2023, 2024):
        planned = [header.parse_time(line, year) for line in same_shape]
        long_way = [header._parse_time(line, year, None) for line in same_shape]
        assert planned == long_way
    assert header.parse_time(same_shape[2], 2024) is None
    assert header.parse_time(same_shape[4], 2023) is None
    assert header.parse_time(same_shape[3], 2023) is not None
    assert header.parse_time(same_shape[8], 2024) is None
    assert header._TIME_PLANS[header.digit_shape(same_shape[7])] is header._NO_PLAN
    assert header._TIME_PLANS[header.digit_shape(same_shape[0])][0] is header._BRACKET_ISO


def test_second_of_is_the_whole_second_parse_time_reads() -> None:
    # second_of remembers a time's whole second by its text up to the seconds (and the zone):
    # every line must still get int(parse_time(...)), whatever its fraction, zone or date.
    import random

    from l4_plugin.ingest import header

    rng = random.Random(7)
    formats = [
        "[2024-05-03 10:11:{s:02d},{f3}] [INFO] [engine.py:{n}:step] hi",
        "2024-05-03T10:11:{s:02d}.{f6}Z [rank{n}]: x",
        "2024-05-03T10:11:{s:02d}.{f6}+02:00 x",
        "2024-05-03T10:11:{s:02d}.{f6}-0{z}30 x",
        "2024-05-03 10:11:{s:02d} {n} plain",
        "E1023 09:13:{s:02d}.{f6} {n} ProcessGroupNCCL.cpp:616] x",
        "[rank{n}]:[W1105 01:02:{s:02d}.{f9} Utils.hpp:1] nanoseconds",
        "[INFO|trainer.py:{n}] 2024-05-03 10:11:{s:02d},{f3} >> step",
        "[2024-13-03 10:11:{s:02d},{f3}] [INFO] [engine.py:7:step] no such month",
        "E1323 09:13:{s:02d}.{f6} {n} x.cpp:1] month 13",
        "1969-12-31T23:59:{s:02d}.{f6}Z before the epoch",
        "{n}.{f3} an epoch stamp",
        "no time at all {n}",
    ]
    header._SECOND_SPANS.clear()
    header._SECONDS.clear()
    for _ in range(3):  # cold caches, then warm ones
        for fmt in formats:
            for _ in range(40):
                line = fmt.format(
                    s=rng.choice((0, 59, rng.randrange(60))),
                    n=rng.randrange(1, 99999),
                    z=rng.randrange(10),
                    f3=rng.choice(("999", "000", f"{rng.randrange(1000):03d}")),
                    f6=rng.choice(("999999", "000000", f"{rng.randrange(10**6):06d}")),
                    f9=rng.choice(("999999999", f"{rng.randrange(10**9):09d}")),
                )
                ts = header.parse_time(line, 2000)
                for shape in (None, header.digit_shape(line)):
                    assert header.second_of(line, 2000, shape) == (
                        int(ts) if ts is not None else None
                    ), line
    # one conversion per second and zone, not per line
    header._SECONDS.clear()
    for frac in range(100):
        header.second_of(f"E1023 09:13:42.{frac:06d} 77 x.cpp:1] y", 2000)
        header.second_of(f"E1023 09:13:43.{frac:06d} 77 x.cpp:1] y", 2000)
    assert len(header._SECONDS) == 2


def test_parse_time_remembers_a_plans_times_by_the_text_it_matched() -> None:
    # Lines of one shape with the same time text read the time once (``_TIMES``); every line
    # must still get what the long way (``_parse_time``) reads, whatever else differs.
    import random

    from l4_plugin.ingest import header

    rng = random.Random(11)
    formats = [
        "[rank{n}]: [2024-07-13 05:{m:02d}:{s:02d}] iteration {n:>8}/ 2000 | x (ms): {n}.{s}",
        "[2024-05-03 10:{m:02d}:{s:02d},{f3}] [INFO] [engine.py:{n}:step] hi",
        "[2024-05-03 10:{m:02d}:{s:02d},{f3}] [{lv}] [engine.py:{n}:step] hi",
        "2024-05-03T10:{m:02d}:{s:02d}.{f6}+0{z}:{n:02d}{n} x",
        "2024-05-03T10:{m:02d}:{s:02d}.{f6}+0{z}:30 x",
        "2024-0{z}-3{z} 10:{m:02d}:{s:02d} {n} day 30 to 39",
        "E1{z}23 09:{m:02d}:{s:02d}.{f6} {n} ProcessGroupNCCL.cpp:616] x",
        "[rank{n}]:[W1105 01:{m:02d}:{s:02d}.{f9} Utils.hpp:1] nanoseconds",
    ]
    header._TIMES.clear()
    calls = 0
    for _ in range(2):
        for fmt in formats:
            for _ in range(60):
                line = fmt.format(
                    m=rng.choice((0, 1)),
                    s=rng.choice((0, 59)),
                    n=rng.choice((3, 7, 12, 99)),
                    z=rng.choice((0, 1, 2)),
                    lv=rng.choice(("INFO", "WARN", "BOGUS")),
                    f3=rng.choice(("999", "000")),
                    f6=rng.choice(("999999", "000000")),
                    f9=rng.choice(("999999999", "000000001")),
                )
                for year in (2023, 2024):
                    expected = header._parse_time(line, year, None)
                    assert header.parse_time(line, year) == expected, line
                    assert header.parse_time(line, year, line.translate(_ZEROS)) == expected
                    calls += 2
    assert 0 < len(header._TIMES) < calls / 4  # remembered, and shared by lines


@pytest.mark.parametrize(
    ("line", "ts", "level", "body"),
    [
        # torchtitan's logger behind its tag (torchtitan/tools/logging.py)
        (
            "[titan] 2024-05-03 10:11:12,378 - root - INFO - step:  1  loss:  9.95",
            T0 + 0.378,
            "INFO",
            "step:  1  loss:  9.95",
        ),
        ("[entrypoint] 2024-05-03T06:11:12-04:00 host=dgx-h144", T0, None, "host=dgx-h144"),
        # NeMo's formatter (nemo/utils/formatters/base.py) and tornado's default
        (
            "[NeMo W 2024-05-03 10:11:12 nemo_logging:405] FutureWarning: x",
            T0,
            "WARNING",
            "FutureWarning: x",
        ),
        ("[E 2024-05-03 10:11:12,500 web:2239] 500 GET /", T0 + 0.5, "ERROR", "500 GET /"),
        # Ray's C++ components (spdlog "[%Y-%m-%d %H:%M:%S,%e %L %P %t]")
        (
            "[2024-05-03 10:11:12,692 E 1674 1674] (raylet) node_manager.cc:1: Worker died",
            T0 + 0.692,
            "ERROR",
            "(raylet) node_manager.cc:1: Worker died",
        ),
        # Ray's Python logger: a tab before the level
        (
            "2024-05-03 10:11:12,586\tINFO worker.py:1832 -- Connected",
            T0 + 0.586,
            "INFO",
            "worker.py:1832 -- Connected",
        ),
        # a tag that is no header's stays part of the message
        ("[note] no time here", None, None, "[note] no time here"),
    ],
)
def test_tagged_and_bracketed_emitters(
    line: str, ts: float | None, level: str | None, body: str
) -> None:
    h = parse_header(line, default_year=2024)
    assert h.timestamp == pytest.approx(ts) if ts is not None else h.timestamp is None
    assert h.level == level
    assert line[h.body_start :] == body


def test_a_collectors_time_before_the_programs_header() -> None:
    # kubectl logs --timestamps: the collector's UTC time wins, the program's header gives
    # the level and where the message starts.
    line = "2024-05-03T10:11:12.5Z W0503 12:11:12.123000 110607 torch/distributed/run.py:793] x"
    h = parse_header(line, default_year=2024)
    assert (h.timestamp, h.level, h.emitter, line[h.body_start :]) == (
        T0 + 0.5,
        "WARNING",
        "torch",
        "x",
    )
    plain = parse_header("2024-05-03T10:11:12Z hello there", default_year=2024)
    assert (plain.timestamp, plain.level, plain.body_start) == (T0, None, 21)


def test_srun_labels_a_line_that_starts_with_its_own_time() -> None:
    # srun -l before a program's stamped line: the task's rank, the program's time and level.
    h = parse_header("12: 2024-05-03 10:11:12,000 - root - WARNING - slow", 2024)
    assert (h.rank, h.timestamp, h.level) == (12, T0, "WARNING")


@pytest.mark.parametrize(
    ("line", "east"),
    [
        ("[2025-10-24T16:49:58-07:00] task 40 on dgx-h288 (SLURM_LOCALID=0) job 5", -7 * 3600),
        ("2025-03-07T12:39:40+0800 INFO x", 8 * 3600),
        ("2025-03-07T12:39:40.5+05:30 INFO x", 5 * 3600 + 1800),
        ("2025-03-07T12:39:40Z INFO x", 0),
        ("2024-05-03T10:11:12.123Z stdout F hello", 0),  # a collector's stamp
        ("1730000000.123 hello", 0),  # epoch seconds: no wall clock at all
        ("[NeMo W 2025-10-24 16:50:07 nemo_logging:405] x", None),
        ("Oct 24 18:12:31 dgx-h288 kernel: [173691.523709] watchdog: BUG", None),
        ("[rank0]:[E1024 18:42:08.369118928 ProcessGroupNCCL.cpp:1595] x", None),
        ("2025-03-07 12:39:40,123 - INFO - x", None),
    ],
)
def test_the_zone_a_stamp_states(line: str, east: int | None) -> None:
    ts, stated = stated_zone(line, 2025)
    assert ts is not None and stated == east
    # Read in a job whose unzoned stamps are 3 h east of UTC: only those move, by 3 h.
    assert parse_local(line, 2025, 3 * 3600) == ts - (3 * 3600 if east is None else 0)
    assert parse_local(line, 2025, 0) == ts


def test_a_line_without_a_time_states_no_zone() -> None:
    assert stated_zone("NCCL INFO Bootstrap : Using bond0:10.46.9.96<0>", 2025) == (None, None)
    assert parse_local("no time here", 2025, 3600) is None


def test_an_indented_ray_prefix_ends_where_its_label_does() -> None:
    # verl-project/verl#4799, pasted indented: the frame after Ray's label is the line's body
    line = '  (WorkerDict pid=42417, ip=10.0.0.5)   File "/opt/verl/decorator.py", line 456, in f'
    assert line[prefix_end(line) :] == '  File "/opt/verl/decorator.py", line 456, in f'


def test_an_indented_paste_keeps_its_launcher_prefixes() -> None:
    # deepspeedai/DeepSpeed#7869, every line of the paste indented by a space: the rank and
    # the body after "[rank3]:", as unindented; srun's "N: " needs the line's start
    from l4_plugin.ingest.header import parse_header, rank_prefix

    line = '[rank3]:   File "/home/u/DeepSpeed/deepspeed/runtime/engine.py", line 363, in f'
    flat, indented = parse_header(line), parse_header(" " + line)
    assert indented.rank == flat.rank == 3
    assert (" " + line)[indented.body_start :] == line[flat.body_start :]
    assert rank_prefix(" [rank3]: ValueError: x") == (3, 9)
    assert rank_prefix("  3: x")[0] is None and rank_prefix("3: x")[0] == 3


def test_a_runners_stream_label_is_a_prefix() -> None:
    # mila-iqia/milabench#183: each process's lines under "NAME.N [stderr] "; NCCL's "Last
    # error:" and its words then continue torch's error as under any launcher's prefix
    line = "opt-1_3b.0 [stderr] ncclInternalError: Internal check failed."
    assert line[prefix_end(line) :] == "ncclInternalError: Internal check failed."
    assert prefix_end("2024-01-01 [stderr] x") == 0
