"""A large job through the ``l4`` command: wall, CPU and peak RSS of every process it starts.

The job (issue 32's recipe): ``l4 simulate``'s 64-node x 2,000-iteration ``nccl-ib-error`` job
(seed 7, one line per iteration, no baselines), each node's files hard-linked ``--copies`` times
into folders of new node names (``JOB/<node>-<k>/<file>``: the folder names the node). 8 copies
make 512 nodes, 4,609 files, 1.7 GB, 5.4 M lines; 80 copies ten times that (17 GB).

The command runs as a child of this process, which makes itself a *subreaper*
(``PR_SET_CHILD_SUBREAPER``): every process the command starts (the forkserver, its worker
processes, the embedded cluster) is this process's descendant until it ends, orphans included, and
is reaped here. Measured:

* wall time of the command (``l4`` started to ``l4`` ended);
* CPU time of every process (user + system, ``/proc/PID/stat``, read once a process has exited and
  before it is reaped, so its final figure), summed per role: ``l4`` itself, the worker processes
  (``l4``'s other descendants), the embedded cluster (``osmem-server``); CPU % is the sum over
  the wall time;
* peak RSS of every process (``VmHWM``, sampled every ``--sample`` seconds while it runs): the
  largest per role and the sum of the peaks.

Usage:
    python benchmarks/bench_scale.py --copies 8 --workers 2             # the 1.7 GB job, l4 ingest
    python benchmarks/bench_scale.py --copies 80 --workers 2 --diagnose  # 17 GB, l4 diagnose
    python benchmarks/bench_scale.py --copies 8 --workers 2 --scheduler tcp://HOST:8786
    python benchmarks/bench_scale.py --copies 8 --l4 /tmp/base/.venv/bin/l4   # another build
Every run uses a fresh HOME (no settings file, its own embedded cluster). The load average before
and after each run is printed: on a shared machine a run taken above ~2.5 says little.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PR_SET_CHILD_SUBREAPER = 36
_TICK = os.sysconf("SC_CLK_TCK")


def make_job(out: Path, copies: int) -> Path:
    """The recipe's job under ``out`` (made once; an existing one is reused)."""
    job = out / f"job-x{copies}"
    if (job / "job.yaml").exists():
        return job
    sim = out / "sim64"
    if not (sim / "job" / "job.yaml").exists():
        subprocess.run(
            [str(ROOT / ".venv" / "bin" / "l4"), "simulate", str(sim), "--nodes", "64",
             "--iterations", "2000", "--fault", "nccl-ib-error", "--seed", "7",
             "--baselines", "0"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    tmp = out / f".job-x{copies}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    files = sorted(p for p in (sim / "job").iterdir() if p.name != "job.yaml")
    nodes = sorted({p.name.rsplit("-", 1)[0] for p in files})
    for node in nodes:
        mine = [p for p in files if p.name.rsplit("-", 1)[0] == node]
        for k in range(1, copies + 1):
            folder = tmp / f"{node}-{k}"
            folder.mkdir()
            for p in mine:
                os.link(p, folder / p.name)
    shutil.copy(sim / "job" / "job.yaml", tmp / "job.yaml")
    tmp.rename(job)
    return job


@dataclass
class Proc:
    """What was seen of one process of the run."""

    pid: int
    name: str
    role: str  # l4, worker, cluster
    hwm_kb: int = 0
    cpu: float = 0.0


@dataclass
class Run:
    wall: float
    rc: int
    procs: dict[int, Proc] = field(default_factory=dict)
    out: str = ""
    err: str = ""

    def cpu(self, role: str | None = None) -> float:
        return sum(p.cpu for p in self.procs.values() if role is None or p.role == role)

    def peak_mb(self, role: str) -> float:
        return max((p.hwm_kb for p in self.procs.values() if p.role == role), default=0) / 1024


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(name, parent pid, own CPU seconds) of a process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2 :].split()
    # Fields after the name: state(3) ppid(4) ... utime(14) stime(15), numbered from 1.
    return name, int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK


def _hwm_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (orphans are reparented to this subreaper, which
    is ``root``'s parent, so they are found under this process instead)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                children.setdefault(st[1], []).append(int(entry))
    me = os.getpid()
    out, todo = [], [root, *(c for c in children.get(me, []) if c != root)]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def run(argv: list[str], env: dict[str, str], sample: float) -> Run:
    """Run ``argv``; sample its process tree until it and every descendant have ended."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        child = subprocess.Popen(argv, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        seen: dict[int, Proc] = {child.pid: Proc(child.pid, "l4", "l4")}
        wall = None
        while True:
            for pid in _descendants(child.pid):
                st = _stat(pid)
                if st is None:
                    continue
                proc = seen.get(pid)
                if proc is None:
                    role = "cluster" if "osmem" in st[0] else "worker"
                    proc = seen[pid] = Proc(pid, st[0], role)
                proc.hwm_kb = max(proc.hwm_kb, _hwm_kb(pid))
                proc.cpu = max(proc.cpu, st[2])
            # Reap what has exited, its final CPU read first (a zombie's stat still has it).
            while True:
                try:
                    info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    info = None
                if info is None:
                    break
                st = _stat(info.si_pid)
                proc = seen.get(info.si_pid)
                if proc is None:
                    proc = seen[info.si_pid] = Proc(info.si_pid, st[0] if st else "?", "worker")
                if st is not None:
                    proc.cpu = max(proc.cpu, st[2])
                _, status = os.waitpid(info.si_pid, 0)
                if info.si_pid == child.pid:
                    wall = time.monotonic() - started
                    child.returncode = os.waitstatus_to_exitcode(status)
            if wall is not None and len(_descendants(child.pid)) <= 1:
                break
            time.sleep(sample)
        out.seek(0)
        err.seek(0)
        return Run(wall, child.returncode or 0, seen, out.read(), err.read())


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=8, help="hard links of each node (8: 1.7 GB)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/l4-scale"), help="where jobs are made")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scheduler", help="a Dask scheduler's address (l4 --scheduler)")
    ap.add_argument("--diagnose", action="store_true", help="l4 diagnose instead of l4 ingest")
    ap.add_argument("--l4", default=str(ROOT / ".venv" / "bin" / "l4"), help="the l4 to run")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--sample", type=float, default=0.05, help="seconds between samples")
    args = ap.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    job = make_job(args.out, args.copies)
    files = [p for p in job.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    print(f"job {job}: {len(files):,} files, {size / 1e9:.2f} GB")
    command = "diagnose" if args.diagnose else "ingest"
    argv = [args.l4, command, str(job), "--workers", str(args.workers)]
    if args.scheduler:
        argv += ["--scheduler", args.scheduler]
    if args.diagnose:
        argv += ["--json", os.devnull]
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="l4-scale-home-") as home:
            env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")}
            env["HOME"] = home
            load = _load()
            res = run(argv, env, args.sample)
        total = res.cpu()
        l4, workers, cluster = res.cpu("l4"), res.cpu("worker"), res.cpu("cluster")
        ours = l4 + workers
        print(f"round {r + 1}: {' '.join(argv[1:])} (exit {res.rc}); load before {load}, "
              f"after {_load()}")  # fmt: skip
        print(
            f"  wall {res.wall:.2f} s; CPU {total:.2f} s = {100 * total / res.wall:.0f}% "
            f"(l4 {l4:.2f} s, worker processes {workers:.2f} s, cluster {cluster:.2f} s); "
            f"L4's processes {100 * ours / res.wall:.0f}%; l4's own CPU "
            f"{100 * l4 / total:.0f}% of all, {100 * l4 / max(ours, 1e-9):.0f}% of L4's"
        )
        peaks = sorted(res.procs.values(), key=lambda p: -p.hwm_kb)
        sum_mb = sum(p.hwm_kb for p in peaks) / 1024
        print(
            f"  peak RSS: l4 {res.peak_mb('l4'):,.0f} MB, largest worker process "
            f"{res.peak_mb('worker'):,.0f} MB, cluster {res.peak_mb('cluster'):,.0f} MB; "
            f"sum of every process's peak {sum_mb:,.0f} MB ({len(peaks)} processes)"
        )
        for line in (res.out + res.err).splitlines()[-12:]:
            print(f"  | {line}")
        if res.rc:
            sys.exit(res.rc)


if __name__ == "__main__":
    main()
