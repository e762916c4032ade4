"""No process outlives the ``l4`` that started it (issue 34, SECURITY.md *Bounded work*).

A process that made a pool of ``ingest/procs.py`` (the forkserver's, with the resource tracker)
and an ingest's lanes of local processes (``ingest/lanes.py``) is killed with SIGKILL: every
process it started is gone within 5 s. ``tests/cluster/test_process_lifetime.py`` kills a real
``l4 ingest``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from tests.processes import MARK, kill_and_wait, marked, needs_proc, wait_for

POOLS = """
import sys, time
from l4_plugin.ingest import procs
pool = procs.executor(2)
busy = [pool.submit(time.sleep, 600) for _ in range(2)]
from l4_plugin.ingest.lanes import open_lanes
opened = open_lanes(2)  # kept: its end would shut the lanes down
lanes = opened.__enter__()
waiting = [lane.executor.submit(time.sleep, 600) for lane in lanes]
print("ready", flush=True)
time.sleep(600)
"""

pytestmark = needs_proc


def test_kill_9_leaves_no_pool_process_forkserver_or_resource_tracker() -> None:
    mark = uuid.uuid4().hex
    env = {**os.environ, MARK: mark}
    proc = subprocess.Popen(
        [sys.executable, "-c", POOLS], env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        # The parent, the forkserver, the resource tracker, two workers, two lanes' processes.
        wait_for(lambda: len(marked(mark)) >= 7, 60, f"the pools did not start: {marked(mark)}")
        commands = " ".join(marked(mark).values())
        assert "forkserver" in commands and "resource_tracker" in commands
    finally:
        kill_and_wait(proc, mark)
