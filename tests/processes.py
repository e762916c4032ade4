"""Finding the processes a test started, by an environment variable every child inherits, and
killing their parent: what the process-lifetime tests of tests/unit and tests/cluster share."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

#: The environment variable that marks a test's processes (its value: one per test).
MARK = "L4_TEST_PROCESS_MARK"
#: What a test that reads other processes' environments needs.
needs_proc = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")


def marked(mark: str) -> dict[int, str]:
    """The live processes whose environment holds ``MARK=mark``: pid → command line."""
    found = {}
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue  # gone meanwhile, or a zombie's
    return {pid: cmd.decode(errors="replace")[:120] for pid, cmd in found.items()}


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll ``condition`` until it holds; ``AssertionError(what)`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.05)


def kill_and_wait(proc: subprocess.Popen[bytes], mark: str) -> None:
    """SIGKILL ``proc`` (its pipes closed); every process of ``mark`` must be gone within 5 s."""
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    deadline = time.monotonic() + 5
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = marked(mark)
    for pid in left:  # leave nothing running for the next test, whatever the outcome
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"still running 5 s after kill -9 of their parent: {left}"
