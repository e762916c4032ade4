"""A small data-parallel training script, run by torchrun on CPU with gloo (see README.md).

It is written the way user scripts are: DDP around a tiny model, a DataLoader with worker
processes, a checkpoint every K steps, resume from the last checkpoint after a restart. Three
logging styles, chosen per job:

- ``plain``: ``print`` from rank 0 only (``step N loss X``);
- ``logging``: Python ``logging`` with asctime, host and rank on every rank;
- ``megatron``: a Megatron-like ``iteration N/M | ...`` line from the last rank only.

The faults of the corpus are ordinary code paths switched on by the environment variable
``L4RR_FAULT`` (``kind:key=value,...``), which nothing prints: the logs show only what the fault
itself makes torch, gloo, the DataLoader or this script print (``uneven_data``: a rank's shard
runs out of batches first and it leaves the loop; ``lr_blowup``: the learning rate jumps at a
step; ``missing_module``: a node's image lacks a package the script imports; ``corrupt_shard``: a
node's local copy of a data shard is cut short; ``type_error``: a call with an old signature;
``batch_assert``: a global batch size the job's shape does not divide). A collective that
fails (a gloo timeout, a closed connection) makes the script write this rank's Flight Recorder
trace, as pickle and as JSON, next to ``TORCH_FR_DUMP_TEMP_FILE`` before it re-raises; so does
SIGTERM.

Never imported by the test suite: it needs torch, which is not a dependency of L4.
"""

from __future__ import annotations

import argparse
import datetime
import io
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

LOG = logging.getLogger("train")


def parse_fault() -> dict[str, str]:
    raw = os.environ.get("L4RR_FAULT", "")
    if not raw:
        return {}
    kind, _, rest = raw.partition(":")
    out = {"kind": kind}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        out[key] = value
    return out


FAULT = parse_fault()
SAMPLE_SECONDS = float(os.environ.get("SAMPLE_READ_SECONDS", "0.03"))


def fault_here(kind: str) -> bool:
    """True on the process the fault targets (host name and local rank)."""
    if FAULT.get("kind") != kind:
        return False
    if FAULT.get("host") and FAULT["host"] != socket.gethostname():
        return False
    return FAULT.get("local_rank", "") in ("", os.environ.get("LOCAL_RANK", ""))


def fault_attempts() -> bool:
    """Whether the fault fires in this attempt (``attempts=0`` fires only in the first one)."""
    wanted = FAULT.get("attempts", "")
    return not wanted or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") in wanted.split("/")


