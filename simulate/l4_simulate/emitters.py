"""Line formats of the programs that write training logs: NCCL, PyTorch (c10 and torchrun),
Megatron-LM, DeepSpeed, HF Trainer, Ascend CANN/HCCL, Slurm and the kernel.

Functions return lines without newlines and without the per-job worker prefix (``[rank3]:``),
which the job writer adds.
"""

from __future__ import annotations

import math

from l4_simulate import clock
from l4_simulate.plan import JobPlan, RankInfo

PYLIB = "/usr/local/lib/python3.10/dist-packages"
TORCH = f"{PYLIB}/torch"


# --- NCCL ---------------------------------------------------------------------------------------
def nccl(ri: RankInfo, level: str, msg: str, *, src: str = "", tid: int | None = None) -> str:
    """``node-a07:1234:5678 [3] NCCL INFO ...`` (no timestamp; WARN lines carry ``file:line``)."""
    where = f"{src} " if src else ""
    thread = ri.tid if tid is None else tid
    return f"{ri.node}:{ri.pid}:{thread} [{ri.local}] {where}NCCL {level} {msg}"


def nccl_init(plan: JobPlan, ri: RankInfo, hcas: int) -> list[str]:
    """NCCL bootstrap and communicator set-up of one rank on the world communicator."""
    ver = plan.nccl_version
    devs = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(hcas))
    lines = [nccl(ri, "INFO", f"Bootstrap : Using eth0:{ri.ip}<0>", tid=ri.pid)]
    if ri.rank == 0:
        lines.append(nccl(ri, "INFO", f"NCCL version {ver}", tid=ri.pid))
    lines += [
        nccl(ri, "INFO", f"cudaDriverVersion {12040 if 'cuda12' in ver else 11080}", tid=ri.pid),
        nccl(
            ri,
            "INFO",
            "NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared "
            "object file: No such file or directory : when loading libnccl-net.so",
            tid=ri.pid,
        ),
        nccl(ri, "INFO", "NET/Plugin: Using internal network plugin.", tid=ri.pid),
        nccl(ri, "INFO", "NCCL_IB_GID_INDEX set by environment to 3.", tid=ri.pid),
        nccl(ri, "INFO", f"NET/IB : Using {devs} ; OOB eth0:{ri.ip}<0>", tid=ri.pid),
        nccl(ri, "INFO", "Using non-device net plugin version 0", tid=ri.pid),
        nccl(ri, "INFO", "Using network IB", tid=ri.pid),
        nccl(
            ri,
            "INFO",
            f"comm 0x{0x55D5C8A0 + ri.rank * 4096:x} rank {ri.rank} nranks {plan.world} "
            f"cudaDev {ri.local} nvmlDev {ri.local} busId {ri.bus} commId 0x{plan.slurm_job:x}"
            f"{plan.seed:04x} - Init START",
            tid=ri.pid,
        ),
        nccl(
            ri,
            "INFO",
            f"Setting affinity for GPU {ri.local} to ffffffff,00000000,ffffffff",
            tid=ri.pid,
        ),
    ]
    nxt = (ri.rank + 1) % plan.world
    for ch in range(2):
        if (ri.local + 1) % plan.ranks_per_node == 0:
            lines.append(
                nccl(
                    ri,
                    "INFO",
                    f"Channel {ch:02d}/0 : {ri.rank}[{ri.local}] -> {nxt}"
                    f"[{nxt % plan.ranks_per_node}] [send] via NET/IB/{ri.local % hcas}",
                )
            )
        else:
            lines.append(
                nccl(
                    ri,
                    "INFO",
                    f"Channel {ch:02d}/0 : {ri.rank}[{ri.local}] -> {nxt}"
                    f"[{nxt % plan.ranks_per_node}] via P2P/IPC",
                )
            )
    lines += [
        nccl(ri, "INFO", "Connected all rings"),
        nccl(ri, "INFO", "Connected all trees"),
        nccl(ri, "INFO", "threadThresholds 8/8/64 | 4096/8/64 | 512 | 512"),
        nccl(
            ri,
            "INFO",
            "24 coll channels, 0 collnet channels, 0 nvls channels, 32 p2p channels, "
            "32 p2p channels per peer",
        ),
        nccl(
            ri,
            "INFO",
            f"comm 0x{0x55D5C8A0 + ri.rank * 4096:x} rank {ri.rank} nranks {plan.world} "
            f"cudaDev {ri.local} nvmlDev {ri.local} busId {ri.bus} commId 0x{plan.slurm_job:x}"
            f"{plan.seed:04x} - Init COMPLETE",
            tid=ri.pid,
        ),
    ]
    return lines


