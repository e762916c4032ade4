"""The real runs' torchrun output as other platforms collect it: the same lines, other wrapping.

``benchmarks/relayout.py`` does this for the dev generator's cases; this does it for the real
PyTorch runs of ``tests/realruns/cases`` (every line as torch printed it). Each node's torchrun
stdout (``<host>/torchrun.log``: the agent's lines and, through ``--tee 3``, every rank's with
its ``[defaultN]:`` label) is rewritten, for the failed run and its baselines, truth rewritten
where node names change::

    python benchmarks/relayout_runs.py tests/realruns/cases /tmp/rr-stdout stdout
    python benchmarks/relayout_runs.py tests/realruns/cases /tmp/rr-pods pods
    python benchmarks/relayout_runs.py tests/realruns/cases /tmp/rr-slurm slurm

- ``stdout``: ``JOB/<host>/torchrun.log`` alone (no ``--log-dir`` files, no dumps).
- ``pods``: Kubeflow pod logs as ``kubectl logs --timestamps`` saves them,
  ``JOB/<job>-master-0.log`` and ``JOB/<job>-worker-<k>.log``. A pod's host name is its name,
  so the host names in the lines become the pods' (the truth's nodes too). Every line gets the
  time it reached the kubelet: its own stamp when it has one (glog's, Python logging's); between
  two stamped lines, lines that state an iteration's duration share the interval by those
  durations, other lines follow the line before by a microsecond, and from a traceback on (a
  process printing as it dies) the lines arrive together just before the next stamp; never
  before the line above.
- ``slurm``: Slurm per-task output files ``JOB/<job>-<jobid>-<task>.out`` whose job script
  prints ``SLURM_PROCID=<k> hostname=<host>`` first, and the batch script's own output
  ``slurm-<jobid>.out`` with srun's line for each task that failed, in the order their logs
  ended ("srun: error: HOST: task K: Exited with exit code N", "...: Killed", "...: Terminated").

Then ``../shared/eval/score.py --cases DST`` scores it like the original.
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

_GLOG = re.compile(r"^(?:\[default\d+\]:)?\[?[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)")
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
_ELAPSED = re.compile(r"elapsed time per iteration \(ms\): ([\d.]+)")
_YEAR = 2026  # the runs' glog stamps carry no year
_JOB_ID = 482131
_UTC = datetime.UTC


def stamp_of(line: str) -> float | None:
    """The time a line states itself (glog's header, else an ISO date near its start), UTC."""
    m = _GLOG.match(line)
    if m is not None:
        mo, d, h, mi, s, frac = m.groups()
        when = datetime.datetime(_YEAR, int(mo), int(d), int(h), int(mi), int(s), tzinfo=_UTC)
        return when.timestamp() + int((frac + "000000000")[:9]) / 1e9
    m = _ISO.search(line, 0, 80)
    if m is not None:
        y, mo, d, h, mi, s, frac = m.groups()
        when = datetime.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=_UTC)
        return when.timestamp() + int(((frac or "") + "000000000")[:9]) / 1e9
    return None


def arrivals(lines: list[str]) -> list[float]:
    """When each line reached the kubelet (see the module docstring)."""
    at = [stamp_of(line) for line in lines]
    known = [i for i, t in enumerate(at) if t is not None]
    if not known:
        start = datetime.datetime(_YEAR, 1, 1, tzinfo=_UTC).timestamp()
        return [start + 1e-3 * i for i in range(len(lines))]
    stamped = {i: t for i, t in enumerate(at) if t is not None}
    first, last = stamped[known[0]], stamped[known[-1]]
    out = [stamped.get(i, first if i < known[0] else last) for i in range(len(lines))]
    for a, b in itertools.pairwise(known):
        _spread(lines, out, a, b)
    for i in range(1, len(out)):
        out[i] = max(out[i], out[i - 1])
    return out


