from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from l4_plugin.errors import IngestError
from l4_plugin.ingest.header import parse_header
from l4_plugin.ingest.masking import Masker, digit_key
from l4_plugin.ingest.parser import LineParser, kind_spec, parse_file
from l4_plugin.ingest.reader import read_blocks


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_parse_file_bad_bytes_nul_crlf(tmp_path: Path) -> None:
    data = (
        b"2024-05-03T10:11:12Z ok \xff\xfe broken\r\n"
        b"node-a07:1:2 [0] NCCL WARN x\x00y\r\n"
        b"[rank2]:Traceback (most recent call last):\n"
        b"\n"
        b"last line without newline"
    )
    lines = list(parse_file(_write(tmp_path / "r.log", data)))
    assert [p.line for p in lines] == [1, 2, 3, 4, 5]
    assert lines[0].timestamp is not None
    assert "\ufffd" not in lines[0].template or "\r" not in lines[0].template
    assert lines[1].level == "WARNING"
    assert "\x00" not in lines[1].template and "xy" in lines[1].template
    assert (lines[2].rank, lines[2].level) == (2, "ERROR")
    assert all(p.template_id == lines[0].template_id for p in lines[:1])


def test_parse_file_empty(tmp_path: Path) -> None:
    assert list(parse_file(_write(tmp_path / "e.log", b""))) == []


def test_parse_file_gz_and_glog_year(tmp_path: Path) -> None:
    text = "2023-05-03T10:11:12Z start\nE0503 10:11:13.5 1 a.cpp:1] boom\n"
    path = tmp_path / "r.log.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(text)
    first, second = list(parse_file(path))
    assert second.level == "ERROR"
    assert second.timestamp == pytest.approx(first.timestamp + 1.5)  # year 2023 carried over


