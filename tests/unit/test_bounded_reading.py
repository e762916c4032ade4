"""Bounded work on hostile files (issue 34, SECURITY.md *Bounded work*): a line without end is
read past, not held; a gzip stream that inflates beyond what logs do is cut, the lines before it
read. Behaviour only: the memory and time a real probe costs are measured by
``benchmarks/bench_bombs.py`` (benchmarks/RESULTS.md)."""

from __future__ import annotations

import gzip
import random
import zlib
from pathlib import Path

import pytest

from l4_plugin.errors import FileCutError, IngestError
from l4_plugin.ingest import reader
from l4_plugin.ingest.jobdir import discover
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.reader import Block, GuardedGzip, read_blocks
from l4_plugin.ingest.scanner import chunks
from l4_plugin.ingest.sources import file_streams
from l4_plugin.limits import MAX_LINE_BYTES, MAX_LINE_CHARS, RATIO_WINDOW, ReadLimits

LINE = b"2026-11-27 10:00:00 INFO the same line again and again\n"


def _lines(path: Path, chunk_bytes: int = 4096, **limits: float) -> tuple[list[Block], str]:
    """Every block ``read_blocks`` yields of ``path``, and the error it ended with ('' none)."""
    blocks: list[Block] = []
    try:
        for block in read_blocks(path, chunk_bytes, ReadLimits(**limits)):  # type: ignore[arg-type]
            blocks.append(block)
    except IngestError as exc:
        return blocks, str(exc)
    return blocks, ""


def _reference(data: bytes) -> list[str]:
    """The lines as a reader that held every line whole shows them (NUL dropped, a line redrawn
    with CR its last non-empty frame)."""
    out = []
    for line in data.decode("utf-8", errors="replace").replace("\x00", "").split("\n"):
        frames = [f for f in line.split("\r") if f] if "\r" in line else [line]
        out.append(frames[-1] if frames else "")
    return out


def test_a_line_without_end_is_cut_and_read_past_with_one_warning(tmp_path: Path) -> None:
    """A 5 MiB line between short ones: its block holds its first ``MAX_LINE_BYTES`` bytes
    only, says how long it was, and the lines after it keep their numbers and byte offsets;
    the scan warns once, naming the file and line, and reads the rest of the file."""
    job = tmp_path / "job" / "node-1"
    job.mkdir(parents=True)
    before = b"".join(b"2026-11-27 10:00:0%d INFO step %d\n" % (i, i) for i in range(3))
    monster = b"2026-11-27 10:00:04 WARNING dump " + b"x" * (5 << 20)
    after = b"2026-11-27 10:00:05 ERROR after the dump\nlast line without newline"
    (job / "rank0.log").write_bytes(before + monster + b"\n" + after)
    blocks, error = _lines(job / "rank0.log")
    assert not error
    lines = [line for b in blocks for line in b.lines]
    assert len(lines) == 6 and lines[4:] == [
        "2026-11-27 10:00:05 ERROR after the dump",
        "last line without newline",
    ]
    [cut] = [b for b in blocks if b.cut]
    assert cut.lines == [monster[:MAX_LINE_BYTES].decode()] and cut.cut == len(monster)
    assert cut.offset(0) == len(before) and cut.end == len(before) + len(monster)
    [tail] = [b for b in blocks if "after the dump" in b.lines[0]]
    assert tail.offset(0) == len(before) + len(monster) + 1
    assert tail.offset(1) == len(before) + len(monster) + 1 + after.index(b"\n") + 1
    # The scan: one warning naming the file and line, the line cut, the rest read.
    [stream] = file_streams(discover(tmp_path / "job"))
    problems: list[str] = []
    long_lines: set[int] = set()
    seen = [line for c in chunks(stream, LineParser(), problems, long_lines) for line in c[0]]
    assert problems == [
        f"node-1/rank0.log:4: line of {len(monster):,} bytes truncated to {MAX_LINE_CHARS}"
    ]
    assert long_lines == {4} and len(seen) == 6 and len(seen[3]) == MAX_LINE_CHARS
    assert seen[3] == monster[:MAX_LINE_CHARS].decode() and seen[4].endswith("after the dump")


def test_a_file_that_is_one_endless_line(tmp_path: Path) -> None:
    path = tmp_path / "one.log"
    path.write_bytes(b"y" * (3 * MAX_LINE_BYTES + 5))
    blocks, error = _lines(path, chunk_bytes=1000)
    assert not error and [b.cut for b in blocks] == [3 * MAX_LINE_BYTES + 5]
    assert blocks[0].lines == ["y" * MAX_LINE_BYTES]


