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


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """How much of a job directory ingest may read (``--max-file-size``, ``--max-job-size``)."""

    max_file_size: int = MAX_FILE_SIZE
    max_job_size: int = MAX_JOB_SIZE


def human_size(n: int) -> str:
    """``n`` bytes as ``12.0 GiB`` / ``512 B``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
