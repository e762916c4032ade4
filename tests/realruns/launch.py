"""Run one multi-node torchrun job across the node namespaces and watch it like a platform does.

Each node: ``ip netns exec <ns> unshare -u -m sh -c 'hostname H; ...; exec torchrun ...'`` with the
agent's own stdout/stderr in ``<host>/torchrun.log``, torchrun's ``--log-dir`` in ``<host>/logs``,
Flight Recorder dumps (written by train.py) in ``<host>/fr`` and ``py-spy dump`` stacks of every
worker in ``<host>/stacks`` when the job has printed nothing for a while (a hang) or before the
wall-clock limit kills it. The job ends when every agent has exited, when the wall-clock limit
is reached (SIGTERM to every agent, then SIGKILL, like a scheduler), or a grace period after the
first agent failed (like ``srun --kill-on-bad-exit`` with a wait).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import netns

VENV = Path(os.environ.get("L4RR_VENV", "/work/torchvenv"))
TRAIN = Path(__file__).resolve().parent / "train.py"
STEP_RX = {
    "plain": re.compile(r"^step (\d+) loss"),
    "logging": re.compile(r" step (\d+)/\d+ loss="),
    "megatron": re.compile(r"^ iteration\s+(\d+)/"),
}


@dataclass
class Node:
    host: str
    k: int
    root: Path
    proc: subprocess.Popen[bytes] | None = None
    rc: int | None = None
    stacked: set[str] = field(default_factory=set)


@dataclass
class JobSpec:
    """What to run: hosts (node 0 first), torchrun and train.py settings, the fault."""

    hosts: list[str]
    style: str
    nproc: int = 2
    steps: int = 40
    ckpt_every: int = 10
    ckpt_format: str = "torch"
    max_restarts: int = 0
    timeout: int = 30
    workers: int = 2
    hidden: int = 64
    resume: bool = False
    guard_eval: bool = False
    detect_anomaly: bool = False
    nnodes: int | None = None  # what --nnodes says, when not the number of hosts started
    rdzv_conf: str = ""
    fault: str = ""
    wall_limit: float = 150.0
    bad_exit_grace: float = 60.0
    quiet_for_stacks: float = 8.0
    rdzv: str = "c10d"
    port: int = 29400
    endpoint_override: dict[str, str] = field(default_factory=dict)
    mount_tmpfs: dict[str, str] = field(default_factory=dict)
    sample_seconds: float = 0.03
    extra_env: dict[str, str] = field(default_factory=dict)

    def config(self) -> dict[str, object]:
        return {
            "launcher": "torchrun",
            "rdzv_backend": self.rdzv,
            "nnodes": self.nnodes or len(self.hosts),
            "nproc_per_node": self.nproc,
            "backend": "gloo",
            "script_style": self.style,
            "steps": self.steps,
            "ckpt_every": self.ckpt_every,
            "ckpt_format": self.ckpt_format,
            "max_restarts": self.max_restarts,
            "collective_timeout_s": self.timeout,
            "num_workers": self.workers,
            "hidden": self.hidden,
            "time_limit_s": int(self.wall_limit),
        }


def torchrun_cmd(spec: JobSpec, node: Node, ckpt: Path) -> list[str]:
    first = spec.hosts[0]
    cmd = [
        str(VENV / "bin" / "torchrun"),
        "--nnodes",
        str(spec.nnodes or len(spec.hosts)),
        "--node-rank",
        str(node.k),
        "--nproc-per-node",
        str(spec.nproc),
    ]
    if spec.rdzv == "static":
        addr = spec.endpoint_override.get(node.host, first)
        cmd += ["--master-addr", addr, "--master-port", str(spec.port)]
    else:
        endpoint = spec.endpoint_override.get(node.host, f"{first}:{spec.port}")
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "job1"]
        if spec.rdzv_conf:
            cmd += ["--rdzv-conf", spec.rdzv_conf]
    cmd += [
        "--max-restarts",
        str(spec.max_restarts),
        "--monitor-interval",
        "1",
        "--log-dir",
        str(node.root / "logs"),
        "--tee",
        "3",
        str(TRAIN),
        "--style",
        spec.style,
        "--steps",
        str(spec.steps),
        "--ckpt-every",
        str(spec.ckpt_every),
        "--ckpt-dir",
        str(ckpt),
        "--ckpt-format",
        spec.ckpt_format,
        "--timeout",
        str(spec.timeout),
        "--workers",
        str(spec.workers),
        "--hidden",
        str(spec.hidden),
    ]
    if spec.resume or spec.max_restarts:
        cmd.append("--resume")
    if spec.guard_eval:
        cmd.append("--guard-eval")
    if spec.detect_anomaly:
        cmd.append("--detect-anomaly")
    return cmd


def start_node(spec: JobSpec, node: Node, ckpt: Path) -> None:
    for sub in ("logs", "fr", "stacks"):
        (node.root / sub).mkdir(parents=True, exist_ok=True)
    prep = f"hostname {shlex.quote(node.host)}"
    size = spec.mount_tmpfs.get(node.host)
    if size:
        prep += f" && mkdir -p {ckpt} && mount -t tmpfs -o size={size} tmpfs {ckpt}"
    script = f"{prep} && exec {shlex.join(torchrun_cmd(spec, node, ckpt))}"
    env = {
        "PATH": f"{VENV / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(node.root),
        "LANG": "C.UTF-8",
        "GLOO_SOCKET_IFNAME": "eth0",
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_FR_DUMP_TEMP_FILE": str(node.root / "fr" / "fr_trace_rank_"),
        "SAMPLE_READ_SECONDS": str(spec.sample_seconds),
        **spec.extra_env,
    }
    if spec.fault:
        env["L4RR_FAULT"] = spec.fault
    log = open(node.root / "torchrun.log", "wb")  # noqa: SIM115 - closed by the child's exit
    node.proc = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            netns.node_ns(node.k),
            "unshare",
            "-u",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=node.root,
        start_new_session=True,
    )
    log.close()


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def proc_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(
        item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item
    )


def workers(node: Node) -> list[tuple[int, dict[str, str]]]:
    """(pid, environment) of each training worker of the node's agent."""
    if node.proc is None or node.rc is not None:
        return []
    out = []
    for pid in children(node.proc.pid):
        env = proc_env(pid)
        if "LOCAL_RANK" in env:
            out.append((pid, env))
    return out