def test_long_lines_show_what_a_reader_holding_them_whole_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random files of long lines made of CR frames (tqdm redrawing its bar), NUL holes and
    plain text, read in small pieces with a small cap: every line is what the whole-line
    reader shows, or (a line longer than the cap that outgrew a read) its first bytes up to
    the cap, flagged with the length shown; a line the reader could not hold whole is."""
    cap = 64
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", cap)
    rng = random.Random(7)
    pieces = [b"a", b"bc", b"\r", b"\r\r", b"\x00" * 9, b"\x00" * 200, b"frame 12% ", b"z" * 90]
    read_past = cut_lines = 0
    for case in range(300):
        lines = [
            b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40)))
            for _ in range(rng.randrange(1, 6))
        ]
        data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
        path = tmp_path / f"{case}.log"
        path.write_bytes(data)
        size = rng.choice([7, 33, 128, 4096])
        blocks, error = _lines(path, chunk_bytes=size)
        assert not error
        got = [(line, b.cut) for b in blocks for line in b.lines]
        want = _reference(data)
        if data.endswith(b"\n"):
            want = want[:-1]  # nothing after the last newline
        assert len(got) == len(want), data
        for (line, cut), whole, raw in zip(got, want, data.split(b"\n"), strict=False):
            read_past += len(raw) > size + cap
            cut_lines += bool(cut)
            if cut:
                assert (line, cut) == (whole[:cap], len(whole)), data
            else:
                assert line == whole, data
                # Held whole only if it fit in a read and the cap, or what is shown fits.
                assert len(raw) <= size + cap or len(whole) <= cap, data
    assert read_past > 100 and cut_lines > 50  # the cases cover what they should


def _member(data: bytes) -> bytes:
    out = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: one gzip member
    return out.compress(data) + out.flush()


def test_a_gzip_bomb_is_cut_before_its_lines_are_read(tmp_path: Path) -> None:
    """A few hundred MB of one repeated line in concatenated members (a few hundred KB on
    disk), after a member of real lines: those are read, the bomb is cut in its first MiBs."""
    real = b"".join(b"2026-11-27 10:00:%02d INFO step %d\n" % (i % 60, i) for i in range(500))
    repeated = LINE * ((16 << 20) // len(LINE))
    path = tmp_path / "bomb.log.gz"
    path.write_bytes(_member(real) + _member(repeated) * 20)  # 320 MiB inflated
    assert path.stat().st_size < 1 << 20
    blocks, error = _lines(path, chunk_bytes=4 << 20)
    lines = [line for b in blocks for line in b.lines]
    assert lines[:500] == real.decode().splitlines()
    assert len(lines) < 500 + (2 * RATIO_WINDOW) // len(LINE)  # cut within two windows
    assert error.startswith("log file cut — ") and str(path) in error
    assert "times its compressed size" in error and "a compression bomb" in error
    assert error.endswith("the lines before were read — hint: raise --max-inflate-ratio")


def test_the_guard_counts_concatenated_members_as_one_stream(tmp_path: Path) -> None:
    """Members each too small to be measured are measured together, and their inflated bytes
    add up against ``max_inflated_size``."""
    path = tmp_path / "members.log.gz"
    path.write_bytes(_member(LINE * (RATIO_WINDOW // 4 // len(LINE))) * 40)
    blocks, error = _lines(path, chunk_bytes=4 << 20)
    assert "a compression bomb" in error
    rng = random.Random(3)
    varied = b"".join(b"step %d loss %f\n" % (i, rng.random()) for i in range(20_000))
    path.write_bytes(_member(varied) * 10)
    blocks, error = _lines(path, chunk_bytes=64 << 10, max_inflated_size=len(varied) * 3)
    assert error.startswith("log file cut — ") and "inflates to more than" in error
    read = sum(len(b.lines) for b in blocks)
    assert 2 * 20_000 < read <= 3 * 20_000 + 1
    assert error.endswith("hint: raise --max-inflated-size")


def test_the_time_budget_cuts_a_slow_file(tmp_path: Path) -> None:
    path = tmp_path / "slow.log.gz"
    path.write_bytes(gzip.compress(LINE * 1000))
    _, error = _lines(path, max_read_seconds=1e-9)
    assert "took more than 1e-09 s to read and inflate" in error
    assert error.endswith("hint: raise --max-read-seconds")
    assert not _lines(path)[1]


def test_real_logs_are_not_cut_and_the_ratio_limit_is_a_parameter(tmp_path: Path) -> None:
    """Simulated training logs gzipped at the highest level inflate ~12 times: the default
    guard lets them through; a limit below that cuts them."""
    from l4_simulate import simulate

    simulate(tmp_path / "sim", nodes=4, iterations=400, seed=5, baselines=0, lines_per_iteration=4)
    data = b"".join(p.read_bytes() for p in sorted((tmp_path / "sim" / "job").rglob("*.log")))
    assert len(data) > 2 * RATIO_WINDOW
    path = tmp_path / "all.log.gz"
    path.write_bytes(gzip.compress(data, compresslevel=9))
    blocks, error = _lines(path, chunk_bytes=4 << 20)
    assert not error and sum(len(b.lines) for b in blocks) == data.count(b"\n")
    with open(path, "rb") as fh, GuardedGzip(fh, "all", ReadLimits()) as gz:
        while gz.read1(4 << 20):
            pass
    assert 3 < gz.peak_ratio < 30
    _, error = _lines(path, chunk_bytes=4 << 20, max_inflate_ratio=2.0)
    assert "a compression bomb" in error and "limit 2)" in error


def test_a_cut_file_travels_as_one_line_for_the_job_document(tmp_path: Path) -> None:
    """What the scan keeps of a cut file (``chunks(..., cut=)``), and the error pickled to
    another process and back."""
    import pickle

    job = tmp_path / "job" / "node-1"
    job.mkdir(parents=True)
    (job / "rank0.log.gz").write_bytes(_member(b"ok 1\n") + _member(LINE * 200_000))
    [stream] = file_streams(discover(tmp_path / "job"))
    problems: list[str] = []
    cut: list[str] = []
    seen = [line for c in chunks(stream, LineParser(), problems, set(), cut) for line in c[0]]
    assert seen == ["ok 1"] and problems == []
    [what] = cut
    assert what.startswith("node-1/rank0.log.gz: inflates ") and "compression bomb" in what
    exc = FileCutError("a.log.gz", "why", "raise --x")
    back = pickle.loads(pickle.dumps(exc))
    assert isinstance(back, FileCutError) and str(back) == str(exc) and back.cut == exc.cut
