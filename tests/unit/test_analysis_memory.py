"""Whose memory filled a node (``analysis.memory``): the kernel's OOM table, Ray's top users."""

from __future__ import annotations

from l4_plugin.analysis.memory import ANY_NODE, outsiders

_PREFIX = "Mar  7 13:02:08 gpu-7 kernel: [201754.850222] "


def _kernel(rows: list[tuple[int, int, int, int]], killed: tuple[int, int]) -> str:
    """A dump_tasks table of (pid, uid, rss pages, oom_score_adj) rows and the kill's summary."""
    lines = [
        _PREFIX + "Tasks state (memory values in pages):",
        _PREFIX + "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents "
        "oom_score_adj name",
    ]
    lines += [
        f"{_PREFIX}[{pid:>7}] {uid:>5} {pid:>7} {rss * 2:>9} {rss:>9} {rss * 8:>14} 0 {adj:>13} "
        "python3"
        for pid, uid, rss, adj in rows
    ]
    pid, uid = killed
    lines.append(
        f"{_PREFIX}oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,"
        f"global_oom,task_memcg=/,task=python3,pid={pid},uid={uid}"
    )
    return "\n".join(lines)


def test_another_users_process_holding_the_memory_is_named() -> None:
    table = _kernel([(686710, 1007, 58_000_000, 0), (2979380, 0, 9_001_000, -1000)], (2979380, 0))
    [(node, hog)] = outsiders([("gpu-7", "t", table)]).items()
    assert node == "gpu-7" and hog.pid == 686710 and round(hog.gib) == 221
    assert "uid 1007" in hog.why and "gpu-7" in hog.why


def test_the_jobs_own_memory_names_nobody() -> None:
    # the job's processes hold the most: its own configuration
    mine = _kernel([(11, 1007, 1_000, 0), (12, 0, 9_000_000, 0)], (12, 0))
    # another user's process, smaller than the job's largest: not what filled the node
    small = _kernel([(11, 1007, 5_000_000, 0), (12, 0, 9_000_000, 0)], (12, 0))
    # one owner for all: nothing to tell apart
    same = _kernel([(11, 0, 58_000_000, 0), (12, 0, 9_000_000, 0)], (12, 0))
    assert outsiders([("a", "t", mine), ("b", "t", small), ("c", "t", same)]) == {}
    # a table with no kill summary says nothing of whose the job's processes are
    cut = "\n".join(mine.split("\n")[:-1])
    assert outsiders([("a", "t", cut)]) == {}


def _ray(*rows: str, ip: str = "10.1.2.3") -> str:
    return "\n".join(
        [
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
            "memory.",
            f"Memory on the node (IP: {ip}, ID: c66e) where the task … Top 10 memory users:",
            "PID\tMEM(GB)\tCOMMAND",
            *rows,
        ]
    )


def test_rays_top_user_outside_the_job_is_named_on_its_node() -> None:
    report = _ray(
        "366824\t1411.52\tpython3 /home/svc-old/run_eval.py", "1042416\t60.01\tray::W.train"
    )
    [(node, hog)] = outsiders([("driver", "t", report)], {"10.1.2.3": "gpu-9"}).items()
    assert node == "gpu-9" and hog.pid == 366824 and "not a Ray task" in hog.why
    # an address the book does not know: the node that killed for memory
    assert list(outsiders([("driver", "t", report)], {})) == [ANY_NODE]
    mine = _ray("1042416\t60.01\tray::W.train", "12\t3.5\tpython3 /home/me/train.py")
    assert outsiders([("driver", "t", mine)], {"10.1.2.3": "gpu-9"}) == {}