def nccl_destroy(plan: JobPlan, ri: RankInfo) -> str:
    return nccl(
        ri,
        "INFO",
        f"comm 0x{0x55D5C8A0 + ri.rank * 4096:x} rank {ri.rank} nranks "
        f"{plan.world} cudaDev {ri.local} busId {ri.bus} - Destroy COMPLETE",
        tid=ri.pid,
    )


def ib_completion(
    ri: RankInfo, peer_ip: str, port: int, status: int, vendor: int, kind: str
) -> str:
    """The NET/IB completion-error warning (retry exceeded = 12, vendor err 129)."""
    return nccl(
        ri,
        "WARN",
        f"NET/IB : Got completion from peer {peer_ip}<{port}> with status={status} opcode=0 len=0 "
        f"vendor err {vendor} ({kind}) localGid ::ffff:{ri.ip} remoteGids::ffff:{peer_ip}",
        src="transport/net_ib.cc:1696",
        tid=ri.tid + 11,
    )


def nccl_error_return(ri: RankInfo) -> list[str]:
    return [
        nccl(ri, "INFO", "transport/net.cc:1298 -> 6", tid=ri.tid + 11),
        nccl(ri, "INFO", "proxy.cc:694 -> 6", tid=ri.tid + 11),
        nccl(ri, "INFO", "proxy.cc:874 -> 6 [Progress Thread]", tid=ri.tid + 11),
        "",
    ]


# --- PyTorch c10 / ProcessGroupNCCL --------------------------------------------------------------
def c10(plan: JobPlan, ri: RankInfo, level: str, t: float, src: str, msg: str) -> str:
    """A c10 log line: ``[rank3]:[E1023 09:13:42.123456789 src] msg`` (new torch) or ``[E src] "
    "msg``."""
    if plan.config.new_torch:
        head = f"[{clock.c10(level, t, True)} {src}]"
        # The job writer adds "[rank3]:" to every worker line when the job uses that prefix.
        return head + " " + msg if plan.prefix == "rank" else f"[rank{ri.rank}]:{head} {msg}"
    return f"[{level} {src}] {msg}"


def work_nccl(seq: int, op: str, numel: int, timeout_ms: int) -> str:
    return (
        f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
        f"Timeout(ms)={timeout_ms})"
    )


def pg(plan: JobPlan, ri: RankInfo) -> str:
    return (
        f"[PG ID 0 PG GUID 0(default_pg) Rank {ri.rank}]"
        if plan.config.new_torch
        else (f"[Rank {ri.rank}]")
    )


def watchdog_timeout(plan: JobPlan, ri: RankInfo, t: float, seq: int, numel: int) -> list[str]:
    """The NCCL watchdog block of a rank whose collective never completed."""
    work = work_nccl(seq, "ALLREDUCE", numel, plan.timeout_ms)
    ran = plan.timeout_ms + 7 + (ri.rank * 37) % 400
    msg = (
        f"[Rank {ri.rank}] Watchdog caught collective operation timeout: {work} ran for {ran} "
        "milliseconds before timing out."
    )
    return [
        c10(plan, ri, "E", t, "ProcessGroupNCCL.cpp:616", msg),
        c10(
            plan,
            ri,
            "E",
            t,
            "ProcessGroupNCCL.cpp:1785",
            f"{pg(plan, ri)} Timeout at NCCL work: {seq}, "
            f"last enqueued NCCL work: {seq + 1}, last completed NCCL work: {seq - 1}.",
        ),
        c10(
            plan,
            ri,
            "E",
            t,
            "ProcessGroupNCCL.cpp:630",
            f"[Rank {ri.rank}] Some NCCL operations have "
            "failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
            "operations might run on corrupted/incomplete data.",
        ),
        c10(
            plan,
            ri,
            "E",
            t,
            "ProcessGroupNCCL.cpp:636",
            f"[Rank {ri.rank}] To avoid data inconsistency, we are taking the entire process down.",
        ),
        *abort_block(
            plan,
            ri,
            t,
            "c10::DistBackendError",
            f"{pg(plan, ri)} Process group watchdog thread terminated with exception: {msg}",
            "checkTimeout",
            618,
        ),
    ]