def test_truncated_gz_yields_readable_lines_then_raises(tmp_path: Path) -> None:
    body = "".join(f"line {i} of a long log with words\n" for i in range(200_000)).encode()
    whole = gzip.compress(body)
    path = _write(tmp_path / "t.log.gz", whole[: len(whole) // 2])
    got = []
    with pytest.raises(IngestError, match=r"truncated or corrupt.*t\.log\.gz"):
        for parsed in parse_file(path):
            got.append(parsed)
    assert len(got) > 1000
    assert [p.line for p in got[:3]] == [1, 2, 3]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"cannot open log file.*nope\.log"):
        list(parse_file(tmp_path / "nope.log"))


def test_feed_alignment_and_long_lines() -> None:
    parser = LineParser()
    lines = ["x" * 100_000 + " 1", "x" * 100_000 + " 2", "short 3", ""]
    kinds = parser.feed(lines)
    assert len(kinds) == 4 and kinds[0] is kinds[1]
    parser.finish()
    assert all(k.template is not None for k in kinds)


def test_line_kind_fields() -> None:
    parser = LineParser()
    a, b = parser.feed(
        [
            "[rank3]:[E0503 10:11:12.1 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught",
            "[rank5]:[E0503 10:11:19.9 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught",
        ]
    )
    assert a is b
    assert (a.level, a.emitter, a.has_timestamp, a.rank_prefix) == ("ERROR", "torch", True, True)
    assert a.body == "[Rank <RANK>] Watchdog caught"
    assert a.template is None
    parser.finish()
    assert a.template is not None and a.template.text == "[Rank <RANK>] Watchdog caught"
    assert {a} == {b}  # identity hash: usable as a rollup key


def test_a_redrawn_progress_bar_is_its_last_frame(tmp_path: Path) -> None:
    # tqdm redraws its bar with a carriage return; CRLF still ends a line; line numbers stay.
    frames = [f"Epoch 1: {p}%|##| {p}/100 [00:0{p // 50}<00:01, 9.1it/s]" for p in (0, 50, 100)]
    path = tmp_path / "tqdm.log"
    path.write_bytes(("start\r\n" + "\r".join(frames) + "\r\nRuntimeError: CUDA error\n").encode())
    lines = [line for block in read_blocks(path) for line in block.lines]
    assert lines == ["start", frames[-1], "RuntimeError: CUDA error"]


def test_a_redrawn_bar_keeps_the_labels_its_line_began_with(tmp_path: Path) -> None:
    # Ray's log monitor, torchrun's --tee, srun -l and mpirun label what they read a newline at
    # a time: the label starts the line, and every frame of the bar in it is that worker's.
    # A line over MAX_LINE_BYTES (read in pieces) keeps its label too.
    from l4_plugin.limits import MAX_LINE_BYTES

    frames = [f" {p}%|##| {p}/202 [00:0{p // 50}<00:01, 4.1s/it]" for p in (0, 50, 100)]
    # (Ray's label ends with a blank of its own, before the worker's text)
    labels = ["(RayTrainWorker pid=1594552, ip=10.83.18.222) ", "[default3]:", "[1,5]<stderr>:"]
    many = "\r".join(frames * (MAX_LINE_BYTES // 40))
    path = tmp_path / "bars.log"
    bar = "\r".join(frames)
    text = "".join(f"{label}{bar}\n" for label in labels)
    path.write_bytes((text + f"{labels[0]}{many}\nplain\r\n").encode())
    lines = [line for block in read_blocks(path) for line in block.lines]
    assert lines == [*(label + frames[-1] for label in labels), labels[0] + frames[-1], "plain"]


def test_terminal_colours_are_removed_and_offsets_stay_those_of_the_file(tmp_path: Path) -> None:
    # torchtitan colours its step line; a rich handler its level; an OSC link its URL.
    step = "\x1b[31mstep:  5  \x1b[32mloss:  9.84\x1b[39m"
    link = "\x1b]8;;http://h:8265\x1b\\dashboard\x1b]8;;\x1b\\ up"
    path = tmp_path / "c.log"
    path.write_bytes(f"a\n{step}\n\x1b[1;33mWARNING\x1b[0m slow\n{link}\nz\n".encode())
    [block] = read_blocks(path)
    assert block.lines == ["a", "step:  5  loss:  9.84", "WARNING slow", "dashboard up", "z"]
    raw = path.read_bytes()
    assert [block.offset(i) for i in range(5)] == [
        0,
        2,
        raw.index(b"\x1b[1;33m"),
        raw.index(b"\x1b]8"),
        raw.rindex(b"z"),
    ]


@pytest.mark.parametrize(
    ("raw", "level", "body"),
    [
        # hiyouga/LlamaFactory#2424: a watchdog's error printed after a dataset's bar frame
        (
            "Running tokenizer on dataset:   9%|#7   | 280000/2969526 [29:55<4:48:08, 155.57 "
            "examples/s][E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective "
            "operation timeout",
            "ERROR",
            "[Rank <RANK>] Watchdog caught collective operation timeout",
        ),
        # 2U1/Qwen-VL-Series-Finetune#17: after a bar with no description, under a rank prefix
        (
            "  0%|          | 0/60 [00:00<?, ?it/s][rank0]:[E ProcessGroupNCCL.cpp:563] "
            "[Rank 0] Watchdog caught collective operation timeout",
            "ERROR",
            "[Rank <RANK>] Watchdog caught collective operation timeout",
        ),
        # a Trainer's metrics after its bar, Ray's note on a frame: the bar's line
        (" 10%|#   | 1/10 [00:01<00:09, 1.0it/s]{'loss': 0.3, 'epoch': 0.1}", None, "<NUM>%|"),
        (" 50%|#   | 1/2 [00:01<00:01, 1.0it/s] [repeated 7x across cluster]", None, "<NUM>%|"),
    ],
)
def test_a_record_printed_after_a_bars_frame_is_that_records(
    raw: str, level: str | None, body: str
) -> None:
    [kind] = LineParser().feed([raw])
    assert (kind.level, kind.body[: len(body)]) == (level, body)
    assert "%|" in kind.key  # the line as printed, the frame first


def test_block_keys_are_those_of_the_lines_the_parser_sees(tmp_path: Path) -> None:
    # The reader hands each block's digit keys to the parser (one pass over the block's text);
    # a line cut at MAX_LINE_CHARS must be keyed as cut: two lines that differ only past the cut
    # are one kind, and the keys the scan gets are the cut lines' own.
    from l4_plugin.ingest.jobdir import discover
    from l4_plugin.ingest.scanner import chunks
    from l4_plugin.ingest.sources import file_streams
    from l4_plugin.limits import MAX_LINE_CHARS

    head = "2024-05-03 10:00:01,000 WARNING payload "
    long_a = head + "x" * MAX_LINE_CHARS + " tail 1 alpha"
    long_b = head + "x" * MAX_LINE_CHARS + " other 22 beta"
    lines = ["2024-05-03 10:00:00,000 INFO step 17 done", long_a, long_b, "plain 3"]
    (tmp_path / "job" / "n1").mkdir(parents=True)
    (tmp_path / "job" / "n1" / "rank0.log").write_text("\n".join(lines) + "\n")
    [stream] = file_streams(discover(tmp_path / "job"))
    parser = LineParser()
    problems: list[str] = []
    got = list(chunks(stream, parser, problems, set()))
    seen = [line for c in got for line in c[0]]
    kinds = [kind for c in got for kind in c[1]]
    keys = [key for c in got for key in (c[4] or [])]
    assert [len(line) for line in seen[1:3]] == [MAX_LINE_CHARS, MAX_LINE_CHARS]
    assert kinds[1] is kinds[2] and len(problems) == 2
    assert keys == [parser.masker.key(line) for line in seen]
    # Lines that fit: the keys are the ones a parser computes itself, the kinds the same.
    short = tmp_path / "job" / "n1" / "rank0.log"
    short.write_text("\n".join([lines[0], lines[3], "step 18 done"]) + "\n")
    [stream] = file_streams(discover(tmp_path / "job"))
    fresh = LineParser()
    [(seen, kinds, _, _, keys)] = list(chunks(stream, fresh, [], set()))
    assert keys == [fresh.masker.key(line) for line in seen]
    assert [k.key for k in kinds] == [k.key for k in LineParser().feed(seen)]


def test_block_offsets_and_keys_whatever_the_bytes(tmp_path: Path) -> None:
    """Each line's byte offset and digit key, asked in order, out of order, of ASCII blocks and
    of blocks with NULs, CRs or bytes that are not UTF-8: what the file's bytes say."""
    from l4_plugin.ingest.masking import digit_key
    from l4_plugin.ingest.reader import Block, _block

    bodies = [
        b"step 12 ok\nstep 345 ok\n\nlast 6",
        b"nul\x00 7 here\nstep 8\nend 9",
        b"caf\xc3\xa9 10\nbad \xff\xfe 11\nstep 12",
        b"crlf 13\r\nbar 14\rbar 15\nend 16",
    ]
    for data in bodies:
        parts = data.split(b"\n")
        want = [100 + sum(len(x) + 1 for x in parts[:i]) for i in range(len(parts))]
        block = _block(data, 100)
        keys = block.digit_keys()
        if keys is not None:  # a block with CRs: the parser keys its cleaned lines itself
            assert keys == [digit_key(line) for line in block.lines]
        assert [block.offset(i) for i in range(len(want))] == want
        again = _block(data, 100)
        order = [2, 0, 1, *range(len(want))]
        assert [again.offset(i) for i in order] == [want[i] for i in order]
        assert Block(list(block.lines)).offset(0) is None


class _CountingMasker(Masker):
    """The shipped rules, counting the keys the regexes run over."""

    def __init__(self) -> None:
        shipped = Masker.load()
        super().__init__(shipped.rules, shipped.normalise_digits, shipped.normalise_hex)
        self.masked: list[str] = []

    def mask_folded(self, text: str) -> str:
        self.masked.extend(text.split("\n"))
        return super().mask_folded(text)


def test_keys_that_fold_alike_are_masked_once() -> None:
    """NCCL's per-rank ``comm 0x…`` pointers: one regex pass for every key that folds alike,
    the same kinds as masking each key."""
    lines = [
        "node-a07:1234:5678 [3] NCCL INFO comm 0x7f3a2b00 rank 3 nranks 16 - Init START",
        "node-a07:1234:5679 [4] NCCL INFO comm 0x5e1c9d00 rank 4 nranks 16 - Init START",
        "node-a07:1234:5680 [5] NCCL INFO comm 0xabcdef12 rank 5 nranks 16 - Init START",
        "node-a07:1234:5681 [6] NCCL INFO comm 0x0 rank 6 nranks 16 - Init START",
    ]
    masker = _CountingMasker()
    parser = LineParser(masker)
    first = parser.feed(lines[:2])
    rest = parser.feed(lines[2:])
    assert len({id(k) for k in first + rest}) == 1
    # one key (then the body of its one kind), not four
    assert len(masker.masked) == 2 and "0x0" in masker.masked[0]
    unfolded = LineParser(Masker(masker.rules, True, False)).feed(lines)
    assert [k.key for k in first + rest] == [k.key for k in unfolded]


def test_the_folded_keys_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from l4_plugin.ingest import parser as parser_module

    lines = [f"n:1:{i} [0] NCCL INFO comm 0x{i:x}ab rank {i} - Init START" for i in range(50)]
    lines += [f"step {i} done" for i in range(50)]
    kept = LineParser()
    want = [k.key for k in kept.feed(lines[:60])] + [k.key for k in kept.feed(lines[60:])]
    monkeypatch.setattr(parser_module, "MAX_FOLDED_KEYS", 1)
    small = LineParser()
    got = [k.key for k in small.feed(lines[:60])] + [k.key for k in small.feed(lines[60:])]
    assert got == want and len(small._by_folded) <= 2 < len(kept._by_folded)


def test_a_parser_that_learnt_the_masks_runs_no_regex_for_them() -> None:
    """Scanners in two processes share what their regexes computed (``mask_log`` →
    ``learn_masks``): the learner's kinds are the same, and its masker is never called."""
    lines = [
        "node-a07:1234:5678 [3] NCCL INFO comm 0x7f3a2b00 rank 3 nranks 16 - Init START",
        "2026-01-01 00:00:01 INFO iteration 17/100 | loss 2.31 | lr 3e-4",
        "[rank5]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
        "RuntimeError: CUDA error: an illegal memory access was encountered at 10.1.2.3:29500",
    ]
    teacher = LineParser()
    teacher.mask_log = []
    taught = teacher.feed(lines)
    assert len(teacher.mask_log) >= len(lines)  # the lines' keys and their kinds' bodies
    masker = _CountingMasker()
    learner = LineParser(masker)
    learner.learn_masks(teacher.mask_log)
    learnt = learner.feed(lines)
    assert masker.masked == []
    assert [kind_spec(k) for k in learnt] == [kind_spec(k) for k in taught]
    fresh = LineParser(_CountingMasker())
    assert [kind_spec(k) for k in fresh.feed(lines)] == [kind_spec(k) for k in taught]


def test_a_kinds_body_is_the_mask_of_its_lines_body() -> None:
    """The body goes through the folded keys' cache: the same text as masking it alone."""
    masker = Masker.load()
    lines = [
        "2026-01-01 00:00:01 INFO iteration 17/100 | loss 2.31 | lr 3e-4",
        "2026-01-01 00:00:01 INFO 2026-01-01 00:00:01 INFO nested header 0xdeadbeef",
        "node-a07:1234:5678 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<1234>",
        "plain line without a header, host gpu-17 port 29500",
        "[2026-01-01 00:00:01,123] [ERROR] [engine.py:77] 0x7f3a2b00 failed",
    ]
    for line in lines:
        kind = LineParser(masker).feed([line])[0]
        body_start = parse_header(line).body_start
        assert kind.body == masker.mask(digit_key(line)[body_start:]).strip()
