"""The catalogue of fault kinds the simulator can inject (paper taxonomy, §3 of the L4 paper)."""

from __future__ import annotations

from dataclasses import dataclass

from l4_plugin.records import FAULT_CATEGORIES

CATEGORIES = FAULT_CATEGORIES


@dataclass(frozen=True)
class FaultSpec:
    """One fault kind: taxonomy category, the stage it strikes in, and whether it is node-local."""

    name: str
    category: str
    stage: str | None
    scope: str  # "node": one culprit node; "global": every node is at fault; "none": no fault
    description: str
    needs_kernel_log: bool = False
    accelerator: str = "cuda"


_SPECS = (
    FaultSpec(
        "nccl-ib-error",
        "hardware/network",
        "training",
        "node",
        "An HCA port on one node fails: NCCL IB async port error and completion errors there, "
        "ring peers see completion errors naming it, everyone else hits the NCCL watchdog.",
    ),
    FaultSpec(
        "gpu-xid",
        "hardware/accelerator",
        "training",
        "node",
        "One GPU falls off the bus (Xid 79) or its GSP stops answering (Xid 119): CUDA errors on "
        "its rank, kernel NVRM Xid lines, collective timeouts elsewhere.",
    ),
    FaultSpec(
        "ecc-error",
        "hardware/accelerator",
        "training",
        "node",
        "Uncorrectable double-bit ECC error (Xid 48 / Xid 94-95) on one GPU: 'uncorrectable ECC "
        "error encountered' on its rank.",
    ),
    FaultSpec(
        "cuda-illegal-memory",
        "framework",
        "training",
        "node",
        "A fused kernel makes an illegal memory access on one rank (Xid 31 MMU fault in the kernel "
        "log); the rank's watchdog aborts the process.",
    ),
    FaultSpec(
        "oom",
        "user/config",
        "training",
        "node",
        "CUDA out of memory on one rank (a long-sequence batch on a pipeline stage with no "
        "headroom).",
    ),
    FaultSpec(
        "nan-loss",
        "user/code",
        "training",
        "global",
        "The loss becomes nan on every rank; the framework's nan check raises on all nodes.",
    ),
    FaultSpec(
        "checkpoint-io",
        "hardware/storage",
        "checkpointing",
        "node",
        "Writing a checkpoint fails on one node (NFS server not responding / I/O error): "
        "torch.save raises 'unexpected pos' or OSError [Errno 5].",
    ),
    FaultSpec(
        "rendezvous-failure",
        "platform",
        "init",
        "node",
        "One node cannot reach the c10d TCPStore (no route to host); the others time out in the "
        "rendezvous; no worker ever starts.",
    ),
    FaultSpec(
        "config-mismatch",
        "user/config",
        "init",
        "global",
        "Batch-size arithmetic does not divide over data parallelism (Megatron/DeepSpeed "
        "assertion) "
        "or the checkpoint shape differs from the model (HF): every rank raises.",
    ),
    FaultSpec(
        "version-mismatch",
        "user/software-incompatibility",
        "init",
        "global",
        "A package installed at start-up does not match the image's torch/CUDA: undefined symbol "
        "in flash-attn, or NCCL 'CUDA driver version is insufficient'.",
    ),
    FaultSpec(
        "hang",
        "hardware/node",
        "training",
        "node",
        "One node's GPUs hang silently: it stops printing while its peers go on; its NCCL "
        "heartbeat monitor fires, everyone else hits watchdog timeouts minutes later.",
    ),
    FaultSpec(
        "straggler",
        "hardware/node",
        "training",
        "node",
        "One node throttles (package temperature / HW thermal slowdown): iteration times grow for "
        "the whole job, then the peers' collectives time out.",
        needs_kernel_log=True,
    ),
    FaultSpec(
        "node-crash",
        "hardware/node",
        "training",
        "node",
        "A machine check exception panics one node's kernel: its logs end mid-iteration, peers "
        "see IB completion errors and watchdog timeouts.",
        needs_kernel_log=True,
    ),
    FaultSpec(
        "shm-bus-error",
        "platform",
        "data_loading",
        "node",
        "One node's container has a small /dev/shm: a DataLoader worker is killed by a bus error.",
    ),
    FaultSpec(
        "hccl-notify-timeout",
        "hardware/network",
        "training",
        "node",
        "Ascend 910 cluster: one NPU's RoCE link goes down (HCCL/CANN logs); its peers report "
        "EI0002 notify wait timeouts naming it.",
        accelerator="ascend",
    ),
    FaultSpec(
        "time-limit",
        "user/misoperation",
        "training",
        "global",
        "The job runs into its Slurm time limit: every step is cancelled 'DUE TO TIME LIMIT'.",
    ),
    FaultSpec("none", "none", None, "none", "A successful run with benign noise only."),
)

FAULT_KINDS: dict[str, FaultSpec] = {spec.name: spec for spec in _SPECS}
