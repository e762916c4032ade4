"""Throughput of the L4 parsing core against drain3 on every line (prints figures; not a test).

    /work/venv/bin/python benchmarks/bench_parse.py [--lines N] [--baseline-sample N] [DIR]

Without DIR it generates realistic per-rank training log lines (NCCL INFO/WARN, torchrun/c10,
Megatron iteration lines, DeepSpeed, python logging, tracebacks, kernel Xid); with DIR it reads
every ``*.log``/``*.log.gz`` below it. It reports lines/s on one core for
``LineParser.feed`` + ``finish`` (in memory, and including reading a file from disk) and for
drain3's ``TemplateMiner.add_log_message`` on a sample of the lines (drain3 on every line is too
slow to run on millions; its rate is extrapolated from the sample and labelled as such).
"""

from __future__ import annotations

import argparse
import gzip
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.reader import read_lines


def generate(n: int, seed: int = 7) -> list[str]:
    """Lines shaped like a 8-node x 8-GPU Megatron/DeepSpeed job's logs, repetitive as real ones."""
    rng = random.Random(seed)
    hosts = [f"node-a{i:02d}" for i in range(8)]
    lines: list[str] = []
    t0 = 1714731072.0
    it = 0
    while len(lines) < n:
        it += 1
        t = t0 + it * 1.7
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
        ms = int((t % 1) * 1000)
        rank = rng.randrange(64)
        host = hosts[rank // 8]
        pid, tid = 1000 + rank, 5000 + rng.randrange(50)
        gl = time.strftime("%m%d %H:%M:%S", time.gmtime(t))
        lines.append(
            f" [{stamp}] iteration {it:8d}/  500000 | consumed samples: {it * 512:12d} | "
            f"elapsed time per iteration (ms): {rng.uniform(900, 1400):.1f} | learning rate: "
            f"{rng.uniform(1e-5, 3e-4):.6E} | global batch size:   512 | lm loss: "
            f"{rng.uniform(1.5, 3.5):.6E} | loss scale: 1.0 | grad norm: {rng.uniform(0.1, 2):.3f} "
            f"| number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
        lines.append(
            f"[{stamp},{ms:03d}] [INFO] [logging.py:96:log_dist] [Rank 0] step={it}, skipped=0, "
            f"lr=[{rng.uniform(1e-5, 3e-4):.6E}], mom=[(0.9, 0.95)]"
        )
        lines.append(
            f"[{stamp},{ms:03d}] [INFO] [timer.py:260:stop] epoch=0/micro_step={it * 8}/"
            f"global_step={it}, RunningAvgSamplesPerSec={rng.uniform(40, 60):.4f}, "
            f"CurrSamplesPerSec={rng.uniform(40, 60):.4f}, MemAllocated={rng.uniform(20, 30):.2f}GB"
        )
        for _ in range(rng.randrange(3, 9)):
            ch = rng.randrange(32)
            lines.append(
                f"{host}:{pid}:{tid} [{rank % 8}] NCCL INFO Channel {ch:02d}/32 : {rank} "
                f"{(rank + 1) % 64} {(rank + 2) % 64} {(rank + 3) % 64} via P2P/IPC/read"
            )
        if it % 100 == 0:  # communicator init: once per new group, with fresh hex ids
            lines.append(
                f"{host}:{pid}:{tid} [{rank % 8}] NCCL INFO comm 0x{rng.getrandbits(48):x} "
                f"rank {rank} "
                f"nranks 64 cudaDev {rank % 8} nvmlDev {rank % 8} busId {rng.choice('1234')}b000 "
                f"commId 0x{rng.getrandbits(64):016x} - Init COMPLETE"
            )
        lines.append(
            f"2024-05-03 10:11:{it % 60:02d},{ms:03d} - torch.distributed.elastic - INFO - "
            f"[default] Rank {rank} heartbeat ok after {rng.uniform(0, 5):.2f}s"
        )
        if it % 50 == 0:
            lines.append(
                f"[rank{rank}]:[W{gl}.{rng.randrange(10**9):09d} ProcessGroupNCCL.cpp:1168] "
                f"Warning: TORCH_NCCL_ASYNC_ERROR_HANDLING is deprecated"
            )
            lines.append(
                f"W{gl}.{rng.randrange(10**6):06d} {pid} torch/distributed/elastic/agent/server/"
                f"api.py:{rng.choice([704, 858])}] [default] worker group heartbeat, rank {rank}"
            )
            lines.append(
                f"saving checkpoint at iteration {it:7d} to /mnt/ckpt/run-{seed}/iter_{it:07d} "
                f"in torch format took {rng.uniform(5, 50):.2f} s, {rng.uniform(10, 90):.1f} GiB"
            )
        if it % 400 == 0:
            lines.append(
                f"{host}:{pid}:{tid} [{rank % 8}] NCCL WARN NET/IB : Got completion from peer "
                f"10.1.{rng.randrange(8)}.{rng.randrange(255)}<{rng.randrange(60000)}> with "
                f"error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.1.0.1"
            )
            lines.extend(
                f"[rank{rank}]: {x}"
                for x in (
                    "Traceback (most recent call last):",
                    f'  File "/workspace/Megatron-LM/pretrain_gpt.py", line {rng.randrange(300)}, '
                    "in <module>",
                    "    pretrain(train_valid_test_datasets_provider,",
                    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
                    f"c10d/ProcessGroupNCCL.cpp:{rng.randrange(2000)}, remote process exited",
                )
            )
            lines.append(
                f"May  3 10:11:12 {host} kernel: [{rng.uniform(1e4, 1e6):.6f}] NVRM: Xid "
                f"(PCI:0000:{rng.randrange(256):02x}:00): 79, pid={pid}, name=python, "
                "GPU has fallen off the bus."
            )
    return lines[:n]


def read_dir(root: Path) -> list[str]:
    lines: list[str] = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and (path.name.endswith(".log") or path.name.endswith(".log.gz")):
            for chunk in read_lines(path):
                lines.extend(chunk)
    return lines


def bench_ours(lines: list[str], chunk: int = 65_536) -> tuple[float, LineParser]:
    parser = LineParser()
    start = time.perf_counter()
    for i in range(0, len(lines), chunk):
        parser.feed(lines[i : i + chunk])
    parser.finish()
    return time.perf_counter() - start, parser


def bench_file(lines: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.log.gz"
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as fh:
            fh.write("\n".join(lines) + "\n")
        parser = LineParser()
        start = time.perf_counter()
        for chunk in read_lines(path):
            for i in range(0, len(chunk), 65_536):
                parser.feed(chunk[i : i + 65_536])
        parser.finish()
        return time.perf_counter() - start


def bench_drain3(lines: list[str], sample: int) -> tuple[float, int]:
    from drain3 import TemplateMiner
    from drain3.template_miner_config import TemplateMinerConfig

    config = TemplateMinerConfig()
    config.profiling_enabled = False
    miner = TemplateMiner(config=config)  # drain3 defaults: its own masking, snapshots off
    step = max(1, len(lines) // sample)
    picked = lines[::step][:sample]
    start = time.perf_counter()
    for line in picked:
        miner.add_log_message(line)
    return time.perf_counter() - start, len(picked)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", type=Path, help="read *.log / *.log.gz below this folder")
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--baseline-sample", type=int, default=50_000)
    args = ap.parse_args()

    lines = read_dir(args.dir) if args.dir else generate(args.lines)
    size_mb = sum(map(len, lines)) / 1e6
    print(
        f"input: {len(lines):,} lines, {size_mb:.0f} MB "
        f"({'dir ' + str(args.dir) if args.dir else 'generated'})"
    )

    elapsed, parser = bench_ours(lines)
    print(
        f"L4 LineParser.feed+finish (in memory): {elapsed:.2f} s = {len(lines) / elapsed:,.0f} "
        f"lines/s on one core; {len(parser.kinds):,} distinct masked lines, "
        f"{len(parser.new_templates()):,} templates"
    )
    file_elapsed = bench_file(lines)
    print(
        f"L4 read .gz + feed+finish: {file_elapsed:.2f} s = {len(lines) / file_elapsed:,.0f} "
        "lines/s on one core"
    )
    base_elapsed, n = bench_drain3(lines, args.baseline_sample)
    rate = n / base_elapsed
    print(
        f"drain3 TemplateMiner.add_log_message on every line: {n:,}-line sample in "
        f"{base_elapsed:.2f} s = {rate:,.0f} lines/s (EXTRAPOLATED to {len(lines):,} lines: "
        f"{len(lines) / rate:.0f} s)"
    )
    print(f"speed-up (in memory): {len(lines) / elapsed / rate:.0f}x")


if __name__ == "__main__":
    main()