def abort_block(
    plan: JobPlan, ri: RankInfo, t: float, exc: str, what: str, func: str, line: int
) -> list[str]:
    """``terminate called after throwing`` with the C++ frames of the watchdog thread."""
    lib = f"{TORCH}/lib"
    return [
        c10(plan, ri, "E", t, "ProcessGroupNCCL.cpp:1595", what),
        f"terminate called after throwing an instance of '{exc}'",
        f"  what():  {what}",
        f"Exception raised from {func} at "
        f"../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:{line} "
        "(most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f2a8c1d4897 in "
        f"{lib}/libc10.so)",
        f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::{func}() + 0x1d2 (0x7f2a8d4c21b2 in "
        f"{lib}/libtorch_cuda.so)",
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f2a8d4c8fc3 in "
        f"{lib}/libtorch_cuda.so)",
        "frame #3: <unknown function> + 0xdc253 (0x7f2ad9e5e253 in "
        "/lib/x86_64-linux-gnu/libstdc++.so.6)",
        "frame #4: <unknown function> + 0x94ac3 (0x7f2ade0d2ac3 in "
        "/lib/x86_64-linux-gnu/libc.so.6)",
        "",
    ]


def heartbeat_stuck(plan: JobPlan, ri: RankInfo, t: float) -> list[str]:
    """What a rank whose CUDA calls hang prints: the watchdog's heartbeat monitor gives up."""
    return [
        c10(
            plan,
            ri,
            "E",
            t,
            "ProcessGroupNCCL.cpp:1418",
            f"{pg(plan, ri)} Heartbeat monitor timed "
            "out! Process will be terminated after dumping debug info. workMetaList_.size()=2",
        ),
        c10(
            plan,
            ri,
            "E",
            t,
            "ProcessGroupNCCL.cpp:1476",
            f"{pg(plan, ri)} ProcessGroupNCCL's "
            "watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
            "collectives. This typically indicates a NCCL/CUDA API hang blocking the watchdog, and "
            "could be triggered by another thread holding the GIL inside a CUDA api, or other "
            "deadlock-prone behaviors.If you suspect the watchdog is not actually stuck and a "
            "longer "
            "timeout would help, you can either increase the timeout "
            "(TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value or disable the heartbeat monitor "
            "(TORCH_NCCL_ENABLE_MONITORING=0).If either of aforementioned helps, feel free to file "
            "an issue to PyTorch about the short timeout or false positive abort; otherwise, "
            "please "
            "attempt to debug the hang.",
        ),
    ]


def remote_error_block(plan: JobPlan, ri: RankInfo, t: float, last_error: str) -> list[str]:
    """The watchdog of a rank whose NCCL communicator reported ncclRemoteError."""
    ver = plan.nccl_version.split("+")[0]
    what = (
        f"{pg(plan, ri)} Process group watchdog thread terminated with exception: NCCL error: "
        f"remote process exited or there was a network error, NCCL version {ver}"
    )
    return [
        *abort_block(plan, ri, t, "c10::DistBackendError", what, "checkForNCCLErrors", 1701)[:3],
        "ncclRemoteError: A call failed possibly due to a network error or a remote process "
        "exiting prematurely.",
        "Last error:",
        last_error,
        *abort_block(plan, ri, t, "c10::DistBackendError", what, "checkForNCCLErrors", 1701)[3:],
    ]


# --- Python tracebacks ---------------------------------------------------------------------------
def traceback(script: str, frames: list[tuple[str, int, str, str]], exc: list[str]) -> list[str]:
    """A Python traceback: ``script`` is the entry point; frames are (file, line, func, code)."""
    lines = ["Traceback (most recent call last):"]
    lines += [f'  File "{script}", line 281, in <module>', "    main()"]
    for path, no, func, code in frames:
        lines += [f'  File "{path}", line {no}, in {func}', f"    {code}"]
    return lines + exc


def train_frames(plan: JobPlan) -> list[tuple[str, int, str, str]]:
    fw = plan.config.framework
    if fw == "megatron":
        return [
            (
                "/workspace/Megatron-LM/megatron/training/training.py",
                1161,
                "train",
                "train_step(forward_step_func,",
            ),
            (
                "/workspace/Megatron-LM/megatron/training/training.py",
                612,
                "train_step",
                "losses_reduced = forward_backward_func(",
            ),
            (
                "/workspace/Megatron-LM/megatron/core/pipeline_parallel/schedules.py",
                1367,
                "forward_backward_pipelining_without_interleaving",
                "input_tensor_grad = backward_step(",
            ),
        ]
    if fw == "deepspeed":
        return [
            ("/workspace/train/train_ds.py", 214, "train", "model_engine.backward(loss)"),
            (
                f"{PYLIB}/deepspeed/utils/nvtx.py",
                15,
                "wrapped_fn",
                "ret_val = func(*args, **kwargs)",
            ),
            (
                f"{PYLIB}/deepspeed/runtime/engine.py",
                1976,
                "backward",
                "self.optimizer.backward(loss, retain_graph=retain_graph)",
            ),
        ]
    return [
        (f"{PYLIB}/transformers/trainer.py", 1885, "train", "return inner_training_loop("),
        (
            f"{PYLIB}/transformers/trainer.py",
            2216,
            "_inner_training_loop",
            "tr_loss_step = self.training_step(model, inputs)",
        ),
        (
            f"{PYLIB}/transformers/trainer.py",
            3250,
            "training_step",
            "self.accelerator.backward(loss)",
        ),
    ]


def script_of(plan: JobPlan) -> str:
    return {
        "megatron": "/workspace/Megatron-LM/pretrain_gpt.py",
        "deepspeed": "/workspace/train/train_ds.py",
        "hf-trainer": "/workspace/train/run_clm.py",
    }[plan.config.framework]


# --- torchrun / elastic ---------------------------------------------------------------------------
def elastic_log(plan: JobPlan, level: str, t: float, module: str, src: str, msg: str) -> str:
    """torchrun's own logging: old ``[ts] module: [LEVEL] msg``, new glog-like ``E0503 ...``."""
    if plan.config.new_torch:
        d = clock.c10(level[0], t, False)
        return f"{d} {plan.slurm_job % 100000} torch/distributed/{src}] {msg}"
    return f"[{clock.iso_ms(t)}] {module}: [{level}] {msg}"


def launcher_preamble(plan: JobPlan, ri: RankInfo, t: float) -> list[str]:
    lines: list[str] = []
    if plan.launcher == "slurm":
        lines.append(
            f"+ srun --kill-on-bad-exit=1 torchrun --nnodes {len(plan.nodes)} "
            f"--nproc-per-node {plan.ranks_per_node} --rdzv-backend c10d --rdzv-endpoint "
            f"{plan.nodes[0]}:{plan.master_port} {script_of(plan)}"
        )
    star = "*" * 41
    lines += [
        elastic_log(plan, "WARNING", t, "torch.distributed.run", "run.py:779", ""),
        elastic_log(plan, "WARNING", t, "torch.distributed.run", "run.py:779", star),
        elastic_log(
            plan,
            "WARNING",
            t,
            "torch.distributed.run",
            "run.py:779",
            "Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
            "default, to avoid your system being overloaded, please further tune the "
            "variable for optimal performance in your application as needed. ",
        ),
        elastic_log(plan, "WARNING", t, "torch.distributed.run", "run.py:779", star),
        elastic_log(
            plan,
            "INFO",
            t + 0.4,
            "torch.distributed.elastic.agent.server.api",
            "elastic/agent/server/api.py:525",
            "[default] starting workers for entrypoint: python",
        ),
    ]
    return lines


def launcher_failure(
    plan: JobPlan,
    ri: RankInfo,
    t: float,
    failures: list[tuple[int, int, int, float]],
    root: tuple[int, int, int, float],
    term_sent: list[int],
) -> list[str]:
    """torchrun's ``failed (exitcode ...)`` line and ChildFailedError block.

    ``failures`` and ``root`` are (global rank, local rank, exit code, time); ``term_sent`` are the
    pids the agent sent SIGTERM to before reporting.
    """
    lines = [
        elastic_log(
            plan,
            "WARNING",
            t,
            "torch.distributed.elastic.multiprocessing.api",
            "elastic/multiprocessing/api.py:858",
            f"Sending process {pid} closing signal SIGTERM",
        )
        for pid in term_sent
    ]
    g, local, code, _ = root
    lines.append(
        elastic_log(
            plan,
            "ERROR",
            t + 1.2,
            "torch.distributed.elastic.multiprocessing.api",
            "elastic/multiprocessing/api.py:833",
            f"failed (exitcode: {code}) local_rank: {local} (pid: "
            f"{plan.pids[g]}) of binary: /usr/bin/python",
        )
    )
    lines += [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{TORCH}/distributed/elastic/multiprocessing/errors/__init__.py", line 347, '
        "in wrapper",
        "    return f(*args, **kwargs)",
        f'  File "{TORCH}/distributed/run.py", line 812, in main',
        "    run(args)",
        f'  File "{TORCH}/distributed/run.py", line 803, in run',
        "    elastic_launch(",
        f'  File "{TORCH}/distributed/launcher/api.py", line 135, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        f'  File "{TORCH}/distributed/launcher/api.py", line 268, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * 60,
        f"{script_of(plan).rsplit('/', 1)[-1]} FAILED",
        "-" * 60,
        "Failures:",
    ]
    others = [f for f in failures if f[0] != g]
    if not others:
        lines.append("  <NO_OTHER_FAILURES>")
    for i, (fg, fl, fc, ft) in enumerate(others, start=1):
        lines += [f"[{i}]:", *_failure_fields(plan, ri, fg, fl, fc, ft)]
    lines += [
        "-" * 60,
        "Root Cause (first observed failure):",
        "[0]:",
        *_failure_fields(plan, ri, g, local, code, root[3]),
        "=" * 60,
    ]
    return lines


def _failure_fields(
    plan: JobPlan, ri: RankInfo, g: int, local: int, code: int, t: float
) -> list[str]:
    if code < 0:
        sig = {-6: "SIGABRT", -9: "SIGKILL", -15: "SIGTERM", -7: "SIGBUS"}.get(code, "SIGABRT")
        tb = f"Signal {-code} ({sig}) received by PID {plan.pids[g]}"
    else:
        tb = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    return [
        f"  time      : {clock.elastic(t)}",
        f"  host      : {ri.node}",
        f"  rank      : {g} (local_rank: {local})",
        f"  exitcode  : {code} (pid: {plan.pids[g]})",
        "  error_file: <N/A>",
        f"  traceback : {tb}",
    ]


def launcher_success(plan: JobPlan, t: float) -> list[str]:
    return [
        elastic_log(
            plan,
            "INFO",
            t,
            "torch.distributed.elastic.agent.server.api",
            "elastic/agent/server/api.py:733",
            "[default] worker group successfully finished. Waiting 300 seconds for other "
            "agents to finish.",
        ),
        elastic_log(
            plan,
            "INFO",
            t + 2.1,
            "torch.distributed.elastic.agent.server.api",
            "elastic/agent/server/api.py:1099",
            "Local worker group finished (WorkerState."
            "SUCCEEDED). Waiting 300 seconds for other agents to finish",
        ),
        elastic_log(
            plan,
            "INFO",
            t + 2.4,
            "torch.distributed.elastic.agent.server.api",
            "elastic/agent/server/api.py:1112",
            "Done waiting for other agents. Elapsed: 0.0013 seconds",
        ),
    ]


# --- Slurm ---------------------------------------------------------------------------------------
def srun_task_exit(node: str, task: int, code: int) -> str:
    return f"srun: error: {node}: task {task}: Exited with exit code {code}"


def step_cancelled(plan: JobPlan, node: str, t: float, reason: str = "") -> str:
    tail = f" DUE TO {reason}" if reason else ""
    step = f"{plan.slurm_job}.0"
    return f"slurmstepd: error: *** STEP {step} ON {node} CANCELLED AT {clock.slurm(t)}{tail} ***"


# --- Kernel --------------------------------------------------------------------------------------
def kernel(style: str, node: str, t: float, uptime: float, msg: str) -> str:
    """A kernel line as ``kern.log`` (rsyslog) or ``dmesg -T`` writes it."""
    if style == "kern":
        return f"{clock.syslog(t)} {node} kernel: [{uptime:12.6f}] {msg}"
    return f"{clock.dmesg_human(t)} {msg}"


def xid(pci: str, code: int, pid: int, text: str) -> str:
    return f"NVRM: Xid (PCI:{pci}): {code}, pid={pid}, name=python, {text}"


# --- Frameworks ----------------------------------------------------------------------------------
def megatron_iteration(
    plan: JobPlan, k: int, t: float, ms: float, loss: float, gnorm: float, nan_iters: int = 0
) -> str:
    lr = (
        3.0e-4 * min(1.0, k / 2000.0) * (0.5 + 0.5 * math.cos(math.pi * k / (plan.train_iters * 4)))
    )
    gbs = plan.config.global_batch_size
    loss_s = "nan" if math.isnan(loss) else f"{loss:.6E}"
    gn = "nan" if math.isnan(gnorm) else f"{gnorm:.3f}"
    return (
        f" [{clock.iso(t)}] iteration {k:>8d}/{plan.train_iters:>8d} | consumed samples: "
        f"{k * gbs:>12d} | elapsed time per iteration (ms): {ms:.1f} | learning rate: {lr:.6E} "
        f"| global batch size: {gbs:>5d} | lm loss: {loss_s} | loss scale: 1.0 | grad norm: {gn} "
        f"| number of skipped iterations:   0 | number of nan iterations: {nan_iters:>3d} |"
    )


MEGATRON_TIMERS = (
    "forward-backward",
    "forward-compute",
    "backward-compute",
    "batch-generator",
    "layernorm-grads-all-reduce",
    "embedding-grads-all-reduce",
    "all-grads-sync",
    "params-all-gather",
    "optimizer-copy-to-main-grad",
    "optimizer-unscale-and-check-inf",
    "optimizer-clip-main-grad",
    "optimizer-count-zeros",
    "optimizer-inner-step",
    "optimizer-copy-main-to-model-params",
    "optimizer",
)


def megatron_timer(name: str, ms: float) -> str:
    return f"    {name} {'.' * (48 - len(name))}: ({ms * 0.97:.2f}, {ms:.2f})"


def deepspeed_step(plan: JobPlan, k: int, t: float, loss: float, sec: float) -> list[str]:
    lr = 2.0e-5 * min(1.0, k / 500.0)
    loss_s = "nan" if math.isnan(loss) else f"{loss:.4f}"
    sps = plan.config.global_batch_size / max(sec, 1e-3)
    return [
        f"[{clock.iso_ms(t)}] [INFO] [logging.py:96:log_dist] [Rank 0] step={k}, skipped=0, "
        f"lr=[{lr:.10f}, {lr:.10f}], mom=[(0.9, 0.95), (0.9, 0.95)]",
        f"[{clock.iso_ms(t)}] [INFO] [timer.py:260:stop] "
        f"epoch=0/micro_step={k * 4}/global_step={k}, "
        f"RunningAvgSamplesPerSec={sps * 0.99:.6f}, CurrSamplesPerSec={sps:.6f}, "
        f"MemAllocated=21.34GB, MaxMemAllocated=61.02GB",
        f"steps: {k} loss: {loss_s} iter time (s): {sec:.3f} samples/sec: {sps:.3f}",
    ]


DEEPSPEED_EXTRA = (
    "fwd_microstep",
    "bwd_microstep",
    "bwd_inner_microstep",
    "bwd_allreduce_microstep",
    "step_microstep",
)


def deepspeed_timer(name: str, ms: float) -> str:
    return f"time (ms) | {name}: {ms:.2f}"


def hf_progress(plan: JobPlan, k: int, elapsed: float, sec: float) -> str:
    total = plan.train_iters
    pct = int(100 * k / total)
    filled = int(10 * k / total)
    bar = "█" * filled + " " * (10 - filled)
    remaining = (total - k) * sec
    return (
        f"{pct:3d}%|{bar}| {k}/{total} [{clock.tqdm_clock(elapsed)}<"
        f"{clock.tqdm_clock(remaining)}, {sec:5.2f}s/it]"
    )


def hf_microstep(step: int, loss: float) -> str:
    """A per-micro-step line of the user's training script (gradient accumulation)."""
    loss_s = "nan" if math.isnan(loss) else f"{loss + 0.01 * (step % 3):.4f}"
    return f"  grad-accum micro_step {step + 1}/8 tokens=32768 local_loss={loss_s}"


def hf_loss(k: int, total: int, loss: float, gnorm: float) -> str:
    lr = 1e-05 * (1 - k / (total + 1))
    if math.isnan(loss):
        epoch = f"{k / total:.2f}"
        return f"{{'loss': nan, 'grad_norm': nan, 'learning_rate': {lr:.4e}, 'epoch': {epoch}}}"
    return (
        f"{{'loss': {loss:.4f}, 'grad_norm': {gnorm:.4f}, 'learning_rate': {lr:.4e}, "
        f"'epoch': {k / total:.2f}}}"
    )


def framework_init(plan: JobPlan, ri: RankInfo, t: float) -> list[str]:
    """What a worker prints before NCCL set-up: arguments, parallel sizes, seeds."""
    c = plan.config
    fw = c.framework
    if fw == "megatron":
        lines = []
        if ri.rank == 0:
            lines += [
                f"using world size: {plan.world}, data-parallel size: {plan.data_parallel}, "
                f"context-parallel size: 1, tensor-model-parallel size: {c.tensor_parallel}, "
                f"pipeline-model-parallel size: {c.pipeline_parallel} ",
                f"using {'torch.bfloat16' if c.precision == 'bf16' else 'torch.float16'} for "
                "parameters ...",
                "------------------------ arguments ------------------------",
                f"  global_batch_size ............................... {c.global_batch_size}",
                f"  micro_batch_size ................................ {plan.micro_batch}",
                f"  save_interval ................................... {plan.save_interval}",
                f"  tensor_model_parallel_size ...................... {c.tensor_parallel}",
                f"  pipeline_model_parallel_size .................... {c.pipeline_parallel}",
                f"  train_iters ..................................... {plan.train_iters}",
                "-------------------- end of arguments ---------------------",
                "> initializing torch distributed ...",
            ]
        return lines
    if fw == "deepspeed":
        return [
            f"[{clock.iso_ms(t)}] [INFO] [real_accelerator.py:203:get_accelerator] Setting "
            "ds_accelerator to cuda (auto detect)",
            f"[{clock.iso_ms(t + 1.3)}] [INFO] [comm.py:637:init_distributed] cdb=None",
            *(
                [
                    f"[{clock.iso_ms(t + 1.4)}] [INFO] [comm.py:668:init_distributed] Initializing "
                    "TorchBackend in DeepSpeed with backend nccl"
                ]
                if ri.rank == 0
                else []
            ),
        ]
    return [
        f"[INFO|training_args.py:1902] {clock.iso_ms(t)} >> PyTorch: setting up devices",
        f"[WARNING|logging.py:328] {clock.iso_ms(t + 0.2)} >> Process rank: {ri.rank}, device: "
        f"cuda:{ri.local}, n_gpu: 1, distributed training: True, {c.precision} training: True",
    ]


def framework_init_done(plan: JobPlan, ri: RankInfo, t: float) -> list[str]:
    c = plan.config
    if c.framework == "megatron" and ri.rank == 0:
        return [
            f"> initialized tensor model parallel with size {c.tensor_parallel}",
            f"> initialized pipeline model parallel with size {c.pipeline_parallel}",
            "> setting random seeds to 1234 ...",
            "> compiling dataset index builder ...",
            ">>> done with dataset index builder. Compilation time: 0.046 seconds",
            f"[after megatron is initialized] datetime: {clock.iso(t)} ",
        ]
    return []


def data_loading(plan: JobPlan, ri: RankInfo, t0: float, t1: float) -> list[str]:
    fw = plan.config.framework
    if fw == "megatron":
        if ri.rank != 0:
            return ["> building train, validation, and test datasets for GPT ..."][:0]
        n = plan.train_iters * plan.config.global_batch_size
        return [
            "> building train, validation, and test datasets ...",
            " > datasets target sizes (minimum size):",
            f"    train:      {n}",
            f"    validation: {n // 100}",
            "    test:       1280",
            "> building train, validation, and test datasets for GPT ...",
            "> finished creating GPT datasets ...",
            f"[after dataloaders are built] datetime: {clock.iso(t1)} ",
        ]
    if fw == "deepspeed":
        return [
            f"[{clock.iso_ms(t0)}] [INFO] [data_pipeline] loading indexed dataset from "
            "/mnt/shared/data/pile_text_document",
            f"[{clock.iso_ms(t1)}] [INFO] [data_pipeline] built dataloader: "
            f"{plan.train_iters * plan.config.global_batch_size} samples, 8 workers",
        ]
    total = 4096
    return [
        f"Map (num_proc=32):   0%|          | 0/{total} [00:00<?, ? examples/s]",
        f"Map (num_proc=32):  50%|█████     | {total // 2}/{total} "
        f"[00:{int(t1 - t0) // 2:02d}<00:10, "
        "187.21 examples/s]",
        f"Map (num_proc=32): 100%|██████████| {total}/{total} [00:{int(t1 - t0) % 60:02d}<00:00, "
        "201.77 examples/s]",
    ]


def model_loading(plan: JobPlan, ri: RankInfo, t0: float, t1: float) -> list[str]:
    c = plan.config
    it = plan.start_iteration
    if c.framework == "megatron":
        lines = []
        if ri.rank == 0:
            lines.append(
                f" > number of parameters on (tensor, pipeline) model parallel rank "
                f"(0, 0): {1_620_000_000 // c.tensor_parallel}"
            )
        if it:
            lines += [
                f" loading checkpoint from {plan.ckpt_dir} at iteration {it}",
                f"  successfully loaded checkpoint from {plan.ckpt_dir} [ t "
                f"{ri.local % c.tensor_parallel}, p "
                f"{ri.rank // (plan.world // c.pipeline_parallel)} ] "
                f"at iteration {it}",
            ]
        else:
            lines.append(
                "WARNING: could not find the metadata file "
                f"{plan.ckpt_dir}/latest_checkpointed_iteration.txt "
            )
            lines.append("    will not load any checkpoints and will start from random")
        if ri.rank == 0:
            lines.append(
                f"[after model, optimizer, and learning rate scheduler are built] datetime: "
                f"{clock.iso(t1)} "
            )
            lines.append("training ...")
            lines.append(f"[before the start of training step] datetime: {clock.iso(t1)} ")
        return lines
    if c.framework == "deepspeed":
        lines = [
            f"[{clock.iso_ms(t0)}] [INFO] [config.py:987:print] DeepSpeedEngine configuration:",
            f"[{clock.iso_ms(t0)}] [INFO] [config.py:991:print]   train_batch_size ............. "
            f"{c.global_batch_size}",
        ]
        if it:
            lines.append(
                f"[{clock.iso_ms(t1)}] [INFO] [torch_checkpoint_engine.py:27:load] [Torch] "
                f"Loading checkpoint from {plan.ckpt_dir}/global_step{it}/"
                f"mp_rank_{ri.local % c.tensor_parallel:02d}_model_states.pt..."
            )
        return lines
    return [
        f"[INFO|modeling_utils.py:3474] {clock.iso_ms(t0)} >> loading weights file "
        f"{plan.ckpt_dir}/model.safetensors.index.json",
        f"Loading checkpoint shards: 100%|██████████| 4/4 [00:{int(t1 - t0) % 60:02d}<00:00,  "
        "3.21s/it]",
        f"[INFO|modeling_utils.py:4280] {clock.iso_ms(t1)} >> All model checkpoint weights "
        "were used "
        "when initializing LlamaForCausalLM.",
    ]


def checkpoint_save(plan: JobPlan, ri: RankInfo, k: int, t: float) -> list[str]:
    fw = plan.config.framework
    if fw == "megatron":
        return [f"saving checkpoint at iteration {k:>7d} to {plan.ckpt_dir}"]
    if fw == "deepspeed":
        return [
            f"[{clock.iso_ms(t)}] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model "
            f"checkpoint: {plan.ckpt_dir}/global_step{k}/mp_rank_{ri.local:02d}_model_states.pt"
        ]
    return [
        f"[INFO|trainer.py:3305] {clock.iso_ms(t)} >> Saving model checkpoint to "
        f"{plan.ckpt_dir}/checkpoint-{k}"
    ]


def checkpoint_saved(plan: JobPlan, ri: RankInfo, k: int, t: float) -> list[str]:
    fw = plan.config.framework
    if fw == "megatron":
        return [f"  successfully saved checkpoint at iteration {k:>7d} to {plan.ckpt_dir}"]
    if fw == "deepspeed":
        return [
            f"[{clock.iso_ms(t)}] [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] "
            f"Checkpoint global_step{k} is ready now!"
        ]
    return [
        f"[INFO|configuration_utils.py:471] {clock.iso_ms(t)} >> Configuration saved in "
        f"{plan.ckpt_dir}/checkpoint-{k}/config.json"
    ]


def shutdown(plan: JobPlan, ri: RankInfo, t: float) -> list[str]:
    fw = plan.config.framework
    if fw == "megatron":
        lines = [f"[after training is done] datetime: {clock.iso(t)} "] if ri.rank == 0 else []
    elif fw == "deepspeed":
        lines = [
            f"[{clock.iso_ms(t)}] [INFO] [launch.py:347:main] Process {ri.pid} exits successfully."
        ]
    else:
        lines = [
            "",
            "",
            "Training completed. Do not forget to share your model on huggingface.co/models =)",
            "",
            "",
        ]
    return [*lines, nccl_destroy(plan, ri)]


# --- Ascend CANN / HCCL --------------------------------------------------------------------------
def hccl(level: str, pid: int, t: float, src: str, msg: str) -> str:
    """``[ERROR] HCCL(12345,python):2024-05-03-10:11:12.123.456 [src][pid]msg`` (CANN plog)."""
    return f"[{level}] HCCL({pid},python):{clock.cann(t)} [{src}][{pid}]{msg}"


def hccl_init(plan: JobPlan, ri: RankInfo, t: float) -> list[str]:
    return [
        hccl(
            "INFO",
            ri.pid,
            t,
            "hccl_comm.cc:117",
            f"[HCCL_TRACE]HcclCommInitRootInfo success, "
            f"take time [{int(1800 + ri.rank * 3)}]us, rankNum[{plan.world}], rank[{ri.rank}], "
            f"server[{ri.ip}], device[{ri.local}]",
        ),
        hccl(
            "INFO",
            ri.pid,
            t + 0.2,
            "hccl_communicator.cc:441",
            f"[HCCL_TRACE]Entry-HcclComm"
            f"Init: rankTableM[0], rankNum[{plan.world}], rank[{ri.rank}], userRank[{ri.rank}]",
        ),
    ]
