"""The shape of one simulated run: nodes, ranks, emitters, layout and its timeline.

Every choice is drawn from a ``random.Random`` seeded with a string, so a plan depends only on the
seed (string seeds are hashed with SHA-512, independent of ``PYTHONHASHSEED``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime

FRAMEWORKS = ("megatron", "deepspeed", "hf-trainer")
MODELS = ("llama2-13b", "gpt3-7b", "qwen2-72b", "mixtral-8x7b", "llama3-70b", "bloom-7b1")
IMAGES_CUDA = (
    "nvcr.io/nvidia/pytorch:24.03-py3",
    "nvcr.io/nvidia/pytorch:24.07-py3",
    "registry.local/llm/train:2.3.1-cu121",
    "registry.local/llm/train:2.1.2-cu118",
)
IMAGES_ASCEND = ("swr.cn-south-1.myhuaweicloud.com/ascend/mindspeed:8.0.RC2-910b",)
TORCH_BY_IMAGE = {
    "nvcr.io/nvidia/pytorch:24.03-py3": "2.3.0a0",
    "nvcr.io/nvidia/pytorch:24.07-py3": "2.4.0a0",
    "registry.local/llm/train:2.3.1-cu121": "2.3.1",
    "registry.local/llm/train:2.1.2-cu118": "2.1.2",
    IMAGES_ASCEND[0]: "2.1.0",
}
NCCL_BY_IMAGE = {
    "nvcr.io/nvidia/pytorch:24.03-py3": "2.20.3+cuda12.4",
    "nvcr.io/nvidia/pytorch:24.07-py3": "2.22.3+cuda12.5",
    "registry.local/llm/train:2.3.1-cu121": "2.20.5+cuda12.1",
    "registry.local/llm/train:2.1.2-cu118": "2.18.1+cuda11.8",
}
STAGES = ("init", "data_loading", "model_loading", "training", "checkpointing", "shutdown")


@dataclass(frozen=True)
class JobConfig:
    """The job.yaml ``config``: equal between a job and its baselines except ``nodes``."""

    model: str
    framework: str
    image: str
    tensor_parallel: int
    pipeline_parallel: int
    global_batch_size: int
    precision: str

    def as_dict(self, nodes: int) -> dict[str, object]:
        """The mapping written to job.yaml; ``data_parallel`` follows the world size, so 'auto'."""
        return {
            "model": self.model,
            "framework": self.framework,
            "image": self.image,
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "data_parallel": "auto",
            "global_batch_size": self.global_batch_size,
            "precision": self.precision,
            "nodes": nodes,
        }

    @property
    def torch_version(self) -> str:
        return TORCH_BY_IMAGE[self.image]

    @property
    def new_torch(self) -> bool:
        """torch >= 2.3 prints c10 logs as ``[rank3]:[E1023 09:13:42.123456789 file:line]``."""
        return not self.torch_version.startswith(("2.1", "2.2"))


def draw_config(seed: int, fault_accelerator: str) -> JobConfig:
    """The configuration family of a job (shared with its baselines)."""
    rng = random.Random(f"config:{seed}")
    if fault_accelerator == "ascend":
        image = IMAGES_ASCEND[0]
        framework = "megatron"
    else:
        image = rng.choice(IMAGES_CUDA)
        framework = rng.choice(FRAMEWORKS)
    return JobConfig(
        model=rng.choice(MODELS),
        framework=framework,
        image=image,
        tensor_parallel=rng.choice((2, 4, 8)),
        pipeline_parallel=rng.choice((1, 1, 2)),
        global_batch_size=rng.choice((512, 1024, 2048)),
        precision=rng.choice(("bf16", "bf16", "fp16")),
    )


_NAMINGS = (
    ("node-a{:02d}", 0),
    ("gpu-{:04d}", 1200),
    ("dgx-h100-{:03d}", 1),
    ("bj-a800-{:02d}", 10),
    ("worker-{}", 0),
    ("sh-910b-{:03d}", 100),
)


@dataclass(frozen=True)
class RankInfo:
    """One worker process."""

    rank: int
    local: int
    node: str
    node_index: int
    pid: int
    tid: int
    ip: str
    bus: str


@dataclass(frozen=True)
class JobPlan:
    """Everything the writer needs to render one run, healthy or not."""

    job_id: str
    seed: int
    config: JobConfig
    accelerator: str
    nodes: tuple[str, ...]
    ips: tuple[str, ...]
    ranks_per_node: int
    layout: str  # "nested" (job/<node>/rank<k>.log) or "flat" (job/<node>-rank<k>.log)
    prefix: str  # "", "rank" ([rank3]:) or "default" ([default3]:)
    launcher: str  # "slurm" or "k8s"
    kernel_log: str | None  # "dmesg", "kern" or None
    gz_nodes: frozenset[str]
    start_time: float
    start_iteration: int
    iterations: int
    iter_seconds: float
    save_interval: int
    micro_batch: int
    lines_per_iteration: int
    slurm_job: int
    master_port: int
    timeout_ms: int
    ckpt_dir: str
    pids: tuple[int, ...] = field(repr=False)

    @property
    def world(self) -> int:
        return len(self.nodes) * self.ranks_per_node

    @property
    def data_parallel(self) -> int:
        return max(1, self.world // (self.config.tensor_parallel * self.config.pipeline_parallel))

    @property
    def train_iters(self) -> int:
        return self.start_iteration + self.iterations

    @property
    def nccl_version(self) -> str:
        return NCCL_BY_IMAGE.get(self.config.image, "2.20.5+cuda12.4")

    def rank_info(self, rank: int) -> RankInfo:
        node_index, local = divmod(rank, self.ranks_per_node)
        pid = self.pids[rank]
        return RankInfo(
            rank=rank,
            local=local,
            node=self.nodes[node_index],
            node_index=node_index,
            pid=pid,
            tid=pid + 317 + local * 3,
            ip=self.ips[node_index],
            bus=f"{(0x18 + local * 0x17) % 0xFF:02x}000",
        )

    def node_ranks(self, node_index: int) -> range:
        return range(node_index * self.ranks_per_node, (node_index + 1) * self.ranks_per_node)

    def pci(self, local: int) -> str:
        return f"0000:{(0x18 + local * 0x17) % 0xFF:02x}:00"


def draw_plan(
    seed: int,
    role: str,
    config: JobConfig,
    accelerator: str,
    *,
    nodes: int,
    iterations: int,
    ranks_per_node: int,
    lines_per_iteration: int,
    naming_offset: int,
    force_kernel_log: bool,
    start_time: float,
) -> JobPlan:
    """Draw a run of ``config``: ``role`` ("job" or "baseline-<i>") separates the random streams."""
    rng = random.Random(f"plan:{seed}:{role}")
    pattern, base = _NAMINGS[(rng.randrange(len(_NAMINGS)) + naming_offset) % len(_NAMINGS)]
    first = base + rng.randrange(0, 40) + 60 * naming_offset
    names = tuple(pattern.format(first + i) for i in range(nodes))
    subnet = rng.randrange(1, 250)
    ips = tuple(
        f"10.{subnet}.{(i // 200) + rng.randrange(0, 3)}.{10 + i % 200}" for i in range(nodes)
    )
    kernel_log = rng.choice(("dmesg", "kern", None, None))
    if force_kernel_log and kernel_log is None:
        kernel_log = "kern"
    gz_nodes = (
        frozenset(n for n in names if rng.random() < 0.2) if rng.random() < 0.5 else frozenset()
    )
    style = random.Random(f"style:{seed}")
    iter_seconds = round(style.uniform(1.2, 6.0), 3)
    save_interval = max(5, iterations // rng.choice((3, 4, 5)))
    return JobPlan(
        job_id=f"{config.model.split('-')[0]}-{role}-{rng.randrange(16**8):08x}",
        seed=seed,
        config=config,
        accelerator=accelerator,
        nodes=names,
        ips=ips,
        ranks_per_node=ranks_per_node,
        layout=rng.choice(("nested", "nested", "flat")),
        prefix=style.choice(("", "rank", "default")),
        launcher=style.choice(("slurm", "k8s")),
        kernel_log=kernel_log,
        gz_nodes=gz_nodes,
        start_time=start_time,
        start_iteration=rng.choice((0, 0, 2000, 15000)),
        iterations=iterations,
        iter_seconds=iter_seconds,
        save_interval=save_interval,
        micro_batch=style.choice((1, 2)),
        lines_per_iteration=max(1, lines_per_iteration),
        slurm_job=rng.randrange(100000, 999999),
        master_port=style.choice((29500, 6000, 23456)),
        timeout_ms=style.choice((600000, 1800000)),
        ckpt_dir=f"/mnt/shared/ckpt/{config.model}/{role.split('-')[0]}-{rng.randrange(100, 999)}",
        pids=tuple(rng.randrange(1000, 4000000) for _ in range(nodes * ranks_per_node)),
    )


def job_start(seed: int) -> float:
    """The wall-clock start of the failed job (a fixed epoch per seed, in 2024)."""
    rng = random.Random(f"start:{seed}")
    base = datetime(2024, 3, 1, tzinfo=UTC).timestamp()
    return float(int(base + rng.randrange(0, 200 * 86400)))


class Timeline:
    """Wall-clock times of a run's phases and iterations, with an optional straggler slow-down."""

    def __init__(self, plan: JobPlan, slow_from: int | None = None) -> None:
        rng = random.Random(f"timeline:{plan.seed}:{plan.job_id}")
        self.launch = plan.start_time
        self.init_done = self.launch + rng.uniform(35.0, 90.0)
        self.data_done = self.init_done + rng.uniform(15.0, 60.0)
        self.model_done = self.data_done + rng.uniform(20.0, 120.0)
        self.save_seconds = rng.uniform(15.0, 45.0)
        self.jitter = [rng.uniform(-0.03, 0.03) for _ in range(64)]
        self.ends: dict[int, float] = {}
        self.durations: dict[int, float] = {}
        t = self.model_done
        for k in range(plan.start_iteration + 1, plan.train_iters + 1):
            d = plan.iter_seconds * (1.0 + self.jitter[k % 64])
            if slow_from is not None and k >= slow_from:
                d *= 1.0 + 0.35 * (k - slow_from + 1)
            t += d
            self.durations[k] = d
            self.ends[k] = t
            if k % plan.save_interval == 0:
                t += self.save_seconds
        self.done = t + rng.uniform(5.0, 20.0)

    def end_of(self, iteration: int) -> float:
        """When ``iteration`` finished (``start_iteration`` means: before training began)."""
        return self.ends.get(iteration, self.model_done)
