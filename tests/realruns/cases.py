"""The corpus: each failed job's hosts, settings, fault, orchestration actions and truth."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import actions as A
from facts import last_printed_step
from launch import STEP_RX, Action, JobSpec


@dataclass
class Case:
    name: str
    fault: str
    category: str
    stage: str
    spec: JobSpec
    root_events: list[str]
    related_events: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    silent_nodes: list[str] = field(default_factory=list)
    iteration: int | str | None = None  # int, "action" (step when the orchestration acted), None
    hang: dict[str, object] = field(default_factory=dict)
    baseline: bool = True
    prepare: Callable[[JobSpec, Path, Path], list[subprocess.Popen[bytes]]] | None = None
    actions: Callable[[JobSpec, Path], list[Action]] | None = None
    notes: str = ""

    def truth(self, failed: Path, facts: dict) -> dict[str, object]:
        out: dict[str, object] = {
            "case": self.name,
            "fault": self.fault,
            "category": self.category,
            "stage": self.stage,
            "root_events": self.root_events,
            "related_events": self.related_events,
            "nodes": self.nodes,
            "silent_nodes": self.silent_nodes,
            "failed": "failed",
            "baselines": ["baseline-1"] if self.baseline else [],
            "layout": "torchrun_logdir",
            "framework": f"ddp-{self.spec.style}",
            "max_restarts": self.spec.max_restarts,
            "attempts": count_attempts(failed),
        }
        if self.iteration == "action":
            steps = [s for s in facts.get("fault_steps") or [] if s is not None]
            if steps:
                out["iteration"] = steps[-1]
        elif self.iteration == "limit":
            if facts.get("last_step_at_limit") is not None:
                out["iteration"] = facts["last_step_at_limit"] + 1
        elif self.iteration == "last":
            last = last_printed_step(failed, STEP_RX[self.spec.style])
            if last is not None:
                out["iteration"] = last + 1
        elif self.iteration is not None:
            out["iteration"] = self.iteration
        if self.notes:
            out["notes"] = self.notes
        return out


def count_attempts(failed: Path) -> int:
    found = {p.name for p in failed.glob("*/logs/*/attempt_*")}
    return len(found)


BASELINES = {
    "plain": JobSpec(hosts=["gpu-p101", "gpu-p102"], style="plain"),
    "logging": JobSpec(
        hosts=["cn-b07", "cn-b08", "cn-b09"], style="logging", ckpt_format="per_rank"
    ),
    "megatron": JobSpec(
        hosts=["trn-r2-n01", "trn-r2-n02", "trn-r2-n03", "trn-r2-n04"],
        style="megatron",
        ckpt_format="dcp",
    ),
}


def fifo(spec: JobSpec, scratch: Path, ckpt: Path) -> list[subprocess.Popen[bytes]]:
    """The pipe a stuck DataLoader worker reads from (nobody ever writes it)."""
    path = Path(spec.fault.split("fifo=")[1].split(",")[0])
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return []


def occupy_port(spec: JobSpec, scratch: Path, ckpt: Path) -> list[subprocess.Popen[bytes]]:
    """A process left over on node 0 that still listens on the job's master port."""
    code = (
        f"import socket, time; s = socket.socket(); s.bind(('0.0.0.0', {spec.port})); "
        "s.listen(); time.sleep(3600)"
    )
    return [subprocess.Popen(["ip", "netns", "exec", "l4rr-n0", "python3", "-c", code])]


def earlier_run(spec: JobSpec, scratch: Path, ckpt: Path) -> list[subprocess.Popen[bytes]]:
    """The run this job resumes from: same script, the model's old width, 20 steps."""
    from dataclasses import replace

    from launch import run_job

    old = replace(spec, hidden=64, steps=20, resume=False, fault="")
    facts = run_job(old, scratch / "earlier", ckpt, [])
    if any(facts["returncodes"].values()):
        raise RuntimeError(f"the earlier run failed: {facts}")
    return []


def kill_twice(host: str, lr: str, style: str) -> Callable[[JobSpec, Path], list[Action]]:
    def make(spec: JobSpec, ckpt: Path) -> list[Action]:
        return [
            A.when_ckpt(ckpt, 10, 2.0, 0, A.kill_rank(host, lr, style)),
            A.when_ckpt(ckpt, 20, 2.0, 1, A.kill_rank(host, lr, style)),
        ]

    return make


F = "/tmp/l4rr-fifo-"

