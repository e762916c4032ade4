"""How each fault kind shows up: where each rank's output stops, what the culprit prints, and how
the failure cascades through NCCL, torchrun and Slurm to every other node.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from l4_simulate import clock, emitters
from l4_simulate.emitters import PYLIB
from l4_simulate.faults import FAULT_KINDS
from l4_simulate.plan import JobPlan, RankInfo, Timeline

_PFX = r"(?:\[\w+\]:)?"


@dataclass(frozen=True)
class Cut:
    """Where a rank's normal output stops: stages before ``stage`` are printed in full; in
    "training"/"checkpointing" iterations up to ``iteration`` are, plus ``partial`` lines of the
    next one ("checkpointing" also prints the save line of ``iteration``)."""

    stage: str
    iteration: int | None = None
    partial: int = 0


@dataclass
class Incident:
    """The rendered consequences of one fault in one run."""

    fault: str
    stage: str | None = None
    iteration: int | None = None
    faulty_nodes: list[int] = field(default_factory=list)
    slow_from: int | None = None
    nan_from: int | None = None
    workers_started: bool = True
    cuts: dict[int, Cut] = field(default_factory=dict)
    tails: dict[int, list[str]] = field(default_factory=dict)
    launcher_tails: dict[int, list[str]] = field(default_factory=dict)
    kernel: dict[int, list[tuple[float, str]]] = field(default_factory=dict)
    init_extra: dict[int, list[str]] = field(default_factory=dict)
    extra: dict[int, dict[int, list[str]]] = field(default_factory=dict)
    root: list[str] = field(default_factory=list)
    cascade: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.fault != "none"

    def tail(self, rank: int, lines: list[str]) -> None:
        self.tails.setdefault(rank, []).extend(lines)

    def add_root(self, *patterns: str) -> None:
        self.root.extend(p for p in patterns if p not in self.root)

    def add_cascade(self, *patterns: str) -> None:
        self.cascade.extend(p for p in patterns if p not in self.cascade)


CASCADE = {
    "watchdog": r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=\d+",
    "timeout-at": r"Timeout at NCCL work: \d+, last enqueued NCCL work",
    "pg-terminated": r"Process group watchdog thread terminated with exception",
    "terminate": r"terminate called after throwing an instance of 'c10::DistBackendError'",
    "remote": r"^" + _PFX + r"ncclRemoteError: A call failed possibly due to a network error",
    "exitcode": r"failed \(exitcode: -?\d+\) local_rank: \d+ \(pid: \d+\) of binary",
    "childfailed": r"torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError",
    "srun": r"srun: error: \S+: task \d+: Exited with exit code \d+",
    "cancelled": r"slurmstepd: error: \*\*\* STEP \d+\.0 ON \S+ CANCELLED AT \S+ \*\*\*",
    "sigterm-death": r"Received Signals\.SIGTERM death signal, shutting down workers",
    "node-failure": r"srun: error: Node failure on \S+",
}


class Builder:
    """Accumulates an Incident; shared helpers implement the usual cascade."""

    def __init__(self, plan: JobPlan, fault: str, rng: random.Random) -> None:
        self.plan = plan
        self.rng = rng
        self.inc = Incident(fault=fault)
        self.timeline = Timeline(plan)
        n = len(plan.nodes)
        self.culprit_node = rng.randrange(1, n) if n > 1 else 0

    # -- helpers --------------------------------------------------------------------------------
    def fail_iteration(self) -> int:
        """The iteration that will not complete (between 40 % and 85 % of the run)."""
        p = self.plan
        lo = p.start_iteration + max(2, int(p.iterations * 0.4))
        hi = p.start_iteration + max(3, int(p.iterations * 0.85))
        k = self.rng.randint(lo, max(lo, hi))
        return min(k, p.train_iters)

    def seq(self, k: int) -> int:
        return (k - self.plan.start_iteration) * 12 + 7

    def numel(self) -> int:
        return self.rng.choice((16777216, 131334144, 262668288))

    def prefix_ok(self, host: str) -> str:
        return _PFX + re.escape(host) + r":\d+:\d+ \[\d+\] "

    def launcher(
        self, node: int, t: float, failures: list[tuple[int, int, int, float]], killed: list[int]
    ) -> None:
        """torchrun on ``node`` reports its first failed local rank and SIGTERMs the others."""
        p = self.plan
        ri = p.rank_info(p.node_ranks(node)[0])
        failures = sorted(failures, key=lambda f: (f[3], f[0]))
        root = failures[0]
        others = failures + [(g, g % p.ranks_per_node, -15, t + 1.0) for g in killed]
        lines = emitters.launcher_failure(p, ri, t + 1.0, others, root, [p.pids[g] for g in killed])
        self.inc.launcher_tails.setdefault(node, []).extend(lines)
        self.inc.add_cascade(CASCADE["exitcode"], CASCADE["childfailed"])
        if p.launcher == "slurm":
            self.slurm_end(node, t + 3.0, 1)

    def slurm_end(self, node: int, t: float, code: int, reason: str = "") -> None:
        p = self.plan
        self.inc.launcher_tails.setdefault(node, []).append(
            emitters.step_cancelled(p, p.nodes[node], t, reason)
        )
        self.inc.launcher_tails.setdefault(0, []).append(
            emitters.srun_task_exit(p.nodes[node], node, code)
        )
        self.inc.add_cascade(CASCADE["cancelled"] if not reason else "", CASCADE["srun"])
        self.inc.cascade = [c for c in self.inc.cascade if c]

    def collapse(
        self,
        culprits: dict[int, tuple[list[str], int]],
        tf: float,
        k: int,
        *,
        stage: str = "training",
        culprit_node_dead: bool = False,
        loud_neighbours: bool = True,
    ) -> None:
        """The usual cascade after ``culprits`` (rank -> (tail, exit code)) fail at ``tf``.

        Culprit ranks print their tail; the culprit node's agent SIGTERMs its other ranks; ranks
        on the ring-neighbour nodes get IB completion errors naming the culprit node and abort;
        every other rank waits for the NCCL watchdog (``timeout_ms``) and aborts.
        """
        p, inc, rng = self.plan, self.inc, self.rng
        cnode = p.rank_info(next(iter(culprits))).node_index
        cut = Cut(stage, k, rng.randint(0, p.lines_per_iteration - 1) if stage == "training" else 0)
        cut_at = {"training": cut, "checkpointing": cut}.get(stage, Cut(stage))
        failures_by_node: dict[int, list[tuple[int, int, int, float]]] = {}
        for g, (lines, code) in culprits.items():
            inc.cuts[g] = cut_at
            inc.tail(g, lines)
            failures_by_node.setdefault(cnode, []).append((g, g % p.ranks_per_node, code, tf))
        n = len(p.nodes)
        neighbours = {(cnode - 1) % n, (cnode + 1) % n} - {cnode} if loud_neighbours else set()
        peer_cut = Cut("training", k, 0) if stage == "training" else cut_at
        for node in range(n):
            if node != cnode:
                self._peer_abort(node, cnode, node in neighbours, peer_cut, tf, k)
                continue
            ranks = list(p.node_ranks(node))
            others = [g for g in ranks if g not in culprits]
            for g in others:
                inc.cuts[g] = cut_at
            if culprit_node_dead:
                for g in ranks:
                    inc.cuts[g] = cut
                continue
            self.launcher(node, tf + 0.5, failures_by_node[cnode], others)
        if culprit_node_dead and p.launcher == "slurm":
            inc.launcher_tails.setdefault(0, []).extend(
                [
                    f"srun: error: Node failure on {p.nodes[cnode]}",
                    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
                ]
            )
            inc.add_cascade(CASCADE["node-failure"])

    def _peer_abort(
        self, node: int, cnode: int, neighbour: bool, cut: Cut, tf: float, k: int
    ) -> None:
        """The ranks of ``node`` (not the culprit's) abort after the culprit fails at ``tf``: a
        ring neighbour of ``cnode`` on IB completion errors, any other node on the watchdog."""
        p, inc, rng = self.plan, self.inc, self.rng
        failures = []
        for g in p.node_ranks(node):
            ri = p.rank_info(g)
            inc.cuts[g] = cut
            if neighbour:
                t = tf + rng.uniform(0.3, 4.0)
                self._ib_abort(g, ri, cnode, t)
            else:
                t = tf + p.timeout_ms / 1000.0 + rng.uniform(0.0, 3.0)
                inc.tail(g, emitters.watchdog_timeout(p, ri, t, self.seq(k + 1), self.numel()))
                inc.add_cascade(
                    CASCADE["watchdog"],
                    CASCADE["timeout-at"],
                    CASCADE["pg-terminated"],
                    CASCADE["terminate"],
                )
            failures.append((g, ri.local, -6, t))
        self.launcher(node, max(f[3] for f in failures), failures, [])

    def _ib_abort(self, g: int, ri: RankInfo, cnode: int, t: float) -> None:
        """Rank ``g`` gets an IB completion error from the culprit node ``cnode`` and aborts."""
        p, inc, rng = self.plan, self.inc, self.rng
        peer = p.ips[cnode]
        port = rng.randrange(30000, 60000)
        ib = emitters.ib_completion(ri, peer, port, 12, 129, rng.choice(("Send", "Recv")))
        last = ib.split("NCCL WARN ", 1)[1]
        inc.tail(
            g,
            [ib, *emitters.nccl_error_return(ri), *emitters.remote_error_block(p, ri, t, last)],
        )
        inc.add_cascade(
            r"^" + _PFX + r"(?!" + re.escape(p.nodes[cnode]) + r":)[\w.-]+:\d+:\d+ "
            r"\[\d+\] transport/net_ib\.cc:\d+ NCCL WARN NET/IB : Got completion from "
            r"peer " + re.escape(peer) + "<",
            CASCADE["pg-terminated"],
            CASCADE["terminate"],
            CASCADE["remote"],
        )

    def global_exit(self, tails: Callable[[int], list[str]], cut: Cut, tf: float) -> None:
        """Every rank prints its own error and exits 1 (global faults)."""
        p = self.plan
        for node in range(len(p.nodes)):
            failures = []
            for g in p.node_ranks(node):
                self.inc.cuts[g] = cut
                self.inc.tail(g, tails(g))
                failures.append((g, g % p.ranks_per_node, 1, tf + (g % 7) * 0.013))
            self.launcher(node, tf + 0.6, failures, [])
        self.inc.faulty_nodes = list(range(len(p.nodes)))

    def python_error(
        self, g: int, frames: list[tuple[str, int, str, str]], exc: list[str]
    ) -> list[str]:
        return emitters.traceback(emitters.script_of(self.plan), frames, exc)

    def kernel(self, node: int, t: float, msg: str) -> None:
        self.inc.kernel.setdefault(node, []).append((t, msg))

    def finish(self, stage: str | None, iteration: int | None) -> Incident:
        self.inc.stage = stage
        self.inc.iteration = iteration
        if not self.inc.faulty_nodes and self.inc.failed:
            self.inc.faulty_nodes = [self.culprit_node]
        if self.inc.fault != "none" and self.plan.kernel_log is None:
            self.inc.kernel = {}
        return self.inc


_CUDA_HINT = [
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    "",
]


def _cuda_rank_failure(b: Builder, g: int, tf: float, err: str) -> list[str]:
    p = b.plan
    ri = p.rank_info(g)
    frames = emitters.train_frames(p)
    tb = b.python_error(g, frames, [f"RuntimeError: CUDA error: {err}", *_CUDA_HINT])
    watchdog = emitters.c10(
        p,
        ri,
        "E",
        tf + 0.2,
        "ProcessGroupNCCL.cpp:1595",
        f"{emitters.pg(p, ri)} Process group watchdog thread terminated with "
        f"exception: CUDA error: {err}",
    )
    return [watchdog, *_CUDA_HINT, *tb]


def _nccl_ib(b: Builder) -> Incident:
    p, rng = b.plan, b.rng
    k = b.fail_iteration()
    tf = b.timeline.end_of(k - 1) + rng.uniform(0.2, 0.9) * p.iter_seconds
    node = b.culprit_node
    hca = rng.randrange(max(1, p.ranks_per_node // 2))
    locs = [loc for loc in (hca * 2, hca * 2 + 1) if loc < p.ranks_per_node]
    culprits: dict[int, tuple[list[str], int]] = {}
    n = len(p.nodes)
    for loc in locs:
        g = p.node_ranks(node)[loc]
        ri = p.rank_info(g)
        lines = [
            emitters.nccl(
                ri,
                "WARN",
                f"NET/IB : mlx5_{hca}:1 Got async event : port error",
                src="transport/net_ib.cc:97",
                tid=ri.tid + 5,
            )
        ]
        for nb in sorted({(node + 1) % n, (node - 1) % n} - {node}) or [node]:
            ib = emitters.ib_completion(ri, p.ips[nb], rng.randrange(30000, 60000), 12, 129, "Send")
            lines += [ib, *emitters.nccl_error_return(ri)]
        last = lines[1].split("NCCL WARN ", 1)[1]
        lines += emitters.remote_error_block(p, ri, tf + 1.0, last)
        culprits[g] = (lines, -6)
    b.inc.add_root(
        r"NCCL WARN NET/IB : mlx5_\d+:\d+ Got async event : port error",
        b.prefix_ok(p.nodes[node]) + r"transport/net_ib\.cc:\d+ NCCL WARN NET/IB : Got completion",
    )
    pci = p.pci(locs[0])
    b.kernel(
        node,
        tf - 0.8,
        f"mlx5_core {pci}.1: Port module event[error]: module {hca}, Cable "
        "error, Bus stuck (I2C or data shorted)",
    )
    b.kernel(node, tf - 0.7, f"mlx5_core {pci}.1 ibp{int(pci[5:7], 16)}s0f1: Link down")
    if p.kernel_log:
        b.inc.add_root(
            r"mlx5_core \S+: Port module event\[error\]", r"mlx5_core \S+ \S+: Link down"
        )
    b.collapse(culprits, tf, k - 1)
    return b.finish("training", k)


def _gpu_fault(b: Builder, xids: list[tuple[int, str]], err: str, code: int) -> Incident:
    p, rng = b.plan, b.rng
    k = b.fail_iteration()
    tf = b.timeline.end_of(k - 1) + rng.uniform(0.2, 0.9) * p.iter_seconds
    node = b.culprit_node
    loc = rng.randrange(p.ranks_per_node)
    g = p.node_ranks(node)[loc]
    pci = p.pci(loc)
    for i, (x, text) in enumerate(xids):
        b.kernel(node, tf - 0.5 + i * 0.01, emitters.xid(pci, x, p.pids[g], text))
    if p.kernel_log:
        codes = "|".join(str(x) for x, _ in xids)
        b.inc.add_root(r"NVRM: Xid \(PCI:" + re.escape(pci) + r"\): (?:" + codes + "),")
    b.inc.add_root(r"CUDA error: " + re.escape(err))
    b.collapse({g: (_cuda_rank_failure(b, g, tf, err), code)}, tf, k - 1)
    return b.finish("training", k)


def _gpu_xid(b: Builder) -> Incident:
    if b.rng.random() < 0.6:
        return _gpu_fault(b, [(79, "GPU has fallen off the bus.")], "unspecified launch failure", 1)
    loc_text = "Timeout after 6s of waiting for RPC response from GPU{} GSP! Expected function 76 "
    return _gpu_fault(
        b,
        [(119, loc_text.format(b.rng.randrange(8)) + "(GSP_RM_CONTROL) (0x20800a4c 0x4).")],
        "unknown error",
        1,
    )


def _ecc(b: Builder) -> Incident:
    if b.rng.random() < 0.5:
        xids = [
            (
                48,
                "An uncorrectable double bit error (DBE) has been detected on GPU in the "
                f"framebuffer at partition {b.rng.randrange(8)}, subpartition 0.",
            ),
            (63, "Row Remapper: New row marked for remapping, reset gpu to activate."),
        ]
    else:
        xids = [
            (94, "Contained: SM (0x1). RST: No, D-RST: No"),
            (95, "Uncontained: FBHUB. RST: Yes, D-RST: No"),
        ]
    return _gpu_fault(b, xids, "uncorrectable ECC error encountered", 1)


def _illegal_memory(b: Builder) -> Incident:
    addr = f"0x{b.rng.randrange(0x7F0000000000, 0x7FFFFFFFFFFF) & ~0xFFF:x}"
    return _gpu_fault(
        b,
        [
            (
                31,
                f"Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS "
                f"GPCCLIENT_T1_3 faulted @ {addr}. Fault is of type FAULT_PDE "
                "ACCESS_TYPE_VIRT_READ",
            )
        ],
        "an illegal memory access was encountered",
        -6,
    )


def _oom(b: Builder) -> Incident:
    p, rng = b.plan, b.rng
    k = b.fail_iteration()
    tf = b.timeline.end_of(k - 1) + rng.uniform(0.1, 0.6) * p.iter_seconds
    loc = rng.randrange(p.ranks_per_node)
    g = p.node_ranks(b.culprit_node)[loc]
    alloc = rng.choice((2.0, 4.0, 7.81, 12.5))
    free = rng.uniform(0.5, alloc - 0.1)
    if p.config.new_torch:
        msg = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc:.2f} GiB. GPU "
            f"{loc} has a total capacity of 79.11 GiB of which {free:.2f} GiB is free. Process "
            f"{p.pids[g]} has {79.11 - free:.2f} GiB memory in use. Of the allocated memory "
            f"{72.4 - free:.2f} GiB is allocated by PyTorch, and 3.87 GiB is reserved by "
            "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )
    else:
        msg = (
            f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc:.2f} GiB "
            f"(GPU {loc}; 79.11 GiB total capacity; {72.4 - free:.2f} GiB already allocated; "
            f"{free:.2f} GiB free; 76.12 GiB reserved in total by PyTorch) If reserved memory is "
            ">> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
            "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
        )
    frames = [
        *emitters.train_frames(p),
        (
            f"{emitters.TORCH}/nn/modules/module.py",
            1532,
            "_wrapped_call_impl",
            "return self._call_impl(*args, **kwargs)",
        ),
        (
            f"{PYLIB}/flash_attn/flash_attn_interface.py",
            1069,
            "forward",
            "out_padded, softmax_lse, S_dmask, rng_state = _flash_attn_forward(",
        ),
    ]
    b.inc.add_root(r"OutOfMemoryError: CUDA out of memory\. Tried to allocate")
    b.collapse({g: (b.python_error(g, frames, [msg]), 1)}, tf, k - 1)
    return b.finish("training", k)


def _nan(b: Builder) -> Incident:
    p, rng = b.plan, b.rng
    k = b.fail_iteration()
    b.inc.nan_from = k
    stop = min(k + rng.randint(1, 3), p.train_iters)
    tf = b.timeline.end_of(stop) + rng.uniform(0.2, 0.8) * p.iter_seconds
    fw = p.config.framework

    def tails(g: int) -> list[str]:
        ri = p.rank_info(g)
        if fw == "megatron":
            exc = (
                f"AssertionError: Rank {g}: found NaN in local grad norm in backward pass before "
                f"data-parallel communication collective. Device: {ri.local}, node: {ri.node}"
            )
        else:
            exc = f"ValueError: loss became nan at step {stop + 1}; stopping (check lr / data)"
        return b.python_error(g, emitters.train_frames(p), [exc])

    b.inc.add_root(
        {
            "megatron": r"\| lm loss: nan \|",
            "deepspeed": r"^" + _PFX + r"steps: \d+ loss: nan ",
            "hf-trainer": r"\{'loss': nan, ",
        }[fw]
    )
    b.inc.add_root(
        r"found NaN in local grad norm in backward pass"
        if fw == "megatron"
        else r"ValueError: loss became nan at step \d+"
    )
    b.global_exit(tails, Cut("training", stop, rng.randint(0, p.lines_per_iteration - 1)), tf)
    return b.finish("training", k)


def _checkpoint_io(b: Builder) -> Incident:
    p, rng = b.plan, b.rng
    saves = [k for k in range(p.start_iteration + 2, p.train_iters) if k % p.save_interval == 0]
    k = saves[min(len(saves) - 1, 1 if len(saves) > 2 else 0)] if saves else b.fail_iteration()
    tf = b.timeline.end_of(k) + rng.uniform(3.0, 12.0)
    node = b.culprit_node
    server = f"10.{rng.randrange(1, 250)}.0.{rng.randrange(2, 20)}"
    b.kernel(node, tf - 30.0, f"nfs: server {server} not responding, still trying")
    b.kernel(node, tf - 1.0, f"nfs: server {server} not responding, timed out")
    if p.kernel_log:
        b.inc.add_root(r"nfs: server \S+ not responding")
    io_error = rng.random() < 0.5
    culprits: dict[int, tuple[list[str], int]] = {}
    for g in p.node_ranks(node):
        ri = p.rank_info(g)
        path = (
            f"{p.ckpt_dir}/iter_{k:07d}/mp_rank_{ri.local % p.config.tensor_parallel:02d}"
            f"_{g // max(1, p.world // p.config.pipeline_parallel):03d}/distrib_optim.pt"
        )
        exc = (
            f"OSError: [Errno 5] Input/output error: '{path}'"
            if io_error
            else f"RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos "
            f"{rng.randrange(10**6, 10**8)} vs {rng.randrange(10**5, 10**6)}"
        )
        frames = [
            (
                "/workspace/Megatron-LM/megatron/training/checkpointing.py",
                413,
                "save_checkpoint",
                "torch.save(state_dict, checkpoint_name)",
            ),
            (
                f"{emitters.TORCH}/serialization.py",
                628,
                "save",
                "_save(obj, opened_zipfile, pickle_module, pickle_protocol, "
                "_disable_byteorder_record)",
            ),
        ]
        culprits[g] = (b.python_error(g, frames, [exc]), 1)
    b.inc.add_root(
        r"OSError: \[Errno 5\] Input/output error: '"
        if io_error
        else r"\[enforce fail at inline_container\.cc:\d+\] \. unexpected pos \d+"
    )
    b.collapse(culprits, tf, k, stage="checkpointing")
    return b.finish("checkpointing", k)


def _rendezvous(b: Builder) -> Incident:
    p, rng = b.plan, b.rng
    inc = b.inc
    inc.workers_started = False
    node = b.culprit_node
    master = p.nodes[0]
    t0 = b.timeline.launch
    timeout = 900
    for g in range(p.world):
        inc.cuts[g] = Cut("init")
    lines = []
    for i in range(rng.randint(4, 9)):
        t = t0 + 1.0 + i * 30.0
        head = (
            f"[W{clock.c10('', t, True)} socket.cpp:697]"
            if p.config.new_torch
            else "[W socket.cpp:697]"
        )
        lines.append(
            f"{head} [c10d] The client socket has failed to connect to [{master}]:"
            f"{p.master_port} (errno: 113 - No route to host)."
        )
    lines += [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{emitters.TORCH}/distributed/elastic/rendezvous/dynamic_rendezvous.py", line '
        "1162, in next_rendezvous",
        "    self._op_executor.run(join_op, deadline, self._get_deadline)",
        f'  File "{emitters.TORCH}/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", '
        "line 256, in create_backend",
        "    store = _create_tcp_store(params)",
        f"torch.distributed.DistNetworkError: The client socket has timed out after {timeout}s "
        "while "
        f"trying to connect to ({master}, {p.master_port}).",
    ]
    inc.launcher_tails[node] = lines
    inc.add_root(
        r"The client socket has failed to connect to \[\S+\]:\d+ \(errno: 113 - No route",
        r"DistNetworkError: The client socket has timed out after \d+s while trying to connect",
    )
    for other in range(len(p.nodes)):
        if other == node:
            continue
        t = t0 + timeout + rng.uniform(0, 2)
        inc.launcher_tails[other] = [
            emitters.elastic_log(
                p,
                "INFO",
                t - timeout + 0.5,
                "torch.distributed.elastic.agent.server.api",
                "elastic/agent/server/api.py:858",
                "[default] Rendezvous'ing worker group",
            ),
            "Traceback (most recent call last):",
            '  File "/usr/local/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            f'  File "{emitters.TORCH}/distributed/elastic/rendezvous/dynamic_rendezvous.py", line '
            "1162, in next_rendezvous",
            "    self._op_executor.run(join_op, deadline, self._get_deadline)",
            f'  File "{emitters.TORCH}/distributed/elastic/rendezvous/dynamic_rendezvous.py", line '
            "676, in run",
            "    raise RendezvousTimeoutError",
            "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
        ]
        if p.launcher == "slurm":
            b.slurm_end(other, t + 2, 1)
    inc.add_cascade(r"^torch\.distributed\.elastic\.rendezvous\.api\.RendezvousTimeoutError$")
    if p.launcher == "slurm":
        b.slurm_end(node, t0 + timeout + 3, 1)
    return b.finish("init", None)


def _config_mismatch(b: Builder) -> Incident:
    p = b.plan
    fw = p.config.framework
    gbs = p.config.global_batch_size
    dp = p.data_parallel
    tf = b.timeline.init_done if fw != "hf-trainer" else b.timeline.model_done
    if fw == "megatron":
        exc = [
            f"AssertionError: global batch size ({gbs}) is not divisible by micro batch size (3)"
            f" times data parallel size ({dp})"
        ]
        frames = [
            (
                "/workspace/Megatron-LM/megatron/training/initialize.py",
                73,
                "initialize_megatron",
                "set_global_variables(args)",
            ),
            (
                "/workspace/Megatron-LM/megatron/core/num_microbatches_calculator.py",
                442,
                "__init__",
                "assert (",
            ),
        ]
        b.inc.add_root(r"AssertionError: global batch size \(\d+\) is not divisible by micro batch")
        stage, cut = "init", Cut("data_loading")
    elif fw == "deepspeed":
        exc = [
            f"AssertionError: Check batch related parameters. train_batch_size is not equal to "
            f"micro_batch_per_gpu * gradient_acc_step * world_size {gbs} != 3 * "
            f"{max(1, gbs // (3 * p.world))} * {p.world}"
        ]
        frames = [
            (
                f"{PYLIB}/deepspeed/__init__.py",
                181,
                "initialize",
                "engine = DeepSpeedEngine(args=args,",
            ),
            (f"{PYLIB}/deepspeed/runtime/config.py", 935, "_batch_assertion", "assert ("),
        ]
        b.inc.add_root(r"AssertionError: Check batch related parameters\. train_batch_size is not")
        stage, cut = "init", Cut("data_loading")
    else:
        exc = [
            "RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM:",
            "\tsize mismatch for model.embed_tokens.weight: copying a param with shape "
            "torch.Size([32000, 5120]) from checkpoint, the shape in current model is "
            "torch.Size([32001, 5120]).",
            "\tYou may consider adding `ignore_mismatched_sizes=True` in the model "
            "`from_pretrained` method.",
        ]
        frames = [
            (
                f"{PYLIB}/transformers/modeling_utils.py",
                4364,
                "_load_pretrained_model",
                'raise RuntimeError(f"Error(s) in loading state_dict for '
                "{model.__class__.__name__}",
            )
        ]
        b.inc.add_root(
            r"^" + _PFX + r"\tsize mismatch for model\.embed_tokens\.weight: copying a param"
        )
        stage, cut = "model_loading", Cut("model_loading")
    b.global_exit(lambda g: b.python_error(g, frames, exc), cut, tf)
    return b.finish(stage, None)


def _version_mismatch(b: Builder) -> Incident:
    """A package installed at start-up does not fit the image (one of two variants)."""
    tf = b.timeline.launch + 20.0
    if b.rng.random() < 0.5:
        return _flash_attn_mismatch(b, tf)
    return _nccl_cuda_mismatch(b, tf)


def _flash_attn_mismatch(b: Builder, tf: float) -> Incident:
    """A pip install at start-up builds flash-attn against another torch: an import fails."""
    p = b.plan
    for node in range(len(p.nodes)):
        b.inc.init_extra[p.node_ranks(node)[0]] = [
            "Collecting flash-attn==2.6.3",
            "  Using cached flash_attn-2.6.3.tar.gz (2.6 MB)",
            "Successfully installed einops-0.8.0 flash-attn-2.6.3",
            "WARNING: Running pip as the 'root' user can result in broken permissions and "
            "conflicting behaviour with the system package manager. It is recommended to use a "
            "virtual environment instead: https://pip.pypa.io/warnings/venv",
        ]
    exc = [
        f"ImportError: {PYLIB}/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined "
        "symbol: _ZN3c104cuda9SetDeviceEi"
    ]
    frames = [
        (
            f"{PYLIB}/flash_attn/__init__.py",
            3,
            "<module>",
            "from flash_attn.flash_attn_interface import (",
        ),
        (
            f"{PYLIB}/flash_attn/flash_attn_interface.py",
            10,
            "<module>",
            "import flash_attn_2_cuda as flash_attn_cuda",
        ),
    ]
    b.inc.add_root(
        r"undefined symbol: _ZN3c104cuda9SetDeviceEi",
        r"^Successfully installed .*flash-attn-\d",
    )
    b.global_exit(lambda g: b.python_error(g, frames, exc), Cut("init"), tf)
    return b.finish("init", None)


def _nccl_cuda_mismatch(b: Builder, tf: float) -> Incident:
    """A pip install at start-up brings an NCCL built for a newer CUDA than the driver's."""
    p = b.plan
    for node in range(len(p.nodes)):
        b.inc.init_extra[p.node_ranks(node)[0]] = [
            "Successfully installed nvidia-nccl-cu12-2.23.4",
            "WARNING: Running pip as the 'root' user can result in broken permissions and "
            "conflicting behaviour with the system package manager. It is recommended to use a "
            "virtual environment instead: https://pip.pypa.io/warnings/venv",
        ]
    cuda_err = "Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'"

    def tails(g: int) -> list[str]:
        ri = p.rank_info(g)
        frames = [
            (
                f"{emitters.TORCH}/distributed/distributed_c10d.py",
                2288,
                "all_reduce",
                "work = group.allreduce([tensor], opts)",
            )
        ]
        return [
            emitters.nccl(ri, "WARN", cuda_err, src="init.cc:1769", tid=ri.pid),
            emitters.nccl(ri, "INFO", "init.cc:1795 -> 1", tid=ri.pid),
            *b.python_error(
                g,
                frames,
                [
                    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
                    "c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with "
                    "NCCL_DEBUG=INFO "
                    "for details), NCCL version 2.23.4",
                    "ncclUnhandledCudaError: Call to CUDA function failed.",
                    "Last error:",
                    cuda_err,
                ],
            ),
        ]

    b.inc.add_root(
        r"CUDA driver version is insufficient for CUDA runtime version",
        r"ncclUnhandledCudaError: Call to CUDA function failed",
        r"^Successfully installed nvidia-nccl-cu12-",
    )
    b.global_exit(tails, Cut("data_loading"), tf)
    return b.finish("init", None)


def _hang(b: Builder) -> Incident:
    p, rng, inc = b.plan, b.rng, b.inc
    k = b.fail_iteration()
    node = b.culprit_node
    th = b.timeline.end_of(k - 1) + rng.uniform(0.3, 0.9) * p.iter_seconds
    partial = max(0, p.lines_per_iteration - 1)
    n = len(p.nodes)
    for g in range(p.world):
        inc.cuts[g] = Cut(
            "training",
            k - 1 if g in p.node_ranks(node) else k,
            0 if g in p.node_ranks(node) else rng.randint(0, partial),
        )
    for g in p.node_ranks(node):
        inc.tail(g, emitters.heartbeat_stuck(p, p.rank_info(g), th + 480.0 + rng.uniform(0, 2)))
    inc.add_root(
        r"Heartbeat monitor timed out! Process will be terminated",
        r"watchdog got stuck for \d+ seconds without making progress",
    )
    for other in range(n):
        if other == node:
            continue
        failures = []
        for g in p.node_ranks(other):
            ri = p.rank_info(g)
            t = th + p.timeout_ms / 1000.0 + rng.uniform(0, 3)
            inc.tail(g, emitters.watchdog_timeout(p, ri, t, b.seq(k + 1), b.numel()))
            failures.append((g, ri.local, -6, t))
        b.launcher(other, max(f[3] for f in failures), failures, [])
    inc.add_cascade(
        CASCADE["watchdog"], CASCADE["timeout-at"], CASCADE["pg-terminated"], CASCADE["terminate"]
    )
    t_kill = th + p.timeout_ms / 1000.0 + 30.0
    ranks = list(p.node_ranks(node))
    inc.launcher_tails[node] = [
        emitters.elastic_log(
            p,
            "WARNING",
            t_kill,
            "torch.distributed.elastic.agent.server.api",
            "elastic/agent/server/api.py:704",
            "Received Signals.SIGTERM death signal, shutting down workers",
        ),
        *[
            emitters.elastic_log(
                p,
                "WARNING",
                t_kill,
                "torch.distributed.elastic.multiprocessing.api",
                "elastic/multiprocessing/api.py:858",
                f"Sending process {p.pids[g]} closing signal SIGTERM",
            )
            for g in ranks
        ],
        "Traceback (most recent call last):",
        f'  File "{emitters.TORCH}/distributed/elastic/multiprocessing/api.py", line 62, in '
        "_terminate_process_handler",
        '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
        f"torch.distributed.elastic.multiprocessing.api.SignalException: Process "
        f"{p.pids[ranks[0]] - 7} got signal: 15",
    ]
    inc.add_cascade(CASCADE["sigterm-death"])
    if p.launcher == "slurm":
        b.slurm_end(node, t_kill + 1, 1)
    return b.finish("training", k)


def _straggler(b: Builder) -> Incident:
    p, rng, inc = b.plan, b.rng, b.inc
    node = b.culprit_node
    ks = p.start_iteration + max(2, int(p.iterations * rng.uniform(0.3, 0.5)))
    inc.slow_from = ks
    b.timeline = Timeline(p, slow_from=ks)
    kf = min(p.train_iters - 1, ks + max(3, int(p.iterations * 0.25)))
    for k in range(ks, kf + 1):
        t = b.timeline.end_of(k)
        b.kernel(
            node,
            t - 1.0,
            f"CPU{rng.randrange(96)}: Package temperature above threshold, cpu "
            f"clock throttled (total events = {1000 + (k - ks) * 37})",
        )
        for g in p.node_ranks(node):
            if (k - ks) % 3 == 0:
                inc.extra.setdefault(g, {})[k] = [
                    f"/workspace/train/gpu_monitor.py:57: UserWarning: GPU {g % p.ranks_per_node} "
                    f"clocks event reasons: HW Slowdown, HW Thermal Slowdown (temperature "
                    f"{rng.randint(88, 96)} C, sm clock {rng.randint(900, 1300)} MHz)"
                ]
    inc.add_root(r"clocks event reasons: HW Slowdown, HW Thermal Slowdown")
    inc.add_root(r"Package temperature above threshold, cpu clock throttled")
    tf = b.timeline.end_of(kf) + rng.uniform(0.3, 0.9) * p.iter_seconds
    for g in range(p.world):
        inc.cuts[g] = Cut("training", kf, 0)
    n = len(p.nodes)
    for other in range(n):
        failures = []
        for g in p.node_ranks(other):
            ri = p.rank_info(g)
            if other == node:
                t = tf + p.timeout_ms / 1000.0 + rng.uniform(4, 9)
                last = (
                    f"NET/IB : Got completion from peer {p.ips[(node + 1) % n]}<"
                    f"{rng.randrange(30000, 60000)}> with status=12 opcode=0 len=0 vendor err 129 "
                    f"(Recv) localGid ::ffff:{ri.ip} remoteGids::ffff:{p.ips[(node + 1) % n]}"
                )
                inc.tail(g, emitters.remote_error_block(p, ri, t, last))
                inc.add_cascade(CASCADE["remote"])
            else:
                t = tf + p.timeout_ms / 1000.0 + rng.uniform(0, 3)
                inc.tail(g, emitters.watchdog_timeout(p, ri, t, b.seq(kf + 1), b.numel()))
            failures.append((g, ri.local, -6, t))
        b.launcher(other, max(f[3] for f in failures), failures, [])
    inc.add_cascade(
        CASCADE["watchdog"], CASCADE["timeout-at"], CASCADE["pg-terminated"], CASCADE["terminate"]
    )
    return b.finish("training", ks)


def _node_crash(b: Builder) -> Incident:
    p, rng = b.plan, b.rng
    k = b.fail_iteration()
    tf = b.timeline.end_of(k - 1) + rng.uniform(0.2, 0.9) * p.iter_seconds
    node = b.culprit_node
    cpu = rng.randrange(96)
    for i, msg in enumerate(
        [
            f"mce: [Hardware Error]: CPU {cpu}: Machine Check Exception: 5 Bank 6: "
            "ba00000000000e0b",
            "mce: [Hardware Error]: RIP !INEXACT! 10:<ffffffffa1e0a2c7> {intel_idle+0x87/0x130}",
            "mce: [Hardware Error]: TSC 0 ADDR fef1a140 MISC 0 ",
            f"mce: [Hardware Error]: PROCESSOR 0:806f8 TIME {int(tf)} SOCKET 1 APIC 5e "
            "microcode 2b000571",
            "mce: [Hardware Error]: Run the above through 'mcelog --ascii'",
            "Kernel panic - not syncing: Fatal machine check",
        ]
    ):
        b.kernel(node, tf + i * 0.001, msg)
    b.inc.add_root(
        r"mce: \[Hardware Error\]: CPU \d+: Machine Check Exception",
        r"Kernel panic - not syncing: Fatal machine check",
    )
    culprits: dict[int, tuple[list[str], int]] = {g: ([], -9) for g in p.node_ranks(node)}
    b.collapse(culprits, tf, k - 1, culprit_node_dead=True)
    return b.finish("training", k)


def _shm(b: Builder) -> Incident:
    p, rng = b.plan, b.rng
    node = b.culprit_node
    tf = b.timeline.data_done + rng.uniform(1.0, 10.0)
    g = p.node_ranks(node)[rng.randrange(p.ranks_per_node)]
    wpid = p.pids[g] + rng.randint(50, 400)
    lines = [
        "ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm)."
    ] * rng.randint(1, 3)
    frames = [
        (
            f"{emitters.TORCH}/utils/data/dataloader.py",
            1133,
            "_try_get_data",
            "data = self._data_queue.get(timeout=timeout)",
        ),
        (
            f"{emitters.TORCH}/utils/data/_utils/signal_handling.py",
            66,
            "handler",
            "_error_if_any_worker_fails()",
        ),
    ]
    exc = [
        f"RuntimeError: DataLoader worker (pid {wpid}) is killed by signal: Bus error. It is "
        "possible that dataloader's workers are out of shared memory. Please try to raise your "
        "shared memory limit."
    ]
    b.inc.add_root(
        r"Unexpected bus error encountered in worker\. This might be caused by "
        r"insufficient shared memory",
        r"DataLoader worker \(pid \d+\) is killed by signal: Bus error",
    )
    b.collapse(
        {g: ([*lines, *b.python_error(g, frames, exc)], 1)},
        tf,
        p.start_iteration,
        stage="data_loading",
    )
    for other in range(p.world):
        if other not in p.node_ranks(node):
            b.inc.cuts[other] = Cut("training", p.start_iteration, 0)
    return b.finish("data_loading", None)


def _hccl(b: Builder) -> Incident:
    p, rng, inc = b.plan, b.rng, b.inc
    k = b.fail_iteration()
    tf = b.timeline.end_of(k - 1) + rng.uniform(0.2, 0.9) * p.iter_seconds
    node = b.culprit_node
    loc = rng.randrange(p.ranks_per_node)
    culprit = p.node_ranks(node)[loc]
    cri = p.rank_info(culprit)
    npu_ip = f"192.168.{node % 250}.{100 + loc}"
    peer = (culprit + p.ranks_per_node) % p.world
    culprit_lines = [
        emitters.hccl(
            "ERROR",
            cri.pid,
            tf,
            "hccl_network.cc:310",
            f"[Network] device[{loc}] RoCE link status changed to DOWN, nic ip[{npu_ip}]",
        ),
        emitters.hccl(
            "ERROR",
            cri.pid,
            tf + 0.4,
            "transport_roce.cc:812",
            f"[Transport]rdma "
            f"send failed, remote rank[{peer}], wc status[12], retry count exceeded",
        ),
    ]
    inc.add_root(
        r"RoCE link status changed to DOWN",
        r"rdma send failed, remote rank\[\d+\], "
        r"wc status\[12\]",
    )
    exec_timeout = 1800.0
    for node_i in range(len(p.nodes)):
        failures = []
        for g in p.node_ranks(node_i):
            ri = p.rank_info(g)
            inc.cuts[g] = Cut("training", k - 1, 0)
            t = tf + exec_timeout + rng.uniform(0, 2)
            lines = culprit_lines[:] if g == culprit else []
            remote = "unknown" if g == culprit else str(culprit)
            lines += [
                f"[ERROR] {clock.cann(t)[:19]} (PID:{ri.pid}, Device:{ri.local}, RankID:{g}) "
                "ERR00100 PTA call acl api failed.",
                f"EI0002: [PID: {ri.pid}] {clock.cann(t)} The wait execution of the Notify "
                "register "
                f"times out. Reason: The Notify register has not received the Notify record from "
                f"remote rank: [{remote}]. base information: [streamID:[{rng.randrange(2, 200)}], "
                f"taskID[{rng.randrange(10, 90000)}], taskType[Notify Wait], tag[AllReduce_"
                "hccl_world_group], AlgType(level 0-1-2):[fullmesh-ring-NHR].]. task information: "
                f"[notify id:[0x00000000000002{g % 100:02d}], stage:[0], remote rank:[{remote}]]. "
                f"group information: [group:[hccl_world_group], user define "
                f"information[Unspecified], rankSize[{p.world}], rankId[{g}]]",
                "        Possible Cause: 1. An exception occurs during the execution on some "
                "NPUs in "
                "the cluster. As a result, collective communication operation failed.2. The "
                "execution speed on some NPU in the cluster is too slow to complete a "
                "communication "
                "operation within the timeout interval. (default 1800s, You can set the "
                "interval by "
                "using HCCL_EXEC_TIMEOUT.)",
                *b.python_error(
                    g, emitters.train_frames(p), ["RuntimeError: ACL stream synchronize failed."]
                ),
            ]
            inc.tail(g, lines)
            failures.append((g, ri.local, 1, t))
        b.launcher(node_i, max(f[3] for f in failures), failures, [])
    inc.add_cascade(
        r"EI0002: \[PID: \d+\] .* The wait execution of the Notify register times out",
        r"ERR00100 PTA call acl api failed",
        r"^" + _PFX + r"RuntimeError: ACL stream synchronize failed",
    )
    return b.finish("training", k)


def _time_limit(b: Builder) -> Incident:
    p, rng, inc = b.plan, b.rng, b.inc
    k = b.fail_iteration()
    tf = b.timeline.end_of(k - 1) + rng.uniform(0.1, 0.9) * p.iter_seconds
    for g in range(p.world):
        inc.cuts[g] = Cut("training", k - 1, rng.randint(0, p.lines_per_iteration - 1))
    for node in range(len(p.nodes)):
        lines = []
        if node == 0:
            lines.append(
                f"slurmstepd: error: *** JOB {p.slurm_job} ON {p.nodes[0]} CANCELLED AT "
                f"{clock.slurm(tf)} DUE TO TIME LIMIT ***"
            )
        lines += [
            emitters.step_cancelled(p, p.nodes[node], tf, "TIME LIMIT"),
            emitters.elastic_log(
                p,
                "WARNING",
                tf + 0.1,
                "torch.distributed.elastic.agent.server.api",
                "elastic/agent/server/api.py:704",
                "Received Signals.SIGTERM death signal, shutting down workers",
            ),
        ]
        inc.launcher_tails[node] = lines
    inc.add_root(r"CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*")
    inc.add_cascade(CASCADE["sigterm-death"])
    inc.faulty_nodes = list(range(len(p.nodes)))
    return b.finish("training", k)


def _none(b: Builder) -> Incident:
    return b.finish(None, None)


_BUILDERS: dict[str, Callable[[Builder], Incident]] = {
    "nccl-ib-error": _nccl_ib,
    "gpu-xid": _gpu_xid,
    "ecc-error": _ecc,
    "cuda-illegal-memory": _illegal_memory,
    "oom": _oom,
    "nan-loss": _nan,
    "checkpoint-io": _checkpoint_io,
    "rendezvous-failure": _rendezvous,
    "config-mismatch": _config_mismatch,
    "version-mismatch": _version_mismatch,
    "hang": _hang,
    "straggler": _straggler,
    "node-crash": _node_crash,
    "shm-bus-error": _shm,
    "hccl-notify-timeout": _hccl,
    "time-limit": _time_limit,
    "none": _none,
}
assert set(_BUILDERS) == set(FAULT_KINDS)


def build_incident(plan: JobPlan, fault: str) -> tuple[Incident, Timeline]:
    """Render ``fault`` for ``plan``: the incident and the run's timeline."""
    b = Builder(plan, fault, random.Random(f"incident:{plan.seed}:{fault}"))
    return _BUILDERS[fault](b), b.timeline
