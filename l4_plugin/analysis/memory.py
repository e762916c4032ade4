"""Whose memory filled a node: the tables an out-of-memory kill comes with.

The kernel's OOM killer lists every task with its owner and resident pages before it kills one
(``mm/oom_kill.c``, ``dump_tasks``: "[  pid  ]   uid  tgid total_vm      rss … name", then
"oom-kill:…,pid=N,uid=U"); Ray's memory monitor lists the node's top memory users ("PID
MEM(GB) COMMAND") in the ``OutOfMemoryError`` of the task it killed. When the process holding
the most memory is none of the job's (another user's on the kernel's table, no Ray task or actor
on Ray's), the job did not run out of memory by its own configuration: a process left on the
node by someone else did, and the node needs cleaning (:func:`outsiders`).

The ingest joins each table to the record it belongs to (``stages.yaml`` continuations); the
diagnosis reads those records per node (``JobData.memory_lines``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# One task of the kernel's table: pid, then uid, tgid, total_vm, rss and the page-table and
# swap columns (their number varies by kernel release), the OOM score adjustment and the name.
_TASK_ROW = re.compile(r"\[\s*(\d+)\]\s+(\d+)\s+\d+\s+\d+\s+(\d+)(?:\s+-?\d+){2,4}\s+(\S+)\s*$")
_KILLED = re.compile(r"\boom-kill:\S*?\bpid=(\d+),uid=(\d+)")
# One row of Ray's "Top 10 memory users": pid, GB, command.
_RAY_ROW = re.compile(r"^(?:\S.*?\) )?(\d+)\t([\d.]+)\t(.+)$")
_RAY_TASK = "ray::"
# The node Ray's report is about ("Memory on the node (IP: 10.0.0.3, ID: …)"): the driver prints
# it for a worker node.
_RAY_NODE = re.compile(r"\bMemory on the node \(IP: ([\d.]+)")
_PAGE_GIB = 4096 / 2**30
#: The key of a report about a node the job's address book does not know.
ANY_NODE = "*"


@dataclass(frozen=True, slots=True)
class Hog:
    """The process that held the most memory of an OOM report, when it was none of the job's."""

    node: str
    pid: int
    command: str
    gib: float
    owner: str  # "uid 1007", or "not a Ray task"

    @property
    def why(self) -> str:
        where = "the node's" if self.node == ANY_NODE else f"{self.node}'s"
        return (
            f"pid {self.pid} ({self.command[:60]}, {self.owner}) held {self.gib:,.0f} GiB of "
            f"{where} memory, more than any of the job's processes"
        )


def outsiders(
    lines: Iterable[tuple[str, str, str]], owners: Mapping[str, str] | None = None
) -> dict[str, Hog]:
    """The nodes whose OOM report shows another's process holding the most memory, from the
    reports' records ``(node, template, message)``; ``owners`` (address → node, the job's
    address book) places a report that names the node it is about by address."""
    found: dict[str, Hog] = {}
    for node, _, message in lines:
        about = _RAY_NODE.search(message)
        if about is not None:
            # (a report about an address the book cannot place is about the node whose own
            # words say it killed for memory: ``ANY_NODE``)
            node = (owners or {}).get(about.group(1), ANY_NODE)
        hog = _kernel_hog(node, message) or _ray_hog(node, message)
        if hog is not None and node not in found:
            found[node] = hog
    return found


def _kernel_hog(node: str, message: str) -> Hog | None:
    """The largest task of a kernel OOM table, when its owner is not the killed task's and it
    held more than every task of that owner."""
    killed = _KILLED.search(message)
    if killed is None:
        return None
    uid = int(killed.group(2))
    rows = []
    for line in message.split("\n"):
        row = _TASK_ROW.search(line)
        if row is not None:
            rows.append((int(row.group(3)), int(row.group(2)), int(row.group(1)), row.group(4)))
    if not rows:
        return None
    rss, owner, pid, name = max(rows)
    own = max((r[0] for r in rows if r[1] == uid), default=0)
    if owner == uid or rss <= own:
        return None
    return Hog(node, pid, name, rss * _PAGE_GIB, f"uid {owner}, the job's is {uid}")


def _ray_hog(node: str, message: str) -> Hog | None:
    """The top memory user of Ray's OOM report, when it is no Ray task or actor and held more
    than each of them."""
    rows = []
    for line in message.split("\n"):
        row = _RAY_ROW.match(line)
        if row is not None:
            rows.append((float(row.group(2)), int(row.group(1)), row.group(3).strip()))
    if not rows:
        return None
    gib, pid, command = max(rows)
    tasks = max((r[0] for r in rows if r[2].startswith(_RAY_TASK)), default=None)
    if command.startswith(_RAY_TASK) or tasks is None or gib <= tasks:
        return None
    return Hog(node, pid, command, gib, "not a Ray task")
