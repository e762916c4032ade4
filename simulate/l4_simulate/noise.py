"""Benign anomalies: lines that look alarming but do not cause the failure.

Some kinds appear in both a failed job and its baselines (cross-job filtering removes them), some
only in baselines, and some only in the failed job on healthy nodes (the hard case: absent from
the baseline, yet harmless).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from l4_simulate import clock, emitters
from l4_simulate.plan import JobPlan, Timeline

SHARED_KINDS = ("checkpoint-userwarning", "veth-kernel", "typedstorage-warning")
JOB_ONLY_KINDS = ("aer-corrected", "power-cap", "slow-dataloader", "ib-gid-change", "fewer-hcas")
BASELINE_ONLY_KINDS = ("dataloader-workers", "perf-interrupt")


@dataclass
class Noise:
    """Benign lines to weave into a run: per rank (by iteration) and per node (kernel)."""

    kinds: tuple[str, ...] = ()
    init: dict[int, list[str]] = field(default_factory=dict)
    by_iteration: dict[int, dict[int, list[str]]] = field(default_factory=dict)
    kernel: dict[int, list[tuple[float, str]]] = field(default_factory=dict)
    hcas: dict[int, int] = field(default_factory=dict)

    def add(self, rank: int, iteration: int, line: str) -> None:
        self.by_iteration.setdefault(rank, {}).setdefault(iteration, []).append(line)


def draw_noise(plan: JobPlan, timeline: Timeline, role: str, avoid_nodes: set[int]) -> Noise:
    """Choose and place benign noise for a run; ``role`` is "job" or "baseline"."""
    rng = random.Random(f"noise:{plan.seed}:{plan.job_id}")
    kinds = [k for k in SHARED_KINDS if rng.random() < 0.7]
    extra = JOB_ONLY_KINDS if role == "job" else BASELINE_ONLY_KINDS
    kinds += [k for k in extra if rng.random() < 0.6] or [rng.choice(extra)]
    noise = Noise(kinds=tuple(kinds))
    healthy = [i for i in range(len(plan.nodes)) if i not in avoid_nodes] or [0]
    first, last = plan.start_iteration + 1, plan.train_iters
    for kind in kinds:
        _PLACERS[kind](plan, timeline, noise, rng, healthy, first, last)
    return noise


def _ranks(plan: JobPlan, node: int) -> range:
    return plan.node_ranks(node)


def _checkpoint_warning(
    plan: JobPlan,
    tl: Timeline,
    n: Noise,
    rng: random.Random,
    healthy: list[int],
    first: int,
    last: int,
) -> None:
    for rank in range(plan.world):
        n.init.setdefault(rank, []).extend(
            [
                f"{emitters.TORCH}/utils/checkpoint.py:464: UserWarning: "
                "torch.utils.checkpoint: the "
                "use_reentrant parameter should be passed explicitly. In version 2.4 we will "
                "raise an "
                "exception if use_reentrant is not passed. use_reentrant=False is recommended, "
                "but if "
                "you need to preserve the current default behavior, you can pass "
                "use_reentrant=True. "
                "Refer to docs for more details on the differences between the two variants.",
                "  warnings.warn(",
            ]
        )


def _typedstorage(
    plan: JobPlan,
    tl: Timeline,
    n: Noise,
    rng: random.Random,
    healthy: list[int],
    first: int,
    last: int,
) -> None:
    for rank in range(plan.world):
        n.init.setdefault(rank, []).append(
            f"{emitters.TORCH}/_utils.py:831: UserWarning: TypedStorage is deprecated. It will be "
            "removed in the future and UntypedStorage will be the only storage class. This should "
            "only matter to you if you are using storages directly.  To access UntypedStorage "
            "directly, use tensor.untyped_storage() instead of tensor.storage()"
        )


def _veth(
    plan: JobPlan,
    tl: Timeline,
    n: Noise,
    rng: random.Random,
    healthy: list[int],
    first: int,
    last: int,
) -> None:
    for node in range(len(plan.nodes)):
        veth = f"veth{rng.randrange(16**7):07x}"
        t = tl.launch - rng.uniform(5, 30)
        n.kernel.setdefault(node, []).extend(
            [
                (t, f"docker0: port 1({veth}) entered blocking state"),
                (t + 0.01, f"device {veth} entered promiscuous mode"),
                (t + 0.4, f"IPv6: ADDRCONF(NETDEV_CHANGE): {veth}: link becomes ready"),
                (t + 0.41, f"docker0: port 1({veth}) entered forwarding state"),
            ]
        )


def _aer(
    plan: JobPlan,
    tl: Timeline,
    n: Noise,
    rng: random.Random,
    healthy: list[int],
    first: int,
    last: int,
) -> None:
    for node in rng.sample(healthy, k=min(len(healthy), rng.randint(1, 3))):
        local = rng.randrange(plan.ranks_per_node)
        pci = plan.pci(local) + ".0"
        for _ in range(rng.randint(2, 12)):
            t = rng.uniform(tl.model_done, tl.end_of(last))
            n.kernel.setdefault(node, []).extend(
                [
                    (t, f"pcieport 0000:{pci[5:7]}:01.0: AER: Corrected error received: {pci}"),
                    (
                        t,
                        f"nvidia {pci}: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
                        "(Receiver ID)",
                    ),
                    (t, f"nvidia {pci}:   device [10de:2330] error status/mask=00000001/0000e000"),
                    (t, f"nvidia {pci}:    [ 0] RxErr                  (First)"),
                ]
            )


def _power_cap(
    plan: JobPlan,
    tl: Timeline,
    n: Noise,
    rng: random.Random,
    healthy: list[int],
    first: int,
    last: int,
) -> None:
    node = rng.choice(healthy)
    for rank in _ranks(plan, node):
        local = rank % plan.ranks_per_node
        for k in range(first + rng.randrange(5), last + 1, rng.randint(7, 15)):
            n.add(
                rank,
                k,
                f"/workspace/train/gpu_monitor.py:57: UserWarning: GPU {local} clocks "
                f"event reasons: SW Power Cap (power draw {rng.randint(690, 700)} W, limit 700 W)",
            )


def _slow_dataloader(
    plan: JobPlan,
    tl: Timeline,
    n: Noise,
    rng: random.Random,
    healthy: list[int],
    first: int,
    last: int,
) -> None:
    node = rng.choice(healthy)
    rank = plan.node_ranks(node)[0]
    for k in range(first, last + 1, rng.randint(2, 4)):
        t = tl.end_of(k)
        n.add(
            rank,
            k,
            f"[{clock.iso_ms(t)}] [WARNING] [data_pipeline] batch fetch took "
            f"{rng.uniform(1.0, 4.0):.2f}s (> 1.00s) at step {k}; the dataloader may be the "
            "bottleneck",
        )


def _gid_change(
    plan: JobPlan,
    tl: Timeline,
    n: Noise,
    rng: random.Random,
    healthy: list[int],
    first: int,
    last: int,
) -> None:
    node = rng.choice(healthy)
    k = rng.randint(first, last)
    for rank in _ranks(plan, node):
        ri = plan.rank_info(rank)
        n.add(
            rank,
            k,
            emitters.nccl(
                ri,
                "WARN",
                f"NET/IB : mlx5_{ri.local // 2}:1 Got async event : GID table change",
                src="transport/net_ib.cc:97",
                tid=ri.tid + 5,
            ),
        )


def _fewer_hcas(
    plan: JobPlan,
    tl: Timeline,
    n: Noise,
    rng: random.Random,
    healthy: list[int],
    first: int,
    last: int,
) -> None:
    n.hcas[rng.choice(healthy)] = 2


def _dataloader_workers(
    plan: JobPlan,
    tl: Timeline,
    n: Noise,
    rng: random.Random,
    healthy: list[int],
    first: int,
    last: int,
) -> None:
    for rank in range(plan.world):
        n.init.setdefault(rank, []).extend(
            [
                f"{emitters.TORCH}/utils/data/dataloader.py:558: UserWarning: This DataLoader will "
                "create 16 worker processes in total. Our suggested max number of worker in "
                "current "
                "system is 12, which is smaller than what this DataLoader is going to create. "
                "Please "
                "be aware that excessive worker creation might get DataLoader running slow or even "
                "freeze, lower the worker number to avoid potential slowness/freeze if necessary.",
                "  warnings.warn(_create_warning_msg(",
            ]
        )


def _perf_interrupt(
    plan: JobPlan,
    tl: Timeline,
    n: Noise,
    rng: random.Random,
    healthy: list[int],
    first: int,
    last: int,
) -> None:
    for node in rng.sample(healthy, k=min(len(healthy), 2)):
        t = rng.uniform(tl.model_done, tl.end_of(last))
        n.kernel.setdefault(node, []).append(
            (
                t,
                f"perf: interrupt took too long ({rng.randint(2501, 4000)} > 2500), lowering "
                f"kernel.perf_event_max_sample_rate to {rng.randint(40000, 79000)}",
            )
        )


_PLACERS = {
    "checkpoint-userwarning": _checkpoint_warning,
    "typedstorage-warning": _typedstorage,
    "veth-kernel": _veth,
    "aer-corrected": _aer,
    "power-cap": _power_cap,
    "slow-dataloader": _slow_dataloader,
    "ib-gid-change": _gid_change,
    "fewer-hcas": _fewer_hcas,
    "dataloader-workers": _dataloader_workers,
    "perf-interrupt": _perf_interrupt,
}