def _spread(lines: list[str], at: list[float], a: int, b: int) -> None:
    """Times of the lines between the stamped lines ``a`` and ``b``."""
    if b - a < 2:
        return
    inner = range(a + 1, b)
    weights = {}
    for i in inner:
        m = _ELAPSED.search(lines[i])
        weights[i] = float(m.group(1)) if m else 0.0
    total = sum(weights.values())
    tail = next((i for i in inner if "Traceback (most recent" in lines[i]), b)
    if total > 0:
        tail = max(tail, max(i for i in inner if weights[i] > 0) + 1)
    span, t, done = at[b] - at[a], at[a], 0.0
    for i in inner:
        done += weights[i]
        if i >= tail:
            t = max(t + 1e-6, at[b] - 1e-6 * (b - i))
        elif weights[i] > 0:
            t = max(t + 1e-6, at[a] + 0.95 * span * done / total)
        else:
            t += 1e-6
        at[i] = min(t, at[b])


def kubectl(lines: list[str]) -> list[str]:
    """``lines`` as ``kubectl logs --timestamps`` prints them (RFC 3339, nanoseconds, UTC)."""
    out = []
    for line, t in zip(lines, arrivals(lines), strict=True):
        ns = round(t * 1e9)
        when = datetime.datetime.fromtimestamp(ns // 10**9, _UTC)
        out.append(f"{when:%Y-%m-%dT%H:%M:%S}.{ns % 10**9:09d}Z {line}")
    return out


@dataclass
class Run:
    """One run rewritten: its nodes' new names and when each node's log ended."""

    names: dict[str, str]
    ended: dict[str, float]


def relayout(src: Path, dst: Path, layout: str, job: str) -> Run:
    """The run ``src`` (``<host>/torchrun.log`` per node) in ``layout`` under ``dst``."""
    hosts = sorted(p.name for p in src.iterdir() if (p / "torchrun.log").exists())
    dst.mkdir(parents=True)
    shutil.copy(src / "job.yaml", dst / "job.yaml")
    run = Run({}, {})
    for k, host in enumerate(hosts):
        text = (src / host / "torchrun.log").read_text(errors="replace")
        lines = text.splitlines()
        stamps = [t for t in map(stamp_of, lines) if t is not None]
        run.ended[host] = stamps[-1] if stamps else 0.0
        if layout == "stdout":
            run.names[host] = host
            (dst / host).mkdir()
            (dst / host / "torchrun.log").write_text(text)
        elif layout == "pods":
            name = f"{job}-master-0" if k == 0 else f"{job}-worker-{k - 1}"
            run.names[host] = name
            lines = [line.replace(host, name) for line in lines]
            (dst / f"{name}.log").write_text("\n".join(kubectl(lines)) + "\n")
        elif layout == "slurm":
            run.names[host] = host
            banner = f"SLURM_PROCID={k} hostname={host}"
            out = dst / f"{job}-{_JOB_ID}-{k}.out"
            out.write_text("\n".join([banner, *lines]) + "\n")
        else:
            raise SystemExit(f"unknown layout {layout!r}: stdout, pods or slurm")
    return run


def batch_output(dst: Path, run: Run, codes: dict[str, int]) -> None:
    """The batch script's output: the srun command and srun's line per failed task."""
    hosts = sorted(run.names)
    lines = [f"+ srun --kill-on-bad-exit=1 torchrun --nnodes {len(hosts)} train.py"]
    for host in sorted((h for h in hosts if codes.get(h, 0)), key=lambda h: run.ended[h]):
        task, code = hosts.index(host), codes[host]
        if code == -9:
            lines.append(f"srun: error: {host}: task {task}: Killed")
        elif code < 0:
            lines.append(f"srun: error: {host}: task {task}: Terminated")
        else:
            lines.append(f"srun: error: {host}: task {task}: Exited with exit code {code}")
    (dst / f"slurm-{_JOB_ID}.out").write_text("\n".join(lines) + "\n")


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    src, dst, layout = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    for case in sorted(p for p in src.iterdir() if (p / "truth.json").exists()):
        truth = json.loads((case / "truth.json").read_text())
        out = dst / case.name
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        names: dict[str, str] = {}
        for sub in [truth["failed"], *truth["baselines"]]:
            run = relayout(case / sub, out / sub, layout, case.name)
            if sub == truth["failed"]:
                names = run.names
                if layout == "slurm":
                    batch_output(out / sub, run, truth["run"]["returncodes"])
        for key in ("nodes", "silent_nodes"):
            truth[key] = [names.get(n, n) for n in truth[key]]
        (out / "truth.json").write_text(json.dumps(truth, indent=1))
        print(case.name, flush=True)


if __name__ == "__main__":
    main()
