"""How much of a job ingest may read: the size limits and their defaults.

A floor of the package: it imports nothing of L4, so that the settings (``config.py``), the job
directory's discovery and the file readers can all take their defaults from here without one
of them importing another (``tests/unit/test_structure.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Default per-file limit: bytes read from one log file (decompressed for ``.gz``).
MAX_FILE_SIZE = 16 * 1024**3
#: Default per-job limit: bytes of all the job's log files on disk.
MAX_JOB_SIZE = 1024**4
#: A line longer than this is cut for masking and keying: a 1 MB line of tensor dump is one
#: message, and keeping megabyte keys per distinct line would cost memory for nothing.
MAX_LINE_CHARS = 16_384
#: A line longer than this many bytes is cut by the reader itself: it keeps the line's first
#: bytes (at least ``MAX_LINE_CHARS`` characters, however they are encoded) and reads past the
#: rest without holding it, so that a line without end costs reading, not memory.
MAX_LINE_BYTES = 4 * MAX_LINE_CHARS
#: Default decompression guard of a compressed log file (``.gz``), beside ``MAX_FILE_SIZE``:
#: the most it may inflate to relative to its compressed bytes, over any 1 MiB of its output
#: (``RATIO_WINDOW``). Logs gzip 3 to 22 times (measured on the evaluation sets, LogHub's
#: samples and simulated jobs, gzip -9: benchmarks/RESULTS.md, *Compression bombs*); a bomb of
#: one repeated line 340 to 1,032 (deflate's utmost).
MAX_INFLATE_RATIO = 100.0
#: ... the most bytes it may inflate to (a 400 MB ``.gz`` of logs at a ratio of 10) ...
MAX_INFLATED_SIZE = 4 * 1024**3
#: ... and the seconds its reading and inflating may take, the parsing not counted (inflating
#: 4 GiB takes 7 to 21 s on one core here: a backstop for a slow disk or a starved machine).
MAX_READ_SECONDS = 60.0
#: Inflated bytes over which the guard measures a compressed file's ratio (a window sliding by
#: a quarter of it): a smaller file is never cut by it. The compressed side is counted in the
#: inflater's reads of 8 KiB, which blurs a window's ratio by one read at most: a bomb of one
#: repeated line (300 to 1,000 times) measures well above the limit, real logs at most ~25.
RATIO_WINDOW = 1 << 20


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """How much of a job directory ingest may read: ``--max-file-size``, ``--max-job-size``,
    and the decompression guard of a compressed file (``--max-inflate-ratio``,
    ``--max-inflated-size``, ``--max-read-seconds``)."""

    max_file_size: int = MAX_FILE_SIZE
    max_job_size: int = MAX_JOB_SIZE
    max_inflate_ratio: float = MAX_INFLATE_RATIO
    max_inflated_size: int = MAX_INFLATED_SIZE
    max_read_seconds: float = MAX_READ_SECONDS


def human_size(n: int) -> str:
    """``n`` bytes as ``12.0 GiB`` / ``512 B``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