class Tokens(Dataset):
    """Random token windows; reading a sample takes a little time, like reading a shard."""

    def __init__(self, n: int, width: int, seed: int) -> None:
        self.n, self.width, self.seed = n, width, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(SAMPLE_SECONDS)
        if fault_here("stuck_data") and i >= int(FAULT["sample"]) and fault_attempts():
            # a read from a pipe nobody writes: the worker blocks the way a hung mount does
            with open(FAULT["fifo"], "rb") as f:
                f.read(1)
        if fault_here("corrupt_shard") and i >= int(FAULT["sample"]) and fault_attempts():
            # this node's local copy of the shard holding the sample was cut short
            torch.load(io.BytesIO(truncated_shard()), weights_only=True)
        g = torch.Generator().manual_seed(self.seed * 100003 + i)
        x = torch.randn(self.width, generator=g)
        return x, (x[: self.width // 4] * 0.5).clone()


def truncated_shard() -> bytes:
    """A saved tensor file cut in half, as a copy interrupted mid-way leaves it."""
    buf = io.BytesIO()
    torch.save(torch.zeros(64), buf)
    data = buf.getvalue()
    return data[: len(data) // 2]


def validate_args(args: argparse.Namespace, world: int) -> None:
    """The script's check of its batch sizes against the job's shape (as Megatron-LM's does)."""
    if fault_here("batch_assert"):
        global_batch, micro = int(FAULT["global_batch"]), 4
        assert global_batch % (micro * world) == 0, (
            f"global batch size ({global_batch}) is not divisible by micro batch size ({micro}) "
            f"times data parallel size ({world})"
        )


class Net(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width // 4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def dump_flight_recorder(reason: str) -> None:
    """Write this rank's Flight Recorder trace, pickle and JSON, at TORCH_FR_DUMP_TEMP_FILE."""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not prefix or not dist.is_initialized():
        return
    from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    base = Path(prefix).parent / f"attempt_{attempt}"
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{Path(prefix).name}{dist.get_rank()}"
    path.write_bytes(_dump_fr_trace())
    path.with_name(path.name + ".json").write_bytes(_dump_fr_trace_json())
    print(
        f"[rank{dist.get_rank()}] {reason}: flight recorder trace written to {path}",
        file=sys.stderr,
        flush=True,
    )


def on_sigterm(signum: int, frame: object) -> None:
    dump_flight_recorder("SIGTERM")
    sys.exit(128 + signum)


class Reporter:
    """The three logging styles."""

    def __init__(self, style: str, rank: int, world: int, steps: int) -> None:
        self.style, self.rank, self.world, self.steps = style, rank, world, steps
        self.t0 = time.time()
        if style == "logging":
            logging.basicConfig(
                level=logging.INFO,
                format=f"%(asctime)s %(levelname)s {socket.gethostname()} rank{rank} "
                "%(name)s: %(message)s",
            )

    def info(self, msg: str) -> None:
        if self.style == "logging":
            LOG.info(msg)
        elif self.rank == (self.world - 1 if self.style == "megatron" else 0):
            print(msg, flush=True)

    def step(self, step: int, loss: float, lr: float, samples: int) -> None:
        elapsed = (time.time() - self.t0) * 1000.0
        self.t0 = time.time()
        if self.style == "plain" and self.rank == 0:
            print(f"step {step} loss {loss:.4f}", flush=True)
        elif self.style == "logging":
            LOG.info("step %d/%d loss=%.4f lr=%.2e", step, self.steps, loss, lr)
        elif self.style == "megatron" and self.rank == self.world - 1:
            print(
                f" iteration {step:8d}/{self.steps:8d} | consumed samples: {samples:10d} | "
                f"elapsed time per iteration (ms): {elapsed:.1f} | learning rate: {lr:.6E} | "
                f"global batch size: {self.world * 4:5d} | lm loss: {loss:.6E} | "
                "number of skipped iterations:   0 | number of nan iterations:   0 |",
                flush=True,
            )


def save_checkpoint(
    args: argparse.Namespace, rep: Reporter, model: nn.Module, opt: torch.optim.Optimizer, step: int
) -> None:
    rank = dist.get_rank()
    folder = Path(args.ckpt_dir) / f"step_{step:06d}"
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": step}
    t0 = time.time()
    if args.ckpt_format == "dcp":
        import torch.distributed.checkpoint as dcp

        dcp.save(state, checkpoint_id=str(folder))
    elif args.ckpt_format == "per_rank":
        folder.mkdir(parents=True, exist_ok=True)
        pack_shard(state, step)
        torch.save(state, folder / f"rank{rank:03d}.pt")
    elif rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        pack_shard(state, step)
        torch.save(state, folder / "model.pt")
    dist.barrier()
    if rank == 0:
        (Path(args.ckpt_dir) / "latest").write_text(folder.name)
    rep.info(f"saved checkpoint {folder} in {time.time() - t0:.2f}s")


def pack_shard(state: dict, step: int) -> None:
    """Where a script hands its shard to native code before writing it (a compression or
    checksum extension); the fault makes that code dereference a null pointer."""
    if fault_here("native_crash") and step == int(FAULT["step"]) and fault_attempts():
        import ctypes

        ctypes.string_at(0)


def mix_buffer(x: torch.Tensor, step: int) -> torch.Tensor:
    """Where a script keeps a host-side buffer of past batches, sized from its arguments; the
    fault sizes it past the host's memory, as a wrong argument would."""
    if fault_here("host_oom") and step == int(FAULT["step"]) and fault_attempts():
        torch.empty(int(FAULT["gib"]) << 30, dtype=torch.uint8)
    return x


def load_checkpoint(
    args: argparse.Namespace, rep: Reporter, model: nn.Module, opt: torch.optim.Optimizer
) -> int:
    latest = Path(args.ckpt_dir) / "latest"
    if not args.resume or not latest.exists():
        return 0
    folder = Path(args.ckpt_dir) / latest.read_text().strip()
    rep.info(f"resuming from checkpoint {folder}")
    if args.ckpt_format == "dcp":
        import torch.distributed.checkpoint as dcp

        state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 0}
        dcp.load(state, checkpoint_id=str(folder))
        model.load_state_dict(state["model"])
    else:
        name = f"rank{dist.get_rank():03d}.pt" if args.ckpt_format == "per_rank" else "model.pt"
        state = torch.load(folder / name, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
    return int(state["step"])


def evaluate(args: argparse.Namespace, rep: Reporter, model: nn.Module, step: int) -> None:
    """Validation on this rank's shard; the mean is reduced over ranks."""
    n_val = 16
    if fault_here("empty_shard") and step == int(FAULT["step"]) and fault_attempts():
        n_val = 0  # this rank's validation shard came out empty
    data = Tokens(n_val, args.width, seed=7 + dist.get_rank())
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(len(data)):
            x, y = data[i]
            total += float(nn.functional.mse_loss(model(x[None]), y[None]))
            count += 1
    if args.guard_eval:
        if count:
            stats = torch.tensor([total, float(count)])
            dist.all_reduce(stats)
            rep.info(f"validation loss at step {step}: {stats[0].item() / stats[1].item():.4f}")
    else:
        val = torch.tensor([total / count])
        dist.all_reduce(val)
        rep.info(f"validation loss at step {step}: {val.item() / dist.get_world_size():.4f}")


def train(args: argparse.Namespace, rep: Reporter) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(Net(args.width, args.hidden))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    start = load_checkpoint(args, rep, model.module, opt)
    data = Tokens(args.steps * 4 * world, args.width, seed=1)
    sampler = torch.utils.data.distributed.DistributedSampler(data, world, rank, shuffle=False)
    loader = DataLoader(
        data,
        batch_size=4,
        sampler=sampler,
        num_workers=args.workers,
        persistent_workers=True,
        prefetch_factor=2,
    )
    rep.info(f"training from step {start} to {args.steps}, {len(data)} samples, world {world}")
    it = iter(loader)
    for _ in range(start):
        next(it)
    for step in range(start + 1, args.steps + 1):
        x, y = next(it)
        x = mix_buffer(x, step)
        if fault_here("straggler") and step >= int(FAULT["step"]):
            time.sleep(float(FAULT["delay"]))
            if step == int(FAULT["step"]) and "stall" in FAULT and fault_attempts():
                time.sleep(float(FAULT["stall"]))
        if fault_here("uneven_data") and step > int(FAULT["step"]) and fault_attempts():
            break  # this rank's shard ran out of batches before its peers'
        if fault_here("lr_blowup") and step == int(FAULT["step"]) and fault_attempts():
            for group in opt.param_groups:  # a schedule's warm-up gone wrong
                group["lr"] = float(FAULT["lr"])
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if fault_here("type_error") and step == int(FAULT["step"]) and fault_attempts():
            rep.step(step, loss.item())  # a logging call left with the old signature
        if step % args.log_every == 0:
            reduced = loss.detach().clone()
            dist.all_reduce(reduced)
            rep.step(step, reduced.item() / world, args.lr, step * 4 * world)
        if step % args.ckpt_every == 0:
            evaluate(args, rep, model.module, step)
            save_checkpoint(args, rep, model.module, opt, step)
    rep.info("training finished")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--style", choices=["plain", "logging", "megatron"], default="plain")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--log-every", type=int, default=1)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--ckpt-format", choices=["torch", "per_rank", "dcp"], default="torch")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=int, default=30)
    p.add_argument("--guard-eval", action="store_true")
    p.add_argument("--detect-anomaly", action="store_true")
    return p.parse_args()


@record
def main() -> None:
    args = parse_args()
    if fault_here("missing_module"):
        # an optional fused-kernel package the script imports when installed on the image
        import importlib

        importlib.import_module(FAULT["module"])
    if args.detect_anomaly:
        torch.autograd.set_detect_anomaly(True)
    signal.signal(signal.SIGTERM, on_sigterm)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    rep = Reporter(args.style, rank, world, args.steps)
    validate_args(args, world)
    rep.info(
        f"initialized process group: rank {rank} of {world} on {socket.gethostname()}, "
        f"backend {dist.get_backend()}, torch {torch.__version__}"
    )
    try:
        train(args, rep)
    except (RuntimeError, dist.DistBackendError) as exc:
        if "gloo" in str(exc) or "Connection" in str(exc) or "Timed out" in str(exc):
            dump_flight_recorder(type(exc).__name__)
        raise
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