CASES: list[Case] = [
    Case(
        "skip-collective",
        "a rank skips a collective (hang)",
        "user/code",
        "training",
        JobSpec(
            hosts=["gpu-a11", "gpu-a12"],
            style="plain",
            guard_eval=True,
            fault="empty_shard:host=gpu-a12,local_rank=1,step=20",
        ),
        root_events=[r"Timed out waiting \d+ms for recv operation"],
        nodes=["gpu-a12"],
        iteration=20,
        hang={"culprit_host": "gpu-a12", "culprit_local_rank": 1},
    ),
    Case(
        "skip-collective-restarts",
        "a rank skips a collective (hang), restarted",
        "user/code",
        "training",
        JobSpec(
            hosts=["cn-c01", "cn-c02", "cn-c03"],
            style="logging",
            ckpt_format="per_rank",
            guard_eval=True,
            max_restarts=1,
            wall_limit=300,
            fault="empty_shard:host=cn-c01,local_rank=0,step=20",
        ),
        root_events=[r"Timed out waiting \d+ms for recv operation"],
        nodes=["cn-c01"],
        iteration=20,
        hang={"culprit_host": "cn-c01", "culprit_local_rank": 0},
    ),
    Case(
        "stuck-dataloader",
        "a rank stuck in data loading (hang)",
        "hardware/storage",
        "data_loading",
        JobSpec(
            hosts=["trn-r5-n01", "trn-r5-n02", "trn-r5-n03", "trn-r5-n04"],
            style="megatron",
            ckpt_format="dcp",
            fault=f"stuck_data:host=trn-r5-n03,local_rank=1,sample=800,fifo={F}a",
        ),
        root_events=[r"Timed out waiting \d+ms for recv operation"],
        nodes=["trn-r5-n03"],
        iteration="last",
        prepare=fifo,
        hang={"culprit_host": "trn-r5-n03", "culprit_local_rank": 1},
    ),
    Case(
        "stuck-dataloader-restarts",
        "a rank stuck in data loading (hang), restarted",
        "hardware/storage",
        "data_loading",
        JobSpec(
            hosts=["dgx-07", "dgx-08"],
            style="plain",
            max_restarts=1,
            wall_limit=300,
            fault=f"stuck_data:host=dgx-07,local_rank=0,sample=240,fifo={F}b",
        ),
        root_events=[r"Timed out waiting \d+ms for recv operation"],
        nodes=["dgx-07"],
        iteration="last",
        prepare=fifo,
        hang={"culprit_host": "dgx-07", "culprit_local_rank": 0},
    ),
    Case(
        "sigkill-rank",
        "a rank killed with SIGKILL",
        "platform",
        "training",
        JobSpec(hosts=["node-17", "node-18", "node-19"], style="logging", ckpt_format="per_rank"),
        root_events=[r"exitcode\s*:\s*-9|Signal 9 \(SIGKILL\)"],
        nodes=["node-18"],
        iteration="action",
        actions=lambda spec, ckpt: [
            A.when_ckpt(ckpt, 10, 2.0, 0, A.kill_rank("node-18", "0", "logging"))
        ],
    ),
    Case(
        "sigkill-rank-restarts",
        "a rank killed with SIGKILL, restarted",
        "platform",
        "training",
        JobSpec(
            hosts=["h100-x1", "h100-x2"],
            style="megatron",
            ckpt_format="dcp",
            max_restarts=1,
            wall_limit=300,
        ),
        root_events=[r"exitcode\s*:\s*-9|Signal 9 \(SIGKILL\)"],
        nodes=["h100-x1"],
        iteration="action",
        actions=kill_twice("h100-x1", "1", "megatron"),
    ),
    Case(
        "node-cut-off",
        "a node cut off the network",
        "hardware/network",
        "training",
        JobSpec(hosts=["gpu-d01", "gpu-d02", "gpu-d03"], style="plain", wall_limit=240),
        root_events=[r"Timed out waiting \d+ms|Connection timed out|Connection reset"],
        nodes=["gpu-d02"],
        iteration="action",
        actions=lambda spec, ckpt: [
            A.when_ckpt(ckpt, 10, 2.0, 0, A.link("gpu-d02", False, "plain"))
        ],
    ),
    Case(
        "node-cut-off-restarts",
        "a node cut off the network (link flaps), restarted",
        "hardware/network",
        "training",
        JobSpec(
            hosts=["cn-e11", "cn-e12", "cn-e13"],
            style="logging",
            ckpt_format="per_rank",
            max_restarts=1,
            wall_limit=300,
        ),
        root_events=[r"Timed out waiting \d+ms|Connection timed out|Connection reset"],
        nodes=["cn-e13"],
        iteration="action",
        actions=lambda spec, ckpt: [
            A.chain(
                A.when_ckpt(ckpt, 10, 2.0, 0, A.link("cn-e13", False, "logging")),
                A.after(45.0, A.link("cn-e13", True, "logging")),
                A.when_ckpt(ckpt, 20, 2.0, 1, A.link("cn-e13", False, "logging")),
            )
        ],
    ),
    Case(
        "straggler",
        "a straggler rank; the job hits its wall-clock limit",
        "hardware/node",
        "training",
        JobSpec(
            hosts=["trn-r7-n01", "trn-r7-n02", "trn-r7-n03", "trn-r7-n04"],
            style="megatron",
            ckpt_format="dcp",
            wall_limit=55,
            fault="straggler:host=trn-r7-n02,local_rank=0,step=8,delay=1.0",
        ),
        root_events=[
            r"iteration\s+\d*[2-9]/\s*\d+ \|.*elapsed time per iteration \(ms\): [1-9]\d{3}\."
        ],
        nodes=["trn-r7-n02"],
        # The fault happened where the rank became slow (as gen3's stragglers count it), not
        # where the wall-clock limit ended the run.
        iteration=8,
    ),
    Case(
        "straggler-restarts",
        "a straggler rank (one long stall, then slow), restarted",
        "hardware/node",
        "training",
        JobSpec(
            hosts=["gpu-f05", "gpu-f06"],
            style="plain",
            max_restarts=1,
            wall_limit=140,
            fault="straggler:host=gpu-f05,local_rank=1,step=12,delay=0.8,stall=40,attempts=0",
        ),
        root_events=[r"Timed out waiting \d+ms for recv operation"],
        nodes=["gpu-f05"],
        iteration=12,
    ),
    Case(
        "ckpt-disk-full",
        "checkpoint directory full on one node (ENOSPC)",
        "hardware/storage",
        "checkpointing",
        JobSpec(
            hosts=["cn-g21", "cn-g22", "cn-g23"],
            style="logging",
            ckpt_format="per_rank",
            mount_tmpfs={"cn-g22": "100k"},
        ),
        root_events=[r"basic_ios::clear: iostream error|unexpected pos \d+ vs \d+"],
        related_events=[r"in save_checkpoint"],
        nodes=["cn-g22"],
        iteration=20,
    ),
    Case(
        "master-port-in-use",
        "master port already in use on the first node (EADDRINUSE)",
        "platform",
        "init",
        JobSpec(
            hosts=["gpu-h31", "gpu-h32"], style="plain", rdzv="static", port=29500, wall_limit=150
        ),
        root_events=[r"EADDRINUSE|[Aa]ddress already in use"],
        nodes=["gpu-h31"],
        prepare=occupy_port,
    ),
    Case(
        "resume-shape-mismatch",
        "resume from a checkpoint of a model with another shape",
        "user/config",
        "model_loading",
        JobSpec(
            hosts=["trn-s1-n1", "trn-s1-n2"],
            style="megatron",
            ckpt_format="dcp",
            hidden=96,
            resume=True,
        ),
        root_events=[r"Size mismatch between saved torch\.Size"],
        prepare=earlier_run,
    ),
    Case(
        "user-exception-one-rank",
        "a Python exception in user code on one rank",
        "user/code",
        "training",
        JobSpec(
            hosts=["cn-k04", "cn-k05"],
            style="logging",
            ckpt_format="per_rank",
            fault="empty_shard:host=cn-k05,local_rank=0,step=20",
        ),
        root_events=[r"ZeroDivisionError: (float )?division by zero"],
        nodes=["cn-k05"],
        iteration=20,
    ),
    Case(
        "dataloader-worker-killed",
        "a DataLoader worker killed by a signal",
        "platform",
        "data_loading",
        JobSpec(hosts=["trn-u1", "trn-u2", "trn-u3"], style="megatron", ckpt_format="dcp"),
        root_events=[r"DataLoader worker \(pid\(?s?\)? ?\d+\)? (is killed by signal|exited)"],
        nodes=["trn-u2"],
        iteration="action",
        actions=lambda spec, ckpt: [
            A.when_ckpt(ckpt, 10, 2.0, 0, A.kill_loader_worker("trn-u2", "1", "megatron"))
        ],
    ),
    Case(
        "wrong-master-address",
        "one node given a wrong rendezvous address",
        "user/config",
        "init",
        JobSpec(
            hosts=["gpu-m01", "gpu-m02", "gpu-m03"],
            style="plain",
            wall_limit=150,
            endpoint_override={"gpu-m03": "10.77.0.31:29400"},
        ),
        root_events=[r"10\.77\.0\.31"],
        nodes=["gpu-m03"],
    ),
    Case(
        "segfault-in-save",
        "a rank's native code crashes (SIGSEGV) while it saves a checkpoint",
        "user/code",
        "checkpointing",
        JobSpec(
            hosts=["gpu-q21", "gpu-q22"],
            style="plain",
            fault="native_crash:host=gpu-q21,local_rank=0,step=20",
        ),
        root_events=[
            r"Fatal Python error: Segmentation fault|Signal 11 \(SIGSEGV\)|exitcode\s*:\s*-11"
        ],
        related_events=[r"in pack_shard"],
        nodes=["gpu-q21"],
        iteration=20,
        notes=(
            "faulthandler (enabled by @record) prints the crashing rank's stacks, innermost first"
        ),
    ),
    Case(
        "host-out-of-memory",
        "one rank asks for more host memory than the node has (torch's CPU allocator fails)",
        "user/config",
        "training",
        JobSpec(
            hosts=["dgx-h07", "dgx-h08", "dgx-h09"],
            style="megatron",
            ckpt_format="dcp",
            fault="host_oom:host=dgx-h08,local_rank=1,step=23,gib=4096",
        ),
        root_events=[r"DefaultCPUAllocator: can't allocate memory"],
        nodes=["dgx-h08"],
        iteration=23,
        notes="Megatron-style progress comes from the last rank (dgx-h09) only",
    ),
    # --- second round (2026-11-29): faults the analyses were not developed on, scored unread
    Case(
        "uneven-data-early-exit",
        "a rank's shard runs out of batches first; it leaves the loop and its peers' next "
        "collective fails",
        "user/code",
        "training",
        JobSpec(
            hosts=["gpu-m41", "gpu-m42", "gpu-m43"],
            style="logging",
            ckpt_format="per_rank",
            fault="uneven_data:host=gpu-m42,local_rank=1,step=14",
        ),
        root_events=[r"Connection closed by peer|Timed out waiting \d+ms for (?:recv|send)"],
        nodes=["gpu-m42"],
        iteration=15,
    ),
    Case(
        "lr-blowup-nan",
        "the learning rate jumps at a step; the loss turns NaN and anomaly detection stops "
        "every rank",
        "user/config",
        "training",
        JobSpec(
            hosts=["trn-w1", "trn-w2"],
            style="megatron",
            ckpt_format="dcp",
            detect_anomaly=True,
            fault="lr_blowup:step=17,lr=1e30",
        ),
        root_events=[r"returned nan values in its \d+(?:st|nd|rd|th) output"],
        iteration="last",
    ),
    Case(
        "missing-module-one-node",
        "one node's image lacks a package the script imports; the other nodes wait for it",
        "platform",
        "init",
        JobSpec(
            hosts=["dgx-a1", "dgx-a2", "dgx-a3"],
            style="plain",
            fault="missing_module:host=dgx-a3,module=fused_mlp_ops",
        ),
        root_events=[r"No module named 'fused_mlp_ops'"],
        nodes=["dgx-a3"],
    ),
    # --- third round (2026-11-29, later): scored unread as well
    Case(
        "corrupt-data-shard",
        "one node's local copy of a data shard is cut short; a DataLoader worker fails to read it",
        "hardware/storage",
        "data_loading",
        JobSpec(
            hosts=["cn-p31", "cn-p32", "cn-p33"],
            style="logging",
            ckpt_format="per_rank",
            fault="corrupt_shard:host=cn-p32,local_rank=0,sample=300",
        ),
        root_events=[r"PytorchStreamReader failed reading zip archive"],
        nodes=["cn-p32"],
        iteration="last",
    ),
    Case(
        "type-error-all-ranks",
        "a logging call left with an old signature raises on every rank at a step",
        "user/code",
        "training",
        JobSpec(
            hosts=["gpu-t61", "gpu-t62"],
            style="plain",
            fault="type_error:step=13",
        ),
        root_events=[r"TypeError: Reporter\.step\(\) missing \d+ required positional argument"],
        iteration=13,
    ),
    Case(
        "global-batch-not-divisible",
        "a global batch size the job's data-parallel size does not divide: the script's check "
        "refuses it on every rank",
        "user/config",
        "init",
        JobSpec(
            hosts=["trn-k1", "trn-k2", "trn-k3"],
            style="megatron",
            ckpt_format="dcp",
            fault="batch_assert:global_batch=64",
        ),
        root_events=[r"global batch size \(\d+\) is not divisible by micro batch size"],
    ),
    Case(
        "nnodes-more-than-started",
        "--nnodes says 4 while 3 nodes were started: the rendezvous waits for the fourth and "
        "times out",
        "user/config",
        "init",
        JobSpec(
            hosts=["gpu-v11", "gpu-v12", "gpu-v13"],
            style="plain",
            nnodes=4,
            rdzv_conf="join_timeout=40",
            wall_limit=150,
        ),
        root_events=[r"RendezvousTimeoutError"],
        baseline=True,
    ),
]