def log_size(nodes: list[Node]) -> int:
    total = 0
    for node in nodes:
        for path in (node.root / "logs").rglob("*.log"):
            with contextlib.suppress(OSError):
                total += path.stat().st_size
    return total


def last_step(nodes: list[Node], style: str) -> int | None:
    """The highest step the script printed in the newest attempt of any node."""
    best: int | None = None
    rx = STEP_RX[style]
    for node in nodes:
        attempts = sorted(
            (node.root / "logs").glob("*/attempt_*"), key=lambda p: int(p.name.split("_")[1])
        )
        if not attempts:
            continue
        for path in attempts[-1].rglob("*.log"):
            for line in path.read_text(errors="replace").splitlines():
                m = rx.search(line)
                if m:
                    best = max(best or 0, int(m.group(1)))
    return best


def take_stacks(nodes: list[Node], why: str) -> list[str]:
    """py-spy dump (text and JSON) of every worker of every node, one file per rank and attempt.

    A later quiet period of the same attempt overwrites the files: the last hang wins."""
    taken = []
    for node in nodes:
        for pid, env in workers(node):
            attempt = env.get("TORCHELASTIC_RESTART_COUNT", "0")
            folder = node.root / "stacks" / f"attempt_{attempt}"
            folder.mkdir(parents=True, exist_ok=True)
            base = folder / f"rank{env.get('RANK')}"
            spy = str(VENV / "bin" / "py-spy")
            for args, suffix in (([], ".txt"), (["--json"], ".json")):
                res = subprocess.run(
                    [spy, "dump", *args, "--pid", str(pid)], capture_output=True, timeout=60
                )
                base.with_suffix(suffix).write_bytes(res.stdout + res.stderr)
            taken.append(f"{node.host}:rank{env.get('RANK')}@attempt_{attempt} ({why})")
    return taken


