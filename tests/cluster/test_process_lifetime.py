"""``kill -9`` of a real ``l4 ingest --workers 2`` in the middle of its scan leaves no process of
it behind within 5 s: its scan workers, the forkserver they come from, multiprocessing's resource
tracker and the embedded cluster it started (issue 34, SECURITY.md *Bounded work*)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

from tests.processes import MARK, kill_and_wait, marked, needs_proc, wait_for

pytestmark = needs_proc


def _job(root: Path, megabytes: int = 96) -> Path:
    """8 nodes × 4 ranks of varied training lines: seconds of scanning on this machine."""
    rng = random.Random(0)
    block = "".join(
        f"2026-01-01 00:{i // 600 % 60:02d}:{i // 10 % 60:02d},{i % 1000:03d} INFO [rank{i % 8}] "
        f"step {i} loss {rng.random():.4f} lr {rng.random():.2e} tokens {rng.randint(1, 10**6)}\n"
        for i in range(12_000)
    ).encode()
    repeat = max(1, (megabytes << 20) // (32 * len(block)))
    for node in range(8):
        (root / f"node-{node}").mkdir(parents=True)
        for rank in range(4):
            (root / f"node-{node}" / f"rank{rank}.log").write_bytes(block * repeat)
    return root


def _cpu_seconds(pid: int) -> float:
    fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _scanning(l4_pid: int, mark: str) -> bool:
    """A worker (a child of the forkserver, itself a child of ``l4``) has scanned for 0.5 s."""
    procs = marked(mark)
    try:
        for pid, cmd in procs.items():
            if "forkserver" in cmd and _parent(pid) != l4_pid and _cpu_seconds(pid) >= 0.5:
                return True
    except OSError:
        pass
    return False


def _parent(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])


def test_kill_9_of_l4_mid_ingest_leaves_no_process_behind(tmp_path: Path) -> None:
    job = _job(tmp_path / "job")
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")}
    # Its own embedded cluster (never another one's `l4 cluster up`), marked like the rest.
    env.update({MARK: mark, "L4_STATE_DIR": str(tmp_path / "state")})
    cmd = [sys.executable, "-m", "l4_plugin.cli", "ingest", "--workers", "2", str(job)]
    proc = subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_for(
            lambda: _scanning(proc.pid, mark) or proc.poll() is not None,
            120,
            f"no scan worker within 120 s: {marked(mark)}",
        )
        assert proc.poll() is None, "the ingest ended before it could be killed mid-scan"
        commands = " ".join(marked(mark).values())
        assert "osmem-server" in commands and "resource_tracker" in commands
    finally:
        kill_and_wait(proc, mark)
        assert proc.stderr is not None
        proc.stderr.close()
