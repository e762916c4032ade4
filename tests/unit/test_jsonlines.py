"""Logs stored as JSON lines: read as the text lines of the program that printed them."""

from __future__ import annotations

import calendar
import json
from pathlib import Path

import pytest

from l4_plugin.ingest.header import parse_header
from l4_plugin.ingest.hosts import plan
from l4_plugin.ingest.jobdir import discover
from l4_plugin.ingest.jsonlines import is_json_lines, render, rendered
from l4_plugin.ingest.reader import read_blocks

T0 = calendar.timegm((2025, 9, 12, 7, 15, 57, 0, 0, 0))


def _write(path: Path, objects: list[dict[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return path


@pytest.mark.parametrize(
    ("obj", "line", "ts", "level", "rank", "body"),
    [
        (  # a rank's stdout with the framework's own header inside the message
            {
                "ts": T0 + 0.072,
                "host": "a3",
                "rank": 216,
                "stream": "stdout",
                "msg": "[2025-09-12 08:15:57,072] [WARNING] [engine.py:1:f] slow step",
            },
            "[rank216]: 2025-09-12T07:15:57.072000Z [2025-09-12 08:15:57,072] [WARNING] "
            "[engine.py:1:f] slow step",
            T0 + 0.072,
            "WARNING",
            216,
            "slow step",
        ),
        (  # ISO text time, a level field, no rank
            {"time": "2025-09-12T09:15:57+02:00", "level": "error", "message": "boom"},
            "2025-09-12T07:15:57.000000Z ERROR boom",
            T0,
            "ERROR",
            None,
            "boom",
        ),
        (  # a kernel line: written as syslog writes one, read as the host's kernel line
            {"ts": "2025-09-12T07:15:57Z", "host": "a3", "stream": "kernel", "msg": "NVRM: Xid 79"},
            "Sep 12 07:15:57.000000 2025 a3 kernel: NVRM: Xid 79",
            T0,
            None,
            None,
            "NVRM: Xid 79",
        ),
        (  # Docker's json-file driver
            {"log": "Traceback (most recent call last):\n", "stream": "stderr", "time": T0 * 10**9},
            "2025-09-12T07:15:57.000000Z Traceback (most recent call last):",
            T0,
            "ERROR",
            None,
            "Traceback (most recent call last):",
        ),
    ],
)
def test_each_object_is_the_line_its_program_printed(
    obj: dict[str, object], line: str, ts: float, level: str | None, rank: int | None, body: str
) -> None:
    assert render(obj) == line
    h = parse_header(line)
    assert h.timestamp == pytest.approx(ts)
    assert (h.level, h.rank, line[h.body_start :]) == (level, rank, body)
    if obj.get("stream") == "kernel":
        assert (h.emitter, h.host) == ("kernel", "a3")


def test_a_redrawn_bar_is_its_last_frame() -> None:
    # Lightning's tqdm bar on stderr: a collector ships the frames written since its last read
    # as one message; a terminal shows the last (the job's latest step), so does L4.
    frames = [
        f"Epoch 0:  70%|███████   | {k}/411 [24:42<10:11,  0.20it/s, global_step={k - 1}]"
        for k in (291, 292, 300)
    ]
    obj = {"ts": T0, "rank": 0, "stream": "stderr", "msg": "\r" + "\r".join(frames) + "\r"}
    assert render(obj).endswith("| 300/411 [24:42<10:11,  0.20it/s, global_step=299]")


def test_a_redrawn_bar_keeps_its_objects_time() -> None:
    # HF Trainer's tqdm frames begin with the percentage's padding (" 37%|"): that is no
    # traceback frame continuing a record, so the line keeps the time its last frame was drawn.
    frames = [f" 37%|███       | {k}/2141 [29:{k - 780:02d}<48:09,  2.17s/it]" for k in (809, 810)]
    obj = {"ts": T0, "rank": 0, "stream": "stderr", "msg": "\r" + "\r".join(frames)}
    h = parse_header(render(obj))
    assert h.timestamp == pytest.approx(T0)
    assert render(obj).endswith("| 810/2141 [29:30<48:09,  2.17s/it]")
    # (an indented line of its own is still a record's continuation)
    assert parse_header(render({"ts": T0, "rank": 0, "msg": "  File x.py"})).timestamp is None


def test_a_file_of_json_lines_is_found_and_read_as_text(tmp_path: Path) -> None:
    objects: list[dict[str, object]] = [
        {"ts": T0 + i, "host": "a3", "rank": i % 2, "msg": f"step {i} loss 2.{i}"}
        for i in range(30)
    ]
    path = _write(tmp_path / "job" / "a3.jsonl", objects)
    path.with_name("notes.json").write_text('{"not": "a log"}\n')
    [found] = discover(tmp_path / "job")
    assert (found.node, found.relative) == ("a3", "a3.jsonl")
    blocks = list(read_blocks(path))
    lines = [line for b in blocks for line in b.lines]
    assert lines[3] == "[rank1]: 2025-09-12T07:16:00.000000Z step 3 loss 2.3"
    # offsets stay the file's: line i starts after the i-th newline of the raw bytes
    raw = path.read_bytes()
    starts = [0, *[i + 1 for i, c in enumerate(raw) if c == 10][:-1]]
    assert [b.offset(i) for b in blocks for i in range(len(b.lines))] == starts


def test_a_file_of_several_hosts_is_routed_by_its_host_field(tmp_path: Path) -> None:
    objects: list[dict[str, object]] = [
        {"ts": T0 + i, "host": f"gpu-{i % 3}", "msg": f"line {i}"} for i in range(60)
    ]
    path = _write(tmp_path / "all.jsonl", objects)
    lines = [line for b in read_blocks(path) for line in b.lines]
    router = plan(lines)
    assert router is not None and router.hosts == ("gpu-0", "gpu-1", "gpu-2")
    assert router.route(lines[4]) == ("gpu-1", "2025-09-12T07:16:01.000000Z line 4")


@pytest.mark.parametrize("hosts", [1, 3])
def test_reads_of_any_size_render_the_same_lines(tmp_path: Path, hosts: int) -> None:
    # The probe reads a file's start in small reads, the scan in large ones: JSON lines are
    # told from text, and one host's from several hosts', on the same lines either way.
    # (a banner of text first; a second host only after the first 3,000 lines)
    objects: list[dict[str, object]] = [
        {
            "ts": T0 + i,
            "host": f"gpu-{i % hosts if i > 3000 else 0}",
            "rank": i % 4,
            "msg": f"step {i} loss 2.{i}",
        }
        for i in range(6000)
    ]
    path = _write(tmp_path / "all.jsonl", objects)
    path.write_text("launching job 7\n" + path.read_text())
    text = tmp_path / "x.log"
    text.write_text("".join(f"[rank{i % 4}]: step {i}\n" for i in range(3000)))
    for p in (path, text):
        whole = [line for b in read_blocks(p) for line in b.lines]
        for size in (64, 1000, 64 << 10):
            assert [line for b in read_blocks(p, size) for line in b.lines] == whole, (p, size)
    rendered = [line for b in read_blocks(path) for line in b.lines]
    assert rendered[0] == "launching job 7"
    assert ("gpu-0" in rendered[2]) == (hosts == 3)


def test_text_that_is_not_json_lines_is_left_alone(tmp_path: Path) -> None:
    assert not is_json_lines(["{not json", "plain", '{"a": 1}'])
    assert not is_json_lines(['{"no_message_field": 1}'] * 5)
    path = tmp_path / "x.log"
    path.write_text('plain\n{"msg": "one object among text"}\n')
    assert [line for b in read_blocks(path) for line in b.lines] == [
        "plain",
        '{"msg": "one object among text"}',
    ]


def test_a_traceback_in_json_lines_stays_one_record() -> None:
    # A collector stored torchrun's tee'd lines ("[rank102]:" already in the message) one object
    # per line: the frames keep their indentation right behind the prefix, so the record's
    # reader sees a traceback, named by the exception that ends it.
    from l4_plugin.ingest.parser import LineParser
    from l4_plugin.ingest.rollup import NodeRollup
    from l4_plugin.ingest.stages import default_stage_rules

    said = [
        "[rank102]: Traceback (most recent call last):",
        '[rank102]:   File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", '
        "line 1465, in _next_data",
        "[rank102]:     idx, data = self._get_data()",
        "[rank102]: RuntimeError: DataLoader worker (pid 185572) is killed by signal: Bus error.",
    ]
    lines, sources = rendered(
        [json.dumps({"ts": T0 + i / 1000, "rank": 102, "msg": m}) for i, m in enumerate(said)],
        False,
    )
    assert sources == [0, 1, 2, 3]
    assert lines[0] == "[rank102]: 2025-09-12T07:15:57.000000Z Traceback (most recent call last):"
    assert lines[2] == "[rank102]:     idx, data = self._get_data()"
    rollup = NodeRollup("n1", default_stage_rules())
    rollup.scan("a.jsonl", 0, [(lines, LineParser().feed(lines), None, 0)])
    [record] = [key[0] for key in rollup.groups]
    assert record.body.startswith("RuntimeError: DataLoader worker"), record.body


def test_a_coloured_message_reads_as_a_terminal_shows_it() -> None:
    # torchtitan colours its step line; a collector keeps the escapes inside the JSON string
    msg = "[titan] 2025-09-13 20:20:16,197 - root - INFO - \x1b[31mstep: 270  \x1b[32mloss:  3.7656"
    assert render({"ts": T0, "rank": 0, "msg": msg}).endswith("INFO - step: 270  loss:  3.7656")


def test_torchelastics_error_file_is_the_traceback_it_holds_at_its_time(tmp_path: Path) -> None:
    # torch/distributed/elastic/multiprocessing/errors/error_handler.py (``@record``): one
    # object, the exception, its traceback as printed and the second it was raised.
    stack = (
        "Traceback (most recent call last):\n"
        '  File "/app/train.py", line 182, in save_checkpoint\n'
        "    dist.barrier()\n"
        "RuntimeError: [/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 30000ms "
        "for recv operation to complete\n"
    )
    error = {
        "message": {
            "message": "RuntimeError: [/gloo/transport/tcp/unbound_buffer.cc:78] Timed out",
            "extraInfo": {"py_callstack": stack, "timestamp": str(T0)},
        }
    }
    path = _write(tmp_path / "job" / "h1" / "attempt_0" / "1" / "error.json", [error])
    (path.parent / "stderr.log").write_text("[rank3]: starting\n")
    assert {f.relative for f in discover(tmp_path / "job")} >= {"h1/attempt_0/1/error.json"}
    blocks = list(read_blocks(path))
    lines = [line for b in blocks for line in b.lines]
    assert lines == [
        "2025-09-12T07:15:57.000000Z Traceback (most recent call last):",
        '  File "/app/train.py", line 182, in save_checkpoint',
        "    dist.barrier()",
        "2025-09-12T07:15:57.000000Z RuntimeError: [/gloo/transport/tcp/unbound_buffer.cc:78] "
        "Timed out waiting 30000ms for recv operation to complete",
    ]
    assert [b.offset(i) for b in blocks for i in range(len(b.lines))] == [0, 0, 0, 0]
    header = parse_header(lines[-1], 2025)
    assert header.timestamp == T0 and lines[-1][header.body_start :].startswith("RuntimeError")
    # Any other object with a message field stays one line.
    assert rendered([json.dumps({"message": {"text": "x"}})], False)[1] == [0]


def test_a_kernel_line_among_the_ranks_output_is_the_system_logs(tmp_path: Path) -> None:
    # A collector ships the node's kernel messages with its ranks' output: a soft lockup there
    # is the kernel's word on the node, not a line its ranks printed (no sign they still ran).
    from l4_plugin.ingest.scanner import Scanner
    from l4_plugin.ingest.sources import file_streams

    objects: list[dict[str, object]] = [
        {"ts": T0 + i, "host": "a3", "rank": 0, "msg": f"step {i} loss 2.{i}"} for i in range(5)
    ]
    objects.append(
        {
            "ts": T0 + 9,
            "host": "a3",
            "stream": "kernel",
            "msg": "watchdog: BUG: soft lockup - CPU#27 stuck for 22s! [python3:2424939]",
        }
    )
    _write(tmp_path / "job" / "a3.jsonl", objects)
    streams = file_streams(discover(tmp_path / "job"))
    scanner = Scanner()
    done = scanner.scan_node(streams)
    digest = scanner.digest(done, [0])
    kernel = {i for i, kind in enumerate(done.order) if kind.emitter == "kernel"}
    assert kernel and digest.rank_logs and not kernel & set(digest.rank_logs)
    assert digest.system_logs  # the job has kernel logs: a baseline's lack of a line counts