def training(nodes: list[Node], style: str) -> bool:
    """Whether the newest attempt has printed a training step (start-up is not a hang)."""
    newest = max((attempt_number(p) for n in nodes for p in attempt_dirs(n)), default=None)
    if newest is None:
        return False
    rx = STEP_RX[style]
    for node in nodes:
        for path in (node.root / "logs").glob(f"*/attempt_{newest}/*/*.log"):
            if any(rx.search(line) for line in path.read_text(errors="replace").splitlines()):
                return True
    return False


def attempt_dirs(node: Node) -> list[Path]:
    return list((node.root / "logs").glob("*/attempt_*"))


def attempt_number(path: Path) -> int:
    return int(path.name.split("_")[1])


Action = Callable[[list[Node], dict[str, object]], bool]


def run_job(spec: JobSpec, root: Path, ckpt: Path, actions: list[Action]) -> dict[str, object]:
    """Start every node, run the actions (each True once done), stop the job, return facts."""
    nodes = [Node(h, k, root / h) for k, h in enumerate(spec.hosts)]
    facts: dict[str, object] = {"events": [], "stacks": []}
    t0 = time.monotonic()
    for node in nodes:
        start_node(spec, node, ckpt)
    pending = list(actions)
    size, quiet_since, first_bad = -1, time.monotonic(), None
    try:
        while any(n.rc is None for n in nodes):
            time.sleep(0.5)
            for node in nodes:
                if node.rc is None and node.proc is not None and node.proc.poll() is not None:
                    node.rc = node.proc.returncode
                    if node.rc and first_bad is None:
                        first_bad = time.monotonic()
            pending = [a for a in pending if not a(nodes, facts)]
            note_ranks(nodes, facts)
            now = time.monotonic()
            cur = log_size(nodes)
            if cur != size:
                size, quiet_since = cur, now
            elif now - quiet_since > spec.quiet_for_stacks and training(nodes, spec.style):
                quiet = f"no output for {now - quiet_since:.0f}s"
                facts["stacks"] += take_stacks(nodes, quiet)
                quiet_since = float("inf")  # once per quiet period
            if now - t0 > spec.wall_limit:
                facts["stacks"] += take_stacks(nodes, "wall-clock limit")
                facts["last_step_at_limit"] = last_step(nodes, spec.style)
                facts["events"].append(f"wall-clock limit {spec.wall_limit:.0f}s reached")
                stop(nodes)
                break
            if first_bad is not None and now - first_bad > spec.bad_exit_grace:
                facts["events"].append("an agent failed; the others were stopped after the grace")
                stop(nodes)
                break
    finally:
        stop(nodes)
    facts["returncodes"] = {n.host: n.rc for n in nodes}
    facts["last_step"] = last_step(nodes, spec.style)
    facts["seconds"] = round(time.monotonic() - t0, 1)
    return facts


def note_ranks(nodes: list[Node], facts: dict[str, object]) -> None:
    """host -> attempt -> sorted global ranks of its workers, read from their environment."""
    ranks = facts.setdefault("ranks", {})
    assert isinstance(ranks, dict)
    for node in nodes:
        for _pid, env in workers(node):
            per = ranks.setdefault(node.host, {})
            got = per.setdefault(f"attempt_{env.get('TORCHELASTIC_RESTART_COUNT', '0')}", [])
            if int(env.get("RANK", "-1")) not in got:
                got.append(int(env.get("RANK", "-1")))
                got.sort()


def stop(nodes: list[Node], grace: float = 20.0) -> None:
    """SIGTERM to each running agent, SIGKILL to its whole session after the grace."""
    live = [n for n in nodes if n.proc is not None and n.proc.poll() is None]
    for node in live:
        assert node.proc is not None
        node.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(n.proc.poll() is None for n in live if n.proc):
        time.sleep(0.5)
    netns.kill_inside()
    for node in nodes:
        if node.proc is None:
            continue
        node.proc.wait()
        if node.rc is None:
            node.rc = node.proc.returncode


def dump_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=1) + "\n")
